//! Invalidation tags: names for the sets of rows a cached value depends on, and of the columns
//! of those rows.

use std::fmt;

/// Columns of one table, as a set of 64 bits: which columns a result read, or which a commit
/// changed. A tag's set is written after `#` in hexadecimal; a tag without one names every
/// column ([`ColumnSet::ALL`]).
///
/// Bit 0 ([`ColumnSet::ROWS`]) stands for which rows exist: every read depends on it, and
/// inserts, deletes and anything coarser change it. Bit 1 ([`ColumnSet::VERSION`]) stands for
/// the row's version (`ctid`, `xmin`, ...): every update changes it, and only reads of system
/// columns or of whole rows depend on it. Each column name owns one of the other 62 bits, by
/// a hash of the name ([`ColumnSet::column`]); two names may share a bit, which only costs
/// hits. A read matches a commit when their sets share a bit, so an update of columns a result
/// never read leaves the result cached.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ColumnSet(u64);

impl ColumnSet {
    /// Every column, row existence and row versions included.
    pub const ALL: Self = Self(u64::MAX);
    /// Which rows exist: inserted and deleted rows change it, every read depends on it.
    pub const ROWS: Self = Self(1);
    /// The row's version: every update changes it, reads of system columns depend on it.
    pub const VERSION: Self = Self(2);

    /// The bit of the column called `name` (the unescaped identifier): bit 2 + the 64-bit
    /// FNV-1a hash of its UTF-8 bytes modulo 62. The library computes the same bit.
    pub fn column(name: &str) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.as_bytes() {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        Self(1 << (2 + hash % 62))
    }

    /// The set with these bits.
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The bits of the set.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Both sets' columns.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether the sets share a column: a commit changing one may change a result reading
    /// the other.
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }
}

impl fmt::Debug for ColumnSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ColumnSet({:#x})", self.0)
    }
}

/// A set of rows whose change may change a cached result.
///
/// Two forms, written as text on the wire and in logs:
/// - fine, `schema.table:column=value` — the rows of `schema.table` whose `column` has the
///   text value `value` (PostgreSQL's text output of that column);
/// - wildcard, `schema.table` — every row of the table.
///
/// Either form may name columns after the table: `schema.table#1c:column=value`, a
/// [`ColumnSet`] in hexadecimal (no leading zeros, never 0); without it, every column.
///
/// The table part ends at the first `:` (and its name at the first `#`), the column at the
/// first `=` after it; the value is everything after that `=` and may hold any character. So
/// a table name may not contain `:` or `#` and a column name may not contain `=`.
///
/// One more tag has a meaning of its own: the global tag `*` ([`InvalidationTag::global`]),
/// which a commit carries when the rows it may change cannot be named.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InvalidationTag {
    text: Box<str>,
    /// Byte offset of the `:` ending the table part; `text.len()` for a wildcard.
    table_end: u32,
    /// Byte offset where the table name ends: the `#` of the columns, else `table_end`.
    name_end: u32,
    columns: ColumnSet,
}

/// Why a string is not an invalidation tag.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// The table part is empty.
    #[error("invalidation tag {0:?} has an empty table name")]
    EmptyTable(String),
    /// A fine tag lacks the `=` between column and value, or its column is empty.
    #[error("invalidation tag {0:?} is neither `table` nor `table:column=value`")]
    MissingColumn(String),
    /// The text after `#` is not a nonzero hexadecimal 64-bit set.
    #[error("invalidation tag {0:?} names its columns with something other than nonzero hexadecimal of at most 16 digits")]
    BadColumns(String),
    /// Longer than [`InvalidationTag::MAX_LEN`].
    #[error("invalidation tag of {0} bytes is longer than the limit of {max}", max = InvalidationTag::MAX_LEN)]
    TooLong(usize),
}

impl InvalidationTag {
    /// The longest tag accepted, in bytes: long values are the agent's to hash, not the node's
    /// to store.
    pub const MAX_LEN: usize = 4096;

    /// The text of the global tag ([`InvalidationTag::global`]).
    pub const GLOBAL: &'static str = "*";

    /// The global tag `*`: a commit carrying it may have changed any row, so it bounds every
    /// open version and matches every tag set, the empty one included. The agent sends it for
    /// DDL whose dependents cannot be known (a function redefined, an enum value renamed, a
    /// schema renamed, ...). It is the wildcard of the pseudo-table `*`, which no real table
    /// can be: real tables are `schema.table`, with a `.` ([`table_name`]). [`Self::matches`]
    /// knows nothing of this; the cache node gives the tag its meaning.
    pub fn global() -> Self {
        Self {
            text: Self::GLOBAL.into(),
            table_end: Self::GLOBAL.len() as u32,
            name_end: Self::GLOBAL.len() as u32,
            columns: ColumnSet::ALL,
        }
    }

