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

from cached_reads import cached, reread
from library_fixtures import LibraryStack
from postgres_fixtures import ICU_PG_BIN
from txcache.stack import EmbeddedPostgres

SCHEMA = """
CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE people (id integer PRIMARY KEY, name text COLLATE ci NOT NULL);
CREATE INDEX ON people (name);
CREATE TABLE names (id integer PRIMARY KEY, name text COLLATE "und-x-icu" NOT NULL);
CREATE INDEX ON names (name);
INSERT INTO people VALUES (1, 'ABC'), (2, 'xyz');
INSERT INTO names VALUES (1, 'ABC'), (2, 'xyz');
"""


@pytest.fixture
def lib(icu_database: str) -> Iterator[LibraryStack]:
    """The library stack on a database of the ICU server, with ``people`` (names in the
    case-insensitive collation ``ci``) and ``names`` (the deterministic ``und-x-icu``), both
    indexed on ``name`` so that the agent tags their writes by name."""
    with psycopg.connect(icu_database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    with LibraryStack(icu_database) as stack:
        yield stack


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
    token = lib.commit("UPDATE people SET name = 'ABD' WHERE id = 1")
    assert reread(lib, query, token, "abc") == ([], True), "the update did not invalidate"
    assert cached(lib, query, "abc") == []
    token = lib.commit("INSERT INTO people VALUES (3, 'Abc')")
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
    token = lib.commit("UPDATE names SET name = 'ABD' WHERE id = 1")
    assert reread(lib, query, token, "abc") == ([], False), "a fine tag should have kept it"
    assert reread(lib, explicit, token, "abc") == ([], True), "COLLATE ci was not invalidated"
    token = lib.commit("INSERT INTO names VALUES (3, 'abc')")
    assert reread(lib, query, token, "abc") == ([(3, "abc")], True)


def test_a_collation_change_invalidates_and_is_read_by_the_library(lib: LibraryStack) -> None:
    """``ALTER COLUMN … TYPE text COLLATE ci`` changes what ``name = 'abc'`` reads: the DDL
    invalidates the table, and the library, having re-read its catalog, tags the new result
    with the wildcard, so that a write of the row named ``'ABC'`` invalidates it too."""
    query = "SELECT id, name FROM names WHERE name = %s ORDER BY id"
    assert cached(lib, query, "abc") == []
    token = lib.commit("ALTER TABLE names ALTER COLUMN name TYPE text COLLATE ci")
    assert reread(lib, query, token, "abc") == ([(1, "ABC")], True), "the DDL did not invalidate"
    assert cached(lib, query, "abc") == [(1, "ABC")]
    token = lib.commit("UPDATE names SET name = 'ABD' WHERE id = 1")
    assert reread(lib, query, token, "abc") == ([], True), "tagged as if still deterministic"
