"""Schema changes against the real stack: every DDL that can change a cached result
invalidates it at the DDL's commit — views, partitions (also truncated or dropped directly),
functions, types, renames, row-level security, the publication, table rewrites — and an agent
restarted after a DDL it did not see still invalidates what the DDL made stale.

Each test caches a result (a second read is a hit), changes the schema through a read/write
transaction, waits until both nodes applied the change and the library knows a pin after it,
and reads again with ``not_before`` the DDL's commit: the function must run again and return
what the database returns now.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import txcache
import txcache._schema
from cached_reads import assert_invalidated, cached, read, rows_of, truth
from conftest import running_agent
from library_fixtures import AGENT_ARGS, FINGERPRINTS, LibraryStack, drop_event_triggers
from txcache._catalog_stamp import stamp_check, still_current
from txcache._schema import Catalog, Schema
from txcache.stack import parse_lsn, wait_until, wal_position


@pytest.fixture(params=["triggers", "fingerprint"])
def lib(database: str, request: pytest.FixtureRequest) -> Iterator[LibraryStack]:
    """The library stack, with ``twice`` declared safe for cacheable queries: with the DDL
    event triggers, and without them, its agent checking every pin's catalog fingerprint
    (``--ddl-tracking fingerprint``)."""
    fingerprints = request.param == "fingerprint"
    agent_args = FINGERPRINTS if fingerprints else AGENT_ARGS
    with LibraryStack(database, safe_functions=["twice"], agent_args=agent_args) as stack:
        if fingerprints:
            drop_event_triggers(stack)
            stack.fresh_pins()  # the library then knows the agent checks fingerprints
        yield stack


@pytest.fixture
def triggered(database: str) -> Iterator[LibraryStack]:
    """The library stack with the DDL event triggers, for what only they do."""
    with LibraryStack(database) as stack:
        yield stack


def test_a_redefined_view_invalidates_reads_through_it(lib: LibraryStack) -> None:
    lib.write("CREATE VIEW cheap AS SELECT id, name FROM items WHERE price < 50")
    query = "SELECT id FROM cheap ORDER BY id"
    before = cached(lib, query)
    token = lib.commit(
        "CREATE OR REPLACE VIEW cheap AS SELECT id, name FROM items WHERE price < 100"
    )
    assert assert_invalidated(lib, query, token) != before


def test_no_read_runs_at_a_pin_older_than_a_schema_change(lib: LibraryStack) -> None:
    """PostgreSQL's catalogs are not versioned by snapshot: a query at a pin older than a
    view's redefinition would run the new definition over the old data — a result no commit
    point ever had. Pins older than a schema change are no longer offered."""
    lib.write("CREATE VIEW cheap AS SELECT id FROM items WHERE price < 50")
    lib.caught_up()
    lib.fresh_pins()
    lib.write("UPDATE items SET price = 200 WHERE id = 8")  # counts under the new definition
    token = lib.commit("CREATE OR REPLACE VIEW cheap AS SELECT id FROM items WHERE price < 100")
    lib.cache.policy = txcache.oldest_pin
    with lib.cache.read_only(staleness=60) as tx:
        got = txcache.query("SELECT count(*) FROM cheap")
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= token, "the transaction ran at a pin older than the DDL"
    assert got == truth(lib, "SELECT count(*) FROM cheap")


def test_a_view_dropped_and_created_again_invalidates_reads_through_it(lib: LibraryStack) -> None:
    lib.write("CREATE VIEW named AS SELECT id, name FROM items")
    query = "SELECT name FROM named WHERE id = %s"
    cached(lib, query, 3)
    token = lib.commit(
        "DROP VIEW named", "CREATE VIEW named AS SELECT id, name || '!' AS name FROM users"
    )
    assert assert_invalidated(lib, query, token, 3) == [("user 3!",)]


def make_partitions(lib: LibraryStack) -> None:
    lib.write(
        "CREATE TABLE events (k integer NOT NULL, v integer NOT NULL) PARTITION BY RANGE (k);"
        "CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (10);"
        "CREATE TABLE events_high PARTITION OF events FOR VALUES FROM (10) TO (20);"
        "INSERT INTO events SELECT i, i FROM generate_series(0, 19) i"
    )


def test_a_partition_truncated_directly_invalidates_reads_of_its_root(lib: LibraryStack) -> None:
    make_partitions(lib)
    query = "SELECT count(*), sum(v) FROM events"
    assert cached(lib, query) == [(20, 190)]
    token = lib.commit("TRUNCATE events_low")
    assert assert_invalidated(lib, query, token) == [(10, 145)]


def test_a_partition_dropped_detached_or_attached_invalidates_reads_of_its_root(
    lib: LibraryStack,
) -> None:
    make_partitions(lib)
    query = "SELECT count(*) FROM events"
    cached(lib, query)
    token = lib.commit("ALTER TABLE events DETACH PARTITION events_high")
    assert assert_invalidated(lib, query, token) == [(10,)]
    cached(lib, query)
    token = lib.commit(
        "ALTER TABLE events ATTACH PARTITION events_high FOR VALUES FROM (10) TO (20)"
    )
    assert assert_invalidated(lib, query, token) == [(20,)]
    cached(lib, query)
    token = lib.commit("DROP TABLE events_low")
    assert assert_invalidated(lib, query, token) == [(10,)]


def test_a_detach_concurrently_cut_short_invalidates_reads_of_its_root(lib: LibraryStack) -> None:
    """Its first transaction commits the partition "detach pending", which reads of the root
    already leave out; cancelled while its second waits for an older snapshot, the command
    never ends, and no notice names what it touched."""
    make_partitions(lib)
    query = "SELECT count(*), sum(v) FROM events"
    assert cached(lib, query) == [(20, 190)]
    with psycopg.connect(lib.dsn) as holder, psycopg.connect(lib.dsn, autocommit=True) as ddl:
        holder.execute("SELECT 1 FROM events LIMIT 1")  # a snapshot the command waits for
        ddl.execute("SET statement_timeout = '2s'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            ddl.execute("ALTER TABLE events DETACH PARTITION events_high CONCURRENTLY")
        holder.rollback()
    token = lib.commit("UPDATE items SET price = price WHERE id = 1")  # a commit after it
    assert truth(lib, query) == [(10, 45)]
    assert assert_invalidated(lib, query, token) == [(10, 45)]


def test_a_table_attached_from_an_untracked_schema_is_prepared_as_a_partition(
    triggered: LibraryStack,
) -> None:
    lib = triggered
    make_partitions(lib)
    lib.write(
        "CREATE SCHEMA elsewhere;"
        "CREATE TABLE elsewhere.events_more (k integer NOT NULL, v integer NOT NULL);"
        "INSERT INTO elsewhere.events_more VALUES (25, 1)"
    )
    lib.commit(
        "ALTER TABLE events ATTACH PARTITION elsewhere.events_more FOR VALUES FROM (20) TO (30)",
    )
    assert truth(
        lib, "SELECT relreplident::text FROM pg_class WHERE oid = 'elsewhere.events_more'::regclass"
    ) == [("f",)]
    query = "SELECT count(*) FROM events"
    assert cached(lib, query) == [(21,)]
    token = lib.commit("TRUNCATE elsewhere.events_more")
    assert assert_invalidated(lib, query, token) == [(20,)]


def test_inheritance_added_or_removed_invalidates_reads_of_the_parent(lib: LibraryStack) -> None:
    lib.write(
        "CREATE TABLE animals (id integer PRIMARY KEY);"
        "CREATE TABLE cats () INHERITS (animals);"
        "CREATE TABLE dogs (id integer PRIMARY KEY);"
        "INSERT INTO cats VALUES (1); INSERT INTO dogs VALUES (2)"
    )
    query = "SELECT id FROM animals ORDER BY id"
    assert cached(lib, query) == [(1,)]
    token = lib.commit("ALTER TABLE dogs INHERIT animals")
    assert assert_invalidated(lib, query, token) == [(1,), (2,)]
    cached(lib, query)
    token = lib.commit("ALTER TABLE cats NO INHERIT animals")
    assert assert_invalidated(lib, query, token) == [(2,)]


def test_a_redefined_function_invalidates_every_cached_result(lib: LibraryStack) -> None:
    lib.write(
        "CREATE FUNCTION twice(integer) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 2 * $1'"
    )
    query = "SELECT twice(price) FROM items WHERE id = %s"
    unrelated = "SELECT name FROM users WHERE id = %s"
    assert cached(lib, query, 2) == [(40,)]
    cached(lib, unrelated, 1)
    token = lib.commit(
        "CREATE OR REPLACE FUNCTION twice(integer) RETURNS integer LANGUAGE sql IMMUTABLE "
        "AS 'SELECT 3 * $1'",
    )
    assert assert_invalidated(lib, query, token, 2) == [(60,)]
    assert_invalidated(lib, unrelated, token, 1)


def test_a_catalog_reading_reads_built_in_objects_again_only_when_one_changed(
    lib: LibraryStack,
) -> None:
    """A reading after a schema change reuses the previous reading's built-in functions,
    operators and types (the bulk of the catalog) unless one of their rows changed."""
    schema = Schema.load(lib.dsn)
    built_ins = schema.catalog.built_ins
    lib.write("CREATE FUNCTION shout(text) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT $1'")
    schema.refresh()
    assert schema.catalog.built_ins is built_ins
    assert [f.volatility for f in schema.catalog.functions["shout"]] == ["i"]

    lib.write("ALTER FUNCTION pg_catalog.lower(text) VOLATILE")
    schema.refresh()
    assert schema.catalog.built_ins is not built_ins
    lower = [f for f in schema.catalog.functions["lower"] if f.inputs == (25,)]
    assert [f.volatility for f in lower] == ["v"]


def test_a_renamed_enum_value_invalidates_reads_of_its_columns(lib: LibraryStack) -> None:
    lib.write(
        "CREATE TYPE mood AS ENUM ('happy', 'sad');"
        "CREATE TABLE feelings (id integer PRIMARY KEY, mood mood NOT NULL);"
        "INSERT INTO feelings VALUES (1, 'happy')"
    )
    query = "SELECT mood::text FROM feelings WHERE id = %s"
    assert cached(lib, query, 1) == [("happy",)]
    token = lib.commit("ALTER TYPE mood RENAME VALUE 'happy' TO 'glad'")
    assert assert_invalidated(lib, query, token, 1) == [("glad",)]


def test_a_table_renamed_and_replaced_invalidates_reads_under_the_old_name(
    lib: LibraryStack,
) -> None:
    query = "SELECT name FROM users WHERE id = %s"
    assert cached(lib, query, 1) == [("user 1",)]
    token = lib.commit(
        "ALTER TABLE users RENAME TO people",
        "CREATE TABLE users (id integer PRIMARY KEY, name text NOT NULL)",
        "INSERT INTO users VALUES (1, 'someone else')",
    )
    assert assert_invalidated(lib, query, token, 1) == [("someone else",)]


def test_a_renamed_table_is_no_longer_served_under_its_old_name(lib: LibraryStack) -> None:
    query = "SELECT name FROM users WHERE id = %s"
    cached(lib, query, 1)
    token = lib.commit("ALTER TABLE users RENAME TO people")
    with pytest.raises(txcache.UncacheableQuery, match="users"):
        read(lib, query, 1, not_before=token)


def test_a_column_type_change_invalidates_reads_of_the_table(lib: LibraryStack) -> None:
    query = "SELECT price::text FROM items WHERE id = %s"
    assert cached(lib, query, 4) == [("40",)]
    token = lib.commit("ALTER TABLE items ALTER COLUMN price TYPE numeric(10, 2)")
    assert assert_invalidated(lib, query, token, 4) == [("40.00",)]


def test_row_level_security_invalidates_and_makes_reads_uncacheable(lib: LibraryStack) -> None:
    query = "SELECT name FROM users WHERE id = %s"
    cached(lib, query, 2)
    token = lib.commit("ALTER TABLE users ENABLE ROW LEVEL SECURITY")
    with pytest.raises(txcache.UncacheableQuery, match="row-level security"):
        read(lib, query, 2, not_before=token)


def test_a_table_left_out_of_the_publication_is_no_longer_served(lib: LibraryStack) -> None:
    query = "SELECT name FROM items WHERE id = %s"
    cached(lib, query, 5)
    scope = truth(
        lib,
        "SELECT count(*) FROM pg_publication_namespace pn JOIN pg_publication p "
        "ON p.oid = pn.pnpubid WHERE p.pubname = 'txcache'",
    )
    assert scope == [(1,)], "setup publishes the schema"
    token = lib.commit("ALTER PUBLICATION txcache DROP TABLES IN SCHEMA public")
    with pytest.raises(txcache.UncacheableQuery, match="publication"):
        read(lib, query, 5, not_before=token)


def test_setup_puts_the_truncate_trigger_on_existing_partitions(triggered: LibraryStack) -> None:
    lib = triggered
    lib.write(
        "ALTER EVENT TRIGGER txcache_ddl_command_end DISABLE;"
        "CREATE TABLE older (k integer NOT NULL) PARTITION BY LIST (k);"
        "CREATE TABLE older_1 PARTITION OF older FOR VALUES IN (1);"
        "ALTER EVENT TRIGGER txcache_ddl_command_end ENABLE ALWAYS"
    )
    report = txcache.setup_database(lib.dsn)
    assert "TRUNCATE trigger on public.older_1" in report.step("ddl trigger").detail
    row = lib.admin.execute(
        "SELECT tgenabled FROM pg_trigger WHERE tgrelid = 'older_1'::regclass "
        "AND tgname = 'txcache_truncate_notice'"
    ).fetchone()
    assert row == ("A",)


def behind_the_agents_back(lib: LibraryStack, *statements: str) -> int:
    """Stop the agent, run ``statements`` (each its own transaction), start it again; a
    position every statement committed after, once the nodes applied everything and the
    library knows a pin after it."""
    running_agent(lib).stop()
    token = wal_position(lib.admin) + 1
    for statement in statements:
        lib.write(statement)
    lib.restart_agent()
    lib.fresh_pins(after=token - 1)
    return token


def test_an_agent_restarted_after_a_rename_it_missed_invalidates_the_old_name(
    lib: LibraryStack,
) -> None:
    query = "SELECT name FROM users WHERE id = %s"
    cached(lib, query, 1)
    token = behind_the_agents_back(lib, "ALTER TABLE users RENAME TO people")
    with pytest.raises(txcache.UncacheableQuery, match="users"):
        read(lib, query, 1, not_before=token)


def test_an_agent_restarted_after_an_index_was_dropped_invalidates_by_the_dropped_column(
    lib: LibraryStack,
) -> None:
    query = "SELECT id FROM items WHERE category = %s ORDER BY id"
    before = cached(lib, query, 1)
    token = behind_the_agents_back(
        lib,
        "UPDATE items SET category = 1 WHERE id = 2",  # tagged by category, if at all
        "DROP INDEX items_category_idx",
    )
    assert assert_invalidated(lib, query, token, 1) == sorted([*before, (2,)])


# -- A schema change committed while a transaction runs ------------------------------------
#
# PostgreSQL runs every query with the current catalog, whatever its snapshot. A library
# whose catalog reading predates a schema change derives a query's tags from the old
# definitions while the query runs the new ones: such a result must not be stored.


@pytest.fixture
def slow_lib(database: str) -> Iterator[LibraryStack]:
    """The library stack refreshing pins (and learning of DDL) only when a test asks: its
    catalog stays as it was read while a test commits a schema change behind its back.
    No database transaction is parked: these tests commit the change from inside a block,
    which would wait for the locks of the blocks before it (docs/library.md, "Consecutive
    transactions share a database transaction")."""
    with LibraryStack(database, refresh_interval=3600, pool_size=1, snapshot_hold=0) as stack:
        yield stack


def stored() -> int:
    """How many results :func:`rows_of` stored so far."""
    return sum(rows_of.stats.inserts.values())


def test_a_view_redefined_under_a_running_transaction_is_not_cached(slow_lib: LibraryStack) -> None:
    lib = slow_lib
    lib.write("CREATE VIEW chosen AS SELECT id, price FROM items WHERE id IN (1, 2)")
    cached(lib, "SELECT count(*) FROM chosen")  # the library's catalog has the view
    before = stored()
    with lib.cache.read_only(staleness=60) as tx:
        txcache.query("SELECT 1")  # the transaction's snapshot predates the change
        lib.write("CREATE OR REPLACE VIEW chosen AS SELECT id, price FROM items WHERE id IN (3, 4)")
        got = rows_of("SELECT id, price FROM chosen ORDER BY id")
        assert tx.catalog_moved
        assert tx.moves == 1, "it ran again at a snapshot after the change"
    assert got == [(3, 30), (4, 40)], "the definition and the data of one commit"
    assert stored() == before, "stored with the tags of the definition the library read"


def read_while_attaching(lib: LibraryStack, *, library_hears_of_it: bool) -> None:
    """``events_high`` detached, a transaction pinned, ``events_high`` attached again, then
    the transaction reads ``events`` through a cacheable call — after the library heard of
    the ``ATTACH`` or before: PostgreSQL shows the partition's rows at the snapshot, which
    must not be stored (under the root's name, while writes to the partition before the
    ``ATTACH`` went out under its own)."""
    make_partitions(lib)
    lib.write("ALTER TABLE events DETACH PARTITION events_high")
    assert cached(lib, "SELECT count(*) FROM events") == [(10,)]
    before = stored()
    with lib.cache.read_only(staleness=60) as tx:
        txcache.query("SELECT 1")
        lib.write("ALTER TABLE events ATTACH PARTITION events_high FOR VALUES FROM (10) TO (20)")
        if library_hears_of_it:
            lib.caught_up()
            assert lib.cache.agent is not None
            lib.cache.agent.refresh()  # it reads the catalog again before the next query
        got = rows_of("SELECT sum(v) FROM events")
        assert tx.catalog_moved
        assert tx.moves == 1, "it ran again at a snapshot after the ATTACH"
    assert got == [(190,)]
    assert stored() == before


def test_a_partition_attached_under_a_running_transaction_is_not_cached(
    slow_lib: LibraryStack,
) -> None:
    read_while_attaching(slow_lib, library_hears_of_it=False)


def test_a_read_older_than_a_schema_change_the_library_read_is_not_cached(
    slow_lib: LibraryStack,
) -> None:
    read_while_attaching(slow_lib, library_hears_of_it=True)


def attach_after_writing_to_it(lib: LibraryStack) -> None:
    """``events_high``, detached, gets new values, then is attached again: ``sum(v)`` of
    ``events`` is 45 before the ``ATTACH`` and 1190 after it. 190 — the new catalog over
    the old data, which a snapshot older than both runs — was never the sum."""
    lib.write("UPDATE events_high SET v = v + 100")
    lib.write("ALTER TABLE events ATTACH PARTITION events_high FOR VALUES FROM (10) TO (20)")


@pytest.mark.parametrize(
    "query",
    ["SELECT sum(v) FROM events", "SELECT sum(v) FROM events WHERE now() IS NOT NULL"],
    ids=["tagged", "not analysable"],
)
def test_a_query_at_a_snapshot_older_than_a_schema_change_runs_again_after_it(
    slow_lib: LibraryStack, query: str
) -> None:
    lib = slow_lib
    make_partitions(lib)
    lib.commit("ALTER TABLE events DETACH PARTITION events_high")  # and a pin after it
    with lib.cache.read_only(staleness=60) as tx:
        assert txcache.query("SELECT count(*) FROM items")  # pinned while detached
        attach_after_writing_to_it(lib)
        got = txcache.query(query)  # a bare query: checked the same
        assert tx.moves == 1, "it ran again at a snapshot after the ATTACH"
    assert got == [(1190,)]


def test_a_query_bound_to_a_snapshot_older_than_a_schema_change_is_retried(
    slow_lib: LibraryStack,
) -> None:
    lib = slow_lib
    make_partitions(lib)
    lib.commit("ALTER TABLE events DETACH PARTITION events_high")  # and a pin after it
    cached(lib, "SELECT count(*) FROM items")
    with lib.cache.read_only(staleness=60) as tx:
        rows_of("SELECT count(*) FROM items")  # a hit: bound to pins before the ATTACH
        assert tx.read_cache
        assert txcache.query("SELECT count(*) FROM users")
        attach_after_writing_to_it(lib)
        with pytest.raises(txcache.SnapshotUnavailable, match="schema change committed after"):
            txcache.query("SELECT sum(v) FROM events")
    with lib.cache.read_only(staleness=60):
        assert txcache.query("SELECT sum(v) FROM events") == [(1190,)]


def test_a_read_older_than_a_schema_change_an_agent_restarted_past_is_not_cached(
    database: str,
) -> None:
    """The agent that decoded the ``ATTACH`` is replaced by one whose slot resumes past it
    (it never replays the ``ATTACH``). A transaction pinned before the ``ATTACH``, whose
    catalog reading is newer than it (read by another transaction after the restart), must
    still not store what it reads: the new agent cannot know which schema changes committed
    below where it resumed, so its barrier starts there."""
    with LibraryStack(database, refresh_interval=3600, pool_size=2) as lib:
        make_partitions(lib)
        lib.commit("ALTER TABLE events DETACH PARTITION events_high")  # and a pin after it
        before = stored()
        with lib.cache.read_only(staleness=60) as tx:
            txcache.query("SELECT count(*) FROM items")  # pinned before the ATTACH, for good
            lib.write(
                "ALTER TABLE events ATTACH PARTITION events_high FOR VALUES FROM (10) TO (20)"
            )
            attached = lib.caught_up()
            wait_until(
                lambda: slot_confirmed(lib) >= attached,
                f"the agent to confirm its slot past the ATTACH ({attached})",
            )
            lib.restart_agent()
            # Another transaction reads the catalog (as of after the ATTACH)…
            reader = threading.Thread(target=read, args=(lib, "SELECT count(*) FROM users"))
            reader.start()
            reader.join()
            # …and the agent's stream passes the reading, so its barrier would apply.
            lib.caught_up()
            assert lib.cache.agent is not None
            lib.cache.agent.refresh()
            got = rows_of("SELECT sum(v) FROM events")
            assert tx.catalog_moved
            assert tx.moves == 1, "it ran again at a snapshot after the ATTACH"
        assert got == [(190,)]
        lib.cache.housekeeping()  # the nodes' answers to the stores, which nobody waited for
        assert stored() == before + 1, "only the other transaction's read was stored"


def slot_confirmed(lib: LibraryStack) -> int:
    """Where the agent's replication slot resumes (``confirmed_flush_lsn``)."""
    row = lib.admin.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (lib.options.slot,),
    ).fetchone()
    assert row is not None
    assert row[0] is not None
    return parse_lsn(row[0])


