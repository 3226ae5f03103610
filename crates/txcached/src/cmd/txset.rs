//! `TXSET key value lo hi|OPEN [SNAPSHOT s] [TAGS tag ...]`: stores one version, ending the
//! key's lease (`TXGET … LEASE`) whatever the outcome.

use super::{printable, txget::encode_interval, Args, CommandError, Context, Protocol};
use bytes::BytesMut;
use txcache_model::{InvalidationTag, ValidityInterval};
use txcache_resp::encode;
use txcache_store::{InsertOutcome, InsertRequest};

/// Appends the reply for one insert.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    // Still in the read buffer: the store copies it into an allocation of exactly its size.
    let value = args.next_bytes()?;
    let request = parse_request(args)?;
    let outcome = context
        .with_shard(key, |store| {
            store.release_lease(key);
            store.insert(key, value, request)
        })
        .map_err(|error| CommandError::from_store(args.command(), error))?;
    let protocol = context.session.protocol;
    encode::array_header(out, 3);
    match outcome {
        InsertOutcome::Inserted(interval) => encode_stored(out, "inserted", &interval, protocol),
        InsertOutcome::Extended(interval) => encode_stored(out, "extended", &interval, protocol),
        InsertOutcome::Nondeterministic => encode_dropped(out, "nondeterministic", protocol),
        InsertOutcome::EmptyInterval => encode_dropped(out, "empty", protocol),
    }
    Ok(())
}

fn parse_request(args: &mut Args) -> Result<InsertRequest, CommandError> {
    let lo = args.next_timestamp("lo")?;
    let hi = if args.eat_keyword("OPEN") {
        None
    } else {
        Some(args.next_timestamp("hi")?)
    };
    let interval =
        ValidityInterval::new(lo, hi).map_err(|error| CommandError::InvalidArgument {
            command: args.command(),
            message: error.to_string(),
        })?;
    let snapshot = match args.eat_keyword("SNAPSHOT") {
        true => Some(args.next_timestamp("snapshot")?),
        false => None,
    };
    let tags = match args.eat_keyword("TAGS") {
        true => parse_tags(args)?,
        false => Vec::new(),
    };
    if args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    Ok(InsertRequest {
        interval,
        snapshot,
        tags,
    })
}

/// Parses every remaining argument as an invalidation tag.
pub fn parse_tags(args: &mut Args) -> Result<Vec<InvalidationTag>, CommandError> {
    args.rest()
        .iter()
        .map(|raw| {
            let text =
                std::str::from_utf8(raw).map_err(|_| args.invalid("tag", raw, "UTF-8 text"))?;
            InvalidationTag::parse(text).map_err(|error| CommandError::InvalidArgument {
                command: args.command(),
                message: format!("{error} ('{}')", printable(raw)),
            })
        })
        .collect()
}

fn encode_stored(
    out: &mut BytesMut,
    outcome: &str,
    interval: &ValidityInterval,
    protocol: Protocol,
) {
    encode::bulk(out, outcome.as_bytes());
    encode_interval(out, interval, protocol);
}

fn encode_dropped(out: &mut BytesMut, outcome: &str, protocol: Protocol) {
    encode::bulk(out, outcome.as_bytes());
    protocol.null(out);
    protocol.null(out);
}
