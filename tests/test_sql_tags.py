"""SQL → tags (``txcache._sql.analyze``): one test per rule of docs/sql-tags.md, against a
real catalog. The tag columns are the leading index columns, as the agent's TAGCOLUMNS
serves them. The collation rules run on the server built with ICU (``icu_postgres``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.types.numeric import Int2, Int4, Int8

from postgres_fixtures import drop_database
from txcache import TxcacheError, setup_database
from txcache._columns import ALL, ROWS, column_bit, split_tag
from txcache._current import Params
from txcache._schema import Schema, escape_name, table_name, tag_columns_at
from txcache._sql import QueryTags, UncacheableQuery, analyze
from txcache.stack import EmbeddedPostgres

SCHEMA = """
CREATE EXTENSION citext;
CREATE TABLE items (
    id int PRIMARY KEY, small smallint, big bigint, sku text UNIQUE, name varchar(20),
    ref uuid, active bool, price numeric(10, 2), code char(4), ci citext, added date,
    seen timestamp, ratio float8, plain int, "Mixed" int, note text
);
CREATE INDEX ON items (small);
CREATE INDEX ON items (big);
CREATE INDEX ON items (name);
CREATE INDEX ON items (ref);
CREATE INDEX ON items (active);
CREATE INDEX ON items (price);
CREATE INDEX ON items (code);
CREATE INDEX ON items (ci);
CREATE INDEX ON items (added);
CREATE INDEX ON items (seen);
CREATE INDEX ON items (ratio);
CREATE INDEX ON items ("Mixed");
CREATE INDEX ON items (note, plain);
CREATE TABLE bids (id bigint PRIMARY KEY, item int, bidder int, amount int);
CREATE INDEX ON bids (item);
CREATE INDEX ON bids (bidder);
CREATE TABLE "Odd Table" ("Id" int PRIMARY KEY, "Name" text);
CREATE TABLE odd (id int PRIMARY KEY);
CREATE SCHEMA other;
CREATE TABLE other.notes (id int PRIMARY KEY, body text);
CREATE TABLE other.items (id int PRIMARY KEY);
CREATE SCHEMA untracked;
CREATE TABLE untracked.t (id int PRIMARY KEY);
CREATE SCHEMA "my.schema";
CREATE TABLE "my.schema"."t:1" ("c=x" text PRIMARY KEY);
CREATE VIEW small_items AS SELECT * FROM items WHERE small = 1;
CREATE VIEW small_bids AS SELECT b.* FROM bids b JOIN small_items i ON i.id = b.item;
CREATE VIEW clock AS SELECT now() AS t;
CREATE MATERIALIZED VIEW totals AS SELECT count(*) FROM bids;
CREATE UNLOGGED TABLE scratch (id int PRIMARY KEY);
CREATE SEQUENCE counter;
CREATE FOREIGN DATA WRAPPER nowhere;
CREATE SERVER far FOREIGN DATA WRAPPER nowhere;
CREATE FOREIGN TABLE remote (id int) SERVER far;
CREATE TABLE events (id int, kind int, at date) PARTITION BY RANGE (at);
CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE INDEX ON events (kind);
CREATE TABLE animals (id int PRIMARY KEY, kind int);
CREATE TABLE dogs (bark int) INHERITS (animals);
CREATE INDEX ON animals (kind);
CREATE INDEX ON dogs (kind);
CREATE TABLE secrets (id int PRIMARY KEY);
ALTER TABLE secrets ENABLE ROW LEVEL SECURITY;
CREATE DOMAIN positive AS int CHECK (VALUE > 0);
CREATE DOMAIN label AS text;
CREATE TABLE typed (id positive PRIMARY KEY, tag label UNIQUE);
CREATE TABLE measures (id int PRIMARY KEY, a int, doubled int GENERATED ALWAYS AS (a * 2) STORED);
CREATE FUNCTION bid_count(int) RETURNS bigint LANGUAGE sql STABLE
    AS 'SELECT count(*) FROM bids WHERE item = $1';
CREATE FUNCTION bid_total(items) RETURNS bigint LANGUAGE sql STABLE
    AS 'SELECT sum(amount) FROM bids WHERE item = $1.id';
"""

TAG_COLUMNS = """
SELECT n.nspname::text, c.relname::text, array_agg(DISTINCT a.attname::text)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
WHERE c.relkind IN ('r', 'p') AND i.indkey[0] <> 0
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
GROUP BY 1, 2
"""


def tag_columns(conn: psycopg.Connection) -> dict[str, frozenset[str]]:
    """The leading index columns of every table, as the agent's TAGCOLUMNS serves them."""
    rows = conn.execute(TAG_COLUMNS).fetchall()
    return {table_name(schema, table): frozenset(columns) for schema, table, columns in rows}


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[str]:
    """One database with the schema above, set up for txcache (schemas public, other,
    "my.schema"), shared by the module's tests (they only read it)."""
    name = "sql_tags"
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
    dsn = postgres.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    setup_database(dsn, schemas=("public", "other", "my.schema"), slot=name)
    yield dsn
    drop_database(postgres, name)


