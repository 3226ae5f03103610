//! `EXPIRE key seconds [NX | XX | GT | LT]` and `PEXPIRE key ms [NX | XX | GT | LT]`: a
//! deadline for a plain value.

use super::args::{deadline_ms, TimeUnit};
use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;
use txcache_store::ExpireCondition;

/// `EXPIRE`: the time in seconds.
pub fn run_expire(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    expire(args, context, out, TimeUnit::Seconds)
}

/// `PEXPIRE`: the time in milliseconds.
pub fn run_pexpire(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    expire(args, context, out, TimeUnit::Milliseconds)
}

/// Replies `:1` when the deadline was set (or, being in the past, removed the key), `:0` when
/// the key is missing or the condition kept the old one; `-WRONGTYPE` for a versioned key.
fn expire(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
    unit: TimeUnit,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    let time = args.next_bytes()?;
    // Redis checks the options before the time.
    let condition = parse_condition(&args.rest())?;
    let time = super::args::parse_integer(time).ok_or(CommandError::NotAnInteger)?;
    let now = context.now_ms();
    let deadline =
        deadline_ms(time, unit, now).ok_or(CommandError::InvalidExpireTime(args.command()))?;
    // A time in the past (even before the epoch) removes the key.
    let deadline = u64::try_from(deadline).unwrap_or(0);
    let applied = context
        .with_shard(key, |store| store.expire(key, deadline, now, condition))
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    encode::integer(out, i64::from(applied));
    Ok(())
}

/// `NX`, `XX`, `GT`, `LT` in any case and order; `NX` goes with none of the others, `GT` not
/// with `LT` (Redis's messages).
fn parse_condition(options: &[&[u8]]) -> Result<ExpireCondition, CommandError> {
    let mut condition = ExpireCondition::default();
    for option in options {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" => condition.if_none = true,
            b"XX" => condition.if_some = true,
            b"GT" => condition.if_later = true,
            b"LT" => condition.if_earlier = true,
            _ => {
                return Err(CommandError::UnsupportedOption(super::printable(option)));
            }
        }
    }
    if condition.if_none && (condition.if_some || condition.if_later || condition.if_earlier) {
        return Err(CommandError::Redis(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if condition.if_later && condition.if_earlier {
        return Err(CommandError::Redis(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(condition)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &[&str]) -> Result<ExpireCondition, String> {
        let options: Vec<&[u8]> = options.iter().map(|o| o.as_bytes()).collect();
        parse_condition(&options).map_err(|error| error.to_string())
    }

    #[test]
    fn conditions_combine_as_in_redis() {
        assert_eq!(parse(&[]), Ok(ExpireCondition::default()));
        let xx_gt = parse(&["xx", "Gt"]).unwrap();
        assert!(xx_gt.if_some && xx_gt.if_later && !xx_gt.if_none && !xx_gt.if_earlier);
        assert!(parse(&["NX", "NX"]).unwrap().if_none);
        let nx = "ERR NX and XX, GT or LT options at the same time are not compatible";
        for options in [&["NX", "XX"][..], &["LT", "NX"], &["NX", "GT"]] {
            assert_eq!(parse(options), Err(nx.to_owned()), "{options:?}");
        }
        let gt_lt = "ERR GT and LT options at the same time are not compatible";
        assert_eq!(parse(&["GT", "XX", "LT"]), Err(gt_lt.to_owned()));
        assert_eq!(parse(&["EX"]), Err("ERR Unsupported option EX".to_owned()));
    }
}
