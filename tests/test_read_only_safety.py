"""Read-only transactions against the real stack (PostgreSQL, two nodes, the agent): what
they refuse, what a failed statement does to the block, snapshots older than a TRUNCATE or
a table rewrite, and snapshot ids PostgreSQL reuses after a restart (docs/library.md,
"Read-only safety").

The rewrite tests read at the OLDEST pin (a pin policy), so that the snapshot really
predates the TRUNCATE: PostgreSQL would show the table empty there, and the library must
answer with the table as a snapshot after the reload shows it, and store that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
from typing import Any

import psycopg
import pytest

import txcache
from library_fixtures import LibraryStack
from postgres_fixtures import PostgresFactory
from txcache import (
    Pin,
    PinSet,
    ReadOnlyTransaction,
    SnapshotUnavailable,
    StatementNotAllowed,
    TransactionError,
)
from txcache.protocol import Hit

RELOAD = (
    "INSERT INTO items SELECT i, 'item ' || i, 100 * i, mod(i, 3) FROM generate_series(1, 20) i"
)


@txcache.cacheable
def current_price(item_id: int) -> int | None:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    return None if row is None else int(row[0])


@txcache.cacheable
def run_statement(statement: str) -> int:
    txcache.execute(statement)
    return 1


@txcache.cacheable
def swallow_a_failure(item_id: int) -> int:
    with contextlib.suppress(psycopg.errors.DivisionByZero):
        txcache.query("SELECT 1 / 0")
    return item_id


@txcache.cacheable
def event_payload(event_id: int) -> str | None:
    row = txcache.query_one("SELECT payload FROM events WHERE id = %s", (event_id,))
    return None if row is None else str(row[0])


def ready(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()


def begun_before(lib: LibraryStack, **options: Any) -> ReadOnlyTransaction:
    """A read-only transaction whose pin set is taken now (it is built at creation): once the
    agent decodes a TRUNCATE or a schema change it lists no older pin, so a transaction
    can hold one only if it began before — the window the library's own check guards."""
    return lib.cache.read_only(staleness=60, **options)


def stored(lib: LibraryStack, key: bytes, lo: int, hi: int) -> Hit | None:
    """The version of ``key`` the node holds valid somewhere in ``[lo, hi]``, if any."""
    assert lib.cache.ring is not None
    found = lib.cache.ring.node_for(key).lookup(key, lo, hi, with_tags=False)
    return found if isinstance(found, Hit) else None


# -- statements ------------------------------------------------------------------------------

REFUSED = [
    # transaction control, in any case, after comments and whitespace
    "COMMIT",
    "commit",
    "  -- the end\n END",
    "/* stop */ ROLLBACK",
    "ABORT",
    "BEGIN",
    "START TRANSACTION",
    "SAVEPOINT s",
    "RELEASE SAVEPOINT s",
    "ROLLBACK TO SAVEPOINT s",
    "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
    "PREPARE TRANSACTION 'p'",
    "COMMIT PREPARED 'p'",
    "ROLLBACK PREPARED 'p'",
    # the session
    "SET search_path TO pg_catalog",
    "SET LOCAL statement_timeout = 0",
    "RESET ALL",
    "DISCARD ALL",
    "SET ROLE postgres",
    "SET SESSION AUTHORIZATION postgres",
    "LISTEN channel",
    "UNLISTEN *",
    "NOTIFY channel",
    "LOAD 'plpgsql'",
    "PREPARE q AS SELECT 1",
    "EXECUTE q",
    "DEALLOCATE ALL",
    "SELECT set_config('search_path', 'pg_catalog', false)",
    "SELECT pg_catalog.set_config('search_path', 'pg_catalog', true)",
    "SELECT pg_advisory_lock(42)",
    # writes, DDL, code
    "INSERT INTO users VALUES (99, 'intruder')",
    "UPDATE items SET price = 0",
    "DELETE FROM items",
    "MERGE INTO users u USING items i ON u.id = i.id WHEN MATCHED THEN DELETE",
    "TRUNCATE items",
    "COPY items FROM STDIN",
    "COPY items TO STDOUT",
    "CREATE TABLE other (id integer)",
    "ALTER TABLE items ADD COLUMN extra integer",
    "DROP TABLE users",
    "VACUUM items",
    "LOCK TABLE items",
    "SELECT * INTO copied FROM items",
    "SELECT * FROM items WHERE id = 1 FOR UPDATE",
    "SELECT * FROM items FOR KEY SHARE SKIP LOCKED",
    "SELECT count(*) FROM (SELECT id FROM items FOR SHARE) locked",
    "WITH gone AS (DELETE FROM items RETURNING id) SELECT count(*) FROM gone",
    "EXPLAIN ANALYZE DELETE FROM items",
    "DO $$ BEGIN PERFORM 1; END $$",
    "CALL some_procedure()",
    # several statements: every one is judged
    "SELECT 1; COMMIT",
    "SELECT 1; UPDATE items SET price = 0",
    # what cannot be parsed is not run
    "SELEC price FROM items",
]

