//! Hostile and malformed input: every limit and syntax rule errors out early.
#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use txcache_resp::{decode_request, Frame, Limits, ProtocolError};

fn decode(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    decode_with(input, &Limits::default())
}

/// Decodes, and checks that an error leaves the buffer untouched.
fn decode_with(input: &[u8], limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let mut buf = BytesMut::from(input);
    let result = decode_request(&mut buf, limits);
    if result.is_err() {
        assert_eq!(&buf[..], input);
    }
    result
}

fn small() -> Limits {
    Limits {
        max_bulk_len: 10,
        max_array_len: 3,
        max_inline_len: 16,
        max_depth: 2,
    }
}

#[test]
fn bulk_length_over_limit_errors_immediately() {
    let err = decode(b"*1\r\n$99999999999\r\n").unwrap_err();
    assert_eq!(
        err,
        ProtocolError::BulkTooLong {
            len: 99_999_999_999,
            limit: 536_870_912
        }
    );
    assert_eq!(
        err.to_string(),
        "Protocol error: bulk length 99999999999 exceeds the limit of 536870912"
    );
    assert!(matches!(
        decode_with(b"*1\r\n$11\r\n", &small()),
        Err(ProtocolError::BulkTooLong { len: 11, limit: 10 })
    ));
    assert_eq!(decode_with(b"*1\r\n$10\r\n", &small()), Ok(None));
}

#[test]
fn multibulk_count_over_limit() {
    assert_eq!(
        decode(b"*2147483648\r\n"),
        Err(ProtocolError::MultibulkTooLong {
            len: 2_147_483_648,
            limit: 1_048_576
        })
    );
    assert!(matches!(
        decode(b"*1048577\r\n"),
        Err(ProtocolError::MultibulkTooLong { .. })
    ));
    assert_eq!(decode(b"*1048576\r\n"), Ok(None));
    assert!(matches!(
        decode_with(b"*4\r\n", &small()),
        Err(ProtocolError::MultibulkTooLong { .. })
    ));
    assert_eq!(
        decode(b"*99999999999999999999\r\n"),
        Err(ProtocolError::InvalidMultibulkLength)
    );
}

