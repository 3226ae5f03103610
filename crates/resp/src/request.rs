//! Decoding client requests, multibulk (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or inline
//! (`GET k\r\n`), into zero-copy argument slices.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::cursor::{self, Bulk};
use crate::inline::Inline;
use crate::{Limits, ProtocolError};

/// Decodes one request from the front of `buf`.
///
/// - `Ok(None)`: the request is incomplete; `buf` is untouched. Read more and retry.
/// - `Ok(Some(args))`: exactly the request's bytes were removed from `buf` (split off
///   and frozen), and `args` are [`Bytes`] slices of that chunk, not copies (quoted
///   inline arguments, which need unescaping, are the exception). An empty `args`
///   (`*0`, `*-1` or a blank inline line) is to be ignored, as Redis does.
/// - `Err(_)`: the input violates the protocol or a [`Limits`]; reply with
///   [`ProtocolError::write_reply`] and close the connection. `buf` is untouched.
///
/// Each call re-checks the partial request from its start; a server reading from a
/// socket should keep a [`RequestDecoder`] per connection instead, which resumes
/// where it stopped.
pub fn decode_request(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    RequestDecoder::new().decode(buf, limits)
}

/// A request decoder that remembers how much of an incomplete request it already
/// checked, so a request trickling in over many reads costs linear, not quadratic,
/// time. The check pass also notes where each argument lies, so the bytes are
/// scanned once; that list is kept between requests to spare an allocation.
///
/// Between calls the buffer may only grow at its end (as reading into a `BytesMut`
/// does); after `Ok(Some(_))` or an error the decoder starts afresh. Feeding it a
/// different buffer mid-request gives wrong results or errors, never a panic (call
/// [`RequestDecoder::reset`] when switching buffers).
#[derive(Debug, Clone, Default)]
pub struct RequestDecoder {
    pending: Option<Pending>,
    /// Where the arguments checked so far lie, from the start of the buffer.
    found: Vec<Range<usize>>,
    /// The arguments of the last inline request [`RequestDecoder::peek`] returned (quoted
    /// ones need unescaping, so they cannot be slices of the buffer).
    inline: Vec<Bytes>,
}

/// Above this many remembered argument slots a decoder gives the memory back when the
/// next request starts (a client sent one very long command).
const KEEP_FOUND: usize = 1024;

/// A request begun but not complete.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Multibulk(Multibulk),
    Inline(Inline),
}

/// A complete request found by the check pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ready {
    /// Bytes from the start of the buffer to the end of the request.
    pub(crate) len: usize,
    /// How many arguments it has.
    pub(crate) args: usize,
}

impl RequestDecoder {
    /// A decoder at the start of a request.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets any partial progress.
    pub fn reset(&mut self) {
        self.pending = None;
        self.start_afresh();
    }

    /// Decodes one request from the front of `buf`, exactly like [`decode_request`],
    /// but resuming the check of an incomplete request where the last call stopped.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let Some((ready, kind)) = self.check(buf, limits)? else {
            return Ok(None);
        };
        let frame = buf.split_to(ready.len).freeze();
        let args = match kind {
            Pending::Multibulk(_) => slices(&frame, &self.found),
            Pending::Inline(_) => crate::inline::split(&frame, ready.args),
        };
        args.map(Some)
    }

    /// The complete request at the front of `buf`, borrowed: its arguments are slices of
    /// `buf` itself, with no allocation and no reference count per request (the server's
    /// path). `buf` is not consumed: once done with the request, advance it by
    /// [`Request::len`]; peeking again without that returns the same request.
    ///
    /// `Ok(None)` and errors mean what they mean for [`RequestDecoder::decode`], and the
    /// same resumption rule holds: between calls `buf` may only grow at its end.
    pub fn peek<'a>(
        &'a mut self,
        buf: &'a [u8],
        limits: &Limits,
    ) -> Result<Option<Request<'a>>, ProtocolError> {
        let Some((ready, kind)) = self.check(buf, limits)? else {
            return Ok(None);
        };
        let source = match kind {
            Pending::Multibulk(_) => {
                within(&self.found, ready.len)?;
                Source::Multibulk {
                    buf,
                    found: &self.found,
                }
            }
            Pending::Inline(_) => {
                let line = Bytes::copy_from_slice(&buf[..ready.len]);
                self.inline = crate::inline::split(&line, ready.args)?;
                Source::Inline(&self.inline)
            }
        };
        Ok(Some(Request {
            len: ready.len,
            source,
        }))
    }

    /// The check pass, resumed where the last call stopped: the complete request at the
    /// front of `buf` and its kind, or `None` (progress kept) while it is incomplete.
    fn check(
        &mut self,
        buf: &[u8],
        limits: &Limits,
    ) -> Result<Option<(Ready, Pending)>, ProtocolError> {
        let pending = match self.pending.take() {
            Some(pending) => pending,
            None => {
                self.start_afresh();
                match begin(buf, limits)? {
                    Some(pending) => pending,
                    None => return Ok(None),
                }
            }
        };
        let checked = match pending {
            Pending::Multibulk(m) => m
                .resume(buf, limits, &mut self.found)?
                .map_err(Pending::Multibulk),
            Pending::Inline(i) => i.resume(buf, limits)?.map_err(Pending::Inline),
        };
        match checked {
            Ok(ready) => Ok(Some((ready, pending))),
            Err(pending) => {
                self.pending = Some(pending);
                Ok(None)
            }
        }
    }

    /// Forgets the last request's arguments, freeing their list if it was very long.
    fn start_afresh(&mut self) {
        if self.found.capacity() > KEEP_FOUND {
            self.found = Vec::new();
        }
        self.found.clear();
        self.inline.clear();
    }
}