ALLOWED = [
    "SELECT price FROM items WHERE id = 1",
    "  /* a comment */ select 1",
    "VALUES (1), (2)",
    "TABLE users",
    "WITH u AS (SELECT id FROM users) SELECT count(*) FROM u",
    "EXPLAIN SELECT * FROM items",
    "EXPLAIN ANALYZE SELECT * FROM items",
    "SHOW search_path",
    "SELECT 1; SELECT 2",
    "SELECT pg_advisory_xact_lock(42)",
]


@pytest.mark.parametrize("statement", REFUSED)
def test_a_statement_that_is_not_a_read_is_refused_and_the_block_goes_on(
    lib: LibraryStack, statement: str
) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60) as tx:
        assert txcache.query_one("SELECT price FROM items WHERE id = 1") == (10,)
        snapshot = tx.snapshot
        with pytest.raises(StatementNotAllowed):
            txcache.execute(statement)
        assert not tx.failed, "nothing was sent to the database"
        assert txcache.query_one("SELECT current_setting('search_path')") == ('"$user", public',)
        assert txcache.query_one("SELECT count(*) FROM items WHERE price = 10 * id") == (20,)
        assert tx.snapshot == snapshot
    assert lib.admin.execute("SELECT count(*) FROM users").fetchone() == (5,)


@pytest.mark.parametrize("statement", REFUSED)
def test_a_cacheable_function_cannot_run_it_either(lib: LibraryStack, statement: str) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60), pytest.raises(StatementNotAllowed):
        run_statement(statement)
    assert stored(lib, run_statement.key(statement), 0, 2**63 - 1) is None


@pytest.mark.parametrize("statement", ALLOWED)
def test_reads_run(lib: LibraryStack, statement: str) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60) as tx:
        txcache.execute(statement)
        assert tx.snapshot is not None


def test_the_refusal_says_what_and_why(lib: LibraryStack) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60):
        with pytest.raises(StatementNotAllowed, match=r"COMMIT is not allowed.*block"):
            txcache.execute("END")
        with pytest.raises(StatementNotAllowed, match=r"SET search_path.*pooled connection"):
            txcache.execute("set search_path = pg_catalog")
        with pytest.raises(StatementNotAllowed, match="set_config"):
            txcache.execute("SELECT set_config('a.b', 'c', true)")
        with pytest.raises(StatementNotAllowed, match=r"UPDATE.*cache\.read_write"):
            txcache.execute("UPDATE items SET price = %s WHERE id = %s", (0, 1))
        with pytest.raises(StatementNotAllowed, match='syntax error at or near "SELEC"'):
            txcache.execute("SELEC 1")


def test_commit_then_a_write_inside_the_block_changes_nothing(lib: LibraryStack) -> None:
    """The original hole: COMMIT ended the pinned transaction, an UPDATE after it was
    committed, and a miss after it computed from newer data stored as valid at the pin."""
    ready(lib)
    with lib.cache.read_only(staleness=60) as tx:
        assert current_price(1) == 10
        with pytest.raises(StatementNotAllowed):
            txcache.execute("COMMIT")
        with pytest.raises(StatementNotAllowed):
            txcache.execute("UPDATE items SET price = 0 WHERE id = 2")
        assert current_price(2) == 20
        assert tx.moves == 0
    assert lib.admin.execute("SELECT price FROM items WHERE id = 2").fetchone() == (20,)