def test_a_result_type_changed_under_a_prepared_statement_asks_for_a_retry(
    slow_lib: LibraryStack,
) -> None:
    """psycopg prepares a statement after five runs; PostgreSQL refuses to run it once a
    schema change altered its result type. The transaction fails with a retriable error,
    and the next one runs."""
    lib = slow_lib
    query = "SELECT price FROM items WHERE id = %s"
    lib.caught_up()
    for _ in range(6):  # one pooled connection: the statement is prepared on it
        with lib.cache.read_only(staleness=60):
            assert txcache.query(query, (4,)) == [(40,)]
    lib.write("ALTER TABLE items ALTER COLUMN price TYPE bigint")
    failing = pytest.raises(txcache.SnapshotUnavailable, match="result type")
    with failing, lib.cache.read_only(staleness=60):
        txcache.query(query, (4,))
    with lib.cache.read_only(staleness=60):
        assert txcache.query(query, (4,)) == [(40,)]


def test_a_result_type_change_the_library_knows_of_needs_no_retry(slow_lib: LibraryStack) -> None:
    lib = slow_lib
    query = "SELECT price FROM items WHERE id = %s"
    lib.caught_up()
    for _ in range(6):  # prepared on the one pooled connection
        with lib.cache.read_only(staleness=60):
            assert txcache.query(query, (4,)) == [(40,)]
    before = wal_position(lib.admin)
    lib.write("ALTER TABLE items ALTER COLUMN price TYPE bigint")  # on another connection
    lib.caught_up()
    lib.fresh_pins(after=before)  # the library hears of the change from the agent
    with lib.cache.read_only(staleness=60):
        assert txcache.query(query, (4,)) == [(40,)]


