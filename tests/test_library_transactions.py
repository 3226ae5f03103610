"""The library against the real stack (PostgreSQL, two nodes, the agent): the lazy
timestamp selection cases of the paper (§6.2 and §6.3), read-your-writes, and the rules for
cacheable functions (keys, nesting, exceptions, refusals).

Each test builds its history with the ``admin`` connection, waits until both nodes applied
it and the library knows a pin after it, then checks what a transaction sees — cached
values and query results must always come from one commit point.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.rows import namedtuple_row

import txcache
from library_fixtures import LibraryStack, as_another_process
from txcache.stack import wait_until

runs: list[tuple[str, object]] = []


@txcache.cacheable
def get_item(item_id: int) -> tuple[int, str, int] | None:
    runs.append(("get_item", item_id))
    return txcache.query_one("SELECT id, name, price FROM items WHERE id = %s", (item_id,))


@txcache.cacheable
def price_list(item_ids: tuple[int, ...]) -> list[tuple[int, int]]:
    runs.append(("price_list", item_ids))
    return [(item[0], item[2]) for item in map(get_item, item_ids) if item is not None]


@txcache.cacheable
def user_name(user_id: int) -> str | None:
    runs.append(("user_name", user_id))
    row = txcache.query_one("SELECT name FROM users WHERE id = %s", (user_id,))
    return None if row is None else str(row[0])


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    runs.clear()


def price_of(lib: LibraryStack, item_id: int) -> int:
    row = lib.admin.execute("SELECT price FROM items WHERE id = %s", (item_id,)).fetchone()
    assert row is not None
    return int(row[0])


def commit_and_wait(lib: LibraryStack, statement: str, *params: object) -> int:
    """Commit ``statement`` as another process would (a context of its own: the test's
    reads are not held to it); returns its commit LSN once both nodes applied it and the
    library knows a pin at or after it."""

    def write() -> txcache.ReadWriteTransaction:
        with lib.cache.read_write() as tx:
            tx.execute(statement, params)
        return tx

    token = as_another_process(write).commit_timestamp
    assert token is not None
    lib.caught_up()
    lib.fresh_pins(after=token - 1)
    return token


def warm(lib: LibraryStack, *item_ids: int) -> None:
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=60):
        for item_id in item_ids:
            get_item(item_id)


def test_a_hit_returns_the_stored_value_without_running_the_function(lib: LibraryStack) -> None:
    warm(lib, 1)
    runs.clear()
    with lib.cache.read_only(staleness=60) as tx:
        assert get_item(1) == (1, "item 1", 10)
        assert tx.snapshot is None, "a transaction served from the cache never begins"
    assert runs == []


def test_lookups_and_queries_are_timed(lib: LibraryStack) -> None:
    before = lib.cache.latency.as_dict()
    warm(lib, 1)  # a miss: one lookup, the function's query
    with lib.cache.read_only(staleness=60):
        get_item(1)  # a hit: one lookup
    after = lib.cache.latency.as_dict()
    assert after["lookups"] - before["lookups"] >= 2
    assert after["queries"] - before["queries"] >= 1
    assert after["lookup_mean_ms"] > 0
    assert after["query_mean_ms"] > 0


def test_hits_across_several_pins_narrow_to_one_commit_point(lib: LibraryStack) -> None:
    warm(lib, 1, 2, 3)
    commit = commit_and_wait(lib, "UPDATE items SET price = price + 1 WHERE id IN (2, 3)")
    runs.clear()
    with lib.cache.read_only(staleness=60) as tx:
        first = tx.pin_set.bounds()
        assert first is not None
        assert first[0] < commit <= first[1], "the pin set spans the update"
        assert get_item(1) == (1, "item 1", 10)  # unchanged: valid at every pin
        assert get_item(2) == (2, "item 2", 20)  # the old version: only before the update
        assert all(pin.ts < commit for pin in tx.pin_set), tx.pin_set
        assert not tx.pin_set.star
    assert runs == []


def test_a_miss_after_hits_runs_at_a_pin_the_hits_allow(lib: LibraryStack) -> None:
    warm(lib, 2)
    commit = commit_and_wait(lib, "UPDATE items SET price = price + 1 WHERE id IN (2, 3)")
    with lib.cache.read_only(staleness=60) as tx:
        assert get_item(2) == (2, "item 2", 20)
        # item 3 changed in the same commit: the consistent answer is the old one
        assert get_item(3) == (3, "item 3", 30)
        assert tx.snapshot is not None
        assert tx.snapshot.ts < commit
    assert price_of(lib, 3) == 31


def test_the_database_transaction_moves_when_a_hit_excludes_its_pin(lib: LibraryStack) -> None:
    warm(lib, 2)
    commit = commit_and_wait(lib, "UPDATE items SET price = price + 1 WHERE id = 2")
    with lib.cache.read_only(staleness=60) as tx:
        assert txcache.query_one("SELECT name FROM users WHERE id = 1") == ("user 1",)
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= commit, "the newest pin comes first"
        assert get_item(2) == (2, "item 2", 20), "the cached old version is usable"
        assert tx.moves == 1
        assert tx.snapshot.ts < commit
        # the database now answers at the moved snapshot too
        assert txcache.query_one("SELECT price FROM items WHERE id = 2") == (20,)


def test_no_move_when_the_queries_read_what_changed(lib: LibraryStack) -> None:
    warm(lib, 2)
    commit_and_wait(lib, "UPDATE items SET price = price + 1 WHERE id IN (2, 4)")
    with lib.cache.read_only(staleness=60) as tx:
        assert txcache.query_one("SELECT price FROM items WHERE id = 4") == (41,)
        assert get_item(2) == (2, "item 2", 21), "the old version would contradict item 4"
        assert tx.moves == 0
    assert get_item.stats.misses["consistency"] >= 1


def test_star_is_removed_by_the_first_hit(lib: LibraryStack) -> None:
    warm(lib, 1)
    with lib.cache.read_only(staleness=60) as tx:
        assert tx.pin_set.star
        get_item(1)
        assert not tx.pin_set.star


def test_star_is_chosen_when_the_newest_pin_is_too_old(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    lib.cache.policy = txcache.newest_or_fresh(max_age=0.0)
    assert lib.cache.agent is not None
    listed = {pin.ts for pin in lib.cache.agent.pins(staleness=60, not_before=None, now=1e12)}
    commit_and_wait(lib, "UPDATE users SET name = 'x' WHERE id = 5")
    with lib.cache.read_only(staleness=60) as tx:
        assert user_name(5) == "x"
        assert tx.snapshot is not None
        assert tx.snapshot.ts not in listed


def test_a_transaction_with_only_star_takes_a_fresh_pin(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=0) as tx:
        assert len(tx.pin_set) == 0
        assert tx.pin_set.star
        assert get_item(7) == (7, "item 7", 70)
        assert tx.snapshot is not None


def test_nested_calls_inherit_intervals_and_tags(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=60):
        assert price_list((1, 2)) == [(1, 10), (2, 20)]
    assert runs == [("price_list", (1, 2)), ("get_item", 1), ("get_item", 2)]
    runs.clear()
    commit_and_wait(lib, "UPDATE items SET price = 99 WHERE id = 2")
    with lib.cache.read_only(staleness=0):
        assert price_list((1, 2)) == [(1, 10), (2, 99)]
    # the outer value depended on item 2 through get_item(2): invalidated with it
    assert runs == [("price_list", (1, 2)), ("get_item", 2)]
    runs.clear()
    with lib.cache.read_only(staleness=0):
        assert price_list((1, 2)) == [(1, 10), (2, 99)]
    assert runs == []


def test_an_inner_hit_feeds_the_outer_functions_interval(lib: LibraryStack) -> None:
    warm(lib, 1)
    runs.clear()
    with lib.cache.read_only(staleness=60):
        assert price_list((1,)) == [(1, 10)]
    assert runs == [("price_list", (1,))], "get_item(1) was a hit inside a miss"
    commit_and_wait(lib, "UPDATE items SET price = 11 WHERE id = 1")
    with lib.cache.read_only(staleness=0):
        assert price_list((1,)) == [(1, 11)], "the outer value inherited get_item(1)'s tags"


def test_an_exception_stores_nothing(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    failures = {"left": 1}

    @txcache.cacheable
    def flaky(item_id: int) -> int:
        row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("boom")
        assert row is not None
        return int(row[0])

    with lib.cache.read_only(staleness=60), pytest.raises(RuntimeError, match="boom"):
        flaky(5)
    assert sum(flaky.stats.inserts.values()) == 0
    with lib.cache.read_only(staleness=60):
        assert flaky(5) == 50
    # A store is not waited for: its outcome is counted when the node's reply is read.
    wait_until(lambda: flaky.stats.inserts["inserted"] == 1, "the store's outcome")


def test_read_your_writes(lib: LibraryStack) -> None:
    warm(lib, 6)
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = 1234 WHERE id = 6")
    token = tx.commit_timestamp
    assert token is not None
    with lib.cache.read_only(staleness=60, not_before=token):
        assert get_item(6) == (6, "item 6", 1234)
    assert tx.commit_timestamp == token


def test_read_your_writes_of_a_deferred_trigger(lib: LibraryStack) -> None:
    lib.write(
        """CREATE FUNCTION credit_buyer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE users SET name = 'bought ' || NEW.id WHERE id = 3;
            RETURN NULL;
        END $$"""
    )
    lib.write(
        "CREATE CONSTRAINT TRIGGER credit_buyer AFTER UPDATE ON items "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION credit_buyer()"
    )
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=60):
        assert user_name(3) == "user 3"
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = price + 1 WHERE id = 4")
        assert tx.query_one("SELECT name FROM users WHERE id = 3") == ("user 3",), "deferred"
    token = tx.commit_timestamp
    assert token is not None
    with lib.cache.read_only(staleness=60, not_before=token):
        assert user_name(3) == "bought 4", "the trigger's write, not the cached name"


def test_read_your_writes_of_a_held_cursor_that_commit_runs(lib: LibraryStack) -> None:
    # COMMIT runs the rest of a WITH HOLD cursor's query: its write gets a transaction id
    # only then, after the library could ask for one.
    lib.write(
        """CREATE FUNCTION rename_user_4() RETURNS integer LANGUAGE sql AS $$
        UPDATE users SET name = 'renamed at commit' WHERE id = 4;
        SELECT 1 $$"""
    )
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=60):
        assert user_name(4) == "user 4"
    with lib.cache.read_write() as tx:
        tx.execute("DECLARE held CURSOR WITH HOLD FOR SELECT rename_user_4()")
    assert tx.xid is None, "nothing was written before COMMIT"
    token = tx.commit_timestamp
    assert token is not None, "a WAL position after the commit stands in"
    with lib.cache.read_only(staleness=60, not_before=token):
        assert user_name(4) == "renamed at commit"


def test_a_deferred_constraint_that_fails_fails_the_block(lib: LibraryStack) -> None:
    lib.write("ALTER TABLE users ADD UNIQUE (name) DEFERRABLE INITIALLY DEFERRED")
    with pytest.raises(psycopg.errors.UniqueViolation), lib.cache.read_write() as tx:
        tx.execute("UPDATE users SET name = 'user 1' WHERE id = 2")
    with pytest.raises(txcache.TransactionError, match="after the commit"):
        _ = tx.commit_timestamp
    row = lib.admin.execute("SELECT name FROM users WHERE id = 2").fetchone()
    assert row == ("user 2",)
    with lib.cache.read_write() as tx:
        assert tx.query_one("SELECT name FROM users WHERE id = 2") == ("user 2",)


@txcache.cacheable
def shelf_name(item_id: int) -> str | None:
    row = txcache.query_one("SELECT name FROM shelf WHERE id = %s", (item_id,))
    return None if row is None else str(row[0])


def redefine_shelf(lib: LibraryStack, base: str, change: int) -> None:
    """Redefine the view ``shelf`` to read ``base``; return once the library's agent client
    has seen the DDL."""
    agent = lib.cache.agent
    assert agent is not None
    generation = agent.catalog_generation
    lib.write(f"CREATE OR REPLACE VIEW shelf AS SELECT id, name FROM {base} WHERE id > -{change}")
    wait_until(lambda: agent.catalog_generation > generation, "a new catalog generation")


def test_a_table_locked_after_a_schema_change_stalls_no_transaction(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    """The catalog reading a schema change calls for describes every published table, and
    PostgreSQL locks each to do so: behind a migration's lock on one of them, transactions
    run uncached (a hit too would otherwise wait for the lock) and cache again after it."""
    warm(lib, 1)
    token = lib.commit("ALTER TABLE items ADD COLUMN note text")
    with psycopg.connect(lib.dsn) as migration:
        migration.execute("LOCK TABLE users IN ACCESS EXCLUSIVE MODE")
        pid = migration.info.backend_pid

        def release() -> None:  # after 20 s whatever happens: one waiting fails below
            with psycopg.connect(lib.dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

        released = threading.Timer(20, release)
        released.start()
        started = time.monotonic()
        try:
            with (
                caplog.at_level(logging.WARNING, "txcache"),
                lib.cache.read_only(staleness=60, not_before=token) as tx,
            ):
                assert get_item(1) == (1, "item 1", 10)
        finally:
            released.cancel()
        assert time.monotonic() - started < 10, "waited for the lock"
        # PostgreSQL 18's pg_get_publication_tables opens every published table (15's reads
        # the catalog alone, and so never waits here).
        if migration.info.server_version >= 180000:
            assert tx.uncached
            assert "the catalog could not be read: a table is locked" in caplog.text
        migration.rollback()
    wait_until(lambda: cached_again(lib), "a hit once the lock is gone", timeout=20)


def cached_again(lib: LibraryStack) -> bool:
    """Whether a read, then another, is a hit."""
    with lib.cache.read_only(staleness=60):
        get_item(1)
    runs.clear()
    with lib.cache.read_only(staleness=60) as tx:
        get_item(1)
    return not tx.uncached and runs == []


def test_the_catalog_is_read_again_after_every_schema_change(lib: LibraryStack) -> None:
    lib.write("CREATE VIEW shelf AS SELECT id, name FROM items")
    # More changes than the agent keeps catalog versions (16): the number of versions it
    # lists stops changing, the catalog generation does not.
    for change in range(1, 21):
        base = "users" if change == 20 else "items"
        redefine_shelf(lib, base, change)
        schema = lib.cache._current_schema()
        assert schema is not None
        view = schema.catalog.relation("public", "shelf")
        assert view is not None
        assert view.view_sql is not None
        assert f"FROM {base}" in view.view_sql, f"change {change}: {view.view_sql}"
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=0):
        assert shelf_name(1) == "user 1"
    commit_and_wait(lib, "UPDATE users SET name = 'shelved' WHERE id = 1")
    with lib.cache.read_only(staleness=0):
        assert shelf_name(1) == "shelved", "the cached value depended on users, not items"


def test_a_read_write_transaction_bypasses_the_cache(lib: LibraryStack) -> None:
    warm(lib, 8)
    runs.clear()
    with lib.cache.read_write() as tx:
        assert get_item(8) == (8, "item 8", 80)
        tx.execute("UPDATE items SET price = 81 WHERE id = 8")
        assert get_item(8) == (8, "item 8", 81), "a writer sees its own writes"
    assert runs == [("get_item", 8), ("get_item", 8)]
    assert tx.commit_timestamp is not None


def test_a_cacheable_call_outside_a_transaction_runs_in_an_implicit_one(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    assert get_item(9) == (9, "item 9", 90)
    runs.clear()
    assert get_item(9) == (9, "item 9", 90)
    assert runs == []


def test_the_default_cache_is_the_last_one_made_and_not_closed(lib: LibraryStack) -> None:
    assert txcache.default_cache() is lib.cache
    with lib.connect(**lib.cache_settings) as second:
        assert txcache.default_cache() is second
        third = lib.connect(**lib.cache_settings)
        second.close()
        assert txcache.default_cache() is third, "closing an older one changes nothing"
        third.close()
    assert txcache.default_cache() is lib.cache, "the one made before is the default again"


def test_queries_outside_a_transaction_are_refused(lib: LibraryStack) -> None:
    with pytest.raises(txcache.NoTransaction, match="read_only"):
        txcache.query("SELECT 1")


def test_a_volatile_query_in_a_cacheable_function_is_refused(lib: LibraryStack) -> None:
    @txcache.cacheable
    def clock() -> object:
        return txcache.query_one("SELECT now()")

    with lib.cache.read_only(staleness=60), pytest.raises(txcache.UncacheableQuery, match="now"):
        clock()
    with lib.cache.read_only(staleness=60):
        assert txcache.query_one("SELECT 1") == (1,), "bare queries may be anything"


def test_unsupported_arguments_raise_a_clear_error(lib: LibraryStack) -> None:
    with lib.cache.read_only(staleness=60), pytest.raises(txcache.UnsupportedArgument) as caught:
        get_item(object())  # type: ignore[arg-type]
    assert "item_id" in str(caught.value)
    assert "get_item" in str(caught.value)
    # Uncached (a read/write transaction), the same call is refused alike: not first by the
    # cache once one is connected in production.
    with lib.cache.read_write(), pytest.raises(txcache.UnsupportedArgument, match="item_id"):
        get_item(object())  # type: ignore[arg-type]


@txcache.cacheable
def item_row(item_id: int) -> Any:
    return txcache.query_one(
        "SELECT id, name FROM items WHERE id = %s", (item_id,), row_factory=namedtuple_row
    )


def test_a_value_that_cannot_be_stored_names_the_function_and_what_to_return(
    lib: LibraryStack,
) -> None:
    warm(lib)
    refused = pytest.raises(txcache.UnsupportedValue, match=r"item_row returned .* plain data")
    with lib.cache.read_only(staleness=60), refused:
        item_row(1)


def test_a_foreign_value_is_a_miss_and_a_warning(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    warm(lib, 10)
    other = txcache.connect(
        lib.dsn,
        nodes=[node.address for node in lib.nodes],
        agent=lib.agent_address,
        secret="another secret",
    )
    runs.clear()
    try:
        with caplog.at_level(logging.WARNING, "txcache"), other.read_only(staleness=60) as tx:
            assert get_item(10) == (10, "item 10", 100)
            # Refused before it bound the transaction: it read no cached data, so nothing
            # it reads later can make it raise SnapshotUnavailable for it.
            assert not tx.read_cache
    finally:
        other.close()
    assert runs == [("get_item", 10)]
    assert "integrity tag mismatch" in caplog.text
    assert get_item.stats.misses["foreign"] >= 1


def test_a_value_copied_to_another_key_is_foreign(lib: LibraryStack) -> None:
    """A client of the nodes (no secret needed) copies item 10's genuine value under item
    11's key: the tag covers the key, so item 11 is computed, never served item 10."""
    warm(lib, 10)
    source, target = get_item.key(10), get_item.key(11)
    clients = lib.clients()
    value = None
    for client in clients:
        found = client.execute_command("TXGET", source, 0, 2**63 - 1)
        if found[0] is not None:
            value, lo = found[0], found[1]
    assert value is not None, "item 10 is cached"
    for client in clients:  # the copy on every node, whichever holds the key
        client.delete(target)
        assert client.execute_command("TXSET", target, value, lo, "OPEN", "SNAPSHOT", lo)
    runs.clear()
    with lib.cache.read_only(staleness=60):
        assert get_item(11) == (11, "item 11", 110)
    assert runs == [("get_item", 11)]


