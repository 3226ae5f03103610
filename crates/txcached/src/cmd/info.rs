//! `INFO [section]`: the node's metrics as Redis-style text.

use super::{Args, CommandError, Context};
use crate::metrics;
use bytes::BytesMut;
use txcache_resp::encode;

/// Replies one bulk string.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let section = match args.remaining() {
        0 => None,
        _ => Some(args.next_text("section")?.to_ascii_lowercase()),
    };
    args.finish()?;
    let sections = metrics::REGISTRY.sections();
    let known = |name: &str| name == "all" || name == "default" || sections.contains(&name);
    let section = section.filter(|name| name != "default");
    if let Some(name) = section.as_deref().filter(|name| !known(name)) {
        // Redis answers unknown sections with nothing; an empty reply is what tools expect.
        let _ = name;
        encode::bulk(out, b"");
        return Ok(());
    }
    encode::bulk(
        out,
        metrics::info(context.node, section.as_deref()).as_bytes(),
    );
    Ok(())
}