def test_a_catalog_reading_stamps_the_schema_changes_not_yet_committed(
    triggered: LibraryStack,
) -> None:
    lib = triggered
    with psycopg.connect(lib.dsn) as ddl:  # its transaction stays open
        ddl.execute("CREATE VIEW pending AS SELECT id FROM items")
        catalog = Schema.load(lib.dsn).catalog
        stamp = catalog.stamp
        assert stamp is not None
        assert len(stamp.uncommitted) == 1
        assert ("public", "pending") not in catalog.relations

        def current() -> bool:
            check = stamp_check(stamp)
            assert check is not None  # the stamp tracks the uncommitted change
            with psycopg.connect(lib.dsn, autocommit=True) as conn:
                return still_current(stamp, conn.execute(*check).fetchone())

        assert current(), "a query now runs with the catalog read"
        ddl.commit()
        assert not current(), "a query now runs with the view the reading lacks"


def test_a_catalog_reading_during_which_a_schema_change_committed_is_read_again(
    lib: LibraryStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some catalog functions (pg_get_publication_tables) read the current catalog, not the
    snapshot: a reading a schema change committed during would disagree with itself."""
    readings: list[Catalog] = []
    read_in_one_snapshot = txcache._schema._read_in_one_snapshot

    def reading_then_a_change(conn: psycopg.Connection, publication: str, *rest: Any) -> Catalog:
        catalog = read_in_one_snapshot(conn, publication, *rest)
        if not readings:
            lib.write("CREATE VIEW meanwhile AS SELECT id FROM items")
        readings.append(catalog)
        return catalog

    monkeypatch.setattr(txcache._schema, "_read_in_one_snapshot", reading_then_a_change)
    agent = lib.cache.agent
    assert agent is not None
    catalog = Schema.load(lib.dsn, fingerprint=agent.fingerprints).catalog
    assert len(readings) == 2
    assert ("public", "meanwhile") in catalog.relations
    assert catalog.stamp is not None