/// A complete request borrowed from the input buffer by [`RequestDecoder::peek`].
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    len: usize,
    source: Source<'a>,
}

/// Where a borrowed request's arguments are.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    /// Slices of the buffer, at the ranges the check pass found.
    Multibulk {
        buf: &'a [u8],
        found: &'a [Range<usize>],
    },
    /// Unescaped copies, held by the decoder.
    Inline(&'a [Bytes]),
}

impl<'a> Request<'a> {
    /// The request's length in the buffer: advance the buffer by this much once done.
    #[allow(clippy::len_without_is_empty)] // A request is never zero bytes long.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The arguments, the command's name first. None for `*0`, `*-1` or a blank inline
    /// line, which are to be ignored, as Redis does.
    pub fn args(&self) -> RequestArgs<'a> {
        RequestArgs {
            source: self.source,
            next: 0,
        }
    }
}

/// The arguments of a [`Request`], in order.
#[derive(Debug, Clone)]
pub struct RequestArgs<'a> {
    source: Source<'a>,
    next: usize,
}

impl RequestArgs<'_> {
    fn count(&self) -> usize {
        match self.source {
            Source::Multibulk { found, .. } => found.len(),
            Source::Inline(args) => args.len(),
        }
    }
}

impl<'a> Iterator for RequestArgs<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let arg = match self.source {
            // `peek` checked every range against the request's length.
            Source::Multibulk { buf, found } => buf.get(found.get(self.next)?.clone())?,
            Source::Inline(args) => args.get(self.next)?,
        };
        self.next += 1;
        Some(arg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count().saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for RequestArgs<'_> {}

/// Starts a request: reads the multibulk header, or recognises an inline line.
fn begin(buf: &[u8], limits: &Limits) -> Result<Option<Pending>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => Ok(Multibulk::begin(buf, limits)?.map(Pending::Multibulk)),
        Some(_) => Ok(Some(Pending::Inline(Inline::START))),
    }
}

/// Progress through a multibulk request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Multibulk {
    /// Elements announced by the header.
    count: usize,
    /// Elements found complete so far.
    checked: usize,
    /// Where the next element starts.
    pos: usize,
}

impl Multibulk {
    /// Reads the header `*<count>\r\n`; `*0` and `*-1` are requests without arguments.
    fn begin(buf: &[u8], limits: &Limits) -> Result<Option<Self>, ProtocolError> {
        let read = cursor::read_int(buf, 1).map_err(|_| ProtocolError::InvalidMultibulkLength)?;
        let Some((claimed, body)) = read else {
            return Ok(None);
        };
        let count = cursor::array_len(claimed, limits)?.unwrap_or(0);
        Ok(Some(Self {
            count,
            checked: 0,
            pos: body,
        }))
    }

    /// Check pass: validates the elements present and notes where they lie in
    /// `found` (which grows with the bytes present, never with the claimed count).
    fn resume(
        mut self,
        buf: &[u8],
        limits: &Limits,
        found: &mut Vec<Range<usize>>,
    ) -> Result<Result<Ready, Self>, ProtocolError> {
        while self.checked < self.count {
            match element(buf, self.pos, limits)? {
                Some((data, next)) => {
                    found.push(data);
                    self.pos = next;
                }
                None => return Ok(Err(self)),
            }
            self.checked += 1;
        }
        Ok(Ok(Ready {
            len: self.pos,
            args: self.count,
        }))
    }
}

/// The arguments the check pass found (in order), as slices of the request's frozen
/// bytes. A range outside the frame (a decoder fed another buffer mid-request) is an
/// error, not a panic.
fn slices(frame: &Bytes, found: &[Range<usize>]) -> Result<Vec<Bytes>, ProtocolError> {
    within(found, frame.len())?;
    Ok(found.iter().map(|data| frame.slice(data.clone())).collect())
}

/// Fails unless every range the check pass found lies within the request's `len` bytes (it
/// may not, for a decoder fed another buffer mid-request).
fn within(found: &[Range<usize>], len: usize) -> Result<(), ProtocolError> {
    match found.last() {
        Some(data) if data.end > len => Err(ProtocolError::Truncated),
        _ => Ok(()),
    }
}

/// One element of a multibulk request, which must be a non-null bulk string.
fn element(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<(std::ops::Range<usize>, usize)>, ProtocolError> {
    match buf.get(pos) {
        None => return Ok(None),
        Some(b'$') => {}
        Some(&got) => {
            return Err(ProtocolError::UnexpectedByte {
                expected: b'$',
                got,
            })
        }
    }
    match cursor::read_bulk(buf, pos + 1, limits)? {
        None => Ok(None),
        Some(Bulk::Null { .. }) => Err(ProtocolError::InvalidBulkLength),
        Some(Bulk::Data { data, next }) => Ok(Some((data, next))),
    }
}