@pytest.fixture(scope="module")
def schema(shop: str) -> Schema:
    with psycopg.connect(shop, autocommit=True) as conn:
        columns = tag_columns(conn)
    return Schema.load(shop).with_tag_columns(columns)


Tags = Callable[..., set[str]]
"""``tags(sql, params=None, **options)``: the tags :func:`analyze` gives ``sql``, without
their column sets (the rules of which rows; ``columns`` tests which columns)."""


@pytest.fixture
def tags(schema: Schema) -> Tags:
    def analyse(sql: str, params: Params = None, **options: Any) -> set[str]:
        return {split_tag(tag)[0] for tag in analyze(sql, params, schema, **options).tags}

    return analyse


Columns = Callable[..., dict[str, int]]
"""``columns(sql, params=None)``: each tag's column set, by the tag without it."""


@pytest.fixture
def columns(schema: Schema) -> Columns:
    def analyse(sql: str, params: Params = None) -> dict[str, int]:
        return dict(split_tag(tag) for tag in analyze(sql, params, schema).tags)

    return analyse


def read(*names: str) -> int:
    """The column set of a read of ``names``."""
    found = ROWS
    for name in names:
        found |= column_bit(name)
    return found


def refusal(schema: Schema, sql: str, params: Params = None, **options: Any) -> str:
    with pytest.raises(UncacheableQuery) as caught:
        analyze(sql, params, schema, **options)
    return str(caught.value)


# -- names ---------------------------------------------------------------------------------


def test_column_bits_match_the_agent_vectors() -> None:
    # The same vectors are in crates/model/src/tag.rs.
    bits = {"id": 22, "max_bid": 5, "nb_of_bids": 8, "end_date": 49, "é": 37}
    assert {name: column_bit(name).bit_length() - 1 for name in bits} == bits


def test_escape_name_matches_the_agent_vectors() -> None:
    assert escape_name("items") == "items"
    assert escape_name("t#1") == "t%231"
    assert escape_name("a.b:c=d%") == "a%2Eb%3Ac%3Dd%25"
    assert table_name("my.schema", "t:1") == "my%2Eschema.t%3A1"


def test_escaped_names_in_fine_tags(tags: Tags) -> None:
    sql = 'SELECT * FROM "my.schema"."t:1" WHERE "c=x" = %s'
    assert tags(sql, ("v:=.",)) == {"my%2Eschema.t%3A1:c%3Dx=v:=."}


def test_quoted_identifiers_and_case_folding(tags: Tags) -> None:
    assert tags('SELECT * FROM "Odd Table" WHERE "Id" = 1') == {"public.Odd Table:Id=1"}
    assert tags("SELECT * FROM ODD WHERE ID = 1") == {"public.odd:id=1"}
    assert tags('SELECT * FROM items WHERE "Mixed" = 2') == {"public.items:Mixed=2"}


