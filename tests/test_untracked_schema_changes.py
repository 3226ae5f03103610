"""Schema changes no DDL trigger reports, against the real stack.

Event triggers do not fire for everything (a managed service may exempt its roles, a
superuser may disable them, some services allow none). With the triggers installed the
agent's schema check finds what they missed and invalidates everything; without them,
``--ddl-tracking fingerprint`` checks the catalog's fingerprint at every pin and libraries
store a value only once a later pin shows the catalog its queries ran with
(docs/agent.md, "Without event triggers"; docs/library.md, "Without event triggers").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

import txcache
from cached_reads import assert_invalidated, cached, read, rows_of, runs, truth
from conftest import running_agent
from library_fixtures import (
    AGENT_ARGS,
    EVENT_TRIGGERS,
    FINGERPRINTS,
    LibraryStack,
    drop_event_triggers,
)
from txcache import protocol, setup_database
from txcache._lsn import wal_position
from txcache.stack import wait_until

# Every check logged, for the failure messages.
SCHEMA_CHECKS = (
    *AGENT_ARGS,
    *("--schema-check-interval", "100ms"),
    *("--log", "info,txcache_agent::schema_watch=debug"),
)


@pytest.fixture
def checked(database: str) -> Iterator[LibraryStack]:
    """The library stack, its agent checking the schema every 100 ms."""
    with LibraryStack(database, agent_args=SCHEMA_CHECKS) as stack:
        yield stack


def untracked(lib: LibraryStack, *statements: str) -> None:
    """Run ``statements`` with the DDL triggers disabled, as a role a managed service
    exempts from them would."""
    for trigger in EVENT_TRIGGERS:
        lib.admin.execute(f"ALTER EVENT TRIGGER {trigger} DISABLE")
    try:
        for statement in statements:
            lib.admin.execute(statement)
    finally:
        for trigger in EVENT_TRIGGERS:
            lib.admin.execute(f"ALTER EVENT TRIGGER {trigger} ENABLE ALWAYS")


def untracked_changes(lib: LibraryStack) -> int:
    """The agent's ``untracked_schema_changes``."""
    with protocol.connect(lib.agent_address) as agent:
        return agent.run(protocol.agent_status())["untracked_schema_changes"]


def checked_digest(lib: LibraryStack) -> bool:
    """Whether the agent has checked the schema as it is now."""
    row = lib.admin.execute(
        "SELECT digest = txcache.schema_digest() FROM txcache.schema_check"
    ).fetchone()
    return bool(row and row[0])