def test_the_cursor_returned_cannot_run_statements(lib: LibraryStack) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60):
        cursor = txcache.execute("SELECT id FROM users ORDER BY id")
        with pytest.raises(StatementNotAllowed, match="through the transaction"):
            cursor.execute("COMMIT")
        with pytest.raises(StatementNotAllowed):
            cursor.executemany("SELECT %s", [(1,)])
        with pytest.raises(StatementNotAllowed):
            list(cursor.stream("SELECT 1"))
        assert cursor.fetchall() == [(1,), (2,), (3,), (4,), (5,)]


# -- a failed statement ----------------------------------------------------------------------


def test_a_failed_statement_fails_the_whole_block(lib: LibraryStack) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60):
        assert current_price(1) == 10  # cached from now on
    with lib.cache.read_only(staleness=60) as tx:
        with pytest.raises(psycopg.errors.DivisionByZero):
            txcache.query("SELECT 1 / 0")
        assert tx.failed
        # A hit (item 1) and a miss (item 2) alike: the cache's state decides nothing.
        for item_id in (1, 2):
            with pytest.raises(TransactionError, match=r"failed earlier.*DivisionByZero"):
                current_price(item_id)
        with pytest.raises(TransactionError, match="failed earlier"):
            txcache.query("SELECT 1")


def test_a_failed_statement_is_raised_as_it_is_and_nothing_else_is_logged(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement sent with its checks in one pipeline fails: its own error is raised, and
    psycopg logs nothing about the pipeline the failure aborted (its warning would read as
    a second failure). The error reaches the block at a check sent after the statement, or
    as the pipeline ends, as the server's reply comes: many blocks see both."""
    ready(lib)
    with caplog.at_level(logging.WARNING):
        for _ in range(30):
            with pytest.raises(psycopg.errors.DivisionByZero), lib.cache.read_only() as tx:
                txcache.query("SELECT price / 0 FROM items WHERE id = 1")
            assert tx.rewrite_checks == 1  # it went with its check
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]
    # A cache another test in this worker left open may retry its dropped database meanwhile.
    database = psycopg.conninfo.conninfo_to_dict(lib.dsn)["dbname"]
    elsewhere = re.compile(r'database "(?!' + re.escape(str(database)) + r'")[^"]*" does not exist')
    assert not [message for message in logged if not elsewhere.search(message)]


def test_nothing_is_stored_after_a_failure_a_function_swallowed(lib: LibraryStack) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60) as tx:
        assert swallow_a_failure(7) == 7
        assert tx.failed
        with pytest.raises(TransactionError, match="failed earlier"):
            swallow_a_failure(8)
    assert swallow_a_failure.stats.inserts["inserted"] == 0
    assert stored(lib, swallow_a_failure.key(7), 0, 2**63 - 1) is None


def test_a_failed_block_refuses_cacheable_calls_without_the_cache_too(
    lib: LibraryStack, database: str
) -> None:
    with txcache.connect(database, nodes=[]) as plain, plain.read_only() as tx:
        with pytest.raises(psycopg.errors.DivisionByZero):
            txcache.query("SELECT 1 / 0")
        with pytest.raises(TransactionError, match="failed earlier"):
            current_price(1)
        assert tx.failed


# -- rewritten tables ------------------------------------------------------------------------


def test_the_tables_read_are_checked_once_per_database_transaction(lib: LibraryStack) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60) as tx:
        assert [current_price(n) for n in (1, 2, 3)] == [10, 20, 30]
        assert txcache.query_one("SELECT count(*) FROM items") == (20,)
        assert tx.rewrite_checks == 1, "items was verified by the first query"
        assert txcache.query_one("SELECT name FROM users WHERE id = 1") == ("user 1",)
        assert tx.rewrite_checks == 2
        txcache.query("SELECT 1 FROM items, pg_class LIMIT 1")  # not analysed: checked
        assert tx.rewrite_checks == 3
        assert tx.moves == 0, "no false alarm"