def test_search_path_resolves_unqualified_names(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE id = 1") == {"public.items:id=1"}
    assert tags("SELECT * FROM other.items WHERE id = 1") == {"other.items:id=1"}
    assert tags("SELECT * FROM other.notes") == {"other.notes"}


# -- tag-column versions -------------------------------------------------------------------


def test_tag_columns_at_picks_the_version_in_force() -> None:
    versions = [
        (100, [(b"public.items", [b"id"])]),
        (200, [(b"public.items", [b"id", b"sku"])]),
    ]
    assert tag_columns_at(versions, 99) is None
    assert tag_columns_at(versions, 100) == {"public.items": frozenset({"id"})}
    assert tag_columns_at(versions, 199) == {"public.items": frozenset({"id"})}
    assert tag_columns_at(versions, 10**9) == {"public.items": frozenset({"id", "sku"})}


def test_no_tag_column_version_means_wildcards_only(schema: Schema) -> None:
    bare = schema.with_tag_columns(None)
    assert analyze("SELECT * FROM items WHERE id = 1", None, bare).tags == {"public.items"}


def test_an_equality_on_a_column_that_leads_no_index_gives_the_wildcard(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE plain = 1") == {"public.items"}


# -- equalities ----------------------------------------------------------------------------


def test_equality_with_literal_and_parameters(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE id = 7") == {"public.items:id=7"}
    assert tags("SELECT * FROM items WHERE 7 = id") == {"public.items:id=7"}
    assert tags("SELECT * FROM items WHERE id = %s", (7,)) == {"public.items:id=7"}
    assert tags("SELECT * FROM items WHERE id = %(id)s", {"id": 7}) == {"public.items:id=7"}


def test_in_list_and_any_give_one_tag_per_value(tags: Tags) -> None:
    expected = {"public.items:id=1", "public.items:id=2"}
    assert tags("SELECT * FROM items WHERE id IN (1, %s, 2)", (2,)) == expected
    assert tags("SELECT * FROM items WHERE id = ANY(%s)", ([1, 2],)) == expected
    assert tags("SELECT * FROM items WHERE id = ANY(%s::int[])", ([1, 2],)) == expected
    assert tags("SELECT * FROM items WHERE id = ANY(ARRAY[1, 2])") == expected


def test_null_values_match_nothing(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE id IN (1, NULL)") == {"public.items:id=1"}
    assert tags("SELECT * FROM items WHERE id = %s", (None,)) == {"public.items"}


def test_only_the_top_level_conjunction_counts(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE id = 1 OR id = 2") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = 1 AND (big = 2 OR big = 3)") == {
        "public.items:id=1"
    }
    assert tags("SELECT * FROM items WHERE NOT (id = 1)") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id <> 1") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id NOT IN (1, 2)") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id > 1") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id IS NOT DISTINCT FROM 1") == {"public.items"}


def test_the_restriction_with_fewest_values_is_chosen(tags: Tags) -> None:
    sql = "SELECT * FROM items WHERE id IN (1, 2, 3) AND sku = 'x'"
    assert tags(sql) == {"public.items:sku=x"}
    sql = "SELECT * FROM items WHERE active AND big = 5"
    assert tags(sql) == {"public.items:big=5"}


def test_expressions_on_either_side_give_the_wildcard(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE id + 0 = 1") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = 1 + 0") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = -%s", (1,)) == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = (SELECT 1)") == {"public.items"}
    assert tags("SELECT * FROM items WHERE sku = 'a' COLLATE \"C\"") == {"public.items"}


# -- the type table ------------------------------------------------------------------------


def test_integers_of_every_width(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE small = 3") == {"public.items:small=3"}
    assert tags("SELECT * FROM items WHERE big = 3000000000") == {"public.items:big=3000000000"}
    assert tags("SELECT * FROM items WHERE big = %s", (-(2**40),)) == {
        f"public.items:big={-(2**40)}"
    }


def test_psycopg_typed_integers_are_integers(tags: Tags) -> None:
    """Django passes an ``IntegerField``'s value as psycopg's ``Int4``: sent as int4, it
    compares by value with a column of any integer width."""
    assert tags("SELECT * FROM items WHERE id = %s", (Int4(7),)) == {"public.items:id=7"}
    assert tags("SELECT * FROM items WHERE big = %s", (Int2(-3),)) == {"public.items:big=-3"}
    assert tags("SELECT * FROM items WHERE small = %s", (Int8(3),)) == {"public.items:small=3"}


def test_integer_input_text_is_normalised_like_postgres(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE id = '007'") == {"public.items:id=7"}
    assert tags("SELECT * FROM items WHERE id = %s", (" +7 ",)) == {"public.items:id=7"}
    assert tags("SELECT * FROM items WHERE id = %s", ("0x1F",)) == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = %s::int", ("7",)) == {"public.items:id=7"}


def test_integers_refuse_floats_decimals_and_booleans(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE id = 7.0") == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = %s", (7.0,)) == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = %s", (Decimal(7),)) == {"public.items"}
    assert tags("SELECT * FROM items WHERE id = %s", (True,)) == {"public.items"}


def test_text_and_varchar_with_a_deterministic_collation(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE sku = 'a b '") == {"public.items:sku=a b "}
    assert tags("SELECT * FROM items WHERE name = %s", ("Zoë",)) == {"public.items:name=Zoë"}
    assert tags("SELECT * FROM items WHERE sku = %s::text", ("x",)) == {"public.items:sku=x"}
    assert tags("SELECT * FROM items WHERE name = 'abc'::varchar(2)") == {"public.items"}
    assert tags("SELECT * FROM items WHERE sku = 7::text") == {"public.items"}


COLLATIONS = """
CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE COLLATION ai (provider = icu, locale = 'und-u-ks-level1-kc-true', deterministic = false);
CREATE COLLATION icu (provider = icu, locale = 'und');
CREATE DOMAIN ci_text AS text COLLATE ci;
CREATE TABLE words (
    id int PRIMARY KEY, ci text COLLATE ci UNIQUE, ai varchar(20) COLLATE ai UNIQUE,
    dom ci_text UNIQUE, plain text UNIQUE, und text COLLATE "und-x-icu" UNIQUE,
    own text COLLATE icu UNIQUE
);
"""


@pytest.fixture(scope="module")
def collated(icu_postgres: EmbeddedPostgres) -> Iterator[Schema]:
    """The schema of one database of the ICU server with ``words``: text columns of
    nondeterministic ICU collations (case-insensitive ``ci``, accent-insensitive ``ai``, a
    domain of ``ci``), of the default collation and of deterministic ICU collations."""
    name = "sql_tags_collations"
    with psycopg.connect(icu_postgres.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
    dsn = icu_postgres.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(COLLATIONS)
        setup_database(dsn, slot=name)
        yield Schema.load(conn).with_tag_columns(tag_columns(conn))
    drop_database(icu_postgres, name)


def test_the_icu_collations_compare_as_assumed(
    icu_postgres: EmbeddedPostgres, collated: Schema
) -> None:
    """What the tests below rely on: ``ci`` ignores case, ``ai`` accents, ``und-x-icu``
    neither (a deterministic collation's ``=`` is byte equality)."""
    with psycopg.connect(icu_postgres.dsn_for("sql_tags_collations")) as conn:
        row = conn.execute(
            "SELECT 'abc' = 'ABC' COLLATE ci, 'é' = 'e' COLLATE ci, 'é' = 'e' COLLATE ai, "
            "'E' = 'e' COLLATE ai, 'abc' = 'ABC' COLLATE \"und-x-icu\", "
            "'abc' = 'ABC' COLLATE icu"
        ).fetchone()
    assert row == (True, False, True, False, False, False)


@pytest.mark.parametrize("column", ["ci", "ai", "dom"])
@pytest.mark.parametrize(
    ("condition", "params"),
    [
        ("{} = 'ABC'", None),
        ("'ABC' = {}", None),
        ("{} = %s", ("ABC",)),
        ("{} = %s::text", ("ABC",)),
        ("{} IN ('abc', 'ABC')", None),
        ("{} = ANY(ARRAY['abc'])", None),
        ("{} = ANY(%s)", (["abc", "é"],)),
        ("{} = ANY(%s::text[])", (["abc"],)),
    ],
)
def test_text_with_a_nondeterministic_collation_gives_the_wildcard(
    collated: Schema,
    column: str,
    condition: str,
    params: Params,
) -> None:
    """Several texts equal the value: a fine tag of one would miss the writes of the others."""
    sql = f"SELECT * FROM words WHERE {condition.format(column)}"
    assert analyze(sql, params, collated).tags == {"public.words"}


@pytest.mark.parametrize(
    ("condition", "params"),
    [
        ("plain = 'abc' COLLATE ci", None),
        ("plain COLLATE ci = 'abc'", None),
        ("plain = %s COLLATE ai", ("abc",)),
        ("plain IN ('abc' COLLATE ci, 'x')", None),
        ("plain = ANY(ARRAY['abc' COLLATE ci])", None),
        ("plain = 'abc'::ci_text", None),
        ("und = 'abc' COLLATE ci", None),
        ("plain = 'abc' COLLATE \"C\"", None),  # COLLATE is never read, even a deterministic one
    ],
)
def test_an_explicit_collation_gives_the_wildcard(
    collated: Schema, condition: str, params: Params
) -> None:
    sql = f"SELECT * FROM words WHERE {condition}"
    assert analyze(sql, params, collated).tags == {"public.words"}


@pytest.mark.parametrize("column", ["plain", "und", "own"])
def test_deterministic_icu_collations_give_fine_tags(collated: Schema, column: str) -> None:
    """A deterministic collation's ``=`` is byte equality, ICU's as well as libc's."""
    sql = f"SELECT * FROM words WHERE {column} = %s"
    assert analyze(sql, ("ABC",), collated).tags == {f"public.words:{column}=ABC"}
    sql = f"SELECT * FROM words WHERE {column} IN ('abc', 'Zoë')"
    expected = {f"public.words:{column}=abc", f"public.words:{column}=Zoë"}
    assert analyze(sql, None, collated).tags == expected


def test_uuid_is_written_canonical_lowercase(tags: Tags) -> None:
    ref = uuid.UUID("0ebd4e4b-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
    expected = {f"public.items:ref={ref}"}
    assert tags("SELECT * FROM items WHERE ref = %s", (ref,)) == expected
    assert tags("SELECT * FROM items WHERE ref = %s", (str(ref).upper(),)) == expected
    assert tags(f"SELECT * FROM items WHERE ref = '{{{ref.hex}}}'") == expected
    assert tags("SELECT * FROM items WHERE ref = 'nonsense'") == {"public.items"}


def test_booleans_are_t_and_f(tags: Tags) -> None:
    on, off = {"public.items:active=t"}, {"public.items:active=f"}
    assert tags("SELECT * FROM items WHERE active = true") == on
    assert tags("SELECT * FROM items WHERE active = 'yes'") == on
    assert tags("SELECT * FROM items WHERE active = %s", (False,)) == off
    assert tags("SELECT * FROM items WHERE active") == on
    assert tags("SELECT * FROM items WHERE NOT active") == off
    assert tags("SELECT * FROM items WHERE active IS TRUE") == on
    assert tags("SELECT * FROM items WHERE active IS FALSE") == off
    assert tags("SELECT * FROM items WHERE active IS NOT FALSE") == {"public.items"}
    assert tags("SELECT * FROM items WHERE active = %s", (1,)) == {"public.items"}


@pytest.mark.parametrize(
    ("condition", "params"),
    [
        ("price = 1.5", None),
        ("price = %s", (Decimal("1.50"),)),
        ("code = 'ab'", None),
        ("ci = 'ABC'", None),
        ("added = '2024-01-01'", None),
        ("seen = %s", ("2024-01-01 10:00",)),
        ("ratio = 0.5", None),
    ],
)
def test_types_whose_text_output_is_not_provable_give_the_wildcard(
    tags: Tags, condition: str, params: Params
) -> None:
    assert tags(f"SELECT * FROM items WHERE {condition}", params) == {"public.items"}


def test_domains_take_their_base_type(tags: Tags) -> None:
    assert tags("SELECT * FROM typed WHERE id = 3") == {"public.typed:id=3"}
    assert tags("SELECT * FROM typed WHERE tag = 'x'") == {"public.typed:tag=x"}


def test_an_oversized_fine_tag_falls_back_to_the_wildcard(tags: Tags) -> None:
    assert tags("SELECT * FROM items WHERE sku = %s", ("x" * 5000,)) == {"public.items"}


def test_a_user_defined_equality_disables_fine_tags_for_its_type(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t (id int PRIMARY KEY); CREATE FUNCTION loose_eq(int, bigint) "
            "RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT true'; "
            "CREATE OPERATOR public.= (LEFTARG = int, RIGHTARG = bigint, FUNCTION = loose_eq)"
        )
        setup_database(database)
        schema = Schema.load(conn).with_tag_columns(tag_columns(conn))
    with pytest.raises(UncacheableQuery, match="loose_eq"):
        analyze("SELECT * FROM t WHERE id = 1", None, schema)
    tags = analyze("SELECT * FROM t WHERE id = 1", None, schema, safe_functions=["loose_eq"])
    assert tags.tags == {"public.t"}


# -- scopes: joins, subqueries, CTEs -------------------------------------------------------


def test_inner_join_conditions_restrict_both_sides(tags: Tags) -> None:
    sql = "SELECT * FROM items i JOIN bids b ON b.item = i.id AND b.bidder = 5 WHERE i.id = 1"
    assert tags(sql) == {"public.items:id=1", "public.bids:bidder=5"}


def test_left_join_conditions_restrict_only_the_nullable_side(tags: Tags) -> None:
    sql = "SELECT * FROM items i LEFT JOIN bids b ON b.item = i.id AND i.id = 1 AND b.id = 2"
    assert tags(sql) == {"public.items", "public.bids:id=2"}
    sql = "SELECT * FROM bids b RIGHT JOIN items i ON b.item = i.id AND i.id = 1 AND b.id = 2"
    assert tags(sql) == {"public.items", "public.bids:id=2"}


def test_full_join_conditions_restrict_nothing(tags: Tags) -> None:
    sql = "SELECT * FROM items i FULL JOIN bids b ON b.item = i.id AND i.id = 1 AND b.id = 2"
    assert tags(sql) == {"public.items", "public.bids"}


def test_where_restricts_every_side_of_outer_joins(tags: Tags) -> None:
    sql = "SELECT * FROM items i LEFT JOIN bids b ON b.item = i.id WHERE b.id = 2 AND i.id = 1"
    assert tags(sql) == {"public.items:id=1", "public.bids:id=2"}


def test_each_subquery_is_its_own_scope(tags: Tags) -> None:
    sql = (
        "SELECT * FROM items i WHERE i.id = 1 AND EXISTS "
        "(SELECT 1 FROM bids b WHERE b.item = i.id AND b.bidder = 3)"
    )
    assert tags(sql) == {"public.items:id=1", "public.bids:bidder=3"}
    sql = "SELECT * FROM items WHERE id IN (SELECT item FROM bids WHERE id = 4)"
    assert tags(sql) == {"public.items", "public.bids:id=4"}
    sql = "SELECT id, (SELECT count(*) FROM bids WHERE bids.item = items.id) FROM items"
    assert tags(sql) == {"public.items", "public.bids"}
    sql = "SELECT * FROM (SELECT * FROM items WHERE id = 1) s WHERE s.big = 2"
    assert tags(sql) == {"public.items:id=1"}


def test_a_condition_on_an_outer_table_inside_a_subquery_does_not_restrict_it(tags: Tags) -> None:
    sql = "SELECT * FROM items i WHERE EXISTS (SELECT 1 FROM bids b WHERE i.id = 1)"
    assert tags(sql) == {"public.items", "public.bids"}


def test_ctes_set_operations_and_shadowing(tags: Tags) -> None:
    sql = "WITH b AS (SELECT * FROM bids WHERE id = 1) SELECT * FROM b WHERE b.item = 2"
    assert tags(sql) == {"public.bids:id=1"}
    sql = "WITH items AS (SELECT 1 AS id) SELECT * FROM items WHERE id = 1"
    assert tags(sql) == set()
    sql = "SELECT id FROM items WHERE id = 1 UNION SELECT id FROM bids WHERE id = 2"
    assert tags(sql) == {"public.items:id=1", "public.bids:id=2"}
    sql = (
        "WITH RECURSIVE r(n) AS (SELECT id FROM items WHERE id = 1 "
        "UNION SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r"
    )
    assert tags(sql) == {"public.items:id=1"}


def test_aliases_and_renamed_columns(tags: Tags) -> None:
    assert tags("SELECT * FROM items AS x(k) WHERE k = 5") == {"public.items:id=5"}
    assert tags("SELECT * FROM items AS x(k) WHERE x.id = 5") == {"public.items"}
    assert tags("SELECT * FROM items x WHERE x.id = 5") == {"public.items:id=5"}


def test_ambiguous_or_merged_names_do_not_restrict(tags: Tags) -> None:
    sql = "SELECT * FROM items JOIN bids USING (id) WHERE id = 1"
    assert tags(sql) == {"public.items", "public.bids"}
    sql = "SELECT * FROM items NATURAL JOIN bids WHERE item = 1"
    assert tags(sql) == {"public.items", "public.bids"}
    sql = "SELECT * FROM items i, bids b WHERE item = 1 AND sku = 'x'"
    assert tags(sql) == {"public.items:sku=x", "public.bids:item=1"}


def test_self_joins_tag_each_scan(tags: Tags) -> None:
    sql = "SELECT * FROM items a JOIN items b ON a.id = b.big WHERE a.id = 1"
    assert tags(sql) == {"public.items"}
    sql = "SELECT * FROM items a JOIN items b ON b.id = 2 WHERE a.id = 1"
    assert tags(sql) == {"public.items:id=1", "public.items:id=2"}


def test_queries_reading_no_table_have_no_tags(tags: Tags) -> None:
    assert tags("SELECT 1, lower('X'), %s", (5,)) == set()
    assert tags("VALUES (1), (2)") == set()


# -- views, partitions, inheritance --------------------------------------------------------


def test_views_expand_to_their_base_tables_and_tag_themselves(tags: Tags) -> None:
    assert tags("SELECT * FROM small_items WHERE id = 1") == {
        "public.small_items",
        "public.items:small=1",
    }
    assert tags("SELECT * FROM small_bids") == {
        "public.small_bids",
        "public.small_items",
        "public.bids",
        "public.items:small=1",
    }


def test_a_view_calling_a_volatile_function_is_refused(schema: Schema) -> None:
    assert "view public.clock" in refusal(schema, "SELECT * FROM clock")


def test_partitions_are_tagged_by_their_root(tags: Tags) -> None:
    assert tags("SELECT * FROM events WHERE kind = 1") == {"public.events:kind=1"}
    assert tags("SELECT * FROM events_2024 WHERE kind = 1") == {"public.events:kind=1"}
    assert tags("SELECT * FROM events_2025") == {"public.events"}


def test_inheritance_parents_tag_their_children(tags: Tags) -> None:
    assert tags("SELECT * FROM animals WHERE kind = 1") == {
        "public.animals:kind=1",
        "public.dogs:kind=1",
    }
    assert tags("SELECT * FROM ONLY animals WHERE kind = 1") == {"public.animals:kind=1"}
    assert tags("SELECT * FROM animals WHERE id = 1") == {"public.animals:id=1", "public.dogs"}


# -- columns -------------------------------------------------------------------------------


def test_a_tag_names_the_columns_its_query_reads_of_the_table(columns: Columns) -> None:
    found = columns("SELECT id, name FROM items WHERE small = %s", (1,))
    assert found == {"public.items:small=1": read("id", "name", "small")}
    assert columns("SELECT count(*) FROM bids") == {"public.bids": read()}


def test_qualified_references_read_only_the_item_they_name(columns: Columns) -> None:
    sql = (
        "SELECT b.amount FROM bids b JOIN items i ON i.id = b.item "
        "WHERE b.bidder = %s ORDER BY i.price"
    )
    assert columns(sql, (3,)) == {
        "public.bids:bidder=3": read("amount", "item", "bidder"),
        "public.items": read("id", "price"),
    }


def test_a_correlated_reference_reads_the_outer_item(columns: Columns) -> None:
    sql = (
        "SELECT name FROM items i WHERE i.id = 1 AND EXISTS "
        "(SELECT * FROM bids b WHERE b.item = i.id AND b.bidder = 3)"
    )
    assert columns(sql) == {
        "public.items:id=1": read("name", "id"),
        "public.bids:bidder=3": read("item", "bidder"),
    }


def test_unqualified_names_read_every_item_that_has_them(columns: Columns) -> None:
    found = columns("SELECT amount, name FROM bids JOIN items ON items.id = bids.item")
    assert found == {"public.bids": read("amount", "item"), "public.items": read("id", "name")}
    aliased = columns("SELECT x FROM items AS i(x) WHERE i.x = 1")
    assert aliased == {"public.items:id=1": read("id")}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM items WHERE id = 1",
        "SELECT i.* FROM items i WHERE id = 1",
        "SELECT i FROM items i WHERE id = 1",
        "SELECT row_to_json(i) FROM items i WHERE id = 1",
        "SELECT i.no_such_column FROM items i WHERE id = 1",
        "SELECT 1 FROM items NATURAL JOIN odd WHERE items.id = 1",
    ],
)
def test_whole_rows_read_every_column(columns: Columns, sql: str) -> None:
    assert columns(sql)["public.items:id=1"] == ALL


JOINED = "(bids b JOIN items i ON i.id = b.item)"


def test_a_join_alias_reads_through_to_its_tables(columns: Columns) -> None:
    found = columns(f"SELECT j.name FROM {JOINED} AS j")
    assert found == {"public.bids": read("item"), "public.items": read("id", "name")}
    for sql in (
        f"SELECT j.a FROM {JOINED} AS j(x1, x2, x3, a)",  # renamed: not traced
        f"SELECT row_to_json(j) FROM {JOINED} AS j",
        f"SELECT j.* FROM {JOINED} AS j",
    ):
        assert columns(sql) == {"public.bids": ALL, "public.items": ALL}, sql


def test_a_join_alias_shadowing_an_outer_table_reads_both(columns: Columns) -> None:
    sql = (
        f"SELECT (SELECT j.name FROM {JOINED} AS j ORDER BY j.amount LIMIT 1) "
        "FROM odd AS j WHERE j.id = 1"
    )
    found = columns(sql)
    assert found["public.items"] & read("name") == read("name")
    assert found["public.bids"] & read("amount") == read("amount")


def test_storage_sizes_read_every_column(columns: Columns) -> None:
    """An update may compress or move a value it left unchanged (TOAST)."""
    found = columns("SELECT pg_column_size(note) FROM items WHERE id = 1")
    assert found == {"public.items:id=1": ALL}


def test_using_reads_the_merged_column_of_both_sides(columns: Columns) -> None:
    found = columns("SELECT 1 FROM items JOIN odd USING (id)")
    assert found == {"public.items": read("id"), "public.odd": read("id")}


def test_a_star_reads_whole_rows_of_its_own_level_only(columns: Columns) -> None:
    sql = "SELECT name FROM items i WHERE id IN (SELECT * FROM odd WHERE odd.id = i.small)"
    assert columns(sql) == {"public.items": read("name", "id", "small"), "public.odd": ALL}


def test_the_star_of_exists_reads_no_column(columns: Columns) -> None:
    """``EXISTS`` asks only whether a row comes back (SQLAlchemy's ``exists()`` lists ``*``)."""
    sql = "SELECT name FROM items i WHERE EXISTS (SELECT b.* FROM bids b WHERE b.item = i.id)"
    assert columns(sql) == {"public.items": read("name", "id"), "public.bids": read("item")}
    union = "SELECT 1 WHERE EXISTS (SELECT * FROM bids UNION SELECT * FROM bids)"
    assert columns(union) == {"public.bids": ALL}


def test_a_generated_column_reads_every_column(columns: Columns) -> None:
    plain = columns("SELECT a FROM measures WHERE id = 1")
    assert plain == {"public.measures:id=1": read("a", "id")}
    generated = columns("SELECT doubled FROM measures WHERE id = 1")
    assert generated == {"public.measures:id=1": ALL}


def test_a_view_reads_what_its_definition_names(columns: Columns, schema: Schema) -> None:
    found = columns("SELECT id FROM small_items")
    items = schema.catalog.relation("public", "items")
    assert items is not None
    assert found["public.items:small=1"] == read(*(column.name for column in items.columns))
    assert found["public.small_items"] == ALL


def test_reads_of_one_site_merge_their_columns(columns: Columns) -> None:
    sql = "SELECT a.name, b.price FROM items a JOIN items b ON a.id = 1 AND b.id = 1"
    assert columns(sql) == {"public.items:id=1": read("name", "price", "id")}


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT (i).xmax FROM items i WHERE id = 1", "system column xmax"),
        ("SELECT (i.*).ctid FROM items i WHERE id = 1", "system column ctid"),
        ("SELECT i.bid_total FROM items i WHERE id = 1", "bid_total"),
        ("SELECT (i).bid_total FROM items i WHERE id = 1", "bid_total"),
    ],
)
def test_fields_of_whole_rows_are_checked_as_columns_and_calls(
    schema: Schema, sql: str, reason: str
) -> None:
    """``(t).xmax`` is a system column; ``t.f`` is ``f(t)`` where ``f`` is no column."""
    assert reason in refusal(schema, sql)


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT * FROM totals", "materialized view public.totals"),
        ("SELECT * FROM remote", "foreign table public.remote"),
        ("SELECT * FROM scratch", "unlogged table public.scratch"),
        ("SELECT * FROM counter", "sequence public.counter"),
        ("SELECT nextval('counter')", "nextval"),
        ("SELECT * FROM pg_class", "system catalog pg_catalog.pg_class"),
        ("SELECT * FROM information_schema.tables", "system catalog"),
        ("SELECT * FROM untracked.t", "untracked.t is not in publication txcache"),
        ("SELECT * FROM secrets", "row-level security"),
        ("SELECT * FROM nowhere", "unknown relation nowhere"),
    ],
)
def test_relations_whose_changes_are_not_decoded_are_refused(
    schema: Schema, sql: str, construct: str
) -> None:
    assert construct in refusal(schema, sql)


