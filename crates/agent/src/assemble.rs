//! Turning one decoded transaction into one invalidation.
//!
//! Pure: the stream feeds it BEGIN, pgoutput change messages, DDL notices and COMMIT, and
//! gets back `(commit LSN, commit time, tags)`. It holds the relation cache (pgoutput sends a
//! relation's description before its first change) and resolves, once per relation, its tag
//! columns from the [`Catalog`] and how much its old rows say ([`OldRows`]).

use crate::catalog::{Catalog, RelationName};
use crate::pgoutput::{self, PgOutputMessage, Relation, RelationCache};
use crate::schema_digests::SCHEMA_BEFORE;
use crate::tags::{change_tags, truncate_tags, OldRows, RowChange, TagColumns};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use txcache_model::{ColumnSet, Invalidation, InvalidationTag, Timestamp, WallClock};

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
    /// Whether it changed the schema or truncated a table (a barrier for older snapshots).
    pub barrier: bool,
    /// Whether it changed a table's definition without a DDL notice
    /// ([`Assembler::change`]): the event triggers did not fire.
    pub untracked_schema_change: bool,
    /// The schema digest its last DDL command left ([`Assembler::schema_digest`]).
    pub schema_digest: Option<String>,
    /// The schema digest its first DDL command found: the one the last DDL committed
    /// before it must have left, unless the schema changed unseen in between.
    pub schema_before: Option<String>,
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
    /// Its commit LSN (BEGIN carries it).
    lsn: u64,
    tags: BTreeSet<InvalidationTag>,
    changed_schema: bool,
    barrier: bool,
    untracked_schema_change: bool,
    schema_digest: Option<String>,
    schema_before: Option<String>,
    /// A DDL command started (its `before:` digest) and has not ended (its digest) in this
    /// transaction so far.
    command_open: bool,
}

/// What the assembler knows of one relation's rows.
#[derive(Debug)]
struct Resolved {
    /// Its tag columns (none known: every change yields the wildcard).
    columns: Option<TagColumns>,
    old_rows: OldRows,
}

/// Assembles transactions from the decoded stream.
#[derive(Debug, Default)]
pub struct Assembler {
    relations: RelationCache,
    resolved: HashMap<u32, Resolved>,
    /// The name of every relation described so far.
    described: HashSet<RelationName>,
    /// The relations last described with a replica identity other than FULL, by OID.
    partial: HashMap<u32, RelationName>,
    /// Schema-changing DDL notices fed so far.
    notices: u64,
    /// Per relation, [`Self::notices`] when it was last described: a description that
    /// differs from the last one with no notice since is a schema change the event
    /// triggers did not report.
    described_at: HashMap<u32, u64>,
    open: Option<OpenTransaction>,
    scratch: Vec<InvalidationTag>,
    /// Commits below this were made before the agent first read its catalog, which may
    /// already reflect later DDL (a dropped index, a renamed table): they are tagged
    /// coarsely (see [`Assembler::tag_coarsely_below`]).
    coarse_below: u64,
}

impl Assembler {
    /// Whether a transaction is being assembled (BEGIN seen, COMMIT not yet).
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// Starts the transaction `xid` that commits at `lsn`.
    pub fn begin(&mut self, xid: u32, lsn: u64) {
        self.open = Some(OpenTransaction {
            xid,
            lsn,
            tags: BTreeSet::new(),
            changed_schema: false,
            barrier: false,
            untracked_schema_change: false,
            schema_digest: None,
            schema_before: None,
            command_open: false,
        });
    }

    /// Commits below `lsn` committed before the catalog this agent started with was read:
    /// it may lack the tag columns and the names they were made under (an index dropped or
    /// a table renamed while the agent was down). Each such commit invalidates the tables it
    /// touched whole, and one that changed the schema invalidates everything.
    pub fn tag_coarsely_below(&mut self, lsn: u64) {
        self.coarse_below = self.coarse_below.max(lsn);
    }

