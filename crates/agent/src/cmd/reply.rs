//! Reply pieces more than one command writes.

use crate::pincushion::Pin;
use bytes::BytesMut;
use txcache_resp::encode;

/// Appends a position (an LSN, a wall-clock time) as an integer; RESP integers are signed,
/// so a position beyond `i64::MAX` (none PostgreSQL writes) is sent as `i64::MAX`.
pub fn position(out: &mut BytesMut, value: u64) {
    encode::integer(out, i64::try_from(value).unwrap_or(i64::MAX));
}

/// `*4 :ts $snapshot_id :current_as_of $snapshot`: one pin, in `PINS` and `PIN`.
pub fn pin(out: &mut BytesMut, pin: &Pin) {
    encode::array_header(out, 4);
    position(out, pin.ts.0);
    encode::bulk(out, pin.snapshot_id.as_bytes());
    position(out, pin.current_as_of.0);
    encode::bulk(out, pin.snapshot.as_bytes());
}