def test_a_truncated_and_reloaded_table_is_read_after_the_reload(lib: LibraryStack) -> None:
    ready(lib)
    lib.cache.policy = txcache.oldest_pin
    tx = begun_before(lib)
    token = lib.commit("TRUNCATE items", RELOAD)
    with tx:
        assert tx.pin_set.pins[0].ts < token, "a pin older than the TRUNCATE is offered"
        assert current_price(3) == 300  # PostgreSQL alone shows the old pin's items empty
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= token
        assert tx.moves == 1
        assert current_price(4) == 400
        assert tx.moves == 1
    key = current_price.key(3)
    assert stored(lib, key, 0, token - 1) is None, "nothing claims to be valid before it"
    hit = stored(lib, key, token, 2**63 - 1)
    assert hit is not None
    assert hit.interval.lo >= token
    assert lib.cache.serializer.loads(hit.value, key=key) == 300


def test_a_bare_query_reads_the_reloaded_table(lib: LibraryStack) -> None:
    ready(lib)
    lib.cache.policy = txcache.oldest_pin
    tx = begun_before(lib)
    token = lib.commit("TRUNCATE items", RELOAD)
    with tx:
        assert txcache.query_one("SELECT count(*), sum(price) FROM items") == (20, 21000)
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= token
        # A query the library does not analyse (a catalog): checked, and no false alarm.
        rows = txcache.query("SELECT count(*) FROM items, pg_class WHERE pg_class.oid = 1259")
        assert rows == [(20,)]
        assert tx.moves == 1


def test_a_rewrite_after_cached_reads_moves_to_a_pin_they_allow(lib: LibraryStack) -> None:
    ready(lib)
    lib.cache.policy = txcache.oldest_pin
    with lib.cache.read_only(staleness=60):
        assert current_price(5) == 50  # cached, valid until the TRUNCATE
    token = lib.commit("TRUNCATE users", "INSERT INTO users VALUES (1, 'new user 1')")
    with lib.cache.read_only(staleness=60) as tx:
        assert current_price(5) == 50  # a hit: the transaction is bound to the pins
        assert tx.read_cache
        row = txcache.query_one("SELECT name FROM users WHERE id = 1")
        assert row == ("new user 1",)
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= token


def test_a_rewrite_no_pin_of_the_transaction_can_see_is_a_retryable_error(
    lib: LibraryStack,
) -> None:
    ready(lib)
    lib.cache.policy = txcache.oldest_pin
    with lib.cache.read_only(staleness=60):
        assert current_price(6) == 60
    tx = begun_before(lib)
    token = lib.commit("TRUNCATE users", "INSERT INTO users VALUES (1, 'new user 1')")
    with tx:
        # Only pins before the TRUNCATE: the newer ones are out of the set.
        tx.pin_set = PinSet([pin for pin in tx.pin_set if pin.ts < token], star=False)
        assert current_price(6) == 60
        with pytest.raises(SnapshotUnavailable, match=r"public\.users: a TRUNCATE"):
            txcache.query("SELECT name FROM users")
        assert tx.failed
        with pytest.raises(TransactionError, match="failed earlier"):
            current_price(6)


def test_a_table_rewriting_alter_table_is_read_after_it(lib: LibraryStack) -> None:
    ready(lib)
    lib.cache.policy = txcache.oldest_pin
    tx = begun_before(lib)
    token = lib.commit("ALTER TABLE items ALTER COLUMN price TYPE bigint")
    with tx:
        assert current_price(7) == 70
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= token
        assert tx.moves == 1


