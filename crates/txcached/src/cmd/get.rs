//! `GET key`: a plain value.

use super::{Args, CommandError, Context};
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies `$value`, or a null when the key is absent or expired.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let key = args.next_bytes()?;
    args.finish()?;
    let (node, protocol) = (context.node, context.session.protocol);
    // The value is copied from the store straight into the reply, under the shard's lock:
    // no allocation and no shared handle per hit. The clock is read only for a value with a
    // deadline.
    context
        .with_shard(key, |store| match store.get(key, || node.now_ms())? {
            Some(value) => {
                encode::bulk(out, value);
                Ok(())
            }
            None => {
                protocol.null(out);
                Ok(())
            }
        })
        .map_err(|error| CommandError::from_store(args.command(), error))
}
