//! Reply pieces more than one command writes.

use crate::pincushion::Pin;
use bytes::BytesMut;
use txcache_resp::encode;

/// Appends a position (an LSN, a wall-clock time) as an integer; RESP integers are signed,
/// so a position beyond `i64::MAX` (none PostgreSQL writes) is sent as `i64::MAX`.
pub fn position(out: &mut BytesMut, value: u64) {
    encode::integer(out, i64::try_from(value).unwrap_or(i64::MAX));
}

/// One pin, in `PINS` and `PIN`: `*4 :ts $snapshot_id :current_as_of $snapshot`; a pin with
/// a catalog fingerprint (`--ddl-tracking fingerprint`) is `*6`, those and `$fingerprint
/// :after` (0 when unknown).
pub fn pin(out: &mut BytesMut, pin: &Pin) {
    let fingerprint = pin.fingerprint.as_deref();
    encode::array_header(out, if fingerprint.is_some() { 6 } else { 4 });
    pin_fields(out, pin);
    if let Some(fingerprint) = fingerprint {
        encode::bulk(out, fingerprint.as_bytes());
        position(out, pin.after.map_or(0, |after| after.0));
    }
}

/// One standby pin, in `STANDBYPINS`: `*5 $standby` and the four fields of a pin without a
/// fingerprint (standby pins have none: `--standby` needs the DDL triggers).
pub fn standby_pin(out: &mut BytesMut, standby: &str, pin: &Pin) {
    encode::array_header(out, 5);
    encode::bulk(out, standby.as_bytes());
    pin_fields(out, pin);
}

/// `:ts $snapshot_id :current_as_of $snapshot`, without a header.
fn pin_fields(out: &mut BytesMut, pin: &Pin) {
    position(out, pin.ts.0);
    encode::bulk(out, pin.snapshot_id.as_bytes());
    position(out, pin.current_as_of.0);
    encode::bulk(out, pin.snapshot.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(pin: &Pin) -> String {
        let mut out = BytesMut::new();
        super::pin(&mut out, pin);
        String::from_utf8(out.to_vec()).unwrap()
    }

    const FOUR: &str = "*4\r\n:500\r\n$19\r\n00000003-00000002-1\r\n:1700000000000000\r\n\
                        $8\r\n10:12:10\r\n";

    #[test]
    fn a_pin_without_a_fingerprint_is_four_elements() {
        assert_eq!(encoded(&Pin::sample(500, None, Some(480))), FOUR);
    }

    #[test]
    fn a_standby_pin_is_its_name_and_the_four_elements() {
        let mut out = BytesMut::new();
        standby_pin(&mut out, "replica1", &Pin::sample(500, None, None));
        let four = FOUR.replacen("*4\r\n", "", 1);
        let expected = format!("*5\r\n$8\r\nreplica1\r\n{four}");
        assert_eq!(String::from_utf8(out.to_vec()).unwrap(), expected);
    }

    #[test]
    fn a_pin_with_a_fingerprint_adds_it_and_the_previous_fence() {
        let six = FOUR.replacen("*4", "*6", 1);
        assert_eq!(
            encoded(&Pin::sample(500, Some("1f2e"), Some(480))),
            format!("{six}$4\r\n1f2e\r\n:480\r\n")
        );
        assert_eq!(
            encoded(&Pin::sample(500, Some("1f2e"), None)),
            format!("{six}$4\r\n1f2e\r\n:0\r\n")
        );
    }
}
