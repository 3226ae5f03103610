"""Session state a read/write block leaves on its pooled connection must not reach later
transactions (docs/library.md, "Connections and session state").

Most tests use a cache without nodes or agent and a pool of one connection, so that the
next transaction gets the very connection the read/write block used (its backend pid says
so): what it then sees is exactly what a dirty pool would hand to a read-only transaction.
Each kind of state is first shown to leak with the reset switched off, so that the test
would notice a reset that does nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import psycopg
import pytest

import txcache
import txcache._cache
import txcache._session
from library_fixtures import LibraryStack
from txcache._session import SessionReset
from txcache.stack import wait_until

SCHEMA = """
CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL);
INSERT INTO items VALUES (1, 'item 1');
CREATE SEQUENCE tickets;
CREATE FUNCTION seen_in_session(sequence regclass) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM currval(sequence);
    RETURN true;
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RETURN false;
END $$;
CREATE FUNCTION make_scratch() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    CREATE TEMP TABLE items (id integer, name text);
    INSERT INTO items VALUES (1, 'only this session''s');
END $$;
"""

# (what the block does, what a later transaction looks at)
LEAKS = {
    "search_path": ("SET search_path = pg_catalog", "current_setting('search_path')"),
    "TimeZone": ("SET TimeZone = 'Asia/Tokyo'", "current_setting('TimeZone')"),
    "set_config": (
        "SELECT set_config('statement_timeout', '4321', false)",
        "current_setting('statement_timeout')",
    ),
    # A custom setting once set reads '' after a reset, not NULL: PostgreSQL cannot forget
    # the placeholder (DISCARD ALL neither); the value is what must not leak.
    "custom setting": (
        "SELECT set_config('app.tenant', '7', false)",
        "coalesce(current_setting('app.tenant', true), '')",
    ),
    "transaction defaults": (
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "current_setting('default_transaction_isolation')",
    ),
    "role": ("SET ROLE pg_read_all_data", "current_user"),
    "session authorization": ("SET SESSION AUTHORIZATION pg_read_all_data", "session_user"),
    "temporary table": ("CREATE TEMP TABLE scratch (x int)", "to_regclass('pg_temp.scratch')"),
    "prepared statement": (
        "PREPARE mine AS SELECT 1",
        "(SELECT count(*) FROM pg_prepared_statements WHERE from_sql)",
    ),
    "advisory lock": (
        "SELECT pg_advisory_lock(4242)",
        "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())",
    ),
    "LISTEN": ("LISTEN txcache_test", "(SELECT count(*) FROM pg_listening_channels())"),
    "held cursor": (
        "DECLARE held CURSOR WITH HOLD FOR SELECT 1",
        "(SELECT count(*) FROM pg_cursors)",
    ),
    "sequence state": ("SELECT nextval('tickets')", "seen_in_session('tickets')"),
}


@pytest.fixture
def cache(database: str) -> Iterator[txcache.Cache]:
    """A cache of one pooled connection, without nodes or agent."""
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(SCHEMA)
    with txcache.connect(database, nodes=(), mode="bypass", pool_size=1) as connected:
        yield connected


def look(cache: txcache.Cache, expression: str) -> tuple[int, object]:
    """The backend pid and ``expression`` as a read-only transaction sees them."""
    with cache.read_only() as tx:
        row = tx.query_one(f"SELECT pg_backend_pid(), {expression}")
    assert row is not None
    return int(row[0]), row[1]


def write(cache: txcache.Cache, statement: str) -> int:
    """Run ``statement`` in a read/write block; the backend pid it ran on."""
    with cache.read_write() as tx:
        tx.execute(statement)
        row = tx.query_one("SELECT pg_backend_pid()")
    assert row is not None
    return int(row[0])


def no_reset(connection: psycopg.Connection[object], context: object, reset: object) -> None:
    """What the pool did before: nothing."""


@pytest.mark.parametrize("kind", LEAKS)
def test_session_state_does_not_outlive_the_read_write_block(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    statement, expression = LEAKS[kind]
    _, fresh = look(cache, expression)
    pid = write(cache, statement)
    assert look(cache, expression) == (pid, fresh), "the same connection, reset"
    with monkeypatch.context() as patch:
        patch.setattr(txcache._cache, "_reset_session", no_reset)
        pid = write(cache, statement)
    seen_pid, seen = look(cache, expression)
    assert seen_pid == pid
    assert seen != fresh, f"{kind}: without the reset the state would have leaked"


def write_then_fail(cache: txcache.Cache, *statements: str) -> None:
    """Run ``statements`` in a read/write block that then raises ``RuntimeError``."""
    with cache.read_write() as tx:
        for statement in statements:
            tx.execute(statement)
        raise RuntimeError("boom")


def test_state_left_by_a_rolled_back_block_is_reset_too(cache: txcache.Cache) -> None:
    # Session advisory locks and prepared statements are not transactional.
    lock = "SELECT pg_advisory_lock(4242)"
    with pytest.raises(RuntimeError, match="boom"):
        write_then_fail(cache, lock, "PREPARE mine AS SELECT 1")
    assert look(cache, LEAKS["advisory lock"][1])[1] == 0
    assert look(cache, LEAKS["prepared statement"][1])[1] == 0


def test_a_failed_statement_then_the_reset(cache: txcache.Cache) -> None:
    statements = ("SET search_path = pg_catalog", "SELECT pg_advisory_lock(4242)")
    with pytest.raises(psycopg.errors.UndefinedTable):
        write_then_fail(cache, *statements, "SELECT * FROM no_such_table")
    assert look(cache, LEAKS["advisory lock"][1])[1] == 0
    assert look(cache, "current_setting('search_path')")[1] == '"$user", public'


def test_a_connection_that_cannot_be_reset_is_replaced(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(txcache._session, "_RESET_SESSION", "SELECT no_such_function()")
    with caplog.at_level(logging.WARNING, "txcache"):
        pid = write(cache, "SET search_path = pg_catalog")
    assert "could not be cleaned" in caplog.text
    seen_pid, search_path = look(cache, "current_setting('search_path')")
    assert seen_pid != pid, "the dirty connection was closed, not returned"
    assert search_path == '"$user", public'
    assert cache.pool.get_stats().get("returns_bad") == 1


def test_psycopg_prepared_statements_survive_the_reset(cache: txcache.Cache) -> None:
    # DISCARD ALL would drop them behind psycopg's back: its next use of one would fail.
    statement = "SELECT name FROM items WHERE id = %s"
    for _ in range(8):  # past psycopg's prepare_threshold (5): now prepared
        with cache.read_only() as tx:
            assert tx.query_one(statement, (1,)) == ("item 1",)
    psycopg_statements = "(SELECT count(*) FROM pg_prepared_statements WHERE NOT from_sql)"
    _, prepared = look(cache, psycopg_statements)
    assert isinstance(prepared, int)
    assert prepared > 0
    write(cache, "SET TimeZone = 'Asia/Tokyo'")
    _, prepared = look(cache, psycopg_statements)
    assert isinstance(prepared, int)
    assert prepared > 0
    for _ in range(3):
        with cache.read_only() as tx:
            assert tx.query_one(statement, (1,)) == ("item 1",)


def test_statements_prepared_under_the_blocks_settings_are_analysed_again(
    cache: txcache.Cache,
) -> None:
    # A literal is interpreted when a statement is analysed: one psycopg prepares inside
    # the block (under its TimeZone) must not keep that reading afterwards.
    statement = "SELECT '2024-01-01 00:00'::timestamptz = %s::timestamptz"
    utc = "2024-01-01 00:00+00"
    with cache.read_write() as tx:
        tx.execute("SET TimeZone = 'Asia/Tokyo'")
        for _ in range(8):  # prepared here, under Tokyo time
            assert tx.query_one(statement, (utc,)) == (False,)
    with cache.read_only() as tx:
        assert tx.query_one(statement, (utc,)) == (True,)


def test_read_only_transactions_are_not_reset(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets = record_resets(monkeypatch)
    look(cache, "1")
    assert resets == []
    write(cache, "SELECT 1")
    assert resets == [SessionReset.SEQUENCES]


def record_resets(monkeypatch: pytest.MonkeyPatch) -> list[SessionReset]:
    """Record the kind of every session reset from now on (it still happens)."""
    resets: list[SessionReset] = []
    reset = txcache._cache._reset_session

    def recorded_reset(
        c: psycopg.Connection[object],
        context: txcache._session.SessionContext | None,
        kind: SessionReset,
    ) -> None:
        resets.append(kind)
        reset(c, context, kind)

    monkeypatch.setattr(txcache._cache, "_reset_session", recorded_reset)
    return resets


# Blocks whose statements leave the session alone: only the sequences' state is forgotten
# (the full reset would also have every prepared statement planned again).
SESSION_LEFT_ALONE: dict[str, tuple[str, tuple[object, ...] | None]] = {
    "insert": ("INSERT INTO items VALUES (2, 'item 2') ON CONFLICT DO NOTHING", None),
    "update with a parameter": ("UPDATE items SET name = %s WHERE id = %s", ("item 1", 1)),
    "delete and savepoints": (
        "SAVEPOINT a; DELETE FROM items WHERE id = 99; RELEASE SAVEPOINT a",
        None,
    ),
    "a query locking rows": ("SELECT name FROM items WHERE id = 1 FOR UPDATE", None),
    "a transaction-level advisory lock": ("SELECT pg_advisory_xact_lock(7)", None),
    "a sequence": ("SELECT nextval('tickets')", None),
}


@pytest.mark.parametrize("kind", SESSION_LEFT_ALONE)
def test_a_block_that_leaves_the_session_alone_only_forgets_sequences(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    resets = record_resets(monkeypatch)
    statement, params = SESSION_LEFT_ALONE[kind]
    with cache.read_write() as tx:
        tx.execute(statement, params)
    assert resets == [SessionReset.SEQUENCES]
    assert look(cache, LEAKS["sequence state"][1])[1] is False


def test_a_temporary_table_a_function_made_does_not_outlive_the_write_block(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No statement shows it (a query of a function), yet it would shadow ``items`` in
    later blocks' queries, whose keys name the table the catalog resolves."""
    resets = record_resets(monkeypatch)
    pid = write(cache, "SELECT make_scratch()")
    assert resets == [SessionReset.SEQUENCES]
    assert look(cache, "(SELECT name FROM items WHERE id = 1)") == (pid, "item 1")