#[test]
fn negative_lengths() {
    assert_eq!(
        decode(b"*-2\r\n"),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    assert_eq!(
        decode(b"*1\r\n$-1\r\n"),
        Err(ProtocolError::InvalidBulkLength)
    );
    assert_eq!(
        decode(b"*1\r\n$-5\r\n"),
        Err(ProtocolError::InvalidBulkLength)
    );
    assert_eq!(
        Frame::check(b"$-2\r\n", &Limits::default()),
        Err(ProtocolError::InvalidBulkLength)
    );
    assert_eq!(
        Frame::check(b"*-2\r\n", &Limits::default()),
        Err(ProtocolError::InvalidMultibulkLength)
    );
}

#[test]
fn non_digit_lengths_fail_without_waiting_for_crlf() {
    for input in [
        &b"*x"[..],
        b"*1x",
        b"*\r\n",
        b"*+1\r\n",
        b"*01\r\n",
        b"* 1\r\n",
        b"*1\n",
    ] {
        assert_eq!(
            decode(input),
            Err(ProtocolError::InvalidMultibulkLength),
            "{input:?}"
        );
    }
    for input in [
        &b"*1\r\n$x"[..],
        b"*1\r\n$1x",
        b"*1\r\n$\r\n",
        b"*1\r\n$-0\r\n",
        b"*1\r\n$3\rx",
    ] {
        assert_eq!(
            decode(input),
            Err(ProtocolError::InvalidBulkLength),
            "{input:?}"
        );
    }
}

#[test]
fn multibulk_elements_must_be_bulk_strings() {
    let err = decode(b"*1\r\n:1\r\n").unwrap_err();
    assert_eq!(
        err,
        ProtocolError::UnexpectedByte {
            expected: b'$',
            got: b':'
        }
    );
    assert_eq!(err.to_string(), "Protocol error: expected '$', got ':'");
    let err = decode(b"*2\r\n$1\r\na\r\nx").unwrap_err();
    assert_eq!(err.to_string(), "Protocol error: expected '$', got 'x'");
    let err = decode(b"*1\r\n\x01").unwrap_err();
    assert_eq!(err.to_string(), "Protocol error: expected '$', got '\\x01'");
}

#[test]
fn missing_crlf_after_bulk() {
    assert_eq!(
        decode(b"*1\r\n$3\r\nabcd\r\n"),
        Err(ProtocolError::MissingCrlf)
    );
    assert_eq!(
        decode(b"*1\r\n$3\r\nabc\n"),
        Err(ProtocolError::MissingCrlf)
    );
    assert_eq!(
        decode(b"*1\r\n$3\r\nabc\rx"),
        Err(ProtocolError::MissingCrlf)
    );
    assert_eq!(
        Frame::check(b"$1\r\nab", &Limits::default()),
        Err(ProtocolError::MissingCrlf)
    );
}

#[test]
fn inline_too_long() {
    let limits = small();
    assert_eq!(decode_with(&[b'a'; 17], &limits), Ok(None));
    assert_eq!(
        decode_with(&[b'a'; 18], &limits),
        Err(ProtocolError::TooBigInline)
    );
    assert_eq!(
        decode_with(b"aaaaaaaaaaaaaaaaa\n", &limits),
        Err(ProtocolError::TooBigInline)
    );
    assert_eq!(
        decode_with(b"aaaaaaaaaaaaaaaa\r\n", &limits)
            .unwrap()
            .unwrap()
            .len(),
        1
    );
    let long = vec![b'x'; 64 * 1024 + 2];
    assert_eq!(decode(&long), Err(ProtocolError::TooBigInline));
    assert_eq!(
        ProtocolError::TooBigInline.to_string(),
        "Protocol error: too big inline request"
    );
}

#[test]
fn frame_nesting_too_deep() {
    let limits = small();
    assert_eq!(Frame::check(b"*1\r\n*1\r\n:1\r\n", &limits), Ok(Some(12)));
    assert_eq!(
        Frame::check(b"*1\r\n*1\r\n*0\r\n", &limits),
        Err(ProtocolError::TooDeep { limit: 2 })
    );
    let deep = "*1\r\n".repeat(100);
    let err = Frame::check(deep.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(err, ProtocolError::TooDeep { limit: 32 });
    let none = Limits {
        max_depth: 0,
        ..Limits::default()
    };
    assert_eq!(
        Frame::check(b"*0\r\n", &none),
        Err(ProtocolError::TooDeep { limit: 0 })
    );
    assert_eq!(Frame::check(b"*-1\r\n", &none), Ok(Some(5)));
}

#[test]
fn frame_limits_and_syntax() {
    let limits = small();
    let check = |input: &[u8]| Frame::check(input, &limits);
    assert!(matches!(
        check(b"$11\r\n"),
        Err(ProtocolError::BulkTooLong { .. })
    ));
    assert!(matches!(
        check(b"*4\r\n"),
        Err(ProtocolError::MultibulkTooLong { .. })
    ));
    assert_eq!(
        check(b"+aaaaaaaaaaaaaaaaaa"),
        Err(ProtocolError::LineTooLong { limit: 16 })
    );
    assert_eq!(
        check(b"-aaaaaaaaaaaaaaaaaa"),
        Err(ProtocolError::LineTooLong { limit: 16 })
    );
    assert_eq!(check(b"+aaaaaaaaaaaaaaaa"), Ok(None));
    assert_eq!(check(b":1.5\r\n"), Err(ProtocolError::InvalidInteger));
    assert_eq!(check(b":\r\n"), Err(ProtocolError::InvalidInteger));
    assert_eq!(
        check(b":9223372036854775808\r\n"),
        Err(ProtocolError::InvalidInteger)
    );
    assert_eq!(check(b"x"), Err(ProtocolError::InvalidFrameType(b'x')));
    assert_eq!(
        check(b"*2\r\n:1\r\n?"),
        Err(ProtocolError::InvalidFrameType(b'?'))
    );
    assert_eq!(
        ProtocolError::InvalidFrameType(b'x').to_string(),
        "Protocol error: invalid frame type 'x'"
    );
}

#[test]
fn error_reply() {
    let mut out = BytesMut::new();
    ProtocolError::InvalidBulkLength.write_reply(&mut out);
    assert_eq!(&out[..], b"-ERR Protocol error: invalid bulk length\r\n");
    out.clear();
    ProtocolError::UnexpectedByte {
        expected: b'$',
        got: b'\n',
    }
    .write_reply(&mut out);
    assert_eq!(
        &out[..],
        b"-ERR Protocol error: expected '$', got '\\n'\r\n"
    );
}
