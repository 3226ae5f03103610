//! Turning one decoded transaction into one invalidation.
//!
//! Pure: the stream feeds it BEGIN, pgoutput change messages, DDL notices and COMMIT, and
//! gets back `(commit LSN, commit time, tags)`. It holds the relation cache (pgoutput sends a
//! relation's description before its first change) and resolves each relation's tag columns
//! from the [`Catalog`] once.

use crate::catalog::Catalog;
use crate::pgoutput::{self, PgOutputMessage, Relation, RelationCache};
use crate::tags::{change_tags, truncate_tags, RowChange, TagColumns};
use std::collections::{BTreeSet, HashMap};
use txcache_model::{Invalidation, InvalidationTag, Timestamp, WallClock};

/// Most fine tags one invalidation carries; a larger transaction invalidates the tables it
/// touched whole (sound, and it keeps messages within what a node accepts).
pub const MAX_TAGS: usize = 10_000;

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// A PostgreSQL timestamp (µs since 2000-01-01) as µs since the Unix epoch.
pub fn unix_micros_from_postgres(micros: i64) -> u64 {
    micros.saturating_add(POSTGRES_EPOCH_MICROS).max(0) as u64
}

/// A committed transaction, ready for the nodes.
#[derive(Debug)]
pub struct Committed {
    /// The invalidation to deliver.
    pub invalidation: Invalidation,
    /// The transaction's (32-bit) xid, for certification and read-your-writes.
    pub xid: u32,
    /// Whether it carried DDL: the catalog must be reloaded before the next transaction.
    pub changed_schema: bool,
}

