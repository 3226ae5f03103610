//! Inline requests: a line such as `SET key "a value"\r\n`, as typed into telnet.
//!
//! Arguments are separated by whitespace and follow the quoting rules of Redis's
//! `sdssplitargs`: `"double quotes"` with `\n \r \t \b \a \xHH` and `\<any>`
//! escapes, `'single quotes'` with only `\'`; a closing quote must be followed by
//! whitespace or the end of the line; a quote may start in the middle of an
//! argument (`a"b c"` is `ab c`). Unquoted arguments are zero-copy slices of the
//! line; quoted ones are unescaped into a fresh buffer.

use bytes::Bytes;

use crate::request::Ready;
use crate::{Limits, ProtocolError};

/// Progress through an inline request that is not complete yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inline {
    /// Bytes already searched for the newline.
    scanned: usize,
}

impl Inline {
    /// Nothing scanned yet.
    pub(crate) const START: Self = Self { scanned: 0 };

    /// Check pass: looks for the end of the line (within the limit) and validates
    /// its quoting, without allocating.
    pub(crate) fn resume(
        self,
        buf: &[u8],
        limits: &Limits,
    ) -> Result<Result<Ready, Self>, ProtocolError> {
        let window_end = buf.len().min(limits.max_inline_len.saturating_add(2));
        let from = self.scanned.min(window_end);
        match buf[from..window_end].iter().position(|&b| b == b'\n') {
            Some(i) => ready(buf, from + i, limits).map(Ok),
            None if window_end < limits.max_inline_len.saturating_add(2) => Ok(Err(Self {
                scanned: window_end,
            })),
            None => Err(ProtocolError::TooBigInline),
        }
    }
}

/// The line ends with the `\n` at `newline`: checks its length and quoting.
fn ready(buf: &[u8], newline: usize, limits: &Limits) -> Result<Ready, ProtocolError> {
    let end = content_end(buf, newline);
    if end > limits.max_inline_len {
        return Err(ProtocolError::TooBigInline);
    }
    let mut args = 0;
    let mut pos = 0;
    while let Some(token) = next_token(&buf[..end], pos)? {
        args += 1;
        pos = token.end;
    }
    Ok(Ready {
        len: newline + 1,
        args,
    })
}

/// Where the line's content ends: before the `\n` at `newline` and an optional `\r`.
fn content_end(buf: &[u8], newline: usize) -> usize {
    match newline.checked_sub(1) {
        Some(before) if buf.get(before) == Some(&b'\r') => before,
        _ => newline,
    }
}

/// Slicing pass over a line the check pass accepted (`frame` is the line including
/// its newline); `args` is the argument count the check pass found.
pub(crate) fn split(frame: &Bytes, args: usize) -> Result<Vec<Bytes>, ProtocolError> {
    let newline = frame.len().saturating_sub(1);
    let line = &frame[..content_end(frame, newline)];
    let mut out = Vec::with_capacity(args.min(line.len()));
    let mut pos = 0;
    while let Some(token) = next_token(line, pos)? {
        out.push(if token.verbatim {
            frame.slice(token.start..token.end)
        } else {
            let mut unescaped = Vec::with_capacity(token.end - token.start);
            scan_token(line, token.start, &mut unescaped)?;
            Bytes::from(unescaped)
        });
        pos = token.end;
    }
    Ok(out)
}

/// Whitespace as C's `isspace` sees it.
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

/// One argument's place in the line.
struct Token {
    start: usize,
    end: usize,
    /// No quotes: the argument is exactly `line[start..end]`.
    verbatim: bool,
}

/// The next argument at or after `pos`, if any.
fn next_token(line: &[u8], pos: usize) -> Result<Option<Token>, ProtocolError> {
    let rest = line.get(pos..).unwrap_or_default();
    let Some(skip) = rest.iter().position(|&b| !is_blank(b)) else {
        return Ok(None);
    };
    let start = pos + skip;
    let (end, verbatim) = scan_token(line, start, &mut NoSink)?;
    Ok(Some(Token {
        start,
        end,
        verbatim,
    }))
}

