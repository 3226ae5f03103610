"""Cached reads stay sound whatever a table's replica identity, against the real stack.

Under REPLICA IDENTITY FULL the agent sees every old value; under DEFAULT it sees only the
key, and only when the key changed; a partition keeps its own identity while the stream
describes its rows by its root's. Each test caches a read tagged with a fine tag of a
column whose old value the stream does not carry, changes that column, and requires the
next read to run again (docs/agent.md, "Replica identity"); where the agent does know the
values exactly, a change elsewhere in the table leaves the read cached.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from cached_reads import assert_invalidated, cached, reread
from library_fixtures import LibraryStack

TABLES = """
CREATE TABLE gadgets (id int PRIMARY KEY, kind int NOT NULL, price int NOT NULL,
                      doubled int GENERATED ALWAYS AS (price * 2) VIRTUAL);
CREATE INDEX ON gadgets (kind);
INSERT INTO gadgets (id, kind, price) SELECT i, mod(i, 3), i FROM generate_series(1, 9) i;
CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL,
                    shout text GENERATED ALWAYS AS (upper(body)) VIRTUAL);
INSERT INTO notes (id, body) VALUES (1, 'one'), (2, 'two');
CREATE TABLE events (k int PRIMARY KEY, kind int, note text) PARTITION BY RANGE (k);
CREATE INDEX ON events (kind);
CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (100);
INSERT INTO events SELECT i, mod(i, 3), 'n' FROM generate_series(1, 9) i;
CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL, price int NOT NULL,
                     total int GENERATED ALWAYS AS (qty * price) STORED);
CREATE INDEX ON orders (total);
INSERT INTO orders (id, qty, price) VALUES (1, 2, 10), (2, 4, 5), (3, 1, 7);
"""


@pytest.fixture
def lib(database: str) -> Iterator[LibraryStack]:
    """The library stack, with the tables above created before setup ran (a table created
    while the library runs is read with coarser tags at first, which would hide whether the
    agent's are fine)."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(TABLES)
    with LibraryStack(database) as stack:
        yield stack


def identity(lib: LibraryStack, table: str) -> str:
    row = lib.admin.execute(
        "SELECT relreplident::text FROM pg_class WHERE oid = %s::regclass", (table,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_an_update_of_a_non_key_tag_column_invalidates_under_default_identity(
    lib: LibraryStack,
) -> None:
    """PostgreSQL 18 refuses UPDATE under FULL on a table with a virtual generated column:
    setup leaves it DEFAULT, and an update that keeps the key sends no old row."""
    assert identity(lib, "gadgets") == "d"
    query = "SELECT id FROM gadgets WHERE kind = %s ORDER BY id"
    assert cached(lib, query, 1) == [(1,), (4,), (7,)]
    token = lib.commit("UPDATE gadgets SET kind = 2 WHERE id = 4")  # its old kind unknown
    assert assert_invalidated(lib, query, token, 1) == [(1,), (7,)]
    cached(lib, query, 1)
    token = lib.commit("DELETE FROM gadgets WHERE id = 7")  # only the old key is sent
    assert assert_invalidated(lib, query, token, 1) == [(1,)]


def test_a_key_known_unchanged_keeps_fine_tags_under_default_identity(lib: LibraryStack) -> None:
    """Where every tag column is in the key, an update without an old row left them as
    they were: the agent tags its key alone, and other rows' reads stay cached."""
    query = "SELECT body FROM notes WHERE id = %s"
    assert cached(lib, query, 1) == [("one",)]
    token = lib.commit("UPDATE notes SET body = 'deux' WHERE id = 2")
    assert reread(lib, query, token, 1) == ([("one",)], False)
    token = lib.commit("UPDATE notes SET body = 'uno' WHERE id = 1")
    assert assert_invalidated(lib, query, token, 1) == [("uno",)]


def test_a_partition_with_default_identity_under_a_full_root_invalidates_soundly(
    lib: LibraryStack,
) -> None:
    """The stream marks the partition's old rows whole by its root's identity, but they
    carry only the key: their NULLs are unknown values, not NULLs. The agent's log names the
    partition."""
    lib.write("ALTER TABLE events_low REPLICA IDENTITY DEFAULT")  # kept, with a warning
    assert (identity(lib, "events"), identity(lib, "events_low")) == ("f", "d")
    query = "SELECT k FROM events WHERE kind = %s ORDER BY k"
    assert cached(lib, query, 1) == [(1,), (4,), (7,)]
    token = lib.commit("UPDATE events SET k = 40, kind = 2 WHERE k = 4")  # key changed
    assert assert_invalidated(lib, query, token, 1) == [(1,), (7,)]
    assert lib.agent is not None
    logged = "without REPLICA IDENTITY FULL: where the stream does not send the old value"
    lib.agent.wait_for_log(f"{logged} of a tag column")
    lib.agent.wait_for_log('table=public.events_low replica_identity="DEFAULT"')
    cached(lib, query, 1)
    token = lib.commit("DELETE FROM events WHERE k = 7")
    assert assert_invalidated(lib, query, token, 1) == [(1,)]


def test_a_stored_generated_tag_column_is_published_and_tagged_finely(lib: LibraryStack) -> None:
    """The publication publishes stored generated columns (PostgreSQL 18): their old and
    new values reach the agent, so a change of another row leaves the read cached."""
    assert identity(lib, "orders") == "f"
    query = "SELECT id FROM orders WHERE total = %s ORDER BY id"
    assert cached(lib, query, 20) == [(1,), (2,)]
    token = lib.commit("UPDATE orders SET qty = 2 WHERE id = 3")  # total 7 -> 14
    assert reread(lib, query, token, 20) == ([(1,), (2,)], False)
    token = lib.commit("UPDATE orders SET qty = 3 WHERE id = 2")  # total 20 -> 15
    assert assert_invalidated(lib, query, token, 20) == [(1,)]
