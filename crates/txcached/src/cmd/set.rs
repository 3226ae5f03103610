//! `SET key value [NX | XX] [GET] [EX seconds | PX ms | EXAT unix-seconds | PXAT unix-ms |
//! KEEPTTL]`: a plain value, replacing whatever the key held.

use super::args::{deadline_ms, TimeUnit};
use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;
use txcache_store::{SetCondition, SetExpiry, SetOptions};

/// How the expiry was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expire {
    /// `EX`, `PX`: from now.
    In(TimeUnit),
    /// `EXAT`, `PXAT`: a Unix time.
    At(TimeUnit),
}

/// `SET`'s options as given, before the expire time is read.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parsed<'a> {
    condition: SetCondition,
    get: bool,
    keep_ttl: bool,
    expire: Option<(Expire, &'a [u8])>,
}

/// Replies `+OK`, or a null when `NX`/`XX` kept the value out; with `GET`, the old value (or
/// a null) whether or not the new one was stored. `-TOOLARGE` for a value that can never fit.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    let value = args.next_bytes()?;
    let options = parse_options(args.rest(), args.command())?;
    let now = context.now_ms();
    let expiry = match options.expire {
        None if options.keep_ttl => SetExpiry::Keep,
        None => SetExpiry::Never,
        Some((expire, time)) => SetExpiry::At(expire_deadline(expire, time, now, args.command())?),
    };
    let set = SetOptions {
        condition: options.condition,
        expiry,
        get: options.get,
    };
    let protocol = context.session.protocol;
    // The store copies key and value out of the read buffer into one allocation of its own;
    // with GET, the old value goes into the reply before the new one replaces it.
    let stored = context
        .with_shard(key, |store| {
            store.set_with(key, value, set, now, |old| match old {
                Some(old) => encode::bulk(out, old),
                None => protocol.null(out),
            })
        })
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    match (options.get, stored) {
        (true, _) => {}
        (false, true) => ok(out),
        (false, false) => protocol.null(out),
    }
    Ok(())
}

/// Reads the options as Redis does: left to right, an option repeated is allowed (the last
/// expire time wins), conflicting ones (`NX` with `XX`, two kinds of expiry, an expiry with
/// `KEEPTTL`) and anything else are a syntax error.
fn parse_options<'a>(
    options: Vec<&'a [u8]>,
    command: &'static str,
) -> Result<Parsed<'a>, CommandError> {
    let mut parsed = Parsed::default();
    let mut options = options.into_iter();
    let syntax = || CommandError::Syntax(command);
    while let Some(option) = options.next() {
        let kind = |unit, relative| {
            Some(if relative {
                Expire::In(unit)
            } else {
                Expire::At(unit)
            })
        };
        let expire = match option.to_ascii_uppercase().as_slice() {
            b"NX" if parsed.condition != SetCondition::IfPresent => {
                parsed.condition = SetCondition::IfAbsent;
                None
            }
            b"XX" if parsed.condition != SetCondition::IfAbsent => {
                parsed.condition = SetCondition::IfPresent;
                None
            }
            b"GET" => {
                parsed.get = true;
                None
            }
            b"KEEPTTL" if parsed.expire.is_none() => {
                parsed.keep_ttl = true;
                None
            }
            b"EX" => kind(TimeUnit::Seconds, true),
            b"PX" => kind(TimeUnit::Milliseconds, true),
            b"EXAT" => kind(TimeUnit::Seconds, false),
            b"PXAT" => kind(TimeUnit::Milliseconds, false),
            _ => return Err(syntax()),
        };
        if let Some(expire) = expire {
            let same_kind = parsed.expire.is_none_or(|(given, _)| given == expire);
            let time = options.next().ok_or_else(syntax)?;
            if parsed.keep_ttl || !same_kind {
                return Err(syntax());
            }
            parsed.expire = Some((expire, time));
        }
    }
    Ok(parsed)
}

