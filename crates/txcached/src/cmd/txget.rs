//! `TXGET key lo hi [WITHTAGS] [LEASE ms]`: the most recent version valid somewhere in
//! `[lo, hi]`; on a miss with `LEASE`, the key's lease or how long another caller holds it.

use super::{Args, CommandError, Context, Protocol};
use bytes::BytesMut;
use txcache_model::ValidityInterval;
use txcache_resp::encode;
use txcache_store::{HitRef, LeaseOutcome, LookupRef};

/// The longest lease a caller may ask for: a holder that dies stalls the key's other callers
/// this long at most.
pub const MAX_LEASE_MS: u64 = 60_000;

/// Appends the reply for one lookup.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    let lo = args.next_timestamp("lo")?;
    let hi = args.next_timestamp("hi")?;
    let with_tags = args.eat_keyword("WITHTAGS");
    let lease_ms = match args.eat_keyword("LEASE") {
        true => Some(lease_duration(args)?),
        false => None,
    };
    if args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    if lo > hi {
        return Err(CommandError::InvalidArgument {
            command: args.command(),
            message: format!("lo ({lo}) must not exceed hi ({hi})"),
        });
    }
    let protocol = context.session.protocol;
    let node = context.node; // the clock, read only when a miss asks for the lease
                             // Encoding under the shard's lock copies the value straight into the reply, not into an
                             // owned hit first.
    context
        .with_shard(key, |store| {
            let missed = store.lookup_with(key, lo, hi, with_tags, |found| match found {
                LookupRef::Hit(hit) => {
                    encode_hit(out, &hit, with_tags);
                    None
                }
                LookupRef::Miss(kind) => Some(kind),
            })?;
            let Some(kind) = missed else {
                return Ok(());
            };
            let lease = lease_ms.map(|ms| store.claim_lease(key, kind, node.now_ms(), ms));
            encode::array_header(out, if lease.is_some() { 3 } else { 2 });
            protocol.null(out);
            encode::bulk(out, kind.as_str().as_bytes());
            match lease {
                Some(LeaseOutcome::Granted) => encode::integer(out, 0),
                Some(LeaseOutcome::Held { remaining_ms }) => {
                    encode::integer(out, wire(remaining_ms))
                }
                None => {}
            }
            Ok(())
        })
        .map_err(|error| CommandError::from_store(args.command(), error))
}

/// `LEASE ms`: 1 to [`MAX_LEASE_MS`] milliseconds.
fn lease_duration(args: &mut Args) -> Result<u64, CommandError> {
    let raw = args.next_bytes()?;
    std::str::from_utf8(raw)
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .filter(|ms| (1..=MAX_LEASE_MS).contains(ms))
        .ok_or_else(|| {
            args.invalid(
                "lease",
                raw,
                &format!("milliseconds from 1 to {MAX_LEASE_MS}"),
            )
        })
}

fn encode_hit(out: &mut BytesMut, hit: &HitRef<'_>, with_tags: bool) {
    encode::array_header(out, if with_tags { 5 } else { 4 });
    encode::bulk(out, hit.value);
    // A hit's interval is always bounded: no null to write in either protocol.
    encode_interval(out, &hit.interval, Protocol::Resp2);
    encode::integer(out, i64::from(hit.open));
    if with_tags {
        let tags = hit.tags.unwrap_or_default();
        encode::array_header(out, tags.len());
        for tag in tags {
            encode::bulk(out, tag.as_str().as_bytes());
        }
    }
}

/// Appends `:lo` and `:hi` (or a null for an open interval).
pub fn encode_interval(out: &mut BytesMut, interval: &ValidityInterval, protocol: Protocol) {
    encode::integer(out, wire(interval.lo().0));
    match interval.hi() {
        Some(hi) => encode::integer(out, wire(hi.0)),
        None => protocol.null(out),
    }
}

/// A timestamp as a RESP integer (timestamps never exceed `i64::MAX`; saturate if one did).
fn wire(ts: u64) -> i64 {
    i64::try_from(ts).unwrap_or(i64::MAX)
}
