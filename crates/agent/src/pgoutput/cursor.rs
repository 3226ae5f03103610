//! A bounds-checked reader over one message: the only code in the parser that indexes bytes,
//! so that every read is checked against what remains and every error carries its offset.

use bytes::Bytes;

use super::error::{PgOutputError, PgOutputErrorKind};

/// Reads big-endian fields from a message, front to back.
pub(super) struct Cursor<'a> {
    data: &'a Bytes,
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `data`.
    pub(super) fn new(data: &'a Bytes) -> Self {
        Self { data, pos: 0 }
    }

    /// Offset of the next byte to read.
    pub(super) fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub(super) fn left(&self) -> usize {
        self.data.len() - self.pos
    }

    /// An error of `kind` at offset `at`.
    pub(super) fn error_at(&self, at: usize, kind: PgOutputErrorKind) -> PgOutputError {
        PgOutputError { offset: at, kind }
    }

    /// An error of `kind` at the current offset.
    pub(super) fn error(&self, kind: PgOutputErrorKind) -> PgOutputError {
        self.error_at(self.pos, kind)
    }

    /// The next `N` bytes, or a `Truncated` error naming `what`.
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], PgOutputError> {
        let bytes = self
            .data
            .get(self.pos..self.pos + N)
            .and_then(|slice| <[u8; N]>::try_from(slice).ok())
            .ok_or_else(|| self.truncated(what, N))?;
        self.pos += N;
        Ok(bytes)
    }

    fn truncated(&self, what: &'static str, needed: usize) -> PgOutputError {
        self.error(PgOutputErrorKind::Truncated {
            what,
            needed,
            left: self.left(),
        })
    }

    /// An `Int8`/`Byte1`.
    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, PgOutputError> {
        Ok(self.array::<1>(what)?[0])
    }

    /// An `Int16`.
    pub(super) fn i16(&mut self, what: &'static str) -> Result<i16, PgOutputError> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    /// An `Int32` read as unsigned (OIDs, xids).
    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, PgOutputError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// An `Int32`.
    pub(super) fn i32(&mut self, what: &'static str) -> Result<i32, PgOutputError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    /// An `Int64` read as unsigned (LSNs).
    pub(super) fn u64(&mut self, what: &'static str) -> Result<u64, PgOutputError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// An `Int64`.
    pub(super) fn i64(&mut self, what: &'static str) -> Result<i64, PgOutputError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// A NUL-terminated UTF-8 string; the cursor moves past the NUL.
    pub(super) fn cstring(&mut self, what: &'static str) -> Result<String, PgOutputError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.error(PgOutputErrorKind::UnterminatedString { what }))?;
        let text = std::str::from_utf8(&rest[..len])
            .map_err(|_| self.error(PgOutputErrorKind::InvalidUtf8 { what }))?
            .to_owned();
        self.pos += len + 1;
        Ok(text)
    }

    /// An `Int32` length followed by that many bytes, returned as a slice of the message
    /// without copying. A negative length is an error.
    pub(super) fn len_prefixed(&mut self, what: &'static str) -> Result<Bytes, PgOutputError> {
        let at = self.pos;
        let len = self.i32(what)?;
        let len = usize::try_from(len).map_err(|_| {
            self.error_at(
                at,
                PgOutputErrorKind::Negative {
                    what,
                    value: len.into(),
                },
            )
        })?;
        if len > self.left() {
            return Err(self.truncated(what, len));
        }
        let bytes = self.data.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(bytes)
    }

    /// An `Int16` or `Int32` item count (already widened to `i64`), checked to be
    /// non-negative and to fit the remaining bytes at `min_item_len` bytes per item — so that a
    /// caller may allocate for it. `at` is where the count was read.
    pub(super) fn check_count(
        &self,
        at: usize,
        what: &'static str,
        count: i64,
        min_item_len: usize,
    ) -> Result<usize, PgOutputError> {
        let negative = PgOutputErrorKind::Negative { what, value: count };
        let count = usize::try_from(count).map_err(|_| self.error_at(at, negative))?;
        if count > self.left() / min_item_len.max(1) {
            let left = self.left();
            return Err(self.error_at(at, PgOutputErrorKind::CountTooLarge { what, count, left }));
        }
        Ok(count)
    }

    /// Succeeds only if the whole message has been read.
    pub(super) fn finish(&self) -> Result<(), PgOutputError> {
        match self.left() {
            0 => Ok(()),
            left => Err(self.error(PgOutputErrorKind::TrailingBytes { left })),
        }
    }
}
