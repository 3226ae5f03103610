//! The tag-column catalog: which columns of each table lead some index (DESIGN.md §4).
//!
//! Loaded from `pg_index` at start and reloaded when the stream carries a DDL notice. The
//! reload reads the *current* catalog, which may already include DDL the stream has not
//! reached; so a reload never removes a tag column from a table (the set only grows until
//! the agent restarts). More tags are only slower, never wrong: a column dropped from an
//! index too early would silence invalidations that readers at older snapshots rely on.

use crate::tags::TagColumns;
use std::collections::{BTreeSet, HashMap};
use tokio_postgres::Client;
use txcache_model::table_name;

/// Leading columns of every index on ordinary and partitioned tables, with the index oid.
const TAG_COLUMNS_QUERY: &str = "
    SELECT n.nspname, c.relname, a.attname, i.indexrelid::oid
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
    WHERE c.relkind IN ('r', 'p') AND i.indkey[0] <> 0
      AND n.nspname NOT IN ('pg_catalog', 'information_schema')";

/// Tag columns by table, and which table each index belongs to.
#[derive(Debug, Default)]
pub struct Catalog {
    columns: HashMap<(String, String), BTreeSet<String>>,
    index_tables: HashMap<u32, (String, String)>,
    tag_columns: HashMap<(String, String), TagColumns>,
}

impl Catalog {
    /// Reads the catalog from the database.
    pub async fn load(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let mut catalog = Catalog::default();
        catalog.refresh(client).await?;
        Ok(catalog)
    }

    /// Merges the database's current tag columns into this catalog (never removing any).
    pub async fn refresh(&mut self, client: &Client) -> Result<(), tokio_postgres::Error> {
        for row in client.query(TAG_COLUMNS_QUERY, &[]).await? {
            let table: (String, String) = (row.get(0), row.get(1));
            let column: String = row.get(2);
            let index: u32 = row.get(3);
            self.index_tables.insert(index, table.clone());
            self.columns.entry(table).or_default().insert(column);
        }
        self.tag_columns = self
            .columns
            .iter()
            .map(|(table, columns)| (table.clone(), TagColumns::new(columns.iter().cloned())))
            .collect();
        Ok(())
    }

    /// The tag columns of `schema.table` (none known: every change yields the wildcard).
    pub fn tag_columns(&self, schema: &str, table: &str) -> Option<&TagColumns> {
        self.tag_columns.get(&(schema.to_owned(), table.to_owned()))
    }

    /// The table an index belongs to, if the catalog knew the index.
    pub fn table_of_index(&self, index: u32) -> Option<&(String, String)> {
        self.index_tables.get(&index)
    }

    /// Every table with a known tag column.
    pub fn tables(&self) -> impl Iterator<Item = &(String, String)> {
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