def test_every_statement_a_leak_test_runs_resets_the_session_in_full(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets = record_resets(monkeypatch)
    for kind, (statement, _) in LEAKS.items():
        if kind != "sequence state":
            write(cache, statement)
    assert resets == [SessionReset.FULL] * (len(LEAKS) - 1)


def test_what_the_blocks_cursors_and_executemany_run_is_watched(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets = record_resets(monkeypatch)
    rows = [(10, "item 10"), (11, "item 11")]
    with cache.read_write() as tx:
        tx.executemany("INSERT INTO items VALUES (%s, %s)", rows)
    assert resets == [SessionReset.SEQUENCES]
    with cache.read_write() as tx:
        cursor = tx.execute("SELECT 1")
        cursor.execute("SET search_path = pg_catalog")  # on the cursor the block returned
    assert resets[-1] is SessionReset.FULL
    assert look(cache, "current_setting('search_path')")[1] == '"$user", public'


def test_a_function_that_changes_a_reported_setting_resets_the_write_block_in_full(
    cache: txcache.Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement is a plain query; the search_path PostgreSQL reports (from version
    18) says the function changed the session."""
    write(cache, SNEAKY)
    resets = record_resets(monkeypatch)
    _, before = look(cache, "current_setting('search_path')")
    write(cache, "SELECT sneaky()")
    assert resets == [SessionReset.FULL]
    assert look(cache, "current_setting('search_path')")[1] == before


@txcache.cacheable
def item_name(item_id: int) -> str | None:
    row = txcache.query_one("SELECT name FROM items WHERE id = %s", (item_id,))
    return None if row is None else str(row[0])


@pytest.fixture
def lib1(database: str) -> Iterator[LibraryStack]:
    """The whole stack with one pooled connection."""
    with LibraryStack(database, pool_size=1) as stack:
        yield stack


def test_a_writers_search_path_does_not_reach_a_cached_result(lib1: LibraryStack) -> None:
    lib1.write("CREATE SCHEMA shadow")
    lib1.write("CREATE TABLE shadow.items (id integer PRIMARY KEY, name text NOT NULL)")
    lib1.write("INSERT INTO shadow.items VALUES (1, 'shadow 1')")
    with lib1.cache.read_write() as tx:
        tx.execute("SET search_path = shadow, public")
    lib1.caught_up()
    lib1.fresh_pins()
    with lib1.cache.read_only(staleness=60):
        assert item_name(1) == "item 1"
    # A store is not waited for: its outcome is counted when the node's reply is read.
    wait_until(lambda: item_name.stats.inserts["inserted"] >= 1, "the store's outcome")
    with lib1.cache.read_only(staleness=60):
        assert item_name(1) == "item 1", "what every reader of the cache gets"


SNEAKY = """
CREATE OR REPLACE FUNCTION sneaky() RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('search_path', 'pg_catalog', false);
    RETURN 1;
END $$
"""


def test_a_function_that_changes_the_session_fails_the_read_only_block(
    cache: txcache.Cache,
) -> None:
    """The statement check cannot see into a function; the settings PostgreSQL reports
    show what it changed (search_path is reported from PostgreSQL 18)."""
    write(cache, SNEAKY)
    pid, before = look(cache, "current_setting('search_path')")
    with cache.read_only() as tx:
        with pytest.raises(txcache.TransactionError, match="search_path"):
            tx.query("SELECT sneaky()")
        with pytest.raises(txcache.TransactionError, match="failed"):
            tx.query("SELECT 1")
    assert tx.session_changed
    assert look(cache, "current_setting('search_path')") == (pid, before), "reset, not leaked"


def test_an_async_block_is_failed_and_its_connection_reset_too(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(SNEAKY)

    async def main() -> str:
        cache = await txcache.connect_async(database, nodes=(), mode="bypass", pool_size=1)
        try:
            async with cache.read_only() as tx:
                with pytest.raises(txcache.TransactionError, match="search_path"):
                    await tx.query("SELECT sneaky()")
            async with cache.read_only() as tx:
                row = await tx.query_one("SELECT current_setting('search_path')")
        finally:
            await cache.close()
        assert row is not None
        return str(row[0])

    assert asyncio.run(main()) != "pg_catalog", "reset, not leaked"


def test_an_async_write_block_is_watched_too(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(SCHEMA)
        admin.execute(SNEAKY)

    async def main() -> tuple[str, str]:
        cache = await txcache.connect_async(database, nodes=(), mode="bypass", pool_size=1)
        try:
            async with cache.read_write() as tx:
                await tx.execute("UPDATE items SET name = %s WHERE id = %s", ("item 1", 1))
                await tx.execute("SELECT sneaky()")
            async with cache.read_only() as ro:
                changed = await ro.query_one("SELECT current_setting('search_path')")
            async with cache.read_write() as tx:
                await tx.execute("SELECT nextval('tickets')")
            async with cache.read_only() as ro:
                sequences = await ro.query_one("SELECT seen_in_session('tickets')::text")
        finally:
            await cache.close()
        assert changed is not None
        assert sequences is not None
        return str(changed[0]), str(sequences[0])

    assert asyncio.run(main()) == ('"$user", public', "false")


def test_the_reset_pins_back_exactly_the_settings_it_reset(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'Asia/Tokyo'")
        row = conn.execute(txcache._session.READ_CONTEXT).fetchone()
        context = txcache._session.context_from_row(row)
        conn.execute("RESET ALL")
        changed = conn.execute(txcache._session.pin_statement(context)).fetchone()
        assert changed == (1,), "only TimeZone differed from its reset value"
        assert conn.execute("SHOW TimeZone").fetchone() == ("Asia/Tokyo",)
        assert conn.execute(txcache._session.pin_statement(context)).fetchone() == (0,)


# Functions that change what PostgreSQL does not report to the client: only the context
# check after the statement (txcache._session.CHECK_CONTEXT) or at the block's end sees it.
UNREPORTED = """
CREATE OR REPLACE FUNCTION fewer_digits() RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('extra_float_digits', '-3', false);
    RETURN 1;
END $$;
CREATE OR REPLACE FUNCTION become(role text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('role', role, false);
    RETURN role;
END $$;
"""


@txcache.cacheable
def a_third() -> str:
    row = txcache.query_one("SELECT (1::float8 / 3)::text")
    assert row is not None
    return str(row[0])


def test_a_function_changing_what_postgres_does_not_report_fails_the_read_only_block(
    lib1: LibraryStack,
) -> None:
    """extra_float_digits is in every key and PostgreSQL does not report it: without the
    check, the block's next cacheable call would store a value computed under -3 under
    the keys of the pool's 1, and the parked transaction would take the change along."""
    lib1.write(UNREPORTED)
    lib1.caught_up()
    lib1.fresh_pins()
    with lib1.cache.read_only(staleness=60) as tx:
        with pytest.raises(txcache.TransactionError, match="extra_float_digits"):
            tx.query("SELECT fewer_digits()")
        with pytest.raises(txcache.TransactionError, match="failed"):
            a_third()
    assert tx.session_changed
    with lib1.cache.read_only(staleness=60) as tx:
        assert a_third() == "0.3333333333333333", "the pool's session, reset"
        assert tx.query_one("SHOW extra_float_digits") == ("1",)


def test_a_function_changing_the_role_fails_the_read_only_block(lib1: LibraryStack) -> None:
    lib1.write(UNREPORTED)
    lib1.caught_up()
    lib1.fresh_pins()
    with lib1.cache.read_only(staleness=60) as tx:
        role = tx.query_one("SELECT current_user")
        with pytest.raises(txcache.TransactionError, match=r"role|is_superuser"):
            tx.query("SELECT become('pg_read_all_data')")
    with lib1.cache.read_only(staleness=60) as tx:
        assert tx.query_one("SELECT current_user") == role


@pytest.mark.parametrize(
    ("statement", "shown", "expected"),
    [
        ("SELECT fewer_digits()", "current_setting('extra_float_digits')", "1"),
        ("SELECT become('pg_read_all_data')", "current_user::text", None),
        ("INSERT INTO audited VALUES (1)", "current_setting('extra_float_digits')", "1"),
    ],
    ids=["function", "role", "trigger"],
)
def test_a_write_block_that_changed_its_session_unseen_is_reset_in_full(
    cache: txcache.Cache, database: str, statement: str, shown: str, expected: str | None
) -> None:
    """The statement says nothing of it (a function's or a trigger's set_config, which
    the COMMIT keeps): the context check beside the sequences' reset sees it."""
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute(UNREPORTED)
        admin.execute(
            "CREATE TABLE audited (id integer);"
            "CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "PERFORM set_config('extra_float_digits', '-3', false); RETURN NEW; END $$;"
            "CREATE TRIGGER audit BEFORE INSERT ON audited FOR EACH ROW EXECUTE FUNCTION audit()"
        )
        role = admin.execute("SELECT current_user::text").fetchone()
    assert role is not None
    pid = write(cache, statement)
    assert look(cache, shown) == (pid, expected or role[0]), "reset, not leaked"


def test_a_setting_local_to_a_transaction_does_not_reach_the_next_block(
    lib1: LibraryStack,
) -> None:
    """A row-security app's tenant, set for the transaction by a function (unseen by the
    analysis): the next block would share the database transaction were it parked."""
    lib1.write(
        "CREATE FUNCTION set_tenant(tenant text) RETURNS text LANGUAGE sql "
        "AS $$ SELECT set_config('app.tenant', tenant, true) $$"
    )
    lib1.caught_up()
    lib1.fresh_pins()
    with lib1.cache.read_only(staleness=60) as tx:
        assert tx.query_one("SELECT set_tenant('a')") == ("a",)
    for _ in range(2):
        with lib1.cache.read_only(staleness=60) as tx:
            assert tx.query_one("SELECT current_setting('app.tenant', true)") in {(None,), ("",)}
