"""What a query names without reading a table, against the real stack (PostgreSQL, setup,
two nodes, the agent, the library): a cached result that names a relation through its row
type or a ``regclass`` literal is invalidated by the relation's DDL, and a result that names
the current time through a range literal — which drifts with no commit at all — is never
cached (docs/sql-tags.md).

Each invalidation test caches a result (a second read is a hit), changes the schema through
a read/write transaction and reads again with ``not_before`` the change's commit: the
function must run again and return what the database returns now.
"""

from __future__ import annotations

import pytest

import txcache
from cached_reads import assert_invalidated, cached, read
from library_fixtures import LibraryStack
from txcache.stack import wait_until


def test_adding_a_column_invalidates_a_row_type_named_in_a_cast(lib: LibraryStack) -> None:
    lib.write("CREATE TABLE shapes (id integer PRIMARY KEY, name text)")
    query = "SELECT json_populate_record(NULL::shapes, '{\"id\": 1}')::text"
    assert cached(lib, query) == [("(1,)",)]
    token = lib.commit("ALTER TABLE shapes ADD COLUMN extra integer")
    assert assert_invalidated(lib, query, token) == [("(1,,)",)]


def test_a_column_type_change_invalidates_a_row_type_named_by_a_parameter_cast(
    lib: LibraryStack,
) -> None:
    lib.write("CREATE TABLE shapes (id integer PRIMARY KEY, name text)")
    query = "SELECT %s::shapes::text"
    assert cached(lib, query, (1, "5")) == [("(1,5)",)]
    token = lib.commit("ALTER TABLE shapes ALTER COLUMN name TYPE numeric(4, 2) USING 0")
    assert assert_invalidated(lib, query, token, (1, "5")) == [("(1,5.00)",)]


def test_adding_a_column_invalidates_reads_of_a_table_holding_its_row_type(
    lib: LibraryStack,
) -> None:
    """``ALTER TABLE shapes ADD COLUMN`` changes the text of every ``holders.shape`` value,
    yet its DDL notice names ``shapes`` only."""
    lib.write(
        "CREATE TABLE shapes (id integer PRIMARY KEY, name text);"
        "CREATE TABLE holders (id integer PRIMARY KEY, shape shapes);"
        "INSERT INTO holders VALUES (1, ROW(1, 'x'))"
    )
    query = "SELECT shape::text FROM holders WHERE id = 1"
    assert cached(lib, query) == [("(1,x)",)]
    token = lib.commit("ALTER TABLE shapes ADD COLUMN extra integer")
    assert assert_invalidated(lib, query, token) == [("(1,x,)",)]


def test_a_regclass_literal_is_invalidated_when_its_table_is_dropped_and_created(
    lib: LibraryStack,
) -> None:
    lib.write("CREATE TABLE shapes (id integer PRIMARY KEY)")
    query = "SELECT 'shapes'::regclass::oid::bigint"
    before = cached(lib, query)
    token = lib.commit("DROP TABLE shapes", "CREATE TABLE shapes (id integer PRIMARY KEY)")
    assert assert_invalidated(lib, query, token) != before


def test_a_regclass_parameter_is_invalidated_when_its_table_is_renamed(lib: LibraryStack) -> None:
    lib.write(
        "CREATE TABLE shapes (id integer PRIMARY KEY); CREATE TABLE forms (id integer PRIMARY KEY)"
    )
    query = "SELECT %s::regclass::oid::bigint"
    before = cached(lib, query, "forms")
    token = lib.commit(
        "ALTER TABLE forms RENAME TO old_forms", "ALTER TABLE shapes RENAME TO forms"
    )
    assert assert_invalidated(lib, query, token, "forms") != before


def test_a_range_literal_naming_now_drifts_without_a_commit_and_is_refused(
    lib: LibraryStack,
) -> None:
    """The count changes as the clock passes the range's end, with nothing committed: no
    invalidation could ever end a cached value of it."""
    lib.write(
        "CREATE TABLE periods (id integer PRIMARY KEY, during tstzrange);"
        "INSERT INTO periods VALUES (1, tstzrange(NULL, now() + interval '1 second'))"
    )
    query = "SELECT count(*) FROM periods WHERE during && '[now,infinity)'"

    def count() -> int:
        # Unprepared: a prepared statement keeps the time its literal was first read as.
        row = lib.admin.execute(query, prepare=False).fetchone()
        assert row is not None
        return int(row[0])

    assert count() == 1
    wait_until(lambda: count() == 0, "the range to end", timeout=10)
    with pytest.raises(txcache.UncacheableQuery, match="names the current time"):
        read(lib, query)


def test_a_table_text_read_as_a_time_drifts_without_a_commit_and_is_refused(
    lib: LibraryStack,
) -> None:
    """No literal names the time here: the row does."""
    lib.write(
        "CREATE TABLE notes (id integer PRIMARY KEY, note text);INSERT INTO notes VALUES (1, 'now')"
    )
    query = "SELECT note::timestamptz FROM notes WHERE id = 1"
    first = lib.admin.execute(query, prepare=False).fetchone()
    wait_until(
        lambda: lib.admin.execute(query, prepare=False).fetchone() != first,
        "the row's time to move",
        timeout=10,
    )
    with pytest.raises(txcache.UncacheableQuery, match="may name the current time"):
        read(lib, query)
