//! Request decoding: multibulk and inline, incomplete input, pipelining.
#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use txcache_resp::{decode_request, encode, Limits, ProtocolError, RequestDecoder};

fn decode(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    decode_request(&mut BytesMut::from(input), &Limits::default())
}

/// Decodes a complete request that must use up all of `input`.
fn args(input: &[u8]) -> Vec<Vec<u8>> {
    let mut buf = BytesMut::from(input);
    let args = decode_request(&mut buf, &Limits::default())
        .unwrap()
        .unwrap();
    assert!(buf.is_empty(), "left over: {buf:?}");
    args.iter().map(|a| a.to_vec()).collect()
}

fn strs(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn multibulk() {
    assert_eq!(
        args(b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"),
        strs(&["GET", "key"])
    );
    assert_eq!(args(b"*1\r\n$0\r\n\r\n"), strs(&[""]));
    assert_eq!(args(b"*1\r\n$4\r\na\r\nb\r\n"), strs(&["a\r\nb"]));
    assert_eq!(
        args(b"*1\r\n$3\r\n\x00\xff\x80\r\n"),
        vec![vec![0, 0xff, 0x80]]
    );
}

#[test]
fn empty_multibulk_is_consumed() {
    assert_eq!(args(b"*0\r\n"), Vec::<Vec<u8>>::new());
    assert_eq!(args(b"*-1\r\n"), Vec::<Vec<u8>>::new());
    let mut buf = BytesMut::from(&b"*0\r\n*1\r\n$1\r\nx\r\n"[..]);
    assert_eq!(
        decode_request(&mut buf, &Limits::default()),
        Ok(Some(vec![]))
    );
    assert_eq!(&buf[..], b"*1\r\n$1\r\nx\r\n");
}

#[test]
fn arguments_are_slices_of_the_request() {
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$5\r\nvalue\r\nrest"[..]);
    let start = buf.as_ptr() as usize;
    let args = decode_request(&mut buf, &Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(args[0].as_ptr() as usize, start + 8);
    assert_eq!(args[1].as_ptr() as usize, start + 17);
    assert_eq!(&buf[..], b"rest");
}

#[test]
fn inline_plain() {
    assert_eq!(args(b"PING\r\n"), strs(&["PING"]));
    assert_eq!(args(b"PING\n"), strs(&["PING"]));
    assert_eq!(args(b"  SET\tk   v  \r\n"), strs(&["SET", "k", "v"]));
    assert_eq!(args(b"\r\n"), Vec::<Vec<u8>>::new());
    assert_eq!(args(b"\n"), Vec::<Vec<u8>>::new());
    assert_eq!(args(b"   \t \r\n"), Vec::<Vec<u8>>::new());
}

#[test]
fn inline_unquoted_args_are_slices() {
    let mut buf = BytesMut::from(&b"GET key\r\n"[..]);
    let start = buf.as_ptr() as usize;
    let args = decode_request(&mut buf, &Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(args[1].as_ptr() as usize, start + 4);
}

#[test]
fn inline_double_quotes() {
    assert_eq!(
        args(b"SET k \"a value\"\r\n"),
        strs(&["SET", "k", "a value"])
    );
    assert_eq!(args(b"\"\"\r\n"), strs(&[""]));
    assert_eq!(args(b"\"a\\nb\\r\\t\\\\\\\"\"\n"), strs(&["a\nb\r\t\\\""]));
    assert_eq!(
        args(b"\"\\x41\\x7a\\xff\\x00\"\n"),
        vec![vec![b'A', b'z', 0xff, 0]]
    );
    assert_eq!(
        args(b"\"\\xZZ\\q\\b\\a\"\n"),
        vec![b"xZZq\x08\x07".to_vec()]
    );
    assert_eq!(args(b"a\"b c\"\n"), strs(&["ab c"]));
    assert_eq!(args(b"\"a'b\"\n"), strs(&["a'b"]));
}

#[test]
fn inline_single_quotes() {
    assert_eq!(args(b"'a b' 'c'\n"), strs(&["a b", "c"]));
    assert_eq!(args(b"'it\\'s'\n"), strs(&["it's"]));
    assert_eq!(args(b"'a\\nb'\n"), strs(&["a\\nb"]));
    assert_eq!(args(b"'a\"b'\n"), strs(&["a\"b"]));
}

#[test]
fn inline_unbalanced_quotes() {
    for input in [
        &b"\"abc\n"[..],
        b"'abc\n",
        b"\"a\"b\n",
        b"'a'b\n",
        b"\"abc\\\"\n",
    ] {
        assert_eq!(
            decode(input),
            Err(ProtocolError::UnbalancedQuotes),
            "{input:?}"
        );
    }
}

/// Every proper prefix is incomplete and leaves the buffer alone; the whole parses.
fn check_prefixes(input: &[u8], expected: &[Vec<u8>]) {
    let limits = Limits::default();
    for split in 0..input.len() {
        let mut buf = BytesMut::from(&input[..split]);
        assert_eq!(
            decode_request(&mut buf, &limits),
            Ok(None),
            "prefix {split}"
        );
        assert_eq!(&buf[..], &input[..split]);
    }
    let mut decoder = RequestDecoder::new();
    let mut buf = BytesMut::new();
    for &byte in input {
        assert!(buf.is_empty() || decoder.decode(&mut buf, &limits) == Ok(None));
        buf.extend_from_slice(&[byte]);
    }
    let args = decoder.decode(&mut buf, &limits).unwrap().unwrap();
    assert_eq!(
        args.iter().map(|a| a.to_vec()).collect::<Vec<_>>(),
        expected
    );
    assert!(buf.is_empty());
}

#[test]
fn incomplete_at_every_split_point() {
    check_prefixes(
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$12\r\nhello\r\nworld\r\n",
        &strs(&["SET", "k", "hello\r\nworld"]),
    );
    check_prefixes(b"*0\r\n", &[]);
    check_prefixes(b"*-1\r\n", &[]);
    check_prefixes(b"SET k \"v w\\x41\"\r\n", &strs(&["SET", "k", "v wA"]));
    check_prefixes(b"'x'\n", &strs(&["x"]));
}

#[test]
fn pipelined_requests_decode_one_by_one() {
    let mut buf = BytesMut::new();
    encode::request(&mut buf, &[b"SET", b"a", b"1"]);
    buf.extend_from_slice(b"PING\r\n");
    encode::request(&mut buf, &[b"GET", b"a"]);
    buf.extend_from_slice(b"*0\r\nECHO 'x y'\n*1\r\n$4\r\nPI");
    let limits = Limits::default();
    let mut decoder = RequestDecoder::new();
    let mut next = || {
        decoder
            .decode(&mut buf, &limits)
            .unwrap()
            .map(|v| v.iter().map(|a| a.to_vec()).collect::<Vec<_>>())
    };
    assert_eq!(next(), Some(strs(&["SET", "a", "1"])));
    assert_eq!(next(), Some(strs(&["PING"])));
    assert_eq!(next(), Some(strs(&["GET", "a"])));
    assert_eq!(next(), Some(vec![]));
    assert_eq!(next(), Some(strs(&["ECHO", "x y"])));
    assert_eq!(next(), None);
    assert_eq!(next(), None);
    assert_eq!(&buf[..], b"*1\r\n$4\r\nPI");
    buf.extend_from_slice(b"NG\r\n");
    assert_eq!(
        decoder.decode(&mut buf, &limits),
        Ok(Some(vec![Bytes::from_static(b"PING")]))
    );
    assert!(buf.is_empty());
}

#[test]
fn decoder_resumes_and_resets() {
    let limits = Limits::default();
    let mut decoder = RequestDecoder::new();
    let mut buf = BytesMut::from(&b"*2\r\n$1\r\na\r\n"[..]);
    assert_eq!(decoder.decode(&mut buf, &limits), Ok(None));
    decoder.reset();
    let mut other = BytesMut::from(&b"PING\r\n"[..]);
    assert_eq!(
        decoder.decode(&mut other, &limits),
        Ok(Some(vec![Bytes::from_static(b"PING")]))
    );
}

#[test]
fn misused_decoder_does_not_panic() {
    let limits = Limits::default();
    let mut decoder = RequestDecoder::new();
    let mut buf = BytesMut::from(&b"*2\r\n$1\r\na\r\n$1\r\n"[..]);
    assert_eq!(decoder.decode(&mut buf, &limits), Ok(None));
    let mut other = BytesMut::from(&b"$1\r\nb\r\n"[..]);
    let _ = decoder.decode(&mut other, &limits);
    let mut decoder = RequestDecoder::new();
    let mut line = BytesMut::from(&b"GET aaaaaaaaaaaaaaa"[..]);
    assert_eq!(decoder.decode(&mut line, &limits), Ok(None));
    let _ = decoder.decode(&mut BytesMut::from(&b"x\n"[..]), &limits);
}

#[test]
fn unauthenticated_limits_fit_every_auth_form_and_refuse_more() {
    let limits = Limits::UNAUTHENTICATED;
    let decode_with = |input: &[u8]| decode_request(&mut BytesMut::from(input), &limits);
    let hello = b"*7\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n$7\r\nSETNAME\r\n$3\r\napp\r\n";
    let hello = decode_with(hello).unwrap().unwrap();
    assert_eq!(hello.len(), 7, "the longest handshake fits");
    let auth = b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n";
    assert!(decode_with(auth).unwrap().is_some());
    assert_eq!(
        decode_with(b"*11\r\n"),
        Err(ProtocolError::MultibulkTooLong { len: 11, limit: 10 })
    );
    assert_eq!(
        decode_with(b"*2\r\n$3\r\nSET\r\n$16385\r\n"),
        Err(ProtocolError::BulkTooLong {
            len: 16385,
            limit: 16 * 1024
        })
    );
}