/// Why a change could not be turned into tags.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The change message was malformed.
    #[error(transparent)]
    Parse(#[from] pgoutput::PgOutputError),
    /// A change named a relation the stream never described.
    #[error("change for relation {0} arrived before its description")]
    UnknownRelation(u32),
    /// A change arrived outside BEGIN … COMMIT.
    #[error("change outside a transaction")]
    NoTransaction,
    /// A tag could not be formed even as a wildcard (a name longer than any real one).
    #[error(transparent)]
    Tag(#[from] txcache_model::TagError),
}

#[derive(Debug)]
struct OpenTransaction {
    xid: u32,
    tags: BTreeSet<InvalidationTag>,
    changed_schema: bool,
}

/// Assembles transactions from the decoded stream.
#[derive(Debug, Default)]
pub struct Assembler {
    relations: RelationCache,
    resolved: HashMap<u32, Option<TagColumns>>,
    open: Option<OpenTransaction>,
    scratch: Vec<InvalidationTag>,
}

impl Assembler {
    /// Whether a transaction is being assembled (BEGIN seen, COMMIT not yet).
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// Starts a transaction.
    pub fn begin(&mut self, xid: u32) {
        self.open = Some(OpenTransaction {
            xid,
            tags: BTreeSet::new(),
            changed_schema: false,
        });
    }

    /// Feeds one pgoutput change message (relation descriptions, rows, truncates).
    pub fn change(&mut self, data: &bytes::Bytes, catalog: &Catalog) -> Result<(), AssembleError> {
        match pgoutput::parse(data)? {
            PgOutputMessage::Relation(relation) => {
                self.resolved.remove(&relation.id);
                self.relations.apply(relation);
            }
            PgOutputMessage::Truncate { relation_ids, .. } => {
                for id in relation_ids {
                    let tag = truncate_tags(self.relation(id)?)?;
                    self.transaction()?.tags.insert(tag);
                }
            }
            message => self.row_change(&message, catalog)?,
        }
        Ok(())
    }

    fn row_change(
        &mut self,
        message: &PgOutputMessage,
        catalog: &Catalog,
    ) -> Result<(), AssembleError> {
        let Some((id, change)) = RowChange::from_message(message) else {
            return Ok(()); // BEGIN/COMMIT/ORIGIN/TYPE/MESSAGE carry no row
        };
        let relation = self
            .relations
            .get(id)
            .ok_or(AssembleError::UnknownRelation(id))?;
        let columns = self.resolved.entry(id).or_insert_with(|| {
            catalog
                .tag_columns(&relation.schema, &relation.name)
                .cloned()
        });
        let empty = TagColumns::new(Vec::<String>::new());
        self.scratch.clear();
        change_tags(
            relation,
            columns.as_ref().unwrap_or(&empty),
            &change,
            &mut self.scratch,
        )?;
        let open = self.open.as_mut().ok_or(AssembleError::NoTransaction)?;
        open.tags.extend(self.scratch.drain(..));
        Ok(())
    }

    /// Feeds the content of a `txcache-ddl` notice: every table it names is invalidated whole.
    pub fn ddl_notice(&mut self, content: &[u8], catalog: &Catalog) -> Result<(), AssembleError> {
        let text = String::from_utf8_lossy(content);
        let mut tags = Vec::new();
        for line in text.lines() {
            let fields: Vec<String> = line.split('\t').map(unescape).collect();
            if let [kind, schema, name, oid] = fields.as_slice() {
                match kind.as_str() {
                    "table" => tags.push(InvalidationTag::for_table(schema, name)?),
                    "index" => {
                        // An index the catalog never knew led no tag column: nothing to do.
                        let owner = oid.parse().ok().and_then(|oid| catalog.table_of_index(oid));
                        if let Some((schema, table)) = owner {
                            tags.push(InvalidationTag::for_table(schema, table)?);
                        }
                    }
                    _ => {}
                }
            }
        }
        let open = self.transaction()?;
        open.tags.extend(tags);
        open.changed_schema = true;
        Ok(())
    }

    /// Ends the transaction; `None` when no BEGIN was seen (a stream resumed mid-way).
    pub fn commit(&mut self, lsn: u64, commit_time_micros: i64) -> Option<Committed> {
        let mut open = self.open.take()?;
        if open.tags.len() > MAX_TAGS {
            open.tags = coarsened(&open.tags);
        }
        Some(Committed {
            invalidation: Invalidation {
                ts: Timestamp(lsn),
                commit_time: WallClock(unix_micros_from_postgres(commit_time_micros)),
                tags: open.tags.into_iter().collect(),
            },
            xid: open.xid,
            changed_schema: open.changed_schema,
        })
    }

    /// Forgets every relation's resolved tag columns (after the catalog was reloaded).
    pub fn catalog_changed(&mut self) {
        self.resolved.clear();
    }

    /// Drops a half-received transaction (the stream broke inside it).
    pub fn abandon(&mut self) {
        self.open = None;
    }

    fn relation(&self, id: u32) -> Result<&Relation, AssembleError> {
        self.relations
            .get(id)
            .ok_or(AssembleError::UnknownRelation(id))
    }

    fn transaction(&mut self) -> Result<&mut OpenTransaction, AssembleError> {
        self.open.as_mut().ok_or(AssembleError::NoTransaction)
    }
}

/// Every table's wildcard in place of its fine tags.
fn coarsened(tags: &BTreeSet<InvalidationTag>) -> BTreeSet<InvalidationTag> {
    tags.iter()
        .filter_map(|tag| InvalidationTag::parse(tag.table()).ok())
        .collect()
}

/// Undoes the DDL notice's escaping of `\\`, `\t`, `\n` and `\r`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Unix microseconds now.
pub fn unix_micros_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_reverses_the_notice_escaping() {
        assert_eq!(unescape(r"a\tb\\c\nd"), "a\tb\\c\nd");
        assert_eq!(unescape("plain"), "plain");
    }

    #[test]
    fn ddl_notice_invalidates_named_tables_and_flags_the_schema_change() {
        let catalog = Catalog::default();
        let mut assembler = Assembler::default();
        assembler.begin(7);
        assembler
            .ddl_notice(
                b"table\tpublic\titems\t16384\nother\tpublic\tpublic.v\t1\nindex\tpublic\tgone\t99",
                &catalog,
            )
            .unwrap();
        let committed = assembler.commit(500, 0).unwrap();
        assert!(committed.changed_schema);
        assert_eq!(
            committed.invalidation.tags,
            vec![InvalidationTag::parse("public.items").unwrap()]
        );
        assert_eq!(
            committed.invalidation.commit_time,
            WallClock(POSTGRES_EPOCH_MICROS as u64)
        );
    }

    #[test]
    fn huge_transactions_invalidate_whole_tables() {
        let catalog = Catalog::default();
        let mut assembler = Assembler::default();
        assembler.begin(1);
        let notice: Vec<String> = (0..=MAX_TAGS)
            .map(|n| format!("table\ts\tt{n}\t{n}"))
            .collect();
        assembler
            .ddl_notice(notice.join("\n").as_bytes(), &catalog)
            .unwrap();
        let open = assembler.open.as_mut().unwrap();
        open.tags
            .insert(InvalidationTag::parse("s.t1:id=1").unwrap());
        let committed = assembler.commit(1, 0).unwrap();
        assert_eq!(committed.invalidation.tags.len(), MAX_TAGS + 1);
        assert!(committed
            .invalidation
            .tags
            .iter()
            .all(InvalidationTag::is_wildcard));
    }

    #[test]
    fn commit_without_begin_yields_nothing() {
        assert!(Assembler::default().commit(1, 0).is_none());
    }
}
