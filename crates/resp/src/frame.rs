//! Reply frames as a client sees them: check, parse, encode.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::cursor::{self, Bulk};
use crate::{encode, Limits, ProtocolError};

/// One RESP2 value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `+<text>\r\n`. Parsed lossily: invalid UTF-8 becomes U+FFFD.
    Simple(String),
    /// `-<message>\r\n`. Parsed lossily like [`Frame::Simple`].
    Error(String),
    /// `:<n>\r\n`.
    Integer(i64),
    /// `$<len>\r\n<data>\r\n`; when parsed, a zero-copy slice of the input.
    Bulk(Bytes),
    /// The null bulk string, `$-1\r\n`.
    Null,
    /// `*<len>\r\n` followed by `len` frames.
    Array(Vec<Frame>),
    /// The null array, `*-1\r\n`.
    NullArray,
}

/// The smallest frame, `+\r\n`.
const MIN_FRAME: usize = 3;

/// The start of a frame: a whole scalar, or an array's header.
enum Head {
    Simple(Range<usize>),
    Error(Range<usize>),
    Integer(i64),
    Bulk(Range<usize>),
    Null,
    Array(usize),
    NullArray,
}

impl Frame {
    /// Checks whether `buf` starts with a complete frame, without allocating.
    ///
    /// `Ok(Some(len))`: the first `len` bytes are one valid frame. `Ok(None)`: a
    /// valid but incomplete prefix. `Err(_)`: malformed or over a [`Limits`],
    /// reported as soon as the offending bytes arrive.
    pub fn check(buf: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
        check_at(buf, 0, limits, 0)
    }

    /// Removes exactly one complete frame from the front of `buf` and returns it;
    /// `Ok(None)` (with `buf` untouched) if it is incomplete. Bulk strings are
    /// zero-copy slices of the removed bytes.
    pub fn parse(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Frame>, ProtocolError> {
        let Some(len) = Self::check(buf, limits)? else {
            return Ok(None);
        };
        let bytes = buf.split_to(len).freeze();
        parse_at(&bytes, 0, limits).map(|(frame, _)| Some(frame))
    }

    /// Appends the frame's encoding to `out`. CR and LF in simple strings and errors
    /// are replaced by spaces (see [`encode::simple`]).
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Frame::Simple(text) => encode::simple(out, text),
            Frame::Error(message) => encode::error(out, message),
            Frame::Integer(n) => encode::integer(out, *n),
            Frame::Bulk(data) => encode::bulk(out, data),
            Frame::Null => encode::null(out),
            Frame::NullArray => encode::null_array(out),
            Frame::Array(items) => {
                encode::array_header(out, items.len());
                items.iter().for_each(|item| item.encode(out));
            }
        }
    }
}

/// Checks the frame at `pos`, inside `depth` arrays; returns where it ends.
fn check_at(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
    depth: usize,
) -> Result<Option<usize>, ProtocolError> {
    let Some((head, mut next)) = read_head(buf, pos, limits)? else {
        return Ok(None);
    };
    if let Head::Array(len) = head {
        if depth >= limits.max_depth {
            return Err(ProtocolError::TooDeep {
                limit: limits.max_depth,
            });
        }
        for _ in 0..len {
            match check_at(buf, next, limits, depth + 1)? {
                Some(end) => next = end,
                None => return Ok(None),
            }
        }
    }
    Ok(Some(next))
}

/// Builds the frame at `pos` of a buffer [`check_at`] accepted.
fn parse_at(bytes: &Bytes, pos: usize, limits: &Limits) -> Result<(Frame, usize), ProtocolError> {
    let (head, mut next) = read_head(bytes, pos, limits)?.ok_or(ProtocolError::Truncated)?;
    let text = |range: Range<usize>| String::from_utf8_lossy(&bytes[range]).into_owned();
    let frame = match head {
        Head::Simple(range) => Frame::Simple(text(range)),
        Head::Error(range) => Frame::Error(text(range)),
        Head::Integer(n) => Frame::Integer(n),
        Head::Bulk(range) => Frame::Bulk(bytes.slice(range)),
        Head::Null => Frame::Null,
        Head::NullArray => Frame::NullArray,
        Head::Array(len) => {
            let available = bytes.len().saturating_sub(next);
            let mut items = Vec::with_capacity(cursor::capacity(len, available, MIN_FRAME));
            for _ in 0..len {
                let (item, end) = parse_at(bytes, next, limits)?;
                items.push(item);
                next = end;
            }
            Frame::Array(items)
        }
    };
    Ok((frame, next))
}

/// Reads the head of the frame at `pos` and returns where it ends.
fn read_head(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<(Head, usize)>, ProtocolError> {
    let Some(&tag) = buf.get(pos) else {
        return Ok(None);
    };
    let at = pos + 1;
    match tag {
        b'+' => Ok(line(buf, at, limits)?.map(|(range, next)| (Head::Simple(range), next))),
        b'-' => Ok(line(buf, at, limits)?.map(|(range, next)| (Head::Error(range), next))),
        b':' => {
            let read = cursor::read_int(buf, at).map_err(|_| ProtocolError::InvalidInteger)?;
            Ok(read.map(|(n, next)| (Head::Integer(n), next)))
        }
        b'$' => Ok(cursor::read_bulk(buf, at, limits)?.map(|bulk| match bulk {
            Bulk::Null { next } => (Head::Null, next),
            Bulk::Data { data, next } => (Head::Bulk(data), next),
        })),
        b'*' => array_head(buf, at, limits),
        other => Err(ProtocolError::InvalidFrameType(other)),
    }
}

/// The content of a simple string or error line starting at `at`.
fn line(
    buf: &[u8],
    at: usize,
    limits: &Limits,
) -> Result<Option<(Range<usize>, usize)>, ProtocolError> {
    let limit = limits.max_inline_len;
    let end =
        cursor::find_crlf(buf, at, limit).map_err(|_| ProtocolError::LineTooLong { limit })?;
    Ok(end.map(|end| (at..end, end + 2)))
}

fn array_head(
    buf: &[u8],
    at: usize,
    limits: &Limits,
) -> Result<Option<(Head, usize)>, ProtocolError> {
    let read = cursor::read_int(buf, at).map_err(|_| ProtocolError::InvalidMultibulkLength)?;
    let Some((claimed, next)) = read else {
        return Ok(None);
    };
    let head = match cursor::array_len(claimed, limits)? {
        Some(len) => Head::Array(len),
        None => Head::NullArray,
    };
    Ok(Some((head, next)))
}