def test_temporary_tables_are_refused(shop: str) -> None:
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE mine (id int PRIMARY KEY)")
        schema = Schema.load(conn)
        assert "temporary table" in refusal(schema, "SELECT * FROM mine")


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT random()", "volatile function random()"),
        ("SELECT clock_timestamp()", "volatile function clock_timestamp()"),
        ("SELECT now()", "function now()"),
        ("SELECT * FROM items WHERE added > current_date", "CURRENT_DATE"),
        ("SELECT current_timestamp", "CURRENT_TIMESTAMP"),
        ("SELECT current_user", "CURRENT_USER"),
        ("SELECT txid_current()", "function txid_current()"),
        ("SELECT pg_current_xact_id()", "function pg_current_xact_id()"),
        ("SELECT current_setting('TimeZone')", "function current_setting()"),
        ("SELECT age(added) FROM items", "age()"),
        ("SELECT * FROM items WHERE seen < 'now'", "'now'"),
        ("SELECT * FROM items WHERE added = 'tomorrow'::date", "'tomorrow'"),
        ("SELECT table_to_xml('bids', true, false, '')", "table_to_xml"),
        ("SELECT obj_description('items'::regclass)", "obj_description"),
        ("SELECT * FROM items WHERE ctid = '(0,1)'", "system column ctid"),
        ("SELECT xmin FROM items", "system column xmin"),
    ],
)
def test_volatile_and_time_dependent_functions_are_refused(
    schema: Schema, sql: str, construct: str
) -> None:
    assert construct in refusal(schema, sql)