def test_a_partition_truncated_directly(lib: LibraryStack) -> None:
    lib.commit(
        "CREATE TABLE events (id integer PRIMARY KEY, payload text NOT NULL) "
        "PARTITION BY RANGE (id)",
        "CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE events_high PARTITION OF events FOR VALUES FROM (100) TO (200)",
        "INSERT INTO events VALUES (5, 'low'), (150, 'high')",
    )
    txcache.setup_database(lib.dsn)
    ready(lib)
    with lib.cache.read_only(staleness=60):
        txcache.query("SELECT count(*) FROM events")  # the library reads its catalog
    # not_before: pins from before the table existed would show it as created since, and
    # pins older than the library's catalog reading could have run with a newer catalog.
    read_at = lib.commit("INSERT INTO events VALUES (60, 'after the reading')")
    lib.cache.policy = txcache.oldest_pin
    tx, second = begun_before(lib, not_before=read_at), begun_before(lib, not_before=read_at)
    token = lib.commit("TRUNCATE events_low", "INSERT INTO events VALUES (5, 'reloaded')")
    with tx:
        assert tx.pin_set.pins[0].ts < token
        assert event_payload(5) == "reloaded"
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= token
        assert tx.moves == 1
    with second as tx:
        # The partition the first query reads is fine; the table's name is never taken as
        # verified, since another query of it can read another partition.
        assert txcache.query("SELECT payload FROM events WHERE id = 150") == [("high",)]
        checks = tx.rewrite_checks
        assert tx.snapshot is not None
        assert tx.snapshot.ts < token
        with pytest.raises(SnapshotUnavailable, match=r"public\.events_low"):
            txcache.query("SELECT payload FROM events WHERE id = 5")
        assert tx.rewrite_checks > checks


def test_a_table_created_after_the_snapshot_is_not_read_there(lib: LibraryStack) -> None:
    """A pin from before the table existed: PostgreSQL reads the table it finds now at an
    old snapshot (empty); the library reads it where it exists."""
    ready(lib)
    lib.cache.policy = txcache.oldest_pin
    tx = begun_before(lib)
    token = lib.commit(
        "CREATE TABLE later (id integer PRIMARY KEY)", "INSERT INTO later VALUES (1)"
    )
    txcache.setup_database(lib.dsn)
    with tx:
        assert tx.pin_set.pins[0].ts < token
        assert txcache.query("SELECT id FROM later") == [(1,)]
        assert tx.snapshot is not None
        assert tx.snapshot.ts >= token


def test_the_unpinned_fallback_refuses_a_table_truncated_after_its_snapshot(
    lib: LibraryStack, database: str
) -> None:
    with txcache.connect(database, nodes=[]) as plain:
        with plain.read_only() as tx:
            assert txcache.query_one("SELECT count(*) FROM users") == (5,)
            assert tx.database_snapshot is not None
            lib.write("TRUNCATE items")
            lib.write(RELOAD)
            with pytest.raises(SnapshotUnavailable, match=r"public\.items"):
                txcache.query("SELECT count(*) FROM items")
        with plain.read_only():
            assert txcache.query_one("SELECT sum(price) FROM items") == (21000,)


# -- snapshot ids reused after a restart -----------------------------------------------------


def test_the_agent_lists_each_pins_snapshot_contents(lib: LibraryStack) -> None:
    ready(lib)
    with lib.cache.read_only(staleness=60) as tx:
        txcache.query("SELECT 1")
        assert tx.snapshot is not None
        assert re.fullmatch(r"\d+:\d+:[\d,]*", tx.snapshot.snapshot_text or "")
        row = txcache.query_one("SELECT pg_current_snapshot()::text")
        assert row == (tx.snapshot.snapshot_text,)