def test_keys_change_with_arguments_and_code(lib: LibraryStack) -> None:
    assert get_item.key(1) == get_item.key(item_id=1)
    assert get_item.key(1) != get_item.key(2)
    assert len(get_item.key(1)) == 16


def test_bypass_mode_never_touches_the_cache(database: str) -> None:
    with LibraryStack(database, mode="bypass") as lib:
        with lib.cache.read_only(staleness=60) as tx:
            assert get_item(1) == (1, "item 1", 10)
            assert get_item(1) == (1, "item 1", 10)
            assert tx.uncached
        assert runs == [("get_item", 1), ("get_item", 1)]
        for client in lib.clients():
            assert client.dbsize() == 0
            client.close()


def test_a_read_only_transaction_chosen_to_end_a_deadlock_asks_for_a_retry(
    lib: LibraryStack,
) -> None:
    """A block holds the locks of what it read until it ends; a schema change waiting on
    one of them while holding a table the block reads next is a deadlock, which PostgreSQL
    ends by failing one side. When that is the block (its deadlock_timeout, 1 s, expires
    first: the change waits 60 s), it raises SnapshotUnavailable, the error to retry."""
    migration = psycopg.connect(lib.dsn, autocommit=True)
    migration.execute("SET deadlock_timeout = '60s'")
    altered = threading.Event()

    def alter() -> None:
        with migration.transaction(force_rollback=True):
            migration.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
            altered.set()
            migration.execute("ALTER TABLE users ADD COLUMN nickname text")

    lib.caught_up()
    try:
        with lib.cache.read_only(staleness=60):
            assert txcache.query_one("SELECT name FROM users WHERE id = 1") == ("user 1",)
            changer = threading.Thread(target=alter, daemon=True)
            changer.start()
            assert altered.wait(30)
            wait_until(
                lambda: (
                    lib.admin.execute(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted "
                        "AND relation = 'users'::regclass"
                    ).fetchone()
                    == (1,)
                ),
                "the schema change to wait for the block's lock on users",
            )
            with pytest.raises(txcache.SnapshotUnavailable, match="deadlock"):
                txcache.query_one("SELECT price FROM items WHERE id = 1")
        changer.join(timeout=30)
        assert not changer.is_alive()
    finally:
        migration.close()
