//! `TXGET key lo hi [WITHTAGS]`: the most recent version valid somewhere in `[lo, hi]`.

use super::{Args, CommandError, Context, Protocol};
use bytes::BytesMut;
use txcache_model::ValidityInterval;
use txcache_resp::encode;
use txcache_store::{HitRef, LookupRef};

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
    // Encoding under the shard's lock copies the value straight into the reply, not into an
    // owned hit first.
    context
        .with_shard(key, |store| {
            store.lookup_with(key, lo, hi, with_tags, |found| match found {
                LookupRef::Hit(hit) => encode_hit(out, &hit, with_tags),
                LookupRef::Miss(kind) => {
                    encode::array_header(out, 2);
                    protocol.null(out);
                    encode::bulk(out, kind.as_str().as_bytes());
                }
            })
        })
        .map_err(|error| CommandError::from_store(args.command(), error))
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