/// Receives an argument's unescaped bytes; [`NoSink`] when only validating.
trait Sink {
    fn push(&mut self, byte: u8);
}

struct NoSink;

impl Sink for NoSink {
    fn push(&mut self, _: u8) {}
}

impl Sink for Vec<u8> {
    fn push(&mut self, byte: u8) {
        Vec::push(self, byte);
    }
}

/// Scans the argument starting at `pos`; returns where it ends and whether it is
/// verbatim (quote-free).
fn scan_token(
    line: &[u8],
    mut pos: usize,
    sink: &mut impl Sink,
) -> Result<(usize, bool), ProtocolError> {
    while let Some(&byte) = line.get(pos) {
        match byte {
            b'"' | b'\'' => return scan_quoted(line, pos + 1, byte, sink).map(|end| (end, false)),
            _ if is_blank(byte) => break,
            _ => sink.push(byte),
        }
        pos += 1;
    }
    Ok((pos, true))
}

/// One step inside quotes.
enum Step {
    /// A content byte, taking this many bytes of input.
    Byte(u8, usize),
    /// The closing quote.
    Close,
}

/// Scans quoted content starting after the opening `quote` at `pos - 1`; returns
/// the position after the closing quote.
fn scan_quoted(
    line: &[u8],
    mut pos: usize,
    quote: u8,
    sink: &mut impl Sink,
) -> Result<usize, ProtocolError> {
    loop {
        let step = match quote {
            b'"' => double_step(line, pos)?,
            _ => single_step(line, pos)?,
        };
        match step {
            Step::Byte(byte, len) => {
                sink.push(byte);
                pos += len;
            }
            Step::Close => return after_close(line, pos + 1),
        }
    }
}

fn double_step(line: &[u8], pos: usize) -> Result<Step, ProtocolError> {
    match line.get(pos) {
        None => Err(ProtocolError::UnbalancedQuotes),
        Some(b'"') => Ok(Step::Close),
        Some(b'\\') => Ok(escape(line, pos)),
        Some(&byte) => Ok(Step::Byte(byte, 1)),
    }
}

/// The escape whose backslash is at `pos`, inside double quotes.
fn escape(line: &[u8], pos: usize) -> Step {
    if line.get(pos + 1) == Some(&b'x') {
        if let Some(byte) = hex_byte(line.get(pos + 2..pos + 4)) {
            return Step::Byte(byte, 4);
        }
    }
    match line.get(pos + 1) {
        None => Step::Byte(b'\\', 1),
        Some(&c) => {
            let byte = match c {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'b' => 0x08,
                b'a' => 0x07,
                other => other,
            };
            Step::Byte(byte, 2)
        }
    }
}

fn hex_byte(pair: Option<&[u8]>) -> Option<u8> {
    let digit = |b: u8| char::from(b).to_digit(16);
    match pair? {
        &[hi, lo] => Some(u8::try_from(digit(hi)? * 16 + digit(lo)?).ok()?),
        _ => None,
    }
}

fn single_step(line: &[u8], pos: usize) -> Result<Step, ProtocolError> {
    match (line.get(pos), line.get(pos + 1)) {
        (None, _) => Err(ProtocolError::UnbalancedQuotes),
        (Some(b'\\'), Some(b'\'')) => Ok(Step::Byte(b'\'', 2)),
        (Some(b'\''), _) => Ok(Step::Close),
        (Some(&byte), _) => Ok(Step::Byte(byte, 1)),
    }
}

/// A closing quote must be followed by whitespace or the end of the line.
fn after_close(line: &[u8], pos: usize) -> Result<usize, ProtocolError> {
    match line.get(pos) {
        Some(&byte) if !is_blank(byte) => Err(ProtocolError::UnbalancedQuotes),
        _ => Ok(pos),
    }
}