def test_a_pin_whose_snapshot_contents_differ_is_refused(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    ready(lib)
    lib.commit("UPDATE users SET name = 'user 5' WHERE id = 5")  # a second pin
    lib.cache.policy = txcache.oldest_pin
    caplog.set_level(logging.WARNING, logger="txcache")
    with lib.cache.read_only(staleness=60) as tx:
        pins = tx.pin_set.pins
        assert len(pins) >= 2
        forged = dataclasses.replace(pins[0], snapshot_text="1:1:")
        tx.pin_set = PinSet([forged, *pins[1:]], star=False)
        assert txcache.query_one("SELECT price FROM items WHERE id = 1") == (10,)
        assert tx.snapshot == pins[1]
        assert forged not in tx.pin_set
    assert "now names another snapshot" in caplog.text


def test_a_snapshot_id_reused_after_a_restart_is_not_imported(
    postgres_factory: PostgresFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """After a restart PostgreSQL hands out snapshot ids again (backend slot, local
    transaction number, counter): a session that exports one with an old pin's id makes
    ``SET TRANSACTION SNAPSHOT`` of that pin succeed, on an unrelated snapshot."""
    server = postgres_factory()
    caplog.set_level(logging.WARNING, logger="txcache")
    with LibraryStack(server.dsn) as lib:
        ready(lib)
        assert lib.cache.agent is not None
        old_pins = lib.cache.agent.pins(staleness=60, not_before=None, now=time.time())
        assert old_pins
        # The agent stays away until the exporter holds an old pin's backend slot: its
        # sessions coming back would take those slots first.
        assert lib.agent is not None
        lib.agent.stop()
        server.restart()
        # A write (a new xid: other snapshot contents), then a session exporting a
        # snapshot under an old pin's id.
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("INSERT INTO users VALUES (6, 'after the restart')")
        exporter, reused = export_an_old_id(server.dsn, old_pins)
        try:
            with psycopg.connect(server.dsn, autocommit=True) as probe:
                probe.execute(f"{BEGIN_IMPORT}; SET TRANSACTION SNAPSHOT '{reused.snapshot_id}'")
                probe.execute("ROLLBACK")  # PostgreSQL alone takes the old id
            lib.restart_agent()
            lib.fresh_pins(after=old_pins[-1].ts, timeout=30)  # the agent's pins again
            lib.cache.pool.check()  # drop the connections the restart broke
            with lib.cache.read_write() as write:
                write.execute("UPDATE users SET name = 'seen' WHERE id = 6")
            token = write.commit_timestamp
            assert token is not None
            lib.fresh_pins(after=token - 1, timeout=30)
            lib.cache.policy = txcache.oldest_pin  # the old pin first
            with lib.cache.read_only(staleness=60, not_before=token) as tx:
                tx.pin_set = PinSet([reused, *tx.pin_set], star=False)
                assert txcache.query_one("SELECT name FROM users WHERE id = 6") == ("seen",)
                assert tx.snapshot is not None
                assert tx.snapshot.ts >= token
                assert reused not in tx.pin_set
        finally:
            exporter.close()
        assert "now names another snapshot" in caplog.text


BEGIN_IMPORT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def export_an_old_id(dsn: str, old_pins: list[Pin]) -> tuple[psycopg.Connection, Pin]:
    """A session exporting a snapshot under the id of one of ``old_pins`` (``slot-lxid-1``):
    sessions are opened until one sits in the backend slot of an old pin whose local
    transaction number it has not passed yet, which then runs transactions up to it."""
    wanted: dict[int, list[tuple[int, Pin]]] = {}
    for pin in old_pins:
        pin_slot, pin_lxid, _ = pin.snapshot_id.split("-")
        wanted.setdefault(int(pin_slot, 16), []).append((int(pin_lxid, 16), pin))
    opened: list[psycopg.Connection] = []
    try:
        for _ in range(60):
            session = psycopg.connect(dsn, autocommit=True)
            opened.append(session)
            slot, lxid = own_slot_and_lxid(session)
            candidates = [(n, pin) for n, pin in wanted.get(slot, []) if n > lxid]
            if not candidates:
                continue
            target, pin = min(candidates, key=lambda candidate: candidate[0])
            for _ in range(target - lxid - 1):
                session.execute("SELECT 1")
            session.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            exports = int(pin.snapshot_id.rsplit("-", 1)[1])  # the pinner may export several
            for _ in range(exports):
                row = session.execute("SELECT pg_export_snapshot()").fetchone()
            assert row == (pin.snapshot_id,), (row, pin)
            opened.remove(session)
            return session, pin
        raise AssertionError("no session landed in an old pin's backend slot")
    finally:
        for session in opened:
            session.close()


def own_slot_and_lxid(session: psycopg.Connection) -> tuple[int, int]:
    """The session's backend slot and the local transaction number it just used."""
    session.execute("BEGIN")
    row = session.execute(
        "SELECT virtualtransaction FROM pg_locks "
        "WHERE pid = pg_backend_pid() AND locktype = 'virtualxid'"
    ).fetchone()
    session.execute("ROLLBACK")
    assert row is not None
    slot, lxid = str(row[0]).split("/")
    return int(slot), int(lxid)