def test_a_parameter_naming_the_current_time_is_refused(schema: Schema, tags: Tags) -> None:
    assert "'today'" in refusal(schema, "SELECT * FROM items WHERE added = %s", ("today",))
    assert tags("SELECT * FROM items WHERE sku = %s", ("today",)) == {"public.items:sku=today"}


def test_stable_and_immutable_builtins_are_allowed(tags: Tags) -> None:
    sql = (
        "SELECT lower(sku), count(*), date_trunc('day', seen), extract(year FROM added), "
        "to_char(seen, 'YYYY'), coalesce(name, 'x'), ci = 'abc' FROM items "
        "WHERE id = 1 GROUP BY 1, 3, 4, 5, 6, 7"
    )
    assert tags(sql) == {"public.items:id=1"}


def test_user_defined_functions_are_refused_unless_declared_safe(
    schema: Schema, tags: Tags
) -> None:
    assert "public.bid_count()" in refusal(schema, "SELECT bid_count(1)")
    assert tags("SELECT bid_count(1)", safe_functions=["bid_count"]) == set()
    assert tags("SELECT bid_count(1)", safe_functions=["public.bid_count"]) == set()


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("INSERT INTO items (id) VALUES (1)", "INSERT"),
        ("UPDATE items SET big = 1", "UPDATE"),
        ("DELETE FROM items", "DELETE"),
        ("MERGE INTO items USING bids ON false WHEN NOT MATCHED THEN DO NOTHING", "MERGE"),
        ("WITH d AS (DELETE FROM bids RETURNING *) SELECT * FROM d", "writes data"),
        ("SELECT * FROM items FOR UPDATE", "FOR UPDATE"),
        ("SELECT * FROM items FOR SHARE", "FOR UPDATE/SHARE"),
        ("SELECT * INTO copy FROM items", "SELECT INTO"),
        ("SELECT 1; SELECT 2", "2 statements"),
        ("SELECT * FROM items TABLESAMPLE SYSTEM (10)", "TABLESAMPLE"),
        ("SELEKT 1", "cannot parse"),
        ("EXPLAIN SELECT 1", "EXPLAIN"),
    ],
)
def test_writes_locks_and_other_statements_are_refused(
    schema: Schema, sql: str, construct: str
) -> None:
    assert construct in refusal(schema, sql)


