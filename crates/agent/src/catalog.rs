//! The agent's catalog: which columns of each table lead some index (its tag columns), and
//! every name and parent each relation has had, to turn DDL notices into invalidations.
//!
//! Loaded at start and reloaded when the stream carries a DDL notice. The reload reads the
//! *current* catalog, which may already include DDL the stream has not reached; so a reload
//! never removes anything until the agent restarts: a tag column stays (a column dropped from
//! an index too early would silence invalidations that readers at older snapshots rely on),
//! and so do a relation's old names and parents (a notice decoded after a later rename or
//! detach was read still invalidates every name cached results may carry). More tags are only
//! slower, never wrong.

use crate::tags::TagColumns;
use std::collections::{BTreeSet, HashMap};
use tokio_postgres::Client;
use txcache_model::table_name;

/// Leading columns of every index on ordinary and partitioned tables, with the index's and
/// the table's oids.
const TAG_COLUMNS_QUERY: &str = "
    SELECT n.nspname, c.relname, a.attname, i.indexrelid::oid, c.oid::oid
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
    WHERE c.relkind IN ('r', 'p') AND i.indkey[0] <> 0
      AND n.nspname NOT IN ('pg_catalog', 'information_schema')";

/// Every relation that reads can name (tables, views, materialized views, foreign tables)
/// outside the system schemas, by oid.
const RELATIONS_QUERY: &str = "
    SELECT c.oid::oid, n.nspname, c.relname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relpersistence <> 't'
      AND n.nspname NOT IN ('pg_catalog', 'information_schema')
      AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'";

/// Inheritance and partitioning: `(child, parent)`.
const PARENTS_QUERY: &str = "SELECT inhrelid::oid, inhparent::oid FROM pg_inherits";

/// A schema-qualified relation name, unescaped.
pub type RelationName = (String, String);

/// What the agent has seen of one relation since it started.
#[derive(Debug, Default)]
struct RelationHistory {
    /// Every name it had.
    names: BTreeSet<RelationName>,
    /// Every table it inherited from (partition parents included).
    parents: BTreeSet<u32>,
    /// Every table that inherited from it (partitions included).
    children: BTreeSet<u32>,
}

/// Tag columns by table, which table each index belongs to, and each relation's names and
/// parents.
#[derive(Debug, Default)]
pub struct Catalog {
    columns: HashMap<RelationName, BTreeSet<String>>,
    index_tables: HashMap<u32, u32>,
    relations: HashMap<u32, RelationHistory>,
    tag_columns: HashMap<RelationName, TagColumns>,
}

impl Catalog {
    /// Reads the catalog from the database.
    pub async fn load(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let mut catalog = Catalog::default();
        catalog.refresh(client).await?;
        Ok(catalog)
    }

    /// Merges the database's current catalog into this one (never removing anything).
    pub async fn refresh(&mut self, client: &Client) -> Result<(), tokio_postgres::Error> {
        for row in client.query(RELATIONS_QUERY, &[]).await? {
            self.add_relation(row.get(0), (row.get(1), row.get(2)));
        }
        for row in client.query(PARENTS_QUERY, &[]).await? {
            self.add_parent(row.get(0), row.get(1));
        }
        for row in client.query(TAG_COLUMNS_QUERY, &[]).await? {
            let table: RelationName = (row.get(0), row.get(1));
            let column: String = row.get(2);
            let (index, table_oid): (u32, u32) = (row.get(3), row.get(4));
            self.add_index(index, table_oid);
            self.add_relation(table_oid, table.clone());
            self.columns.entry(table).or_default().insert(column);
        }
        self.tag_columns = self
            .columns
            .iter()
            .map(|(table, columns)| (table.clone(), TagColumns::new(columns.iter().cloned())))
            .collect();
        Ok(())
    }

    /// Records that relation `oid` is (or was) called `name`.
    pub fn add_relation(&mut self, oid: u32, name: RelationName) {
        self.relations.entry(oid).or_default().names.insert(name);
    }

    /// Records that index `index` belongs to table `table`.
    pub fn add_index(&mut self, index: u32, table: u32) {
        self.index_tables.insert(index, table);
    }

    /// Records that relation `child` inherits (or inherited) from `parent`.
    pub fn add_parent(&mut self, child: u32, parent: u32) {
        self.relations
            .entry(child)
            .or_default()
            .parents
            .insert(parent);
        self.relations
            .entry(parent)
            .or_default()
            .children
            .insert(child);
    }

    /// The tag columns of `schema.table` (none known: every change yields the wildcard).
    pub fn tag_columns(&self, schema: &str, table: &str) -> Option<&TagColumns> {
        self.tag_columns.get(&(schema.to_owned(), table.to_owned()))
    }

    /// The table an index belongs to, if the catalog knew the index.
    pub fn table_of_index(&self, index: u32) -> Option<u32> {
        self.index_tables.get(&index).copied()
    }

    /// Every name relation `oid`, the tables it inherits from and the tables that inherit
    /// from it (transitively, as far as the agent has seen) have had: what cached results
    /// that read any of them may be tagged with. A partition detached, or a child no longer
    /// inheriting, stays in the family. Empty for an unknown oid.
    pub fn names_of_family(&self, oid: u32) -> BTreeSet<&RelationName> {
        let mut family = self.related(oid, |relation| &relation.parents);
        family.extend(self.related(oid, |relation| &relation.children));
        family
            .iter()
            .filter_map(|oid| self.relations.get(oid))
            .flat_map(|relation| relation.names.iter())
            .collect()
    }

    /// `oid` and every relation reached from it through `next`, transitively.
    fn related(
        &self,
        oid: u32,
        next: impl Fn(&RelationHistory) -> &BTreeSet<u32>,
    ) -> BTreeSet<u32> {
        let mut seen = BTreeSet::new();
        let mut pending = vec![oid];
        while let Some(current) = pending.pop() {
            if seen.insert(current) {
                if let Some(relation) = self.relations.get(&current) {
                    pending.extend(next(relation).iter().copied());
                }
            }
        }
        seen
    }

    /// Every table with a known tag column.
    pub fn tables(&self) -> impl Iterator<Item = &RelationName> {
        self.columns.keys()
    }

    /// The tag columns of every table, as tags name them (`schema.table`, escaped), sorted.
    pub fn published(&self) -> Vec<(String, Vec<String>)> {
        let mut tables: Vec<(String, Vec<String>)> = self
            .columns
            .iter()
            .map(|((schema, table), columns)| {
                (table_name(schema, table), columns.iter().cloned().collect())
            })
            .collect();
        tables.sort();
        tables
    }
}
