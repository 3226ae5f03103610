//! Property tests: round trips, chunked input, and arbitrary bytes never panicking.
#![allow(clippy::unwrap_used)]

use bytes::{Buf, Bytes, BytesMut};
use proptest::prelude::*;
use txcache_resp::{decode_request, encode, Frame, Limits, RequestDecoder};

fn arg() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        proptest::collection::vec(
            prop::sample::select(b"*$-+:\r\n0123 \"'\\x".to_vec()),
            0..12
        ),
    ]
}

fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(arg(), 0..8)
}

fn encode_all(commands: &[Vec<Vec<u8>>]) -> BytesMut {
    let mut wire = BytesMut::new();
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
        encode::request(&mut wire, &args);
    }
    wire
}

fn owned(args: Vec<Bytes>) -> Vec<Vec<u8>> {
    args.into_iter().map(|a| a.to_vec()).collect()
}

/// Feeds `wire` in chunks of the given sizes, decoding after each chunk.
fn decode_chunked(wire: &[u8], chunks: &[usize], stateful: bool) -> Vec<Vec<Vec<u8>>> {
    let limits = Limits::default();
    let mut decoder = RequestDecoder::new();
    let mut buf = BytesMut::new();
    let mut decoded = Vec::new();
    let mut rest = wire;
    let mut sizes = chunks.iter().cycle();
    while !rest.is_empty() || !buf.is_empty() {
        let take = rest.len().min(*sizes.next().unwrap());
        buf.extend_from_slice(&rest[..take]);
        rest = &rest[take..];
        loop {
            let before = buf.clone();
            let result = match stateful {
                true => decoder.decode(&mut buf, &limits),
                false => decode_request(&mut buf, &limits),
            };
            match result.unwrap() {
                Some(args) => decoded.push(owned(args)),
                None => {
                    assert_eq!(buf, before, "incomplete input must stay untouched");
                    break;
                }
            }
        }
        if rest.is_empty() && !buf.is_empty() {
            panic!("left over: {buf:?}");
        }
    }
    decoded
}

/// An inline line quoting every argument with `\xHH` escapes.
fn quoted_line(args: &[Vec<u8>]) -> Vec<u8> {
    let mut line = Vec::new();
    for arg in args {
        line.extend_from_slice(b" \"");
        for byte in arg {
            line.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
        }
        line.push(b'"');
    }
    line.extend_from_slice(b"\r\n");
    line
}

fn frame() -> impl Strategy<Value = Frame> {
    let leaf = prop_oneof![
        "[^\r\n]{0,20}".prop_map(Frame::Simple),
        "[^\r\n]{0,20}".prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        proptest::collection::vec(any::<u8>(), 0..32).prop_map(|b| Frame::Bulk(b.into())),
        Just(Frame::Null),
        Just(Frame::NullArray),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Frame::Array)
    })
}

/// Bytes that are mostly protocol tokens, to get past the first byte.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    let tokens: Vec<&'static [u8]> = vec![
        b"*",
        b"$",
        b"+",
        b"-",
        b":",
        b"\r\n",
        b"\r",
        b"\n",
        b"0",
        b"1",
        b"2",
        b"3",
        b"-1",
        b"-2",
        b"10",
        b"99999999999",
        b"a",
        b"\"",
        b"'",
        b"\\",
        b"x4",
        b" ",
        b"\t",
        b"\xff",
    ];
    proptest::collection::vec(prop::sample::select(tokens), 0..40).prop_map(|t| t.concat())
}

fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![
        Just(Limits::default()),
        Just(Limits {
            max_bulk_len: 4,
            max_array_len: 3,
            max_inline_len: 8,
            max_depth: 2
        }),
    ]
}

/// Whatever happens, it is an error, an untouched incomplete buffer, or a decode
/// that consumed a non-empty prefix.
fn assert_sane_request(input: &[u8], limits: &Limits) {
    let mut buf = BytesMut::from(input);
    match decode_request(&mut buf, limits) {
        Err(_) => assert_eq!(&buf[..], input),
        Ok(None) => assert_eq!(&buf[..], input),
        Ok(Some(_)) => assert!(buf.len() < input.len() && input.ends_with(&buf)),
    }
}

