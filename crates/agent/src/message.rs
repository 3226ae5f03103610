//! The invalidation stream's messages to the nodes, and the node commands that carry them
//! (`TXINVALIDATE`, `TXHEARTBEAT`; docs/protocol.md). Pure: the stream produces them, the
//! fan-out buffers them, a node link writes them.

use bytes::BytesMut;
use std::sync::Arc;
use txcache_model::{Invalidation, Timestamp, WallClock};
use txcache_resp::encode;

/// One message of the stream to the nodes.
#[derive(Clone, Debug)]
pub enum StreamMessage {
    /// A committed write transaction.
    Invalidate(Arc<Invalidation>),
    /// Every commit up to `ts` has been sent.
    Heartbeat {
        /// The position reached.
        ts: Timestamp,
        /// Wall-clock time at which that position was current.
        time: WallClock,
    },
}

impl StreamMessage {
    /// The message's position in the stream.
    pub fn ts(&self) -> Timestamp {
        match self {
            StreamMessage::Invalidate(invalidation) => invalidation.ts,
            StreamMessage::Heartbeat { ts, .. } => *ts,
        }
    }

    /// The message's wall-clock time.
    pub fn time(&self) -> WallClock {
        match self {
            StreamMessage::Invalidate(invalidation) => invalidation.commit_time,
            StreamMessage::Heartbeat { time, .. } => *time,
        }
    }

    /// Whether it carries a commit (not a heartbeat).
    pub fn is_commit(&self) -> bool {
        matches!(self, StreamMessage::Invalidate(_))
    }

    /// Appends the node command carrying this message.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            StreamMessage::Invalidate(invalidation) => encode_invalidation(out, invalidation),
            StreamMessage::Heartbeat { ts, time } => encode_heartbeat(out, *ts, *time),
        }
    }
}

/// Appends `TXINVALIDATE ts commit_time tag…`.
fn encode_invalidation(out: &mut BytesMut, invalidation: &Invalidation) {
    let (ts, time) = (
        invalidation.ts.0.to_string(),
        invalidation.commit_time.0.to_string(),
    );
    let mut parts: Vec<&[u8]> = vec![b"TXINVALIDATE", ts.as_bytes(), time.as_bytes()];
    parts.extend(invalidation.tags.iter().map(|tag| tag.as_str().as_bytes()));
    encode::request(out, &parts);
}

/// Appends `TXHEARTBEAT ts commit_time`.
fn encode_heartbeat(out: &mut BytesMut, ts: Timestamp, time: WallClock) {
    let (ts, time) = (ts.0.to_string(), time.0.to_string());
    encode::request(out, &[b"TXHEARTBEAT", ts.as_bytes(), time.as_bytes()]);
}
