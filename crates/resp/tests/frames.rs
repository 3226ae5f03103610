//! Reply frames: exact bytes for every type, check/parse, incomplete input.
#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use txcache_resp::{Frame, Limits, ProtocolError};

fn encoded(frame: &Frame) -> Vec<u8> {
    let mut out = BytesMut::new();
    frame.encode(&mut out);
    out.to_vec()
}

fn parse(input: &[u8]) -> Result<Option<Frame>, ProtocolError> {
    Frame::parse(&mut BytesMut::from(input), &Limits::default())
}

fn cases() -> Vec<(Frame, &'static [u8])> {
    vec![
        (Frame::Simple("OK".into()), b"+OK\r\n"),
        (Frame::Simple(String::new()), b"+\r\n"),
        (Frame::Error("ERR bad thing".into()), b"-ERR bad thing\r\n"),
        (Frame::Integer(0), b":0\r\n"),
        (Frame::Integer(-17), b":-17\r\n"),
        (Frame::Integer(i64::MIN), b":-9223372036854775808\r\n"),
        (
            Frame::Bulk(Bytes::from_static(b"hi\r\n")),
            b"$4\r\nhi\r\n\r\n",
        ),
        (Frame::Bulk(Bytes::new()), b"$0\r\n\r\n"),
        (Frame::Null, b"$-1\r\n"),
        (Frame::NullArray, b"*-1\r\n"),
        (Frame::Array(vec![]), b"*0\r\n"),
        (
            Frame::Array(vec![
                Frame::Integer(1),
                Frame::Array(vec![Frame::Bulk(Bytes::from_static(b"x")), Frame::Null]),
                Frame::NullArray,
                Frame::Simple("s".into()),
            ]),
            b"*4\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n*-1\r\n+s\r\n",
        ),
    ]
}

#[test]
fn every_frame_type_encodes_and_parses_exactly() {
    for (frame, bytes) in cases() {
        assert_eq!(encoded(&frame), bytes, "{frame:?}");
        assert_eq!(
            Frame::check(bytes, &Limits::default()),
            Ok(Some(bytes.len()))
        );
        let mut buf = BytesMut::from(bytes);
        buf.extend_from_slice(b"+next\r\n");
        assert_eq!(Frame::parse(&mut buf, &Limits::default()), Ok(Some(frame)));
        assert_eq!(&buf[..], b"+next\r\n");
    }
}

#[test]
fn every_prefix_is_incomplete() {
    for (_, bytes) in cases() {
        for split in 0..bytes.len() {
            assert_eq!(
                Frame::check(&bytes[..split], &Limits::default()),
                Ok(None),
                "{bytes:?} at {split}"
            );
            let mut buf = BytesMut::from(&bytes[..split]);
            assert_eq!(Frame::parse(&mut buf, &Limits::default()), Ok(None));
            assert_eq!(buf.len(), split);
        }
    }
}

#[test]
fn simple_lines_keep_lone_cr_and_lf() {
    assert_eq!(
        parse(b"+a\rb\nc\r\n"),
        Ok(Some(Frame::Simple("a\rb\nc".into())))
    );
    assert_eq!(encoded(&Frame::Simple("a\rb\nc".into())), b"+a b c\r\n");
    assert_eq!(encoded(&Frame::Error("E\r\n".into())), b"-E  \r\n");
}

#[test]
fn invalid_utf8_is_lossy() {
    assert_eq!(
        parse(b"-ERR \xff\r\n"),
        Ok(Some(Frame::Error("ERR \u{fffd}".into())))
    );
}

#[test]
fn bulk_is_zero_copy() {
    let mut buf = BytesMut::from(&b"*1\r\n$3\r\nabc\r\n"[..]);
    let start = buf.as_ptr() as usize;
    let Some(Frame::Array(items)) = Frame::parse(&mut buf, &Limits::default()).unwrap() else {
        panic!("not an array");
    };
    let Frame::Bulk(data) = &items[0] else {
        panic!("not a bulk")
    };
    assert_eq!(data.as_ptr() as usize, start + 8);
}

#[test]
fn huge_claimed_array_with_few_bytes_is_incomplete() {
    assert_eq!(parse(b"*1000000\r\n:1\r\n:2\r\n"), Ok(None));
}