/// Feeds `input` in chunks to two decoders, one decoding (owned arguments) and one peeking
/// (borrowed arguments, its buffer advanced by hand): they must agree at every step.
fn assert_peek_agrees_with_decode(input: &[u8], chunk: usize, limits: &Limits) {
    let (mut decoding, mut peeking) = (RequestDecoder::new(), RequestDecoder::new());
    let (mut decoded_buf, mut peeked_buf) = (BytesMut::new(), BytesMut::new());
    for piece in input.chunks(chunk.max(1)) {
        decoded_buf.extend_from_slice(piece);
        peeked_buf.extend_from_slice(piece);
        loop {
            let decoded = decoding.decode(&mut decoded_buf, limits);
            let peeked = peeking.peek(&peeked_buf, limits).map(|request| {
                request.map(|request| {
                    let args: Vec<Vec<u8>> = request.args().map(<[u8]>::to_vec).collect();
                    assert_eq!(request.args().len(), args.len(), "an exact size");
                    (request.len(), args)
                })
            });
            match (decoded, peeked) {
                (Ok(Some(args)), Ok(Some((len, peeked_args)))) => {
                    assert_eq!(owned(args), peeked_args);
                    peeked_buf.advance(len);
                    assert_eq!(decoded_buf, peeked_buf, "both consumed the request");
                }
                (Ok(None), Ok(None)) => break,
                (Err(a), Err(b)) => return assert_eq!(a, b),
                (decoded, peeked) => panic!("decode {decoded:?} disagrees with peek {peeked:?}"),
            }
        }
    }
}

fn assert_sane_frame(input: &[u8], limits: &Limits) {
    let checked = Frame::check(input, limits);
    let mut buf = BytesMut::from(input);
    let parsed = Frame::parse(&mut buf, limits);
    match (checked, parsed) {
        (Err(a), Err(b)) => assert_eq!(a, b),
        (Ok(None), Ok(None)) => assert_eq!(&buf[..], input),
        (Ok(Some(len)), Ok(Some(_))) => assert_eq!(&buf[..], &input[len..]),
        (checked, parsed) => panic!("check {checked:?} disagrees with parse {parsed:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn requests_round_trip(commands in proptest::collection::vec(command(), 1..5)) {
        let mut wire = encode_all(&commands);
        let limits = Limits::default();
        for command in &commands {
            let args = decode_request(&mut wire, &limits).unwrap().unwrap();
            prop_assert_eq!(&owned(args), command);
        }
        prop_assert!(wire.is_empty());
    }

    #[test]
    fn requests_round_trip_in_chunks(
        commands in proptest::collection::vec(command(), 1..5),
        chunks in proptest::collection::vec(1usize..24, 1..8),
        stateful in any::<bool>(),
    ) {
        let wire = encode_all(&commands);
        prop_assert_eq!(decode_chunked(&wire, &chunks, stateful), commands);
    }

    #[test]
    fn quoted_inline_round_trips(args in command()) {
        let mut buf = BytesMut::from(&quoted_line(&args)[..]);
        let decoded = decode_request(&mut buf, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(owned(decoded), args);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn frames_round_trip(frame in frame()) {
        let mut wire = BytesMut::new();
        frame.encode(&mut wire);
        let len = wire.len();
        wire.extend_from_slice(b":1\r\n");
        let limits = Limits::default();
        prop_assert_eq!(Frame::check(&wire, &limits), Ok(Some(len)));
        prop_assert_eq!(Frame::parse(&mut wire, &limits), Ok(Some(frame)));
        prop_assert_eq!(&wire[..], b":1\r\n");
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..64), limits in limits()) {
        assert_sane_request(&input, &limits);
        assert_sane_frame(&input, &limits);
    }

    #[test]
    fn peeking_agrees_with_decoding(
        input in prop_oneof![
            soup(),
            proptest::collection::vec(command(), 1..5).prop_map(|c| encode_all(&c).to_vec()),
        ],
        chunk in 1usize..24,
        limits in limits(),
    ) {
        assert_peek_agrees_with_decode(&input, chunk, &limits);
    }

    #[test]
    fn protocol_soup_never_panics(input in soup(), limits in limits()) {
        assert_sane_request(&input, &limits);
        assert_sane_frame(&input, &limits);
        let mut decoder = RequestDecoder::new();
        let mut buf = BytesMut::new();
        for chunk in input.chunks(3) {
            buf.extend_from_slice(chunk);
            if decoder.decode(&mut buf, &limits).is_err() {
                break;
            }
        }
    }
}