    /// Whether this is the global tag `*` ([`InvalidationTag::global`]).
    pub fn is_global(&self) -> bool {
        &*self.text == Self::GLOBAL
    }

    /// The wildcard tag of table `schema.table`, with both names escaped (see [`escape_name`]).
    pub fn for_table(schema: &str, table: &str) -> Result<Self, TagError> {
        Self::parse(&table_name(schema, table))
    }

    /// The fine tag of rows of `schema.table` whose `column` has text output `value`, with the
    /// names escaped (see [`escape_name`]); the value is kept as it is.
    pub fn for_row_value(
        schema: &str,
        table: &str,
        column: &str,
        value: &str,
    ) -> Result<Self, TagError> {
        let text = format!(
            "{}:{}={value}",
            table_name(schema, table),
            escape_name(column)
        );
        Self::parse(&text)
    }

    /// Parses `schema.table[#columns]` or `schema.table[#columns]:column=value`.
    pub fn parse(text: &str) -> Result<Self, TagError> {
        if text.len() > Self::MAX_LEN {
            return Err(TagError::TooLong(text.len()));
        }
        let table_end = text.find(':').unwrap_or(text.len());
        let name_end = text[..table_end].find('#').unwrap_or(table_end);
        if name_end == 0 {
            return Err(TagError::EmptyTable(text.to_owned()));
        }
        if table_end < text.len() {
            let rest = &text[table_end + 1..];
            if rest.find('=').is_none_or(|eq| eq == 0) {
                return Err(TagError::MissingColumn(text.to_owned()));
            }
        }
        let columns = match text.get(name_end + 1..table_end) {
            None => ColumnSet::ALL,
            Some(hex) => parse_columns(hex).ok_or_else(|| TagError::BadColumns(text.to_owned()))?,
        };
        Ok(Self {
            text: text.into(),
            table_end: table_end as u32,
            name_end: name_end as u32,
            columns,
        })
    }

    /// This tag naming only `columns` of its rows ([`ColumnSet::ALL`], or an empty set: every
    /// column). Where the set would make the tag longer than [`Self::MAX_LEN`], every column.
    pub fn with_columns(&self, columns: ColumnSet) -> Self {
        let name = &self.text[..self.name_end as usize];
        let rest = &self.text[self.table_end as usize..];
        let columns = match columns.bits() {
            0 => ColumnSet::ALL,
            _ if name.len() + rest.len() + 17 > Self::MAX_LEN => ColumnSet::ALL,
            _ => columns,
        };
        let text = match columns == ColumnSet::ALL {
            true => format!("{name}{rest}"),
            false => format!("{name}#{:x}{rest}", columns.bits()),
        };
        let name_end = name.len() as u32;
        Self {
            table_end: (text.len() - rest.len()) as u32,
            text: text.into(),
            name_end,
            columns,
        }
    }

    /// The wildcard tag of `table`.
    pub fn wildcard(table: &str) -> Result<Self, TagError> {
        if table.contains(':') {
            return Err(TagError::MissingColumn(table.to_owned()));
        }
        Self::parse(table)
    }

    /// The fine tag `table:column=value`.
    pub fn fine(table: &str, column: &str, value: &str) -> Result<Self, TagError> {
        if table.contains(':') || column.contains('=') {
            return Err(TagError::MissingColumn(format!("{table}:{column}={value}")));
        }
        Self::parse(&format!("{table}:{column}={value}"))
    }

    /// The table this tag belongs to (without its columns).
    pub fn table(&self) -> &str {
        &self.text[..self.name_end as usize]
    }

    /// The columns of its rows this tag names.
    pub fn columns(&self) -> ColumnSet {
        self.columns
    }

    /// The `column=value` part of a fine tag; `None` for a wildcard.
    pub fn column_value(&self) -> Option<&str> {
        self.text.get(self.table_end as usize + 1..)
    }

    /// Whether this names every row of its table.
    pub fn is_wildcard(&self) -> bool {
        self.table_end as usize == self.text.len()
    }

