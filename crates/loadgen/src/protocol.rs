//! The wire protocols: request encoding and reply framing, no I/O.
//!
//! - [`Protocol::Resp`]: Redis's `GET` / `SET` (Redis, txcached's plain keys).
//! - [`Protocol::Versioned`]: txcached's `TXGET key 0 MAX` / `TXSET key value lo lo+1`. Each
//!   insert carries a fresh one-timestamp interval, so every `TXSET` stores a new version
//!   (never an extension of, or a conflict with, an existing one).
//! - [`Protocol::Memcache`]: memcached's text protocol, `get` / `set`.
//!
//! Replies are framed (how many bytes make the next whole reply) and classified ([`Reply`]):
//! a load generator needs to count hits and errors, not to keep values.

use bytes::{BufMut, BytesMut};
use std::fmt;
use std::io::Write;
use txcache_resp::{encode, Frame, Limits};

/// The range every `TXGET` asks for, `0` to the highest timestamp (every version stored by
/// the load generator lies below it), as its last two bulk strings: encoded once, so that
/// the tool's own work per versioned request stays close to a `GET`'s.
const TXGET_RANGE: &[u8] = b"$1\r\n0\r\n$19\r\n9223372036854775806\r\n";

/// The longest memcached reply line accepted before the framing is declared lost.
const MAX_LINE: usize = 4096;

/// Which protocol and command pair a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// RESP `GET` / `SET`.
    Resp,
    /// RESP `TXGET` / `TXSET` (txcached's versioned commands).
    Versioned,
    /// memcached text protocol `get` / `set`.
    Memcache,
}

/// What a reply said, as far as load generation cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A lookup found a value (or a versioned insert's outcome array).
    Value,
    /// A lookup found nothing.
    Miss,
    /// A status: `+OK`, `STORED`, an integer.
    Status,
    /// The server refused the request: `-ERR …`, `SERVER_ERROR …`.
    Error,
}

/// The reply stream cannot be framed any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramingError(pub String);

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed reply: {}", self.0)
    }
}

impl std::error::Error for FramingError {}

