"""SQL → tags for what a query names without reading a table (docs/sql-tags.md, "Literals
that name the current time", "Type references", "Object identifiers"), against a real
catalog:

- a time word (``now``, ``today``, ``tomorrow``, ``yesterday``) in any literal or parameter
  that PostgreSQL may turn into a date or time — ranges, multiranges, arrays, composites,
  domains, JSON — is refused, unless the value provably stays text (an equality with a text
  column, a pattern of ``LIKE``/``SIMILAR TO``/regular expressions); so is text the query
  computes (a table's, or built from pieces) converted to a date or time;
- a relation named through its row type (casts, column definitions, arrays and domains of
  it, composite types and columns holding it, functions returning it) carries the
  relation's wildcard, which the DDL notice of an ``ALTER TABLE`` names;
- ``regclass`` and ``regtype`` literals and parameters carry the wildcard of the relation
  they name; names resolved at run time, roles, and tables holding such values are refused.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from postgres_fixtures import drop_database
from test_sql_tags import tag_columns
from txcache import setup_database
from txcache._columns import split_tag
from txcache._current import Params
from txcache._schema import Schema
from txcache._sql import UncacheableQuery, analyze
from txcache.stack import EmbeddedPostgres

SCHEMA = """
CREATE EXTENSION citext;
CREATE TABLE periods (
    id int PRIMARY KEY, during tstzrange, days daterange, whens tstzmultirange,
    stamps timestamptz[], day date, at timestamptz, clock time, note text UNIQUE,
    label varchar(40), ci citext, doc jsonb
);
CREATE TYPE span AS (starts timestamptz, ends timestamptz);
CREATE DOMAIN moment AS timestamptz;
CREATE DOMAIN moments AS timestamptz[];
CREATE TYPE stamp_range AS RANGE (subtype = timestamp);
CREATE TABLE shapes (id int PRIMARY KEY, name text);
CREATE TABLE holders (id int PRIMARY KEY, shape shapes);
CREATE TYPE wrapper AS (shape shapes, n int);
CREATE DOMAIN shape_list AS shapes[];
CREATE VIEW shape_names AS SELECT id, name FROM shapes;
CREATE MATERIALIZED VIEW shape_count AS SELECT count(*) AS n FROM shapes;
CREATE TABLE refs (id int PRIMARY KEY, rel regclass);
CREATE TABLE type_refs (id int PRIMARY KEY, types regtype[]);
CREATE TABLE role_refs (id int PRIMARY KEY, owner regrole);
CREATE TABLE function_refs (id int PRIMARY KEY, fn regproc);
CREATE SEQUENCE counter;
CREATE UNLOGGED TABLE scratch (id int PRIMARY KEY);
CREATE SCHEMA other;
CREATE TABLE other.shapes (id int PRIMARY KEY);
CREATE FUNCTION all_shapes() RETURNS SETOF shapes LANGUAGE sql STABLE
    AS 'SELECT * FROM shapes';
