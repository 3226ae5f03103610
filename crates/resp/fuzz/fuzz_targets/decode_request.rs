//! Fuzzes request decoding and frame parsing: `cargo +nightly fuzz run decode_request`
//! from `crates/resp`.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use txcache_resp::{decode_request, Frame, Limits, RequestDecoder};

fuzz_target!(|data: &[u8]| {
    let small = Limits { max_bulk_len: 64, max_array_len: 8, max_inline_len: 64, max_depth: 4 };
    for limits in [Limits::default(), small] {
        // Whole buffer, stateless: decode requests until incomplete or an error.
        let mut buf = BytesMut::from(data);
        while let Ok(Some(_)) = decode_request(&mut buf, &limits) {}

        // The same bytes trickling into a resumable decoder, three at a time.
        let mut decoder = RequestDecoder::new();
        let mut buf = BytesMut::new();
        'feed: for chunk in data.chunks(3) {
            buf.extend_from_slice(chunk);
            loop {
                match decoder.decode(&mut buf, &limits) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
        }

        // Reply frames: check and parse must agree.
        let checked = Frame::check(data, &limits);
        let mut buf = BytesMut::from(data);
        let parsed = Frame::parse(&mut buf, &limits);
        match (checked, parsed) {
            (Ok(Some(len)), Ok(Some(_))) => assert_eq!(&buf[..], &data[len..]),
            (Ok(None), Ok(None)) | (Err(_), Err(_)) => assert_eq!(&buf[..], data),
            (checked, parsed) => panic!("check {checked:?} disagrees with parse {parsed:?}"),
        }
    }
});