def test_refusals_are_txcache_errors(schema: Schema) -> None:
    with pytest.raises(TxcacheError):
        analyze("SELECT random()", None, schema)


# -- placeholders --------------------------------------------------------------------------


def test_placeholders_follow_psycopg(tags: Tags, schema: Schema) -> None:
    assert tags("SELECT * FROM items WHERE sku LIKE 'a%%' AND id = %s", (1,)) == {
        "public.items:id=1"
    }
    sql = "SELECT * FROM items WHERE id = %(k)s AND big = %(k)s"
    assert tags(sql, {"k": 3}) == {"public.items:id=3"}
    assert "2 parameters" in refusal(schema, "SELECT %s", (1, 2))
    assert "no value" in refusal(schema, "SELECT %(a)s", {"b": 1})
    assert "named/positional" in refusal(schema, "SELECT %(a)s", (1,))
    assert "invalid placeholder" in refusal(schema, "SELECT %d", (1,))


# -- the schema object ---------------------------------------------------------------------


def test_refresh_sees_new_tables_and_every_copy_shares_it(shop: str) -> None:
    schema = Schema.load(shop)
    copy = schema.with_tag_columns({"public.later": frozenset({"id"})})
    assert "unknown relation later" in refusal(copy, "SELECT * FROM later")
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TABLE later (id int PRIMARY KEY)")
        try:
            schema.refresh()
            assert copy.catalog is schema.catalog
            tags = analyze("SELECT * FROM later WHERE id = 1", None, copy)
            assert tags == QueryTags(frozenset({"public.later:id=1"}))
        finally:
            conn.execute("DROP TABLE later")
