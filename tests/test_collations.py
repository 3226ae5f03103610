"""Nondeterministic collations against the real stack, on a PostgreSQL built with ICU
(``icu_postgres``: Debian's postgresql-15; the embedded build has no ICU).

With a case-insensitive collation, ``name = 'abc'`` also reads the row whose name is
``'ABC'``, and the agent tags a write of that row ``name=ABC``: the read side must give such
an equality the table's wildcard, or the write would not invalidate the cached result. A
deterministic ICU collation keeps its fine tags, and a change of a column's collation
invalidates what was cached under the old one and makes the library read the new one.

Each test caches a result (a second read is a hit), writes through a read/write transaction,
waits until both nodes applied the write and the library knows a pin after it, and reads again
with ``not_before`` the write's commit.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import psycopg
import pytest

import txcache
from conftest import StartNode
from library_fixtures import LibraryStack, start_library_stack
from postgres_fixtures import ICU_PG_BIN
from txcache import EmbeddedPostgres

SCHEMA = """
CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE people (id integer PRIMARY KEY, name text COLLATE ci NOT NULL);
CREATE INDEX ON people (name);
CREATE TABLE names (id integer PRIMARY KEY, name text COLLATE "und-x-icu" NOT NULL);
CREATE INDEX ON names (name);
INSERT INTO people VALUES (1, 'ABC'), (2, 'xyz');
INSERT INTO names VALUES (1, 'ABC'), (2, 'xyz');
"""

runs: list[str] = []

Rows = list[tuple[object, ...]]


@txcache.cacheable
def rows_of(statement: str, *params: object) -> Rows:
    """The rows of ``statement``; each run (a miss) is recorded in ``runs``."""
    runs.append(statement)
    return [tuple(row) for row in txcache.query(statement, params)]


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    runs.clear()


@pytest.fixture
def lib(icu_database: str, start_node: StartNode) -> Iterator[LibraryStack]:
    """The library stack on a database of the ICU server, with ``people`` (names in the
    case-insensitive collation ``ci``) and ``names`` (the deterministic ``und-x-icu``), both
    indexed on ``name`` so that the agent tags their writes by name."""
    with psycopg.connect(icu_database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    yield from start_library_stack(icu_database, start_node)


def read(lib: LibraryStack, statement: str, *params: object, not_before: int | None = None) -> Rows:
    with lib.cache.read_only(staleness=60, not_before=not_before):
        return rows_of(statement, *params)


def truth(lib: LibraryStack, statement: str, *params: object) -> Rows:
    return [tuple(row) for row in lib.admin.execute(statement, params).fetchall()]


def cached(lib: LibraryStack, statement: str, *params: object) -> Rows:
    """Read ``statement`` through the cache until a second read is a hit."""
    lib.caught_up()
    lib.fresh_pins()
    first = read(lib, statement, *params)
    runs.clear()
    assert read(lib, statement, *params) == first
    assert runs == [], "the second read should have been a hit"
    return first


def change(lib: LibraryStack, statement: str) -> int:
    """Run ``statement`` in a read/write transaction; its commit timestamp once both nodes
    applied it and the library knows a pin after it."""
    with lib.cache.read_write() as tx:
        tx.execute(statement)
    token = tx.commit_timestamp
    assert token is not None
    lib.caught_up()
    lib.fresh_pins(after=token - 1)
    return token


def reread(lib: LibraryStack, statement: str, token: int, *params: object) -> tuple[Rows, bool]:
    """Read at a pin no older than ``token``: the rows (checked against the database) and
    whether the function ran again (a miss)."""
    runs.clear()
    got = read(lib, statement, *params, not_before=token)
    assert got == truth(lib, statement, *params)
    return got, runs == [statement]


def test_the_icu_server_runs_the_binaries_asked_for(icu_postgres: EmbeddedPostgres) -> None:
    """``EmbeddedPostgres(bin_dir=…)`` runs that build, not the embedded one."""
    assert icu_postgres.bin_dir == ICU_PG_BIN.absolute()
    version = subprocess.run(
        [str(ICU_PG_BIN / "postgres"), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()
    with psycopg.connect(icu_postgres.dsn) as conn:
        row = conn.execute("SELECT current_setting('server_version')").fetchone()
    assert row is not None
    assert row[0].split()[0] == version[2], f"{version} is not the server's {row[0]}"


def test_an_equality_matching_a_differently_cased_value_is_invalidated(lib: LibraryStack) -> None:
    """``name = 'abc'`` read the row named ``'ABC'``: renaming that row, or adding an
    ``'Abc'``, changes the result although neither write names ``abc``."""
    query = "SELECT id, name FROM people WHERE name = %s ORDER BY id"
    assert cached(lib, query, "abc") == [(1, "ABC")]
    token = change(lib, "UPDATE people SET name = 'ABD' WHERE id = 1")
    assert reread(lib, query, token, "abc") == ([], True), "the update did not invalidate"
    assert cached(lib, query, "abc") == []
    token = change(lib, "INSERT INTO people VALUES (3, 'Abc')")
    assert reread(lib, query, token, "abc") == ([(3, "Abc")], True), "the insert did not"


def test_a_deterministic_icu_column_keeps_its_fine_tags_unless_compared_collate_ci(
    lib: LibraryStack,
) -> None:
    """The control: under ``und-x-icu`` the same write leaves ``name = 'abc'`` cached (its
    fine tag ``name=abc`` matches neither ``ABC`` nor ``ABD``), and an ``'abc'`` ends it;
    but ``name = 'abc' COLLATE ci`` read ``'ABC'`` and must go with that write."""
    query = "SELECT id, name FROM names WHERE name = %s ORDER BY id"
    explicit = "SELECT id, name FROM names WHERE name = %s COLLATE ci ORDER BY id"
    assert cached(lib, query, "abc") == []
    assert cached(lib, explicit, "abc") == [(1, "ABC")]
    token = change(lib, "UPDATE names SET name = 'ABD' WHERE id = 1")
    assert reread(lib, query, token, "abc") == ([], False), "a fine tag should have kept it"
    assert reread(lib, explicit, token, "abc") == ([], True), "COLLATE ci was not invalidated"
    token = change(lib, "INSERT INTO names VALUES (3, 'abc')")
    assert reread(lib, query, token, "abc") == ([(3, "abc")], True)


def test_a_collation_change_invalidates_and_is_read_by_the_library(lib: LibraryStack) -> None:
    """``ALTER COLUMN … TYPE text COLLATE ci`` changes what ``name = 'abc'`` reads: the DDL
    invalidates the table, and the library, having re-read its catalog, tags the new result
    with the wildcard, so that a write of the row named ``'ABC'`` invalidates it too."""
    query = "SELECT id, name FROM names WHERE name = %s ORDER BY id"
    assert cached(lib, query, "abc") == []
    token = change(lib, "ALTER TABLE names ALTER COLUMN name TYPE text COLLATE ci")
    assert reread(lib, query, token, "abc") == ([(1, "ABC")], True), "the DDL did not invalidate"
    assert cached(lib, query, "abc") == [(1, "ABC")]
    token = change(lib, "UPDATE names SET name = 'ABD' WHERE id = 1")
    assert reread(lib, query, token, "abc") == ([], True), "tagged as if still deterministic"