CREATE FUNCTION no_wrapper() RETURNS wrapper LANGUAGE sql IMMUTABLE AS 'SELECT NULL::wrapper';
"""


@pytest.fixture(scope="module")
def schema(postgres: EmbeddedPostgres) -> Iterator[Schema]:
    """The schema above in a database of its own, set up for txcache (public, other)."""
    name = "sql_literals"
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
    dsn = postgres.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        setup_database(dsn, schemas=("public", "other"), slot=name)
        yield Schema.load(dsn).with_tag_columns(tag_columns(conn))
    drop_database(postgres, name)


def tags_of(schema: Schema, sql: str, params: Params = None, **options: Any) -> set[str]:
    """The tags of ``sql`` without their column sets (tested in test_sql_tags.py)."""
    return {split_tag(tag)[0] for tag in analyze(sql, params, schema, **options).tags}


def refusal(schema: Schema, sql: str, params: Params = None, **options: Any) -> str:
    with pytest.raises(UncacheableQuery) as caught:
        analyze(sql, params, schema, **options)
    return str(caught.value)


class When(enum.Enum):
    """psycopg sends an ``Enum`` member as its name."""

    today = 1


# -- time words ----------------------------------------------------------------------------

COUNT = "SELECT count(*) FROM periods WHERE "


@pytest.mark.parametrize(
    "sql",
    [
        COUNT + "during && '[now,infinity)'",
        COUNT + "during @> '[today,tomorrow)'::tstzrange",
        COUNT + "during && tstzrange '[yesterday,)'",
        COUNT + "during && CAST('(,now]' AS tstzrange)",
        COUNT + "during && $$[now,)$$",
        COUNT + "during && E'[\\x6eow,)'",
        COUNT + "days && '[today,tomorrow)'",
        COUNT + "whens && '{[now,)}'",
        COUNT + "whens && '{[2024-01-01,today)}'::tstzmultirange",
        COUNT + "stamps && '{now}'",
        COUNT + "stamps @> '{\"yesterday\"}'::timestamptz[]",
        COUNT + "day = ANY('{today,tomorrow}')",
        COUNT + "at > 'Today'",
        COUNT + "at < ' NOW '::moment",
        COUNT + "stamps = '{now,epoch}'::moments",
        "SELECT '{now}'::date[]",
        "SELECT '(now,tomorrow)'::span",
        "SELECT '(\"yesterday\",)'::span",
        "SELECT ROW('now', NULL)::span",
        "SELECT '[2024-01-01, now)'::stamp_range",
        'SELECT jsonb_populate_record(NULL::span, \'{"starts": "now"}\')',
        'SELECT * FROM jsonb_to_record(\'{"a": "today"}\') AS r(a date)',
        "SELECT 'now'::text::date",
        "SELECT ('[' || 'now,)')::tstzrange",
        "SELECT 'now'",  # the result is text, but a text literal is refused wherever it stands
        COUNT + "note = 'x' OR at > 'tomorrow'",
        COUNT + "note = 'now'::date::text",
        COUNT + "note || '' = 'now'",
    ],
)
def test_a_time_word_in_any_literal_is_refused(schema: Schema, sql: str) -> None:
    assert "current time" in refusal(schema, sql)


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (COUNT + "during && %s", ("[now,infinity)",)),
        (COUNT + "during && %(r)s::tstzrange", {"r": "(,today]"}),
        (COUNT + "stamps && %s", (["now"],)),
        (COUNT + "day = ANY(%s)", (["2024-01-01", "today"],)),
        (COUNT + "day = %s", (When.today,)),
        (COUNT + "at > %s", ("tomorrow 10:00",)),
        ("SELECT %s::span", (("now", None),)),
        ("SELECT jsonb_populate_record(NULL::span, %s)", (Jsonb({"starts": "now"}),)),
        ("SELECT convert_from(%s, 'UTF8')::date", (b"today",)),
        ("SELECT %b::text::date", ("now",)),
    ],
)
def test_a_time_word_in_any_parameter_is_refused(schema: Schema, sql: str, params: Params) -> None:
    assert "current time" in refusal(schema, sql, params)


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        ("SELECT * FROM periods WHERE note = 'now'", None, {"public.periods:note=now"}),
        (
            "SELECT * FROM periods WHERE note = %s",
            ("[now, today)",),
            {"public.periods:note=[now, today)"},
        ),
        (
            "SELECT * FROM periods WHERE note IN ('today', '{tomorrow}')",
            None,
            {"public.periods:note=today", "public.periods:note={tomorrow}"},
        ),
        (
            "SELECT * FROM periods WHERE note = ANY(%s)",
            (["now", "(now)"],),
            {"public.periods:note=now", "public.periods:note=(now)"},
        ),
        ("SELECT * FROM periods WHERE note = 'now'::text", None, {"public.periods:note=now"}),
        ("SELECT * FROM periods WHERE label = 'see you tomorrow!'", None, {"public.periods"}),
        ("SELECT * FROM periods WHERE note LIKE '%today%'", None, {"public.periods"}),
        ("SELECT * FROM periods WHERE note NOT ILIKE %s", ("%now%",), {"public.periods"}),
        ("SELECT * FROM periods WHERE note ~ 'now|today'", None, {"public.periods"}),
        ("SELECT * FROM periods WHERE note !~* %s", ("^yesterday",), {"public.periods"}),
        ("SELECT * FROM periods WHERE note SIMILAR TO '%(now|today)%'", None, {"public.periods"}),
        ("SELECT * FROM periods WHERE note LIKE 'now!%' ESCAPE '!'", None, {"public.periods"}),
        ("SELECT * FROM periods WHERE ci ILIKE '%tomorrow%'", None, {"public.periods"}),
        (
            "SELECT * FROM periods WHERE note LIKE ANY(ARRAY['%now%', '%today%'])",
            None,
            {"public.periods"},
        ),
        ("SELECT * FROM periods WHERE note LIKE ANY(%s)", (["%now%"],), {"public.periods"}),
        ("SELECT note ~~ 'now' FROM periods", None, {"public.periods"}),
        (
            "SELECT * FROM periods WHERE to_tsvector('english', note) @@ 'now'",
            None,
            {"public.periods"},
        ),
        ("SELECT * FROM periods WHERE doc @@ '$.note == \"now\"'", None, {"public.periods"}),
    ],
)
def test_a_time_word_that_provably_stays_text_is_cacheable(
    schema: Schema, sql: str, params: Params, expected: set[str]
) -> None:
    assert tags_of(schema, sql, params) == expected


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (COUNT + "day = '2024-01-01'", None),
        (COUNT + "at > '2024-01-01 10:00+00'", None),
        (COUNT + "during && '[2024-01-01,infinity)'", None),
        (COUNT + "during && %s", ("[epoch,infinity)",)),
        (COUNT + "day < 'infinity' AND at > '-infinity' AND at > 'epoch'", None),
        (COUNT + "clock = 'allballs'", None),
        (COUNT + "stamps && '{epoch,infinity}'", None),
        (COUNT + "day = ANY(%s)", (["2024-01-01", "infinity"],)),
        ("SELECT 'snowfall', 'knowledge', 'nowhere', 'todays', 'tomorrows', 'nowadays'", None),
        ("SELECT %s, %s", ("Snow", b"knowhow")),
    ],
)
def test_constant_dates_and_words_that_only_contain_a_time_word_are_cacheable(
    schema: Schema, sql: str, params: Params
) -> None:
    assert tags_of(schema, sql, params) <= {"public.periods"}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT note::date FROM periods",
        "SELECT label::timestamptz FROM periods",
        "SELECT CAST(ci AS date) FROM periods",
        "SELECT (doc->>'due')::date FROM periods",
        "SELECT date(note) FROM periods",
        "SELECT upper(note)::tstzrange FROM periods",
        "SELECT ARRAY[note]::date[] FROM periods",
        "SELECT coalesce(note, '2024-01-01')::date FROM periods",
        "SELECT CASE WHEN id = 1 THEN note END::date FROM periods",
        "SELECT note::span FROM periods",
        "SELECT max(note)::date FROM periods",
        "SELECT ('n' || 'ow')::date",
        "SELECT substr('snow', 2)::date",
        "SELECT convert_from('\\x6e6f77', 'UTF8')::date",
        "SELECT (SELECT note FROM periods LIMIT 1)::date",
        "SELECT d::date FROM (SELECT at AS d FROM periods) s",
        "SELECT jsonb_populate_record(NULL::span, doc) FROM periods",
        "SELECT * FROM periods, jsonb_to_record(doc) AS r(d date)",
        "SELECT * FROM periods, ROWS FROM (jsonb_to_recordset(doc) AS (d date[])) r",
        "SELECT JSON_VALUE(doc, '$.d' RETURNING date) FROM periods",
        "SELECT * FROM periods, JSON_TABLE(doc, '$' COLUMNS (d date PATH '$.d')) j",
        "SELECT * FROM periods, JSON_TABLE('{}', '$' COLUMNS (d date PATH '$.d' "
        "DEFAULT note ON EMPTY)) j",
        "SELECT JSON_VALUE('{}', '$.d' PASSING note AS x RETURNING date) FROM periods",
        "SELECT * FROM periods, XMLTABLE('/a' PASSING '<a/>' COLUMNS d date PATH 'd' "
        "DEFAULT note) x",
    ],
)
def test_text_the_query_computes_is_not_read_as_a_date_or_time(schema: Schema, sql: str) -> None:
    """A table's text, or text built from pieces, may hold a time word no literal shows:
    its conversion to a type whose input reads the clock is refused."""
    assert "may name the current time" in refusal(schema, sql)


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT at::date, day::timestamptz, CAST(at AS date), date(at) FROM periods", None),
        ("SELECT date_trunc('day', at)::date, (at AT TIME ZONE 'UTC')::date FROM periods", None),
        ("SELECT coalesce(at, '2024-01-01')::date, (day + 1)::timestamp FROM periods", None),
        ("SELECT note::int, note::interval, (doc->>'n')::numeric FROM periods", None),
        ("SELECT jsonb_populate_record(NULL::shapes, doc) FROM periods", None),
        ('SELECT jsonb_populate_record(NULL::span, \'{"starts": "2024-01-01"}\')', None),
        ("SELECT * FROM jsonb_to_record(%s) AS r(d date)", (Jsonb({"d": "2024-01-01"}),)),
        ("SELECT JSON_VALUE(doc, '$.d') FROM periods", None),
        ("SELECT '2024-01-01'::text::date, %s::date", ("2024-01-02",)),
        ("SELECT max(at)::date, min(lower(during))::date FROM periods", None),
    ],
)
def test_values_that_are_no_text_or_constant_text_may_be_read_as_dates(
    schema: Schema, sql: str, params: Params
) -> None:
    assert tags_of(schema, sql, params) <= {"public.periods", "public.shapes"}


# -- type references -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        ("SELECT json_populate_record(NULL::shapes, '{\"id\": 1}')", None, {"public.shapes"}),
        ("SELECT jsonb_populate_recordset(NULL::shapes, %s)", (Jsonb([]),), {"public.shapes"}),
        ("SELECT ROW(1, 'x')::shapes", None, {"public.shapes"}),
        ("SELECT %s::shapes", ((1, "x"),), {"public.shapes"}),
        ("SELECT '(1,x)'::shapes", None, {"public.shapes"}),
        ("SELECT shapes '(1,x)'", None, {"public.shapes"}),
        ("SELECT CAST(NULL AS public.shapes)", None, {"public.shapes"}),
        ("SELECT '{}'::shapes[]", None, {"public.shapes"}),
        ("SELECT NULL::_shapes", None, {"public.shapes"}),
        ("SELECT NULL::shape_list", None, {"public.shapes"}),
        ("SELECT ARRAY[ROW(1, 'x')::shapes]", None, {"public.shapes"}),
        ("SELECT * FROM json_to_record('{}') AS r(s shapes)", None, {"public.shapes"}),
        ("SELECT * FROM jsonb_to_recordset('[]') AS r(s shapes[])", None, {"public.shapes"}),
        ("SELECT NULL::wrapper", None, {"public.shapes"}),
        ("SELECT pg_typeof(NULL::shapes)", None, {"public.shapes"}),
        ("SELECT NULL::other.shapes", None, {"other.shapes"}),
        ("SELECT NULL::shape_names", None, {"public.shape_names"}),
        ("SELECT NULL::shape_count", None, {"public.shape_count"}),
        ("SELECT NULL::scratch", None, {"public.scratch"}),
        ("SELECT NULL::span, NULL::stamp_range, NULL::int[]", None, set()),
        (
            "SELECT * FROM holders WHERE id = 1",
            None,
            {"public.holders:id=1", "public.shapes"},
        ),
    ],
)
def test_a_row_type_named_without_reading_its_table_carries_its_wildcard(
    schema: Schema, sql: str, params: Params, expected: set[str]
) -> None:
    assert tags_of(schema, sql, params) == expected


def test_a_function_returning_a_row_type_carries_its_wildcard(schema: Schema) -> None:
    safe = ["all_shapes", "no_wrapper"]
    assert tags_of(schema, "SELECT all_shapes()", safe_functions=safe) == {"public.shapes"}
    assert tags_of(schema, "SELECT * FROM all_shapes()", safe_functions=safe) == {"public.shapes"}
    assert tags_of(schema, "SELECT no_wrapper()", safe_functions=safe) == {"public.shapes"}


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT NULL::pg_class", "pg_catalog.pg_class"),
        ("SELECT NULL::nonesuch", "unknown relation or type nonesuch"),
        ("SELECT NULL::counter", "unknown relation or type counter"),
    ],
)
def test_row_types_no_ddl_notice_names_are_refused(
    schema: Schema, sql: str, construct: str
) -> None:
    assert construct in refusal(schema, sql)


def test_a_type_name_carries_the_wildcards_of_relations_that_would_hide_it(
    postgres: EmbeddedPostgres, schema: Schema
) -> None:
    """A table created in a schema before the type's on the search path would take its name
    (its row type comes first), and the notice of that CREATE names the new table only."""
    with psycopg.connect(postgres.dsn_for("sql_literals"), autocommit=True) as conn:
        conn.execute("SET search_path = other, public")
        behind = Schema.load(conn)
    assert tags_of(behind, "SELECT NULL::span") == {"other.span"}
    assert tags_of(behind, "SELECT NULL::public.span") == set()
    assert tags_of(behind, "SELECT 'span'::regtype") == {"other.span"}
    assert tags_of(behind, "SELECT NULL::wrapper") == {"other.wrapper", "public.shapes"}
    assert tags_of(behind, "SELECT NULL::shapes") == {"other.shapes"}
    assert tags_of(behind, "SELECT NULL::int") == set()


# -- object identifiers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        ("SELECT 'shapes'::regclass::oid", None, {"public.shapes"}),
        ("SELECT 'public.shapes'::regclass", None, {"public.shapes"}),
        ("SELECT ' \"shapes\" '::regclass", None, {"public.shapes"}),
        ("SELECT 'SHAPES'::regclass", None, {"public.shapes"}),
        ("SELECT 'other . Shapes'::regclass", None, {"other.shapes"}),
        ("SELECT CAST('shapes' AS regclass)", None, {"public.shapes"}),
        ("SELECT regclass 'shapes'", None, {"public.shapes"}),
        ("SELECT %s::regclass", ("shapes",), {"public.shapes"}),
        ("SELECT %(r)s::regclass::oid", {"r": "other.shapes"}, {"other.shapes"}),
        (
            "SELECT 'shape_names'::regclass, 'shape_count'::regclass",
            None,
            {"public.shape_names", "public.shape_count"},
        ),
        ("SELECT * FROM shapes WHERE tableoid = 'shapes'::regclass", None, {"public.shapes"}),
        ("SELECT NULL::regclass, %s::regclass", (None,), set()),
        ("SELECT 'shapes'::regtype", None, {"public.shapes"}),
        ("SELECT 'shapes[]'::regtype", None, {"public.shapes"}),
        ("SELECT 'public._shapes'::regtype", None, {"public.shapes"}),
        ("SELECT 'wrapper'::regtype", None, {"public.shapes"}),
        ("SELECT %s::regtype", ("shapes",), {"public.shapes"}),
        ("SELECT 'integer'::regtype, 'character varying(3)'::regtype", None, set()),
        ("SELECT 'span'::regtype, 'double precision[]'::regtype", None, set()),
        (
            "SELECT 'english'::regconfig, 'lower(text)'::regprocedure, 'lower'::regproc, "
            "'public'::regnamespace, '\"C\"'::regcollation, '||/'::regoper, "
            "'simple'::regdictionary, '+(int,int)'::regoperator",
            None,
            set(),
        ),
        ("SELECT to_tsvector('english', note) FROM periods", None, {"public.periods"}),
        ("SELECT fn, fn::oid::regproc FROM function_refs", None, {"public.function_refs"}),
    ],
)
def test_object_identifier_literals_carry_the_wildcard_of_the_relation_they_name(
    schema: Schema, sql: str, params: Params, expected: set[str]
) -> None:
    assert tags_of(schema, sql, params) == expected


@pytest.mark.parametrize(
    ("sql", "params", "construct"),
    [
        ("SELECT tableoid::regclass FROM shapes", None, "regclass"),
        ("SELECT id::regclass FROM shapes", None, "regclass"),
        ("SELECT id::regtype FROM shapes", None, "regtype"),
        ("SELECT 'shapes'::text::regclass", None, "regclass"),
        ("SELECT ('sha' || 'pes')::regclass", None, "regclass"),
        ("SELECT regclass('shapes')", None, "regclass()"),
        ("SELECT regclassin('shapes')", None, "regclassin()"),
        ("SELECT to_regclass('shapes')", None, "to_regclass()"),
        ("SELECT 'counter'::regclass", None, "sequence public.counter"),
        ("SELECT 'shapes_pkey'::regclass", None, "unknown relation shapes_pkey"),
        ("SELECT 'nonesuch'::regclass", None, "unknown relation nonesuch"),
        ("SELECT 'pg_class'::regclass", None, "pg_catalog.pg_class"),
        ("SELECT 'db.public.shapes'::regclass", None, "regclass"),
        ("SELECT '16385'::regclass", None, "regclass"),
        ("SELECT 16385::regclass", None, "regclass"),
        ("SELECT '{shapes}'::regclass[]", None, "regclass"),
        ("SELECT ARRAY['shapes']::regclass[]", None, "regclass"),
        ("SELECT %s::regclass", (16385,), "regclass"),
        ("SELECT %s::regclass", ("nonesuch",), "unknown relation nonesuch"),
        ("SELECT 'nonesuch'::regtype", None, "unknown relation or type nonesuch"),
        ("SELECT 'int; x'::regtype", None, "regtype"),
        ("SELECT 'postgres'::regrole", None, "regrole"),
        ("SELECT %s::regrole::oid", ("postgres",), "regrole"),
        ("SELECT * FROM refs", None, "public.refs"),
        ("SELECT id FROM type_refs", None, "public.type_refs"),
        ("SELECT count(*) FROM role_refs", None, "public.role_refs"),
    ],
)
def test_object_identifiers_resolved_at_run_time_or_by_role_are_refused(
    schema: Schema, sql: str, params: Params, construct: str
) -> None:
    assert construct in refusal(schema, sql, params)


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        (
            "SELECT CASE WHEN true THEN 'shapes'::regclass ELSE 'holders' END",
            None,
            {"public.shapes", "public.holders"},
        ),
        (
            "SELECT coalesce(%s::regclass, %s)::oid",
            ("shapes", "other.shapes"),
            {"public.shapes", "other.shapes"},
        ),
        ("SELECT ARRAY[NULL::regtype, 'wrapper']", None, {"public.shapes"}),
        ("SELECT 'shapes'::regclass, 'not a name', %s", ("x.y.z",), {"public.shapes"}),
    ],
)
def test_any_literal_of_a_query_with_an_object_identifier_may_name_a_relation(
    schema: Schema, sql: str, params: Params, expected: set[str]
) -> None:
    """PostgreSQL coerces an untyped literal to the type of its neighbours (``CASE``,
    ``COALESCE``, ``ARRAY``, ``UNION``): with a ``regclass`` anywhere, any literal may be
    looked up as a relation's name."""
    assert tags_of(schema, sql, params) == expected