    /// The tag as written on the wire.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether a change described by one tag may affect a value depending on the other.
    ///
    /// Symmetric: `t:c=v` matches `t:c=v` and `t`; `t` matches every tag of `t`; and their
    /// column sets must intersect.
    pub fn matches(&self, other: &InvalidationTag) -> bool {
        self.table() == other.table()
            && self.columns.intersects(other.columns)
            && (self.is_wildcard()
                || other.is_wildcard()
                || self.column_value() == other.column_value())
    }
}

/// The canonical `schema.table` of a table in tags, each name escaped by [`escape_name`].
pub fn table_name(schema: &str, table: &str) -> String {
    format!("{}.{}", escape_name(schema), escape_name(table))
}

/// Escapes an identifier for use in a tag: `%`, `#`, `.`, `:` and `=` become `%25`, `%23`,
/// `%2E`, `%3A` and `%3D`, so that any PostgreSQL identifier (quoted names may hold anything)
/// yields an unambiguous tag. The agent and every library must escape identically.
pub fn escape_name(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(['%', '#', '.', ':', '=']) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut escaped = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            '#' => escaped.push_str("%23"),
            '.' => escaped.push_str("%2E"),
            ':' => escaped.push_str("%3A"),
            '=' => escaped.push_str("%3D"),
            other => escaped.push(other),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// A nonzero set written as at most 16 lowercase or uppercase hexadecimal digits.
fn parse_columns(hex: &str) -> Option<ColumnSet> {
    let valid = (1..=16).contains(&hex.len()) && hex.bytes().all(|b| b.is_ascii_hexdigit());
    let bits = u64::from_str_radix(hex, 16).ok().filter(|_| valid)?;
    (bits != 0).then_some(ColumnSet(bits))
}

impl fmt::Display for InvalidationTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for InvalidationTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InvalidationTag({:?})", &*self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(s: &str) -> InvalidationTag {
        InvalidationTag::parse(s).unwrap()
    }

    #[test]
    fn parses_both_forms() {
        let fine = tag("public.items:id=42");
        assert_eq!(fine.table(), "public.items");
        assert_eq!(fine.column_value(), Some("id=42"));
        assert!(!fine.is_wildcard());
        let wild = tag("public.items");
        assert!(wild.is_wildcard());
        assert_eq!(wild.column_value(), None);
    }

    #[test]
    fn value_may_hold_separators_and_be_empty() {
        assert_eq!(tag("t:c=a:b=c").column_value(), Some("c=a:b=c"));
        assert_eq!(tag("t:c=").column_value(), Some("c="));
    }

    #[test]
    fn refuses_malformed_tags() {
        assert!(matches!(
            InvalidationTag::parse(""),
            Err(TagError::EmptyTable(_))
        ));
        assert!(matches!(
            InvalidationTag::parse(":c=1"),
            Err(TagError::EmptyTable(_))
        ));
        assert!(matches!(
            InvalidationTag::parse("t:"),
            Err(TagError::MissingColumn(_))
        ));
        assert!(matches!(
            InvalidationTag::parse("t:=1"),
            Err(TagError::MissingColumn(_))
        ));
        assert!(matches!(
            InvalidationTag::parse("t:c"),
            Err(TagError::MissingColumn(_))
        ));
        let long = "t".repeat(InvalidationTag::MAX_LEN + 1);
        assert!(matches!(
            InvalidationTag::parse(&long),
            Err(TagError::TooLong(_))
        ));
    }

    #[test]
    fn matching_rules() {
        let a1 = tag("s.a:id=1");
        assert!(a1.matches(&tag("s.a:id=1")));
        assert!(!a1.matches(&tag("s.a:id=2")));
        assert!(!a1.matches(&tag("s.a:name=1")));
        assert!(a1.matches(&tag("s.a")) && tag("s.a").matches(&a1));
        assert!(!a1.matches(&tag("s.b")));
        assert!(!tag("s.a").matches(&tag("s.ab")));
        assert!(!tag("s.a:id=1").matches(&tag("s.ab:id=1")));
    }

    #[test]
    fn names_are_escaped_so_any_identifier_makes_a_tag() {
        assert_eq!(escape_name("items"), "items");
        assert_eq!(escape_name("a.b:c=d%"), "a%2Eb%3Ac%3Dd%25");
        assert_eq!(escape_name("t#1"), "t%231");
        let tag = InvalidationTag::for_row_value("my.schema", "t:1", "c=x", "v:=.").unwrap();
        assert_eq!(tag.as_str(), "my%2Eschema.t%3A1:c%3Dx=v:=.");
        assert_eq!(tag.table(), "my%2Eschema.t%3A1");
        assert_eq!(tag.column_value(), Some("c%3Dx=v:=."));
        assert!(tag.matches(&InvalidationTag::for_table("my.schema", "t:1").unwrap()));
    }

    #[test]
    fn the_global_tag_is_the_wildcard_of_the_pseudo_table_star() {
        let global = InvalidationTag::global();
        assert_eq!(global, tag("*"));
        assert!(global.is_global() && global.is_wildcard());
        assert_eq!(global.table(), "*");
        assert!(!tag("*:c=1").is_global() && !tag("s.t").is_global());
    }

    #[test]
    fn no_table_makes_the_global_tag() {
        let names = ["*", "", ".", "%", "a", "*.*", "public"];
        for schema in names {
            for table in names {
                let tag = InvalidationTag::for_table(schema, table).unwrap();
                assert!(!tag.is_global(), "{schema:?}.{table:?} gave {tag:?}");
                assert!(tag.table().contains('.'), "{tag:?}");
            }
        }
    }

    proptest::proptest! {
        /// Any identifiers, escaped or not: the escaping keeps a `.` between them.
        #[test]
        fn no_identifiers_make_the_global_tag(schema in ".{0,8}", table in ".{0,8}") {
            let tag = InvalidationTag::for_table(&schema, &table).unwrap();
            proptest::prop_assert!(!tag.is_global());
        }
    }

    #[test]
    fn columns_follow_the_table_name() {
        let fine = tag("s.t#6:id=1");
        assert_eq!(fine.table(), "s.t");
        assert_eq!(fine.column_value(), Some("id=1"));
        assert_eq!(fine.columns(), ColumnSet::from_bits(6));
        assert_eq!(tag("s.t").columns(), ColumnSet::ALL);
        assert_eq!(tag("s.t#F0").columns(), ColumnSet::from_bits(0xf0));
        assert!(tag("s.t#F0").is_wildcard());
        for bad in [
            "s.t#",
            "s.t#0",
            "s.t#x",
            "s.t#11112222333344445",
            "s.t#-1:id=1",
        ] {
            assert!(
                matches!(InvalidationTag::parse(bad), Err(TagError::BadColumns(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            InvalidationTag::parse("#1:id=1"),
            Err(TagError::EmptyTable(_))
        ));
    }

    #[test]
    fn with_columns_writes_the_set_and_all_writes_none() {
        let fine = tag("s.t:id=1#x");
        let narrowed = fine.with_columns(ColumnSet::from_bits(0x1a));
        assert_eq!(narrowed.as_str(), "s.t#1a:id=1#x");
        assert_eq!(narrowed, tag("s.t#1a:id=1#x"));
        assert_eq!(narrowed.with_columns(ColumnSet::ALL), fine);
        assert_eq!(fine.with_columns(ColumnSet::from_bits(0)), fine);
        assert_eq!(tag("s.t").with_columns(ColumnSet::ROWS).as_str(), "s.t#1");
        let long = format!("s.t:c={}", "v".repeat(InvalidationTag::MAX_LEN - 10));
        assert_eq!(tag(&long).with_columns(ColumnSet::ROWS), tag(&long));
    }

    #[test]
    fn column_sets_must_intersect_to_match() {
        let read = tag("s.a#5:id=1");
        assert!(read.matches(&tag("s.a#4:id=1")));
        assert!(!read.matches(&tag("s.a#a:id=1")));
        assert!(!read.matches(&tag("s.a#2")));
        assert!(read.matches(&tag("s.a")) && read.matches(&tag("s.a:id=1")));
        assert!(!read.matches(&tag("s.a#4:id=2")));
    }

    #[test]
    fn column_bits_match_the_library_vectors() {
        // The same vectors are in tests/test_sql_tags.py.
        let bit = |name| ColumnSet::column(name).bits().trailing_zeros();
        assert_eq!(bit("id"), 22);
        assert_eq!(bit("max_bid"), 5);
        assert_eq!(bit("nb_of_bids"), 8);
        assert_eq!(bit("end_date"), 49);
        assert_eq!(bit("é"), 37);
        for name in ["", "a", "id", "a.b:c=d%#"] {
            assert!(bit(name) >= 2 && bit(name) < 64);
        }
    }

    #[test]
    fn constructors_agree_with_parse() {
        assert_eq!(
            InvalidationTag::fine("s.a", "id", "1").unwrap(),
            tag("s.a:id=1")
        );
        assert_eq!(InvalidationTag::wildcard("s.a").unwrap(), tag("s.a"));
        assert!(InvalidationTag::wildcard("s:a").is_err());
    }
}