def wait_while_reading(lib: LibraryStack, condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition`` while the library keeps asking for pins: the agent checks
    the schema only while libraries read."""
    agent = lib.cache.agent
    assert agent is not None

    def reading() -> bool:
        agent.pin_now()
        return condition()

    wait_until(reading, what, timeout=30, log=running_agent(lib).log_text)


def test_a_view_redefined_where_no_trigger_fires_is_found_and_invalidated(
    checked: LibraryStack,
) -> None:
    """No DDL notice and no write follows: only the schema check can see it."""
    lib = checked
    lib.write("CREATE VIEW cheap AS SELECT id, name FROM items WHERE price < 50")
    query = "SELECT id FROM cheap ORDER BY id"
    before = cached(lib, query)
    untracked(lib, "CREATE OR REPLACE VIEW cheap AS SELECT id, name FROM items WHERE price < 100")
    wait_until(
        lambda: read(lib, query) != before,
        "a read through the view to see its new definition",
        timeout=30,
        log=running_agent(lib).log_text,
    )
    assert untracked_changes(lib) == 1
    running_agent(lib).wait_for_log("the schema changed without a DDL notice")
    lib.caught_up()
    lib.fresh_pins()
    assert read(lib, query) == truth(lib, query)


def test_a_change_no_trigger_saw_is_found_though_a_later_ddl_reports_a_digest_with_it(
    checked: LibraryStack,
) -> None:
    """A migration that switches the triggers off, redefines a view, switches them back on
    and runs a tracked DDL, all in one transaction: the digest that DDL reports includes
    the redefinition, so only the digest it found as it started — not the one the DDL
    before it left — tells that the schema changed unseen."""
    lib = checked
    lib.write("CREATE VIEW cheap AS SELECT id, name FROM items WHERE price < 50")
    query = "SELECT id FROM cheap ORDER BY id"
    cached(lib, query)
    wait_while_reading(lib, lambda: checked_digest(lib), "the agent to check the schema")
    with lib.admin.transaction():
        for trigger in EVENT_TRIGGERS:
            lib.admin.execute(f"ALTER EVENT TRIGGER {trigger} DISABLE")
        lib.admin.execute("CREATE OR REPLACE VIEW cheap AS SELECT id, name FROM items")
        for trigger in EVENT_TRIGGERS:
            lib.admin.execute(f"ALTER EVENT TRIGGER {trigger} ENABLE ALWAYS")
        lib.admin.execute("CREATE TABLE unrelated (x integer)")
    wait_while_reading(
        lib, lambda: untracked_changes(lib) == 1, "the schema check to find the redefinition"
    )
    lib.caught_up()
    lib.fresh_pins()
    assert read(lib, query) == truth(lib, query)


def test_a_policy_dropped_where_no_trigger_fires_is_found(checked: LibraryStack) -> None:
    """A dropped row security policy leaves no new catalog row: the digest still differs."""
    lib = checked
    lib.write(
        "ALTER TABLE items ENABLE ROW LEVEL SECURITY; ALTER TABLE items FORCE ROW LEVEL SECURITY;"
        "CREATE POLICY everything ON items USING (true)"
    )
    wait_while_reading(lib, lambda: checked_digest(lib), "the agent to check the schema")
    untracked(lib, "DROP POLICY everything ON items")
    wait_while_reading(
        lib, lambda: untracked_changes(lib) == 1, "the schema check to find the dropped policy"
    )


def test_schema_changes_the_triggers_report_are_not_counted_as_missed(
    checked: LibraryStack,
) -> None:
    lib = checked
    lib.commit(
        "CREATE VIEW cheap AS SELECT id FROM items WHERE price < 50",
        "CREATE FUNCTION thrice(integer) RETURNS integer LANGUAGE sql AS 'SELECT $1 * 3'",
    )
    lib.commit("ALTER TABLE items ADD COLUMN extra integer DEFAULT 5")
    wait_while_reading(
        lib, lambda: checked_digest(lib), "the agent to check the schema after the changes"
    )
    assert untracked_changes(lib) == 0


@pytest.fixture
def table_t(database: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to a set-up database with table ``t``."""
    setup_database(database)
    with psycopg.connect(database, autocommit=True) as db:
        db.execute("CREATE TABLE t (id integer PRIMARY KEY, v integer DEFAULT 1)")
        yield db


def text_of(db: psycopg.Connection, statement: str) -> str:
    """The one value ``statement`` returns, as text."""
    row = db.execute(statement).fetchone()
    assert row is not None
    return str(row[0])


def test_the_schema_digest_follows_definitions_not_maintenance(table_t: psycopg.Connection) -> None:
    db = table_t

    def digest() -> str:
        return text_of(db, "SELECT txcache.schema_digest()")

    changes = [
        "CREATE VIEW v AS SELECT id FROM t WHERE v > 0",
        "CREATE OR REPLACE VIEW v AS SELECT id FROM t WHERE v > 1",
        "ALTER TABLE t ALTER COLUMN v SET DEFAULT 2",
        "CREATE FUNCTION f() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "CREATE OR REPLACE FUNCTION f() RETURNS integer LANGUAGE sql AS 'SELECT 2'",
        "CREATE TYPE mood AS ENUM ('sad')",
        "ALTER TYPE mood ADD VALUE 'happy'",
        "ALTER TABLE t ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY p ON t USING (v > 0)",
        "DROP POLICY p ON t",
        "GRANT SELECT ON t TO PUBLIC",
        "ALTER TABLE t RENAME COLUMN v TO w",
        "CREATE SCHEMA other",
        "CREATE TABLE other.t (id integer)",
        "CREATE INDEX t_w ON t (w)",
        "DROP INDEX t_w",
        "CREATE PUBLICATION elsewhere FOR TABLE other.t",
        "ALTER PUBLICATION elsewhere ADD TABLES IN SCHEMA public",
        "CREATE TEXT SEARCH CONFIGURATION words (COPY = english)",
        "ALTER TEXT SEARCH CONFIGURATION words ALTER MAPPING FOR word WITH simple",
        "CREATE COLLATION plain (provider = libc, locale = 'C')",
        "CREATE AGGREGATE total(integer) (SFUNC = int4pl, STYPE = integer)",
        "CREATE TYPE span AS RANGE (SUBTYPE = integer)",
        "CREATE FOREIGN DATA WRAPPER nowhere",
        "CREATE SERVER far FOREIGN DATA WRAPPER nowhere",
        "CREATE OPERATOR FAMILY ints USING btree",
    ]
    now = digest()
    for change in changes:
        db.execute(change)
        before, now = now, digest()
        assert now != before, f"the digest did not change with {change!r}"
    for maintenance in (
        "INSERT INTO t SELECT i, i FROM generate_series(1, 1000) i",
        "VACUUM (ANALYZE, FREEZE) t",
        "TRUNCATE t",
        "CLUSTER t USING t_pkey",
        "REINDEX TABLE t",
        "CREATE SEQUENCE counter",
        "ALTER SEQUENCE counter RESTART",
    ):
        db.execute(maintenance)
    assert digest() == now, "maintenance changed the digest"


def test_the_fingerprint_changes_for_good_and_not_with_vacuum(table_t: psycopg.Connection) -> None:
    """With row versions, a change undone still leaves another fingerprint, and so does
    anything that gives a relation a new file node; VACUUM and ANALYZE update in place."""
    db = table_t

    def fingerprint() -> str:
        return text_of(db, "SELECT txcache.schema_fingerprint(true)")

    seen = {fingerprint()}
    for change in (
        "ALTER TABLE t ALTER COLUMN v SET DEFAULT 2",
        "ALTER TABLE t ALTER COLUMN v SET DEFAULT 1",  # back as it was
        "TRUNCATE t",
        "CLUSTER t USING t_pkey",
        "ALTER TABLE t ALTER COLUMN v TYPE bigint",
    ):
        db.execute(change)
        now = fingerprint()
        assert now not in seen, f"the fingerprint did not change for good with {change!r}"
        seen.add(now)
    db.execute("INSERT INTO t SELECT i, i FROM generate_series(1, 1000) i")
    db.execute("VACUUM (ANALYZE, FREEZE) t")
    db.execute("ANALYZE t")
    db.execute("VACUUM (FREEZE) pg_class, pg_attribute, pg_rewrite")  # xmin is kept
    assert fingerprint() == now, "maintenance in place changed the fingerprint"


# -- without event triggers: --ddl-tracking fingerprint ---------------------------------------


@pytest.fixture
def fingerprinted(database: str) -> Iterator[LibraryStack]:
    """The library stack without event triggers, its agent checking fingerprints."""
    with LibraryStack(database, safe_functions=["twice"], agent_args=FINGERPRINTS) as stack:
        drop_event_triggers(stack)
        stack.fresh_pins()
        agent = stack.cache.agent
        assert agent is not None
        assert agent.fingerprints
        yield stack


def changed(lib: LibraryStack, *statements: str) -> int:
    """Run ``statements`` in one transaction no trigger sees; a ``not_before`` after it,
    once the agent has a pin that shows it (the pin after the change announces it) and
    both nodes applied the announcement."""
    with lib.admin.transaction():
        for statement in statements:
            lib.admin.execute(statement)
    position = wal_position(lib.admin)
    lib.fresh_pins(after=position)
    lib.caught_up()
    return position + 1


def test_without_triggers_a_redefined_view_is_read_anew(fingerprinted: LibraryStack) -> None:
    """The case found by hand: a filter removed from a view and a column added with a default,
    then a read after both: it must not be served the old rows or the old row shape."""
    lib = fingerprinted
    changed(lib, "CREATE VIEW cheap AS SELECT id, name FROM items WHERE price < 50")
    through_view, whole_row = "SELECT id FROM cheap ORDER BY id", "SELECT * FROM items WHERE id = 3"
    before = cached(lib, through_view)
    shape = cached(lib, whole_row)
    token = changed(
        lib,
        "CREATE OR REPLACE VIEW cheap AS SELECT id, name FROM items",
        "ALTER TABLE items ADD COLUMN extra integer DEFAULT 5",
    )
    assert assert_invalidated(lib, through_view, token) != before
    assert assert_invalidated(lib, whole_row, token) == [(*shape[0], 5)]
    assert cached(lib, whole_row) == [(*shape[0], 5)]


def test_without_triggers_a_redefined_function_is_read_anew(fingerprinted: LibraryStack) -> None:
    lib = fingerprinted
    define = "CREATE OR REPLACE FUNCTION twice(integer) RETURNS integer LANGUAGE sql AS "
    changed(lib, define + "'SELECT $1 * 2'")
    query = "SELECT twice(id) FROM items WHERE id = 3"
    assert cached(lib, query) == [(6,)]
    token = changed(lib, define + "'SELECT $1 * 20'")
    assert assert_invalidated(lib, query, token) == [(60,)]


@pytest.fixture
def pins_on_demand(database: str) -> Iterator[LibraryStack]:
    """The stack without event triggers, its agent taking pins only when asked (``PIN``):
    a test decides whether the agent has seen a schema change yet."""
    args = ("--pin-interval", "1h", "--heartbeat-interval", "50ms", "--ddl-tracking", "fingerprint")
    with LibraryStack(database, agent_args=args) as stack:
        drop_event_triggers(stack)
        yield stack


def test_a_value_computed_while_the_schema_changed_is_never_stored(
    pins_on_demand: LibraryStack,
) -> None:
    """PostgreSQL runs a query at an old snapshot with the current catalog: a view
    redefined after the transaction's pin is read with its new definition. Nothing tells
    the library at once; the value waits for a pin taken after its query, which shows
    another fingerprint, and is dropped."""
    lib = pins_on_demand
    changed(lib, "CREATE VIEW cheap AS SELECT id FROM items WHERE price < 50")
    with lib.cache.read_only(staleness=60):  # the library reads the catalog the pin shows
        txcache.query("SELECT count(*) FROM cheap")
    lib.admin.execute("CREATE OR REPLACE VIEW cheap AS SELECT id FROM items WHERE price < 100")
    query = "SELECT id FROM cheap WHERE id > %s ORDER BY id"
    unverified = rows_of.stats.inserts["unverified"]
    runs.clear()
    assert read(lib, query, 0) == truth(lib, query, 0)
    assert runs == [query], "the read should have been a miss"
    assert len(lib.cache.pending_stores) == 1, "the value should wait for a later pin"

    token = changed(lib)  # the agent takes a pin: it sees the new definition
    with lib.cache.read_only():
        pass  # a block's end settles the waiting values
    assert len(lib.cache.pending_stores) == 0
    assert rows_of.stats.inserts["unverified"] == unverified + 1
    assert_invalidated(lib, query, token, 0)
