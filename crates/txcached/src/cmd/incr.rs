//! `INCR key`, `DECR key`, `INCRBY key delta`, `DECRBY key delta`: a plain value as a
//! 64-bit integer, changed in one step under its shard's lock.

use super::args::parse_integer;
use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// `INCR`: adds 1.
pub fn run_incr(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    args.finish()?;
    add(args, context, out, key, 1)
}

/// `DECR`: subtracts 1.
pub fn run_decr(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    args.finish()?;
    add(args, context, out, key, -1)
}

/// `INCRBY`: adds `delta`.
pub fn run_incrby(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    let delta = args.next_integer()?;
    args.finish()?;
    add(args, context, out, key, delta)
}

/// `DECRBY`: subtracts `delta` (which cannot be `i64::MIN`: its negation overflows).
pub fn run_decrby(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    let delta = args.next_integer()?;
    args.finish()?;
    let delta = delta
        .checked_neg()
        .ok_or(CommandError::Redis("decrement would overflow"))?;
    add(args, context, out, key, delta)
}

/// Replies `:value` after adding `delta` to the key's integer (0 for a missing key; the
/// expiry stays). The value must read as Redis reads an integer, and the sum must fit 64 bits.
fn add(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
    key: &[u8],
    delta: i64,
) -> Result<(), CommandError> {
    let now = context.now_ms();
    let mut result = Err(CommandError::NotAnInteger);
    context
        .with_shard(key, |store| {
            store.update(key, now, |old| {
                result = sum(old, delta);
                result.as_ref().ok().map(|sum| sum.to_string().into_bytes())
            })
        })
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    encode::integer(out, result?);
    Ok(())
}

/// The key's integer (`old`: its value, `None` when missing) plus `delta`.
fn sum(old: Option<&[u8]>, delta: i64) -> Result<i64, CommandError> {
    let current = match old {
        None => 0,
        Some(value) => parse_integer(value).ok_or(CommandError::NotAnInteger)?,
    };
    current.checked_add(delta).ok_or(CommandError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_follow_redis() {
        let sum = |old: Option<&str>, delta| {
            sum(old.map(str::as_bytes), delta).map_err(|e| e.to_string())
        };
        assert_eq!(sum(None, 5), Ok(5));
        assert_eq!(sum(Some("10"), -3), Ok(7));
        assert_eq!(sum(Some("-9223372036854775808"), 1), Ok(i64::MIN + 1));
        let overflow = Err("ERR increment or decrement would overflow".to_owned());
        assert_eq!(sum(Some("9223372036854775807"), 1), overflow);
        assert_eq!(sum(Some("-9223372036854775808"), -1), overflow);
        let not_integer = Err("ERR value is not an integer or out of range".to_owned());
        for value in ["", "abc", " 1", "1.5", "01", "+1"] {
            assert_eq!(sum(Some(value), 1), not_integer, "{value:?}");
        }
    }
}
