//! The RESP2 codec (Redis serialization protocol), with the RESP3 reply types a server needs
//! for clients that ask for them (`HELLO 3`): pure, no I/O. Requests are the same in both.
//!
//! The server uses [`decode_request`] (or, per connection, a [`RequestDecoder`]) to
//! read commands and the [`encode`] functions to write replies; Rust clients and load
//! tools use [`encode::request`] to send commands and [`Frame::parse`] to read replies.
//!
//! # Design
//!
//! - **Check, then parse.** As in mini-redis, a cheap check pass walks the buffer
//!   and decides whether a complete, valid item is present, without allocating.
//!   Only then are its bytes split off and a second pass builds the value (for
//!   requests, the check pass notes where each argument lies, so the second pass
//!   only slices).
//!   Incomplete input returns `Ok(None)` and leaves the buffer untouched.
//! - **Every claimed length is checked first.** Each `$<len>` and `*<count>` is
//!   compared with the [`Limits`] as soon as its line is read, before anything
//!   waits for, buffers or allocates that much. Nothing is preallocated from a
//!   claimed count: capacities are capped by what the bytes actually present can
//!   hold. Integer lines must be canonical and cannot overflow, so they are at most
//!   22 bytes; lines without a length prefix are bounded by
//!   [`Limits::max_inline_len`]. Malformed input is rejected as soon as the
//!   offending byte arrives rather than after waiting for more.
//! - **Zero-copy requests.** A decoded request's arguments are [`bytes::Bytes`]
//!   slices of the request's own frozen bytes: no argument is copied. A server can go
//!   further with [`RequestDecoder::peek`]: the request is borrowed from the read
//!   buffer, its arguments plain `&[u8]` slices of it, and the buffer is advanced once
//!   the reply is written: no allocation and no reference count per request.
//! - **Errors are final.** A [`ProtocolError`] means the stream can no longer be
//!   framed; the server replies with [`ProtocolError::write_reply`] and closes.
//!
//! ```
//! use bytes::BytesMut;
//! use txcache_resp::{decode_request, encode, Frame, Limits};
//!
//! let limits = Limits::default();
//! let mut wire = BytesMut::new();
//! encode::request(&mut wire, &[b"GET", b"key"]);
//! let args = decode_request(&mut wire, &limits)?.expect("complete");
//! assert_eq!(args, [&b"GET"[..], &b"key"[..]]);
//!
//! encode::bulk(&mut wire, b"value");
//! assert_eq!(Frame::parse(&mut wire, &limits)?, Some(Frame::Bulk("value".into())));
//! # Ok::<(), txcache_resp::ProtocolError>(())
//! ```

pub mod auth;
mod cursor;
pub mod decimal;
pub mod encode;
mod error;
mod frame;
mod inline;
mod limits;
mod request;

pub use bytes::{Bytes, BytesMut};
pub use error::ProtocolError;
pub use frame::Frame;
pub use limits::Limits;
pub use request::{decode_request, Request, RequestArgs, RequestDecoder};