impl Protocol {
    /// Appends a lookup of `key` to `out`.
    pub fn encode_get(self, out: &mut BytesMut, key: &[u8]) {
        match self {
            Protocol::Resp => encode::request(out, &[b"GET", key]),
            Protocol::Versioned => {
                encode::array_header(out, 4);
                encode::bulk(out, b"TXGET");
                encode::bulk(out, key);
                out.extend_from_slice(TXGET_RANGE);
            }
            Protocol::Memcache => {
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Appends a store of `value` under `key` to `out`; `version` is the timestamp of a
    /// versioned insert (its interval is `[version, version + 1)`), unused otherwise.
    pub fn encode_set(self, out: &mut BytesMut, key: &[u8], value: &[u8], version: u64) {
        match self {
            Protocol::Resp => encode::request(out, &[b"SET", key, value]),
            Protocol::Versioned => {
                encode::array_header(out, 5);
                for arg in [&b"TXSET"[..], key, value] {
                    encode::bulk(out, arg);
                }
                encode::bulk_integer(out, version);
                encode::bulk_integer(out, version + 1);
            }
            Protocol::Memcache => {
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                // Writing into a `BytesMut` cannot fail.
                let _ = write!(out.writer(), " 0 0 {}\r\n", value.len());
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Appends a request that removes every key (`FLUSHALL`, `flush_all`).
    pub fn encode_flush(self, out: &mut BytesMut) {
        match self {
            Protocol::Resp | Protocol::Versioned => encode::request(out, &[b"FLUSHALL"]),
            Protocol::Memcache => out.extend_from_slice(b"flush_all\r\n"),
        }
    }

    /// The length and kind of the first complete reply in `buf`; `Ok(None)` when it is
    /// still incomplete.
    pub fn parse_reply(self, buf: &[u8]) -> Result<Option<(usize, Reply)>, FramingError> {
        match self {
            Protocol::Resp | Protocol::Versioned => parse_resp(buf),
            Protocol::Memcache => parse_memcache(buf),
        }
    }
}

/// Frames one RESP reply with the project's own codec, then classifies it by its head:
/// `$-1` or an array whose first element is `$-1` (a `TXGET` miss) is a miss.
fn parse_resp(buf: &[u8]) -> Result<Option<(usize, Reply)>, FramingError> {
    let Some(len) = Frame::check(buf, &Limits::DEFAULT).map_err(|e| FramingError(e.to_string()))?
    else {
        return Ok(None);
    };
    let reply = match buf[0] {
        b'-' => Reply::Error,
        b'+' | b':' => Reply::Status,
        b'$' if buf.starts_with(b"$-1\r\n") => Reply::Miss,
        b'*' if buf.starts_with(b"*-1\r\n") => Reply::Miss,
        b'*' if first_element_is_nil(&buf[..len]) => Reply::Miss,
        _ => Reply::Value,
    };
    Ok(Some((len, reply)))
}

/// Whether the array in `frame` starts with a null bulk string.
fn first_element_is_nil(frame: &[u8]) -> bool {
    let header_end = frame
        .iter()
        .position(|&b| b == b'\n')
        .map_or(frame.len(), |i| i + 1);
    frame[header_end..].starts_with(b"$-1\r\n")
}

/// Frames one memcached text reply: `VALUE … END`, `END`, a status line or an error line.
fn parse_memcache(buf: &[u8]) -> Result<Option<(usize, Reply)>, FramingError> {
    let Some(eol) = buf.windows(2).take(MAX_LINE).position(|w| w == b"\r\n") else {
        if buf.len() > MAX_LINE {
            return Err(FramingError("memcached reply line too long".into()));
        }
        return Ok(None);
    };
    let line = &buf[..eol];
    let after_line = eol + 2;
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        let bytes = value_length(rest)?;
        let end = after_line + bytes + b"\r\nEND\r\n".len();
        if buf.len() < end {
            return Ok(None);
        }
        if &buf[after_line + bytes..end] != b"\r\nEND\r\n" {
            return Err(FramingError("VALUE block not followed by END".into()));
        }
        return Ok(Some((end, Reply::Value)));
    }
    let reply = match line {
        b"END" => Reply::Miss,
        b"STORED" | b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" | b"DELETED" | b"OK" => Reply::Status,
        _ if line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") => Reply::Error,
        _ if line.starts_with(b"SERVER_ERROR") => Reply::Error,
        _ => {
            let text = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
            return Err(FramingError(format!("unexpected memcached reply {text:?}")));
        }
    };
    Ok(Some((after_line, reply)))
}

/// The `<bytes>` field of `VALUE <key> <flags> <bytes> [<cas>]` (after `VALUE `).
fn value_length(rest: &[u8]) -> Result<usize, FramingError> {
    let field = rest.split(|&b| b == b' ').nth(2);
    field
        .and_then(|f| std::str::from_utf8(f).ok())
        .and_then(|f| f.parse::<usize>().ok())
        .filter(|&n| n <= 64 << 20)
        .ok_or_else(|| FramingError("VALUE line without a valid length".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut out = BytesMut::new();
        f(&mut out);
        out.to_vec()
    }

    #[test]
    fn requests_have_the_exact_bytes() {
        let get = |p: Protocol| encoded(|o| p.encode_get(o, b"k1"));
        let set = |p: Protocol| encoded(|o| p.encode_set(o, b"k1", b"abc", 41));
        assert_eq!(get(Protocol::Resp), b"*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n");
        assert_eq!(
            set(Protocol::Resp),
            b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$3\r\nabc\r\n"
        );
        assert_eq!(
            get(Protocol::Versioned),
            b"*4\r\n$5\r\nTXGET\r\n$2\r\nk1\r\n$1\r\n0\r\n$19\r\n9223372036854775806\r\n"
        );
        assert_eq!(
            set(Protocol::Versioned),
            b"*5\r\n$5\r\nTXSET\r\n$2\r\nk1\r\n$3\r\nabc\r\n$2\r\n41\r\n$2\r\n42\r\n"
        );
        assert_eq!(get(Protocol::Memcache), b"get k1\r\n");
        assert_eq!(set(Protocol::Memcache), b"set k1 0 0 3\r\nabc\r\n");
        let flush = |p: Protocol| encoded(|o| p.encode_flush(o));
        assert_eq!(flush(Protocol::Versioned), b"*1\r\n$8\r\nFLUSHALL\r\n");
        assert_eq!(flush(Protocol::Memcache), b"flush_all\r\n");
    }

    #[test]
    fn resp_replies_are_framed_and_classified() {
        let p = Protocol::Resp;
        assert_eq!(p.parse_reply(b"+OK\r\n"), Ok(Some((5, Reply::Status))));
        assert_eq!(p.parse_reply(b"$-1\r\n+OK"), Ok(Some((5, Reply::Miss))));
        assert_eq!(p.parse_reply(b"$3\r\nabc\r\n"), Ok(Some((9, Reply::Value))));
        assert_eq!(p.parse_reply(b"-ERR no\r\n"), Ok(Some((9, Reply::Error))));
        assert_eq!(p.parse_reply(b"$3\r\nab"), Ok(None));
        assert_eq!(p.parse_reply(b""), Ok(None));
        assert!(p.parse_reply(b"?what\r\n").is_err());
    }

    #[test]
    fn txget_misses_and_hits_are_told_apart() {
        let p = Protocol::Versioned;
        let miss = b"*2\r\n$-1\r\n$10\r\ncompulsory\r\n";
        assert_eq!(p.parse_reply(miss), Ok(Some((miss.len(), Reply::Miss))));
        let hit = b"*4\r\n$3\r\nabc\r\n:1\r\n:2\r\n:0\r\n";
        assert_eq!(p.parse_reply(hit), Ok(Some((hit.len(), Reply::Value))));
        let inserted = b"*3\r\n$8\r\ninserted\r\n:41\r\n:42\r\n";
        assert_eq!(
            p.parse_reply(inserted),
            Ok(Some((inserted.len(), Reply::Value)))
        );
    }

    #[test]
    fn memcache_replies_are_framed_and_classified() {
        let p = Protocol::Memcache;
        let hit = b"VALUE k1 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(p.parse_reply(hit), Ok(Some((hit.len(), Reply::Value))));
        assert_eq!(p.parse_reply(&hit[..hit.len() - 1]), Ok(None));
        // A value may itself contain CRLF: only the declared length frames it.
        let tricky = b"VALUE k1 0 5\r\na\r\nEN\r\nEND\r\nSTORED\r\n";
        assert_eq!(
            p.parse_reply(tricky),
            Ok(Some((tricky.len() - 8, Reply::Value)))
        );
        assert_eq!(p.parse_reply(b"END\r\n"), Ok(Some((5, Reply::Miss))));
        assert_eq!(p.parse_reply(b"STORED\r\n"), Ok(Some((8, Reply::Status))));
        assert_eq!(
            p.parse_reply(b"SERVER_ERROR out of memory\r\n")
                .map(|r| r.map(|r| r.1)),
            Ok(Some(Reply::Error))
        );
        assert_eq!(p.parse_reply(b"STOR"), Ok(None));
        assert!(p.parse_reply(b"VALUE k1 0 x\r\n").is_err());
        assert!(p.parse_reply(b"HELLO\r\n").is_err());
        assert!(p.parse_reply(&[b'x'; MAX_LINE + 10]).is_err());
    }
}
