//! Replies that differ between RESP2 and RESP3, chosen by the connection's protocol.
//!
//! A connection speaks RESP2 until `HELLO 3`. RESP3 changes only some reply types, and a
//! command writes those through its session's [`Protocol`]: the null (`_` for RESP2's `$-1`
//! and `*-1`), field/value replies as maps (`HELLO`, `CONFIG GET`), and text meant for people
//! as a verbatim string (`INFO`). Everything else is written the same way in both.

use bytes::BytesMut;
use txcache_resp::encode;

/// The reply protocol of a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, what every connection starts with.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

impl Protocol {
    /// The protocol's version number, as `HELLO` reports it.
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }

    /// Appends a missing value: `$-1` in RESP2, `_` in RESP3.
    pub fn null(self, out: &mut BytesMut) {
        match self {
            Protocol::Resp2 => encode::null(out),
            Protocol::Resp3 => encode::null3(out),
        }
    }

    /// Appends the header of `pairs` field/value pairs: a map in RESP3, a flat array of twice
    /// as many items in RESP2.
    pub fn map_header(self, out: &mut BytesMut, pairs: usize) {
        match self {
            Protocol::Resp2 => encode::array_header(out, 2 * pairs),
            Protocol::Resp3 => encode::map_header(out, pairs),
        }
    }

    /// Appends text meant for people: a verbatim `txt` string in RESP3, a bulk string in
    /// RESP2 (as Redis replies `INFO`).
    pub fn text(self, out: &mut BytesMut, text: &[u8]) {
        match self {
            Protocol::Resp2 => encode::bulk(out, text),
            Protocol::Resp3 => encode::verbatim(out, b"txt", text),
        }
    }
}
