//! Invalidation tags: names for the sets of rows a cached value depends on.

use std::fmt;

/// A set of rows whose change may change a cached result.
///
/// Two forms, written as text on the wire and in logs:
/// - fine, `schema.table:column=value` — the rows of `schema.table` whose `column` has the
///   text value `value` (PostgreSQL's text output of that column);
/// - wildcard, `schema.table` — every row of the table.
///
/// The table part ends at the first `:` and the column at the first `=` after it; the value is
/// everything after that `=` and may hold any character. So a table name may not contain `:`
/// and a column name may not contain `=`.
///
/// One more tag has a meaning of its own: the global tag `*` ([`InvalidationTag::global`]),
/// which a commit carries when the rows it may change cannot be named.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InvalidationTag {
    text: Box<str>,
    /// Byte offset of the `:` ending the table part; `text.len()` for a wildcard.
    table_end: u32,
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

    /// Parses `schema.table` or `schema.table:column=value`.
    pub fn parse(text: &str) -> Result<Self, TagError> {
        if text.len() > Self::MAX_LEN {
            return Err(TagError::TooLong(text.len()));
        }
        let table_end = text.find(':').unwrap_or(text.len());
        if table_end == 0 {
            return Err(TagError::EmptyTable(text.to_owned()));
        }
        if table_end < text.len() {
            let rest = &text[table_end + 1..];
            if rest.find('=').is_none_or(|eq| eq == 0) {
                return Err(TagError::MissingColumn(text.to_owned()));
            }
        }
        Ok(Self {
            text: text.into(),
            table_end: table_end as u32,
        })
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

    /// The table this tag belongs to.
    pub fn table(&self) -> &str {
        &self.text[..self.table_end as usize]
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
    /// Symmetric: `t:c=v` matches `t:c=v` and `t`; `t` matches every tag of `t`.
    pub fn matches(&self, other: &InvalidationTag) -> bool {
        self.table() == other.table()
            && (self.is_wildcard() || other.is_wildcard() || self.text == other.text)
    }
}

/// The canonical `schema.table` of a table in tags, each name escaped by [`escape_name`].
pub fn table_name(schema: &str, table: &str) -> String {
    format!("{}.{}", escape_name(schema), escape_name(table))
}

/// Escapes an identifier for use in a tag: `%`, `.`, `:` and `=` become `%25`, `%2E`, `%3A`
/// and `%3D`, so that any PostgreSQL identifier (quoted names may hold anything) yields an
/// unambiguous tag. The agent and every library must escape identically.
pub fn escape_name(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(['%', '.', ':', '=']) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut escaped = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            '.' => escaped.push_str("%2E"),
            ':' => escaped.push_str("%3A"),
            '=' => escaped.push_str("%3D"),
            other => escaped.push(other),
        }
    }
    std::borrow::Cow::Owned(escaped)
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
    fn constructors_agree_with_parse() {
        assert_eq!(
            InvalidationTag::fine("s.a", "id", "1").unwrap(),
            tag("s.a:id=1")
        );
        assert_eq!(InvalidationTag::wildcard("s.a").unwrap(), tag("s.a"));
        assert!(InvalidationTag::wildcard("s:a").is_err());
    }
}
