//! `INFO [section]`: the node's metrics as Redis-style text.

use super::{Args, CommandError, Context};
use crate::metrics;
use bytes::BytesMut;

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
        context.session.protocol.text(out, b"");
        return Ok(());
    }
    let node = context.node;
    let reading = metrics::collect_from(node, |visit| context.for_each_shard(visit));
    let text = metrics::info_text(&reading, section.as_deref());
    context.session.protocol.text(out, text.as_bytes());
    Ok(())
}
