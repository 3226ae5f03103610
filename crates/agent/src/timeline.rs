//! Whether one database history continues another. A history is
//! `system_identifier:timeline` ([`crate::database::history`]); a promoted standby writes a
//! new timeline that branched off its primary's at a switch point, recorded in the new
//! timeline's history file (`TIMELINE_HISTORY`, asked over a replication session).
//! Everything the old timeline wrote below the switch point is the new one's too, so cache
//! nodes that saw nothing past it keep their entries across the failover.

use crate::connect::ReplicationHost;
use pgwire_replication::{Lsn, ReplicationClient};
use txcache_model::Timestamp;

/// Where history `new` branched off history `old`: `None` when it does not continue it
/// (another cluster, or a timeline whose history does not list `old`'s). `server`, which
/// has history `new`, is asked.
pub async fn switch_point(
    server: ReplicationHost<'_>,
    old: &str,
    new: &str,
) -> anyhow::Result<Option<Timestamp>> {
    let (Some((old_system, old_timeline)), Some((new_system, new_timeline))) =
        (split(old), split(new))
    else {
        return Ok(None);
    };
    if old_system != new_system || new_timeline <= old_timeline {
        return Ok(None);
    }
    let asking = async |client: &mut ReplicationClient| client.timeline_history(new_timeline).await;
    let history = server.ask("reading the timeline history", asking).await?;
    Ok(branch_point(
        &String::from_utf8_lossy(&history.content),
        old_timeline,
    ))
}

/// The switch point of `timeline` in a timeline history file: lines of
/// `timeline<TAB>switch LSN<TAB>reason`, one per ancestor timeline.
pub fn branch_point(history: &str, timeline: u32) -> Option<Timestamp> {
    history.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let listed: u32 = fields.next()?.parse().ok()?;
        let switch = Lsn::parse(fields.next()?).ok()?;
        (listed == timeline).then(|| Timestamp(switch.as_u64()))
    })
}

/// The timeline of a history (`system_identifier:timeline`).
pub fn timeline_of(history: &str) -> Option<u32> {
    split(history).map(|(_, timeline)| timeline)
}

/// `system_identifier:timeline` split in two.
fn split(history: &str) -> Option<(&str, u32)> {
    let (system, timeline) = history.rsplit_once(':')?;
    Some((system, timeline.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_point_of_each_ancestor_is_read_from_the_history_file() {
        let file = "1\t0/3000148\tno recovery target specified\n\n\
                    2\t0/5A0000A0\tno recovery target specified\n";
        assert_eq!(branch_point(file, 1), Some(Timestamp(0x300_0148)));
        assert_eq!(branch_point(file, 2), Some(Timestamp(0x5A00_00A0)));
        assert_eq!(branch_point(file, 3), None);
        assert_eq!(branch_point("garbage", 1), None);
    }

    #[test]
    fn histories_are_split_at_the_last_colon() {
        assert_eq!(split("7351:2"), Some(("7351", 2)));
        assert_eq!(split("7351"), None);
        assert_eq!(split("7351:x"), None);
    }
}