def test_a_numeric_literal_beside_an_object_identifier_is_refused(schema: Schema) -> None:
    sql = "SELECT CASE WHEN true THEN 'shapes'::regclass ELSE '16385' END"
    assert "OID" in refusal(schema, sql)


def test_backslashes_without_standard_conforming_strings_are_refused(
    postgres: EmbeddedPostgres, schema: Schema
) -> None:
    """With ``standard_conforming_strings`` off, ``'\\x6eow'`` is ``now`` to PostgreSQL but
    not to the parser the analysis uses."""
    with psycopg.connect(postgres.dsn_for("sql_literals"), autocommit=True) as conn:
        conn.execute("SET standard_conforming_strings = off")
        legacy = Schema.load(conn)
    assert "backslash" in refusal(legacy, "SELECT '[\\x6eow,)'::tstzrange")
    assert tags_of(legacy, "SELECT '[epoch,)'::tstzrange") == set()


def test_temporary_relations_are_refused_by_row_type_and_by_name(
    postgres: EmbeddedPostgres, schema: Schema
) -> None:
    with psycopg.connect(postgres.dsn_for("sql_literals"), autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE mine (id int PRIMARY KEY)")
        mine = Schema.load(conn)
        assert "temporary table" in refusal(mine, "SELECT 'mine'::regclass")
        assert "mine" in refusal(mine, "SELECT NULL::mine")
