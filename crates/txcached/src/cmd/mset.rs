//! `MSET key value [key value ...]`: several plain values at once.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;

/// Replies `+OK`. Every value replaces whatever its key held, without an expiry, as `SET`
/// does; keys on several shards are written with all of them locked, so no client sees some
/// written and others not. A value that can never fit refuses the whole command before
/// anything is written.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let parts = args.rest();
    if parts.is_empty() || !parts.len().is_multiple_of(2) {
        return Err(CommandError::WrongArity(args.command()));
    }
    let keys: Vec<&[u8]> = parts.iter().step_by(2).copied().collect();
    let pairs = || parts.chunks_exact(2).map(|pair| (pair[0], pair[1]));
    let command = args.command();
    context.with_keys_locked(&keys, |context| {
        for (key, value) in pairs() {
            context
                .with_shard(key, |store| {
                    store.check_plain_fits(key.len(), value.len(), false)
                })
                .map_err(|error| CommandError::from_store(command, error))?;
        }
        for (key, value) in pairs() {
            context
                .with_shard(key, |store| store.set(key, value))
                .map_err(|error| CommandError::from_store(command, error))?;
        }
        Ok(())
    })?;
    ok(out);
    Ok(())
}
