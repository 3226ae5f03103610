"""Privileges end cached results, against the real stack: results are cached per role, so a
``REVOKE`` must stop what a role cached from being served to it (docs/setup.md, "DDL
messages": ``GRANT`` and ``REVOKE`` invalidate everything, since the event trigger is not
told which objects they changed).

Each test caches a read as a role allowed to make it (the last read a hit), revokes a
privilege the read needs, and reads again at pins no older than the revocation: every read
must fail as it does on the database, not return the cached rows. (The first read after any
DDL re-reads the library's catalog and runs the function anyway; the second would hit.)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import txcache
from cached_reads import Rows, rows_of, runs
from library_fixtures import LibraryStack

_role_numbers = itertools.count(1)


@dataclass
class Reader:
    """A login role, and a cache of the stack connected as it."""

    role: str
    cache: txcache.Cache

    def read(self, statement: str, not_before: int | None = None) -> Rows:
        with self.cache.read_only(staleness=60, not_before=not_before):
            return rows_of(statement)


@pytest.fixture
def lib(database: str) -> Iterator[LibraryStack]:
    with LibraryStack(database) as stack:
        yield stack


@pytest.fixture
def reader(lib: LibraryStack) -> Iterator[Reader]:
    """A new login role with ``SELECT`` on ``items`` (dropped afterwards)."""
    role = f"reader_{lib.admin.info.backend_pid}_{next(_role_numbers)}"
    lib.write(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)).as_string(lib.admin))
    lib.write(f'GRANT SELECT ON items TO "{role}"')
    cache = lib.connect(dsn=make_conninfo(lib.dsn, user=role), refresh_interval=0.05)
    try:
        yield Reader(role, cache)
    finally:
        cache.close()
        lib.write(f'DROP OWNED BY "{role}"')
        lib.write(f'DROP ROLE "{role}"')


def assert_refused(lib: LibraryStack, reader: Reader, statement: str, token: int) -> None:
    """Every read of ``statement`` at a pin no older than ``token`` fails for lack of a
    privilege: none is served from the cache."""
    for _ in range(2):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.read(statement, not_before=token)
        lib.caught_up()
        lib.fresh_pins()


def cached_as(lib: LibraryStack, reader: Reader, statement: str) -> Rows:
    """Read ``statement`` as ``reader`` until a read is a hit; its rows."""
    lib.caught_up()
    lib.fresh_pins()
    first = reader.read(statement)
    lib.caught_up()
    lib.fresh_pins()
    assert reader.read(statement) == first
    runs.clear()
    assert reader.read(statement) == first
    assert runs == [], "the last read should have been a hit"
    return first


def test_a_table_revoked_from_a_role_is_no_longer_served_to_it(
    lib: LibraryStack, reader: Reader
) -> None:
    statement = "SELECT name FROM items WHERE id = 3"
    assert cached_as(lib, reader, statement) == [("item 3",)]
    token = lib.commit(f'REVOKE SELECT ON items FROM "{reader.role}"')
    assert_refused(lib, reader, statement, token)


def test_a_column_revoked_from_a_role_is_no_longer_served_to_it(
    lib: LibraryStack, reader: Reader
) -> None:
    lib.write(f'REVOKE SELECT ON items FROM "{reader.role}"')
    lib.write(f'GRANT SELECT (id, name) ON items TO "{reader.role}"')
    statement = "SELECT id, name FROM items WHERE id = 4"
    assert cached_as(lib, reader, statement) == [(4, "item 4")]
    token = lib.commit(f'REVOKE SELECT (name) ON items FROM "{reader.role}"')
    assert_refused(lib, reader, statement, token)


def test_usage_on_the_schema_revoked_is_no_longer_served(lib: LibraryStack, reader: Reader) -> None:
    statement = "SELECT name FROM public.items WHERE id = 5"
    assert cached_as(lib, reader, statement) == [("item 5",)]
    token = lib.commit("REVOKE USAGE ON SCHEMA public FROM PUBLIC")
    assert_refused(lib, reader, statement, token)
