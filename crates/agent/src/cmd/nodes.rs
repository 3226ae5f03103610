//! `NODES`: the cache nodes the agent delivers to now, which libraries route keys over.

use super::{Active, Args, CommandError};
use bytes::BytesMut;
use txcache_resp::encode;

/// `NODES` takes no arguments.
#[derive(Debug)]
pub struct Nodes;

impl Nodes {
    /// Reads the arguments.
    pub fn parse(args: &mut Args<'_>) -> Result<Self, CommandError> {
        args.finish()?;
        Ok(Self)
    }

    /// `*n` of `$address`: the membership in its order (`--node`'s, or
    /// `txcache.cache_nodes`'s), each address as given (`host:port`, `rediss://host:port`).
    pub fn apply(self, active: &Active, out: &mut BytesMut) -> Result<(), CommandError> {
        let addresses = active.nodes.addresses();
        encode::array_header(out, addresses.len());
        for address in &addresses {
            encode::bulk(out, address.as_bytes());
        }
        Ok(())
    }
}