    /// Feeds one pgoutput change message (relation descriptions, rows, truncates).
    pub fn change(&mut self, data: &bytes::Bytes, catalog: &Catalog) -> Result<(), AssembleError> {
        match pgoutput::parse(data)? {
            PgOutputMessage::Relation(relation) => self.describe(relation)?,
            PgOutputMessage::Truncate { relation_ids, .. } => {
                for id in relation_ids {
                    let tag = truncate_tags(self.relation(id)?)?;
                    let open = self.transaction()?;
                    open.tags.insert(tag);
                    open.barrier = true;
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
        if !self.resolved.contains_key(&id) {
            let resolved = Resolved {
                columns: catalog
                    .tag_columns(&relation.schema, &relation.name)
                    .cloned(),
                old_rows: self.old_rows(relation, catalog),
            };
            self.resolved.insert(id, resolved);
        }
        let resolved = &self.resolved[&id];
        let empty = TagColumns::new(Vec::<String>::new());
        let columns = resolved.columns.as_ref().unwrap_or(&empty);
        self.scratch.clear();
        change_tags(
            relation,
            columns,
            resolved.old_rows,
            &change,
            &mut self.scratch,
        )?;
        let open = self.open.as_mut().ok_or(AssembleError::NoTransaction)?;
        open.tags.extend(self.scratch.drain(..));
        Ok(())
    }

    /// Records a relation's description. A relation described for the first time or with
    /// another replica identity changes what its relatives' old rows say, so every relation
    /// is resolved again; one that is not FULL is logged, since its changes are invalidated
    /// more coarsely (docs/setup.md, "Replica identity").
    fn describe(&mut self, relation: Relation) -> Result<(), AssembleError> {
        self.check_tracked(&relation)?;
        let identity = relation.replica_identity;
        let name = (relation.schema.clone(), relation.name.clone());
        if self.relations.get(relation.id).map(|r| r.replica_identity) == Some(identity) {
            self.resolved.remove(&relation.id);
        } else {
            self.resolved.clear();
            if identity != b'f' {
                tracing::warn!(
                    table = %format!("{}.{}", name.0, name.1),
                    replica_identity = identity_name(identity),
                    "a published table without REPLICA IDENTITY FULL: where the stream does \
                     not send the old value of a tag column, its changes invalidate the whole \
                     table (docs/setup.md, \"Replica identity\")"
                );
            }
        }
        if identity == b'f' {
            self.partial.remove(&relation.id);
        } else {
            self.partial.insert(relation.id, name.clone());
        }
        self.described.insert(name);
        self.relations.apply(relation);
        Ok(())
    }

    /// pgoutput describes a relation again before its first change after its definition
    /// changed. A description unlike the last one, with no DDL notice since, is a schema
    /// change the event triggers missed (disabled, or DDL by a role a managed service
    /// exempts): said loudly, and handled as a DDL of the table would be — the table
    /// invalidated, the catalog read again — from this transaction on. Reads between the
    /// change and this transaction may have been served from the old definition.
    fn check_tracked(&mut self, relation: &Relation) -> Result<(), AssembleError> {
        // Not described yet in this session (a replay re-describes a table as it was then).
        let Some(noticed) = self.described_at.insert(relation.id, self.notices) else {
            return Ok(());
        };
        let Some(before) = self.relations.get(relation.id) else {
            return Ok(());
        };
        if noticed < self.notices || before == relation {
            return Ok(());
        }
        tracing::error!(table = %format!("{}.{}", relation.schema, relation.name),
            was = %format!("{}.{}", before.schema, before.name),
            "A SCHEMA CHANGE NO DDL TRIGGER REPORTED: the table's definition changed (its columns, name or replica identity) without a DDL notice, so the event triggers did not fire (disabled, or DDL run by a role that event triggers skip, as on some managed services). Invalidating the table and reading the catalog again from here on; reads between that change and now may have been served from the old definition: make every schema change fire the triggers (docs/managed-postgres.md)");
        let tags = [
            InvalidationTag::for_table(&before.schema, &before.name)?,
            InvalidationTag::for_table(&relation.schema, &relation.name)?,
        ];
        // pgoutput describes a relation inside the transaction whose change follows.
        if let Some(open) = self.open.as_mut() {
            open.tags.extend(tags);
            open.changed_schema = true;
            open.barrier = true;
            open.untracked_schema_change = true;
        }
        Ok(())
    }

    /// What the old rows of `relation` say exactly. pgoutput marks an old row whole or
    /// key-only by the replica identity of the table it publishes the row as — a partition's
    /// root — while the row was logged under the partition's own identity; it describes the
    /// partition before the partition's first change. So a FULL table's NULLs are trusted
    /// only when the catalog knows it alone (no partitions, parents, children or other
    /// names), or when some relative has been described and none without FULL; and a key's
    /// columns are known unchanged by an update without an old row only for a table alone
    /// (a partition may use another key). Anything else: only what is sent.
    fn old_rows(&self, relation: &Relation, catalog: &Catalog) -> OldRows {
        let own = (relation.schema.clone(), relation.name.clone());
        let family = catalog.names_of_family(relation.id);
        if !family.contains(&own) {
            return OldRows::Sent; // not in the catalog (yet): nothing to go by
        }
        let alone = family.len() == 1;
        match relation.replica_identity {
            b'f' if alone || self.relatives_whole(relation.id, &own, &family) => OldRows::Whole,
            b'd' | b'i' if alone => OldRows::Key,
            _ => OldRows::Sent,
        }
    }

    /// Whether some relative of relation `id` (a name in `family` other than `own`) has been
    /// described, and none is last described without REPLICA IDENTITY FULL.
    fn relatives_whole(
        &self,
        id: u32,
        own: &RelationName,
        family: &BTreeSet<&RelationName>,
    ) -> bool {
        let seen = family
            .iter()
            .any(|name| *name != own && self.described.contains(*name));
        let partial = self
            .partial
            .iter()
            .any(|(other, name)| *other != id && family.contains(name));
        seen && !partial
    }

    /// Feeds the content of a `txcache-ddl` notice (docs/setup.md, "DDL messages"): each
    /// line invalidates what the change of its object can alter, and every kind but
    /// `truncate` marks the transaction as a schema change.
    pub fn ddl_notice(
        &mut self,
        content: &[u8],
        catalog: &mut Catalog,
    ) -> Result<(), AssembleError> {
        let text = String::from_utf8_lossy(content);
        let mut tags = BTreeSet::new();
        let (mut changed_schema, mut barrier) = (false, false);
        for line in text.lines() {
            let notice = DdlLine::parse(line);
            changed_schema |= notice.kind != DdlKind::Truncate;
            barrier |= notice.kind != DdlKind::Unrelated;
            self.notices += u64::from(notice.kind != DdlKind::Unrelated);
            notice.remember(catalog);
            notice.invalidate(catalog, &mut tags)?;
        }
        let open = self.transaction()?;
        open.tags.extend(tags);
        open.changed_schema |= changed_schema;
        open.barrier |= barrier;
        Ok(())
    }

    /// Feeds the content of a `txcache-invalidate` message (docs/agent.md, "Manual
    /// invalidations"): one tag per line, invalidated at the transaction's commit. A line
    /// that is no tag invalidates everything: the writer meant something to go stale.
    pub fn manual_invalidation(&mut self, content: &[u8]) -> Result<(), AssembleError> {
        let text = String::from_utf8_lossy(content);
        let mut tags = BTreeSet::new();
        for line in text.lines().filter(|line| !line.is_empty()) {
            match InvalidationTag::parse(line) {
                Ok(tag) => {
                    tags.insert(tag);
                }
                Err(error) => {
                    tracing::warn!(%error, "a manual invalidation that names no tag: invalidating everything");
                    tags.insert(InvalidationTag::global());
                }
            }
        }
        self.transaction()?.tags.extend(tags);
        Ok(())
    }

    /// Feeds the content of a `txcache-schema` message: the schema digest a DDL command
    /// left (`txcache.schema_digest()`), the transaction's last one being what it
    /// committed; or, prefixed `before:`, the one a command found as it started, the
    /// transaction's first one being what it found.
    pub fn schema_digest(&mut self, content: &[u8]) -> Result<(), AssembleError> {
        let text = String::from_utf8_lossy(content);
        let transaction = self.transaction()?;
        match text.strip_prefix(SCHEMA_BEFORE) {
            Some(before) => {
                transaction
                    .schema_before
                    .get_or_insert_with(|| before.to_owned());
                transaction.command_open = true;
            }
            None => {
                transaction.schema_digest = Some(text.into_owned());
                transaction.command_open = false;
            }
        }
        Ok(())
    }

    /// Ends the transaction; `None` when no BEGIN was seen (a stream resumed mid-way).
    pub fn commit(&mut self, lsn: u64, commit_time_micros: i64) -> Option<Committed> {
        let mut open = self.open.take()?;
        if open.command_open {
            // A command that commits transactions of its own before it ends (DETACH
            // PARTITION … CONCURRENTLY, CREATE INDEX CONCURRENTLY): this commit may already
            // change what queries return, and no notice will say what it touched until the
            // command ends — if it ever does.
            tracing::info!(
                lsn,
                "a DDL command committed a transaction before it ended (… CONCURRENTLY): \
                 every cached result is invalidated at that commit"
            );
            open.tags = BTreeSet::from([InvalidationTag::global()]);
            open.changed_schema = true;
            open.barrier = true;
        }
        open.tags = merged(open.tags);
        if open.lsn < self.coarse_below && open.changed_schema {
            open.tags = BTreeSet::from([InvalidationTag::global()]);
        } else if open.tags.len() > MAX_TAGS || open.lsn < self.coarse_below {
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
            barrier: open.barrier,
            untracked_schema_change: open.untracked_schema_change,
            schema_digest: open.schema_digest,
            schema_before: open.schema_before,
        })
    }

    /// Forgets every relation's resolved tag columns (after the catalog was reloaded).
    pub fn catalog_changed(&mut self) {
        self.resolved.clear();
    }

    /// Drops a half-received transaction (the stream broke inside it). The next session
    /// replays from the slot, describing tables as they were then: nothing to compare.
    pub fn abandon(&mut self) {
        self.open = None;
        self.described_at.clear();
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

/// The SQL words of a replica identity setting, for the log.
fn identity_name(identity: u8) -> &'static str {
    match identity {
        b'd' => "DEFAULT",
        b'n' => "NOTHING",
        b'i' => "USING INDEX",
        b'f' => "FULL",
        _ => "unknown",
    }
}

/// One tag per site (table and `column=value`), naming every column the transaction's tags of
/// that site named: rows changed by different statements name different columns.
fn merged(tags: BTreeSet<InvalidationTag>) -> BTreeSet<InvalidationTag> {
    let mut sites: BTreeMap<InvalidationTag, ColumnSet> = BTreeMap::new();
    for tag in tags {
        let columns = tag.columns();
        let site = sites
            .entry(tag.with_columns(ColumnSet::ALL))
            .or_insert(columns);
        *site = site.union(columns);
    }
    sites
        .into_iter()
        .map(|(site, columns)| site.with_columns(columns))
        .collect()
}

/// Every table's wildcard in place of its fine tags, naming every column they named.
fn coarsened(tags: &BTreeSet<InvalidationTag>) -> BTreeSet<InvalidationTag> {
    let mut tables: BTreeMap<&str, ColumnSet> = BTreeMap::new();
    for tag in tags {
        let columns = tables.entry(tag.table()).or_insert(tag.columns());
        *columns = columns.union(tag.columns());
    }
    tables
        .into_iter()
        .filter_map(|(table, columns)| {
            Some(InvalidationTag::parse(table).ok()?.with_columns(columns))
        })
        .collect()
}

/// What one line of a DDL notice says changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DdlKind {
    /// A relation (table, view, …) created, altered or dropped.
    Relation,
    /// An index dropped: its table, as the catalog knew it.
    Index,
    /// A partition truncated directly (not replicated through its root's publication).
    Truncate,
    /// An object no read depends on (a trigger, a sequence, …).
    Unrelated,
    /// Anything else, or a kind this agent does not know: every cached result.
    Everything,
}

/// One parsed line: `kind \t schema \t name \t oid`.
#[derive(Debug)]
struct DdlLine {
    kind: DdlKind,
    name: (String, String),
    oid: Option<u32>,
}

impl DdlLine {
    fn parse(line: &str) -> Self {
        let fields: Vec<String> = line.split('\t').map(unescape).collect();
        let field = |index: usize| fields.get(index).cloned().unwrap_or_default();
        let kind = match field(0).as_str() {
            "table" => DdlKind::Relation,
            "index" => DdlKind::Index,
            "truncate" => DdlKind::Truncate,
            "none" => DdlKind::Unrelated,
            _ => DdlKind::Everything,
        };
        Self {
            kind,
            name: (field(1), field(2)),
            oid: field(3).parse().ok(),
        }
    }

    /// Records the relation's name as the notice gives it: a catalog re-read after a later
    /// rename would never show it, yet cached reads may carry it.
    fn remember(&self, catalog: &mut Catalog) {
        if let (DdlKind::Relation | DdlKind::Truncate, Some(oid)) = (self.kind, self.oid) {
            catalog.add_relation(oid, self.name.clone());
        }
    }

    /// Adds the tags this line invalidates: a relation's every known name and those of the
    /// tables it inherits from or that inherit from it (cached reads of a partition or child
    /// carry the root's or parent's name, reads of a partition detached since carry its own,
    /// and a rename leaves entries under the old name).
    fn invalidate(
        &self,
        catalog: &Catalog,
        tags: &mut BTreeSet<InvalidationTag>,
    ) -> Result<(), AssembleError> {
        let relation = match self.kind {
            DdlKind::Unrelated => return Ok(()),
            DdlKind::Everything => {
                tags.insert(InvalidationTag::global());
                return Ok(());
            }
            // An index the catalog never knew led no tag column: nothing to do.
            DdlKind::Index => match self.oid.and_then(|oid| catalog.table_of_index(oid)) {
                Some(table) => table,
                None => return Ok(()),
            },
            DdlKind::Relation | DdlKind::Truncate => {
                tags.insert(InvalidationTag::for_table(&self.name.0, &self.name.1)?);
                match self.oid {
                    Some(oid) => oid,
                    None => return Ok(()),
                }
            }
        };
        for (schema, name) in catalog.names_of_family(relation) {
            tags.insert(InvalidationTag::for_table(schema, name)?);
        }
        Ok(())
    }
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

    fn tags(names: &[&str]) -> Vec<InvalidationTag> {
        let mut tags: Vec<_> = names
            .iter()
            .map(|name| InvalidationTag::parse(name).unwrap())
            .collect();
        tags.sort();
        tags
    }

    /// `public.m` (oid 1) partitioned into `public.m1` (2), once called `public.old_m1`,
    /// whose index 3 the catalog knows.
    fn partitioned_catalog() -> Catalog {
        let mut catalog = Catalog::default();
        catalog.add_relation(1, ("public".into(), "m".into()));
        catalog.add_relation(2, ("public".into(), "old_m1".into()));
        catalog.add_relation(2, ("public".into(), "m1".into()));
        catalog.add_parent(2, 1);
        catalog.add_index(3, 2);
        catalog
    }

    fn notice(catalog: &mut Catalog, content: &str) -> Committed {
        let mut assembler = Assembler::default();
        assembler.begin(7, 500);
        assembler.ddl_notice(content.as_bytes(), catalog).unwrap();
        assembler.commit(500, 0).unwrap()
    }

    #[test]
    fn a_relation_line_invalidates_its_every_name_and_its_ancestors() {
        let committed = notice(&mut partitioned_catalog(), "table\tpublic\tm1\t2");
        assert!(committed.changed_schema);
        let expected = tags(&["public.m", "public.m1", "public.old_m1"]);
        assert_eq!(committed.invalidation.tags, expected);
        assert_eq!(
            committed.invalidation.commit_time,
            WallClock(POSTGRES_EPOCH_MICROS as u64)
        );
    }

    #[test]
    fn a_name_only_a_notice_gave_is_invalidated_by_a_later_one() {
        let mut catalog = partitioned_catalog();
        notice(&mut catalog, "table\tpublic\tmiddle\t2");
        let committed = notice(&mut catalog, "table\tpublic\tlast\t2");
        let expected = tags(&[
            "public.last",
            "public.m",
            "public.m1",
            "public.middle",
            "public.old_m1",
        ]);
        assert_eq!(committed.invalidation.tags, expected);
    }

    #[test]
    fn a_manual_invalidation_adds_its_tags_and_a_bad_line_everything() {
        let mut assembler = Assembler::default();
        assembler.begin(7, 500);
        let content = "txcache.calls/app.f:key=00ff\ntxcache.calls/app.g\n";
        assembler.manual_invalidation(content.as_bytes()).unwrap();
        let committed = assembler.commit(500, 0).unwrap();
        assert!(!committed.changed_schema);
        let expected = tags(&["txcache.calls/app.f:key=00ff", "txcache.calls/app.g"]);
        assert_eq!(committed.invalidation.tags, expected);
        assembler.begin(8, 600);
        assembler.manual_invalidation(b"no.column:value").unwrap();
        let committed = assembler.commit(600, 0).unwrap();
        assert_eq!(committed.invalidation.tags, [InvalidationTag::global()]);
    }

    #[test]
    fn a_parent_line_invalidates_every_partition_it_had() {
        let committed = notice(&mut partitioned_catalog(), "table\tpublic\tm\t1");
        let expected = tags(&["public.m", "public.m1", "public.old_m1"]);
        assert_eq!(committed.invalidation.tags, expected);
    }

    #[test]
    fn a_dropped_index_invalidates_its_table_as_the_catalog_knew_it() {
        let mut catalog = partitioned_catalog();
        let committed = notice(
            &mut catalog,
            "index\tpublic\tm1_pkey\t3\nindex\tpublic\tx\t99",
        );
        let expected = tags(&["public.m", "public.m1", "public.old_m1"]);
        assert_eq!(committed.invalidation.tags, expected);
    }

    #[test]
    fn a_truncated_partition_invalidates_its_root_and_is_no_schema_change() {
        let content = "truncate\tpublic\tm\t1\ntruncate\tpublic\tm1\t2";
        let committed = notice(&mut Catalog::default(), content);
        assert!(!committed.changed_schema);
        assert_eq!(
            committed.invalidation.tags,
            tags(&["public.m", "public.m1"])
        );
    }

    #[test]
    fn unknowable_dependents_invalidate_everything_and_unrelated_objects_nothing() {
        let mut catalog = Catalog::default();
        for line in [
            "all\tpublic\tpublic.f(integer)\t9",
            "other\tpublic\tv\t1",
            "new\t\t\t",
        ] {
            let committed = notice(&mut catalog, line);
            assert_eq!(
                committed.invalidation.tags,
                [InvalidationTag::global()],
                "{line}"
            );
        }
        let committed = notice(&mut catalog, "none\tpublic\ttr on public.t\t5");
        assert!(committed.changed_schema);
        assert!(committed.invalidation.tags.is_empty());
    }

    #[test]
    fn commits_older_than_the_first_catalog_reading_are_tagged_coarsely() {
        let mut catalog = Catalog::default();
        let mut assembler = Assembler::default();
        assembler.tag_coarsely_below(1000);
        assembler.begin(1, 900);
        assembler
            .transaction()
            .unwrap()
            .tags
            .extend(tags(&["s.t:id=1", "s.u:k=2"]));
        let committed = assembler.commit(900, 0).unwrap();
        assert_eq!(committed.invalidation.tags, tags(&["s.t", "s.u"]));
        assembler.begin(2, 950);
        assembler
            .ddl_notice(b"table\ts\tt\t5", &mut catalog)
            .unwrap();
        let committed = assembler.commit(950, 0).unwrap();
        assert_eq!(committed.invalidation.tags, [InvalidationTag::global()]);
        assembler.begin(3, 1000);
        assembler
            .transaction()
            .unwrap()
            .tags
            .extend(tags(&["s.t:id=1"]));
        let committed = assembler.commit(1000, 0).unwrap();
        assert_eq!(committed.invalidation.tags, tags(&["s.t:id=1"]));
    }

    #[test]
    fn a_transactions_tags_of_one_site_are_merged_with_their_columns() {
        let mut assembler = Assembler::default();
        assembler.begin(1, 10);
        let written = tags(&["s.t#6:id=1", "s.t#a:id=1", "s.t#4:id=2", "s.u#2", "s.u"]);
        assembler.transaction().unwrap().tags.extend(written);
        let committed = assembler.commit(10, 0).unwrap();
        let expected = tags(&["s.t#e:id=1", "s.t#4:id=2", "s.u"]);
        assert_eq!(committed.invalidation.tags, expected);
    }

    #[test]
    fn coarse_tags_keep_the_columns_of_the_fine_ones() {
        let mut assembler = Assembler::default();
        assembler.tag_coarsely_below(1000);
        assembler.begin(1, 900);
        let written = tags(&["s.t#6:id=1", "s.t#8:id=2", "s.u:k=2"]);
        assembler.transaction().unwrap().tags.extend(written);
        let committed = assembler.commit(900, 0).unwrap();
        assert_eq!(committed.invalidation.tags, tags(&["s.t#e", "s.u"]));
    }

    #[test]
    fn huge_transactions_invalidate_whole_tables() {
        let mut catalog = Catalog::default();
        let mut assembler = Assembler::default();
        assembler.begin(1, 1);
        let notice: Vec<String> = (0..=MAX_TAGS)
            .map(|n| format!("table\ts\tt{n}\t{n}"))
            .collect();
        assembler
            .ddl_notice(notice.join("\n").as_bytes(), &mut catalog)
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

    /// A description of `public.<name>` (oid `id`) with `identity`, its column `id` the key.
    fn described(id: u32, name: &str, identity: u8) -> Relation {
        let column = crate::pgoutput::RelationColumn {
            name: "id".into(),
            type_oid: 23,
            type_modifier: -1,
            flags: 1,
        };
        Relation {
            id,
            schema: "public".into(),
            name: name.into(),
            replica_identity: identity,
            columns: vec![column],
        }
    }

    #[test]
    fn old_rows_of_a_table_alone_follow_its_replica_identity() {
        let mut catalog = Catalog::default();
        let mut assembler = Assembler::default();
        for (id, name, identity, expected) in [
            (10, "full", b'f', OldRows::Whole),
            (11, "keyed", b'd', OldRows::Key),
            (12, "indexed", b'i', OldRows::Key),
            (13, "nothing", b'n', OldRows::Sent),
        ] {
            catalog.add_relation(id, ("public".into(), name.into()));
            let relation = described(id, name, identity);
            assembler.describe(relation.clone()).unwrap();
            assert_eq!(assembler.old_rows(&relation, &catalog), expected, "{name}");
        }
        let unknown = described(14, "created_since", b'f');
        assert_eq!(assembler.old_rows(&unknown, &catalog), OldRows::Sent);
    }

    #[test]
    fn a_root_s_old_rows_are_whole_only_while_every_partition_described_is_full() {
        let mut catalog = partitioned_catalog();
        catalog.add_relation(4, ("public".into(), "m2".into()));
        catalog.add_parent(4, 1);
        let root = described(1, "m", b'f');
        let mut assembler = Assembler::default();
        assembler.describe(root.clone()).unwrap();
        // No partition described yet: nothing says how its rows were logged.
        assert_eq!(assembler.old_rows(&root, &catalog), OldRows::Sent);
        assembler.describe(described(2, "m1", b'f')).unwrap();
        assert_eq!(assembler.old_rows(&root, &catalog), OldRows::Whole);
        assembler.describe(described(4, "m2", b'd')).unwrap();
        assert_eq!(assembler.old_rows(&root, &catalog), OldRows::Sent);
        assembler.describe(described(4, "m2", b'f')).unwrap();
        assert_eq!(assembler.old_rows(&root, &catalog), OldRows::Whole);
        // A root keyed by DEFAULT: its partitions may use other keys.
        let keyed = described(1, "m", b'd');
        assert_eq!(assembler.old_rows(&keyed, &catalog), OldRows::Sent);
    }

    #[test]
    fn a_partition_described_with_another_identity_resolves_its_root_again() {
        let catalog = partitioned_catalog();
        let mut assembler = Assembler::default();
        assembler.describe(described(1, "m", b'f')).unwrap();
        assembler.describe(described(2, "m1", b'f')).unwrap();
        assembler.begin(7, 500);
        let old = crate::pgoutput::OldTuple {
            kind: crate::pgoutput::OldTupleKind::Full,
            data: crate::pgoutput::TupleData(vec![crate::pgoutput::ColumnValue::Null]),
        };
        let delete = PgOutputMessage::Delete {
            relation_id: 1,
            old,
        };
        assembler.row_change(&delete, &catalog).unwrap();
        assert_eq!(assembler.resolved[&1].old_rows, OldRows::Whole);
        assembler.notices += 1; // the notice of ALTER TABLE m1 REPLICA IDENTITY DEFAULT
        assembler.describe(described(2, "m1", b'd')).unwrap();
        assembler.row_change(&delete, &catalog).unwrap();
        assert_eq!(assembler.resolved[&1].old_rows, OldRows::Sent);
        let committed = assembler.commit(500, 0).unwrap();
        assert_eq!(committed.invalidation.tags, tags(&["public.m"]));
    }

    #[test]
    fn a_table_described_anew_without_a_ddl_notice_is_an_untracked_schema_change() {
        let mut assembler = Assembler::default();
        assembler.describe(described(1, "m", b'f')).unwrap();
        assembler.begin(7, 500);
        assembler.describe(described(1, "renamed", b'f')).unwrap();
        let committed = assembler.commit(500, 0).unwrap();
        assert!(committed.untracked_schema_change && committed.changed_schema);
        assert_eq!(
            committed.invalidation.tags,
            tags(&["public.m", "public.renamed"])
        );

        assembler.notices += 1; // ALTER TABLE renamed RENAME TO m, noticed
        assembler.begin(8, 600);
        assembler.describe(described(1, "m", b'f')).unwrap();
        let committed = assembler.commit(600, 0).unwrap();
        assert!(!committed.untracked_schema_change);
        assert!(committed.invalidation.tags.is_empty());
    }

    #[test]
    fn a_transaction_commits_the_last_schema_digest_its_ddl_left() {
        let mut assembler = Assembler::default();
        assembler.begin(7, 500);
        assembler.schema_digest(b"1a").unwrap();
        assembler.schema_digest(b"2b").unwrap();
        let committed = assembler.commit(500, 0).unwrap();
        assert_eq!(committed.schema_digest.as_deref(), Some("2b"));
        assembler.begin(8, 600);
        assert_eq!(assembler.commit(600, 0).unwrap().schema_digest, None);
    }

    #[test]
    fn a_transaction_commits_the_first_schema_digest_its_ddl_found() {
        let mut assembler = Assembler::default();
        assembler.begin(7, 500);
        assembler.schema_digest(b"before:0z").unwrap();
        assembler.schema_digest(b"1a").unwrap();
        assembler.schema_digest(b"before:1a").unwrap();
        assembler.schema_digest(b"2b").unwrap();
        let committed = assembler.commit(500, 0).unwrap();
        assert_eq!(committed.schema_before.as_deref(), Some("0z"));
        assert_eq!(committed.schema_digest.as_deref(), Some("2b"));
    }

    #[test]
    fn a_command_that_commits_before_it_ends_invalidates_everything() {
        let mut assembler = Assembler::default();
        assembler.begin(7, 500);
        assembler.schema_digest(b"before:0z").unwrap();
        let committed = assembler.commit(500, 0).unwrap();
        assert_eq!(committed.invalidation.tags, vec![InvalidationTag::global()]);
        assert!(committed.changed_schema && committed.barrier);
        assembler.begin(8, 600); // its end, in a transaction of its own
        assembler.schema_digest(b"1a").unwrap();
        let ended = assembler.commit(600, 0).unwrap();
        assert!(ended.invalidation.tags.is_empty());
        assembler.begin(9, 700); // a command that ends where it starts
        assembler.schema_digest(b"before:1a").unwrap();
        assembler.schema_digest(b"2b").unwrap();
        assert!(assembler
            .commit(700, 0)
            .unwrap()
            .invalidation
            .tags
            .is_empty());
    }

    #[test]
    fn commit_without_begin_yields_nothing() {
        assert!(Assembler::default().commit(1, 0).is_none());
    }
}
