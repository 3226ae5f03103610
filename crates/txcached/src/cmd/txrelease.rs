//! `TXRELEASE key`: ends the key's lease (`TXGET … LEASE`) without storing a value — its
//! holder could not compute one — so that a waiting caller takes it over at once.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Appends `:1` if the key had a lease, else `:0`.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    if args.remaining() > 0 {
        return Err(CommandError::Syntax(args.command()));
    }
    let released = context.with_shard(key, |store| store.release_lease(key));
    encode::integer(out, i64::from(released));
    Ok(())
}