/// The deadline of an expire option, with Redis's checks: an integer, positive, and within
/// range once in milliseconds and counted from now (or from the epoch, for a Unix time).
fn expire_deadline(
    expire: Expire,
    time: &[u8],
    now: u64,
    command: &'static str,
) -> Result<u64, CommandError> {
    let value = super::args::parse_integer(time).ok_or(CommandError::NotAnInteger)?;
    let (unit, base) = match expire {
        Expire::In(unit) => (unit, now),
        Expire::At(unit) => (unit, 0),
    };
    let deadline = Some(value)
        .filter(|value| *value > 0)
        .and_then(|value| deadline_ms(value, unit, base))
        .and_then(|deadline| u64::try_from(deadline).ok());
    deadline.ok_or(CommandError::InvalidExpireTime(command))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &[&'static str]) -> Result<Parsed<'static>, String> {
        let options = options.iter().map(|o| o.as_bytes()).collect();
        parse_options(options, "SET").map_err(|error| error.to_string())
    }

    #[test]
    fn options_combine_as_in_redis() {
        let nx_get_ex = parse(&["nx", "GET", "ex", "10"]).unwrap();
        assert_eq!(nx_get_ex.condition, SetCondition::IfAbsent);
        assert!(nx_get_ex.get && !nx_get_ex.keep_ttl);
        assert_eq!(
            nx_get_ex.expire,
            Some((Expire::In(TimeUnit::Seconds), &b"10"[..]))
        );
        let last_wins = parse(&["PX", "1", "PX", "2", "XX", "XX"]).unwrap();
        assert_eq!(
            last_wins.expire,
            Some((Expire::In(TimeUnit::Milliseconds), &b"2"[..]))
        );
        assert_eq!(last_wins.condition, SetCondition::IfPresent);
        assert!(parse(&["KEEPTTL", "KEEPTTL"]).unwrap().keep_ttl);
        let at = parse(&["pxat", "5"]).unwrap();
        assert_eq!(
            at.expire,
            Some((Expire::At(TimeUnit::Milliseconds), &b"5"[..]))
        );
        assert_eq!(parse(&[]).unwrap(), Parsed::default());
    }

    #[test]
    fn conflicting_or_unknown_options_are_syntax_errors() {
        for options in [
            &["NX", "XX"][..],
            &["XX", "NX"],
            &["EX", "1", "PX", "1"],
            &["EXAT", "1", "EX", "1"],
            &["KEEPTTL", "EX", "1"],
            &["EX", "1", "KEEPTTL"],
            &["EX"],
            &["BOGUS"],
            &["GET", "EX"],
        ] {
            assert_eq!(
                parse(options),
                Err("ERR syntax error in 'set' command".to_owned()),
                "{options:?}"
            );
        }
    }

    #[test]
    fn expire_times_are_checked_as_in_redis() {
        let deadline = |expire, time: &str| {
            expire_deadline(expire, time.as_bytes(), 1_000, "SET").map_err(|e| e.to_string())
        };
        let (ex, px) = (
            Expire::In(TimeUnit::Seconds),
            Expire::In(TimeUnit::Milliseconds),
        );
        let exat = Expire::At(TimeUnit::Seconds);
        assert_eq!(deadline(ex, "2"), Ok(3_000));
        assert_eq!(deadline(px, "2"), Ok(1_002));
        assert_eq!(
            deadline(exat, "2"),
            Ok(2_000),
            "a Unix time, even a past one"
        );
        let invalid = Err("ERR invalid expire time in 'set' command".to_owned());
        for bad in ["0", "-1", "9223372036854775807"] {
            assert_eq!(deadline(ex, bad), invalid, "{bad}");
        }
        assert_eq!(
            deadline(px, "9223372036854775807"),
            invalid,
            "overflows from now"
        );
        let not_integer = Err("ERR value is not an integer or out of range".to_owned());
        assert_eq!(deadline(ex, "1.5"), not_integer);
        assert_eq!(deadline(ex, ""), not_integer);
    }
}
