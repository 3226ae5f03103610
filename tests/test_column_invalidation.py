"""An update invalidates only the cached results that read a column it changed, against the
real stack (docs/sql-tags.md, "Columns").

Each test caches a read, commits a write, and reads again at a pin no older than the write:
a write that changed a column the read uses must make the function run again; one that
changed only other columns (the auction's bid count under a category listing, say) must
leave the read a hit. Where the agent cannot know which columns an update changed — no old
row under REPLICA IDENTITY DEFAULT — it invalidates as if every column had changed.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from cached_reads import assert_invalidated, cached, reread
from library_fixtures import LibraryStack

TABLES = """
CREATE TABLE lots (id int PRIMARY KEY, category int NOT NULL, name text NOT NULL,
                    bids int NOT NULL DEFAULT 0, max_bid float8 NOT NULL DEFAULT 0,
                    doc text NOT NULL DEFAULT '');
CREATE INDEX ON lots (category);
INSERT INTO lots (id, category, name) SELECT i, mod(i, 3), 'item ' || i
FROM generate_series(1, 9) i;
CREATE TABLE lot_bids (id int PRIMARY KEY, item_id int NOT NULL, user_id int NOT NULL);
CREATE INDEX ON lot_bids (user_id);
INSERT INTO lot_bids VALUES (1, 1, 7), (2, 4, 7), (3, 2, 8);
CREATE TABLE memos (id int PRIMARY KEY, body text NOT NULL, stars int NOT NULL);
INSERT INTO memos VALUES (1, 'one', 0), (2, 'two', 0);
"""

LISTING = "SELECT id FROM lots WHERE category = %s ORDER BY id"


@pytest.fixture
def lib(database: str) -> Iterator[LibraryStack]:
    """The library stack over the tables above, created before setup ran (setup gives them
    REPLICA IDENTITY FULL: the agent sees every old row)."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(TABLES)
    with LibraryStack(database) as stack:
        yield stack


def test_an_update_of_columns_a_read_never_used_leaves_it_cached(lib: LibraryStack) -> None:
    assert cached(lib, LISTING, 1) == [(1,), (4,), (7,)]
    token = lib.commit("UPDATE lots SET bids = bids + 1, max_bid = 12.5 WHERE id = 4")
    assert reread(lib, LISTING, token, 1) == ([(1,), (4,), (7,)], False)
    token = lib.commit("UPDATE lots SET category = 2 WHERE id = 4")
    assert assert_invalidated(lib, LISTING, token, 1) == [(1,), (7,)]
    cached(lib, LISTING, 1)
    token = lib.commit("INSERT INTO lots (id, category, name) VALUES (10, 1, 'new')")
    assert assert_invalidated(lib, LISTING, token, 1) == [(1,), (7,), (10,)]


def test_an_update_of_a_column_a_read_used_invalidates_it(lib: LibraryStack) -> None:
    query = "SELECT name, bids FROM lots WHERE id = %s"
    assert cached(lib, query, 5) == [("item 5", 0)]
    token = lib.commit("UPDATE lots SET doc = 'about item 5' WHERE id = 5")
    assert reread(lib, query, token, 5) == ([("item 5", 0)], False)
    token = lib.commit("UPDATE lots SET bids = 1 WHERE id = 5")
    assert assert_invalidated(lib, query, token, 5) == [("item 5", 1)]


def test_a_join_through_a_wildcard_keeps_its_columns(lib: LibraryStack) -> None:
    """The lots side of this join is read whole-table (no equality on a value), yet only
    through ``id`` and ``category``: bids on any item leave it cached."""
    query = (
        "SELECT b.item_id FROM lot_bids b JOIN lots i ON i.id = b.item_id "
        "WHERE b.user_id = %s AND i.category = 1 ORDER BY b.item_id"
    )
    assert cached(lib, query, 7) == [(1,), (4,)]
    token = lib.commit("UPDATE lots SET bids = bids + 1 WHERE id IN (1, 2, 3)")
    assert reread(lib, query, token, 7) == ([(1,), (4,)], False)
    token = lib.commit("UPDATE lots SET category = 0 WHERE id = 4")
    assert assert_invalidated(lib, query, token, 7) == [(1,)]


def test_an_update_that_changes_no_value_invalidates_only_whole_row_reads(
    lib: LibraryStack,
) -> None:
    named = "SELECT name FROM lots WHERE id = %s"
    whole = "SELECT i FROM lots i WHERE id = %s"
    assert cached(lib, named, 2) == [("item 2",)]
    cached(lib, whole, 2)
    token = lib.commit("UPDATE lots SET name = name WHERE id = 2")
    assert reread(lib, named, token, 2) == ([("item 2",)], False)
    assert_invalidated(lib, whole, token, 2)


def test_equal_texts_of_a_float_count_as_a_change(lib: LibraryStack) -> None:
    """``extra_float_digits`` may round a float's text, so equal texts prove nothing."""
    query = "SELECT max_bid FROM lots WHERE id = %s"
    assert cached(lib, query, 3) == [(0.0,)]
    token = lib.commit("UPDATE lots SET max_bid = max_bid WHERE id = 3")
    assert_invalidated(lib, query, token, 3)


def test_an_unchanged_toasted_value_is_unchanged(lib: LibraryStack) -> None:
    """The stream does not resend a TOASTed value an update kept: the column did not change."""
    lib.write("UPDATE lots SET doc = repeat(md5(id::text), 4000) WHERE id = 6")
    query = "SELECT length(doc) FROM lots WHERE id = %s"
    assert cached(lib, query, 6) == [(128000,)]
    token = lib.commit("UPDATE lots SET bids = 3 WHERE id = 6")
    assert reread(lib, query, token, 6) == ([(128000,)], False)
    token = lib.commit("UPDATE lots SET doc = 'short' WHERE id = 6")
    assert assert_invalidated(lib, query, token, 6) == [(5,)]


def test_without_the_old_row_an_update_changes_every_column(lib: LibraryStack) -> None:
    """Under REPLICA IDENTITY DEFAULT an update that keeps its key sends no old row: which
    columns it changed is unknown, so a read of other columns is invalidated too."""
    lib.write("ALTER TABLE memos REPLICA IDENTITY DEFAULT")
    query = "SELECT body FROM memos WHERE id = %s"
    assert cached(lib, query, 1) == [("one",)]
    token = lib.commit("UPDATE memos SET stars = stars + 1 WHERE id = 1")
    assert assert_invalidated(lib, query, token, 1) == [("one",)]
