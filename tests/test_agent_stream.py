"""The agent's invalidation stream, end to end: real PostgreSQL, txcache-agent, txcached.

Each test registers *probes* at the node: open versions that depend on one tag each. A
commit carrying a matching tag truncates the probe at the commit's LSN, so which probes a
write truncated shows exactly which tags reached the node, and when.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import redis

from agent_fixtures import Stack
from conftest import info, running_agent
from txcache.stack import wait_until


def test_insert_update_delete_tag_old_and_new_values(stack: Stack) -> None:
    item = "public.items"
    probes = stack.probe(
        f"{item}:id=1",
        f"{item}:id=2",
        f"{item}:sku=a:1 b",
        f"{item}:category=5",
        f"{item}:category=6",
        f"{item}:ref=6f1c2a4e-0000-4000-8000-000000000001",
        f"{item}:added=2026-11-22",
        f"{item}:price=9.50",
        item,
    )
    before, after = stack.write(
        "INSERT INTO items VALUES (1, 'a:1 b', 5, 9.5, '6f1c2a4e-0000-4000-8000-000000000001', "
        "'2026-11-22')"
    )
    hit = stack.truncated(probes)
    for tag in [
        f"{item}:id=1",
        f"{item}:sku=a:1 b",
        f"{item}:category=5",
        f"{item}:ref=6f1c2a4e-0000-4000-8000-000000000001",
        f"{item}:added=2026-11-22",
        item,
    ]:
        bound = hit[tag]
        assert bound is not None, tag
        assert before < bound <= after, tag
    # Not an index column, another id, another category: untouched.
    assert hit[f"{item}:price=9.50"] is None
    assert hit[f"{item}:id=2"] is None
    assert hit[f"{item}:category=6"] is None

    # An update moving the row between categories tags the old and the new value.
    probes = stack.probe(f"{item}:category=5", f"{item}:category=6", f"{item}:id=2")
    before, after = stack.write("UPDATE items SET category = 6 WHERE id = 1")
    hit = stack.truncated(probes)
    moved = hit[f"{item}:category=5"]
    assert moved is not None
    assert before < moved <= after
    assert hit[f"{item}:category=5"] == hit[f"{item}:category=6"]
    assert hit[f"{item}:id=2"] is None

    # A delete tags the old row's values.
    probes = stack.probe(f"{item}:sku=a:1 b", f"{item}:category=6", f"{item}:category=5")
    stack.write("DELETE FROM items WHERE id = 1")
    hit = stack.truncated(probes)
    assert hit[f"{item}:sku=a:1 b"] is not None
    assert hit[f"{item}:category=6"] is not None
    assert hit[f"{item}:category=5"] is None


def test_truncate_and_ddl_invalidate_the_whole_table(stack: Stack) -> None:
    item = "public.items"
    stack.write("INSERT INTO items (id, category) VALUES (1, 1), (2, 2)")
    probes = stack.probe(f"{item}:id=1", f"{item}:id=99", f"{item}:price=1.00")
    stack.write("TRUNCATE items")
    assert all(stack.truncated(probes).values())

    # A new index makes price a tag column: DDL invalidates the table, then price is tagged.
    probes = stack.probe(f"{item}:id=42", f"{item}:price=1.00")
    stack.write("CREATE INDEX ON items (price)")
    assert all(stack.truncated(probes).values())
    stack.write("INSERT INTO items (id, price) VALUES (3, 7)")
    probes = stack.probe(f"{item}:price=7.00", f"{item}:price=8.00")
    stack.write("UPDATE items SET price = 8 WHERE id = 3")
    hit = stack.truncated(probes)
    assert hit[f"{item}:price=7.00"] is not None
    assert hit[f"{item}:price=8.00"] is not None


def test_transactions_arrive_in_commit_order(stack: Stack) -> None:
    probes = stack.probe(*(f"public.items:id={n}" for n in range(10)))
    for n in range(10):
        stack.write("INSERT INTO items (id) VALUES (%s)", n)
    bounds = [stack.truncated(probes)[f"public.items:id={n}"] for n in range(10)]
    assert all(bound is not None for bound in bounds)
    assert bounds == sorted(bound for bound in bounds if bound is not None)
    assert len(set(bounds)) == 10


def test_a_fresh_node_is_reset_once_then_streamed(stack: Stack) -> None:
    stack.caught_up()
    assert info(stack.cache, "txcache")["resets"] == 1


def test_heartbeats_move_the_node_when_nothing_commits(stack: Stack) -> None:
    first = stack.caught_up()
    wait_until(
        lambda: stack.cache.execute_command("TXSTATUS")[0] > first,
        "a heartbeat to move the idle node",
        log=running_agent(stack).log_text,
    )
    assert info(stack.cache, "txcache")["heartbeats"] > 0


def test_nothing_is_lost_when_the_agent_is_killed(stack: Stack) -> None:
    rows = 200
    stack.write("INSERT INTO items (id, category) SELECT n, 0 FROM generate_series(0, %s) n", rows)
    probes = stack.probe(*(f"public.items:id={n}" for n in range(rows)))
    resets_before = info(stack.cache, "txcache")["resets"]
    updated: set[int] = set()
    stop = threading.Event()

    def writer() -> None:
        generator = random.Random(7)
        with psycopg.connect(stack.dsn, autocommit=True) as db:
            while not stop.is_set() and len(updated) < rows // 2:
                row = generator.randrange(rows)
                db.execute("UPDATE items SET category = category + 1 WHERE id = %s", (row,))
                updated.add(row)
                time.sleep(0.002)  # a steady trickle of commits, across the agent's deaths

    thread = threading.Thread(target=writer)
    thread.start()
    killer = random.Random(11)
    for _ in range(3):
        # Deliberately at a random moment of the writes: the kill may hit any state.
        time.sleep(killer.uniform(0.05, 0.4))
        running_agent(stack).kill()
        stack.restart_agent()
    stop.set()
    thread.join()
    hit = stack.truncated(probes)
    missing = sorted(n for n in updated if hit[f"public.items:id={n}"] is None)
    assert not missing, f"updates of rows {missing} never reached the node"
    spurious = sorted(n for n in range(rows) if n not in updated and hit[f"public.items:id={n}"])
    assert not spurious, f"rows {spurious} were never updated but their probes were truncated"
    # Replayed from the slot, not reset: the node kept every open entry it could.
    assert info(stack.cache, "txcache")["resets"] == resets_before


def test_tag_column_catalog_is_served_with_versions(stack: Stack) -> None:
    agent = running_agent(stack)
    endpoint = redis.Redis(host=agent.host, port=agent.port, protocol=2)
    stack.caught_up()
    versions = endpoint.execute_command("TAGCOLUMNS")
    since, tables = versions[-1]
    columns = dict(tables)[b"public.items"]
    assert sorted(columns) == [b"added", b"category", b"id", b"ref", b"sku"]
    before, _ = stack.write("CREATE INDEX ON items (price)")
    stack.caught_up()
    since, tables = endpoint.execute_command("TAGCOLUMNS")[-1]
    # From where the agent read the catalog after the DDL: past the DDL, not past now.
    assert before < since <= stack.wal_position()
    assert b"price" in dict(tables)[b"public.items"]
    endpoint.close()


def test_a_catalog_read_after_a_reconnect_applies_from_where_it_was_read(stack: Stack) -> None:
    """Regression: a session reading the catalog after a reconnect published it from
    position 0, so a DDL committed while the stream was down had its columns apply to
    snapshots before it, whose later commits the node had received without them."""
    agent = running_agent(stack)
    endpoint = redis.Redis(host=agent.host, port=agent.port, protocol=2)
    stack.caught_up()
    before = stack.wal_position()
    stack.db.execute(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
        " WHERE active_pid IS NOT NULL"
    )
    stack.db.execute("CREATE INDEX ON items (price)")  # while the agent waits to reconnect
    stack.caught_up()
    versions = endpoint.execute_command("TAGCOLUMNS")
    with_price = [since for since, tables in versions if b"price" in dict(tables)[b"public.items"]]
    assert with_price, versions
    assert min(with_price) > before, "a version applies from before the DDL that brought it"
    endpoint.close()


def test_a_ddl_is_read_only_once_it_is_visible(stack: Stack) -> None:
    """Regression: a DDL's commit is decoded before the transaction becomes visible; the
    agent re-read the catalog in between, missed the index the DDL created, and moved the
    node past the DDL with the old tag columns. A synchronous-replication wait for an absent
    standby holds the DDL in that window for as long as the test needs."""
    agent = running_agent(stack)
    endpoint = redis.Redis(host=agent.host, port=agent.port, protocol=2)
    stack.caught_up()
    with commits_held(stack.dsn) as held:
        before = stack.wal_position()
        ddl = held.run("CREATE INDEX ON items (price)")
        wait_until(
            lambda: agent_status(endpoint)["commit_position"] > before,
            "the agent to decode the held DDL's commit",
            log=running_agent(stack).log_text,
        )
        decoded = agent_status(endpoint)["commit_position"]
        # Deliberately idle: nothing will happen to wait for if the agent is right; what
        # the node would receive, it receives in this time.
        time.sleep(0.5)
        assert stack.cache.execute_command("TXSTATUS")[0] < decoded, (
            "the node passed the DDL before its tag columns could be read"
        )
    ddl.join()
    stack.caught_up()
    since, tables = endpoint.execute_command("TAGCOLUMNS")[-1]
    assert since > decoded, "the version applies from where the catalog was read, after the DDL"
    assert b"price" in dict(tables)[b"public.items"]
    endpoint.close()


def agent_status(endpoint: redis.Redis) -> dict[str, int]:
    """The agent's ``STATUS`` fields."""
    lines = endpoint.execute_command("STATUS").decode().splitlines()
    fields = (line.split(":", 1) for line in lines)
    return {name: int(value) for name, value in fields if value.isdigit()}


class HeldCommits:
    """Statements whose commits wait for an absent synchronous standby."""

    def __init__(self, dsn: str, admin: psycopg.Connection):
        self.dsn = dsn
        self.admin = admin

    def start(self, statement: str) -> tuple[threading.Thread, int]:
        """Runs ``statement`` in a session of its own, on a thread; the thread and the
        session's backend pid."""
        session = psycopg.connect(self.dsn, autocommit=True)
        pid = session.info.backend_pid

        def execute() -> None:
            with session:
                session.execute(statement)

        thread = threading.Thread(target=execute, daemon=True)
        thread.start()
        return thread, pid

    def run(self, statement: str) -> threading.Thread:
        """Runs ``statement`` in a session of its own; returns once its commit waits."""
        thread, pid = self.start(statement)
        wait_until(lambda: self.waits(pid), f"the commit of {statement!r} to wait")
        return thread

    def waits(self, pid: int) -> bool:
        """Whether backend ``pid`` waits for the standby."""
        query = "SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = %s"
        row = self.admin.execute(query, (pid,)).fetchone()
        return bool(row and row[0])


# A transaction that writes WAL, so that its commit waits for the standby; the agent ignores
# its message.
PROBE_COMMIT = "SELECT pg_logical_emit_message(true, 'txcache-test-probe', '')"


@contextmanager
def commits_held(dsn: str) -> Iterator[HeldCommits]:
    """Every commit of the server waits until the block ends (then all are released)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'txcache_test_absent'")
        admin.execute("SELECT pg_reload_conf()")
        try:
            held = HeldCommits(dsn, admin)
            probe: tuple[threading.Thread, int] | None = None

            def a_commit_waits() -> bool:
                # Commits wait once the checkpointer has reloaded the setting: until a
                # probe transaction's commit waits, start another.
                nonlocal probe
                if probe is None or not probe[0].is_alive():
                    probe = held.start(PROBE_COMMIT)
                return held.waits(probe[1])

            wait_until(a_commit_waits, "commits to wait for the absent standby")
            yield held
        finally:
            admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            admin.execute("SELECT pg_reload_conf()")


def test_a_commit_right_after_a_heartbeat_is_not_swallowed(stack: Stack) -> None:
    """Regression: a heartbeat decoded at LSN L vouched for L itself, where the next commit
    record may start; that commit's invalidation was then dropped as a duplicate."""
    emit = "SELECT pg_logical_emit_message(false, 'txcache-heartbeat', %s, true)::text"
    with psycopg.connect(stack.dsn, autocommit=True) as other:
        if other.info.server_version < 170000:  # the agent's own form there: no flush
            emit = "SELECT pg_logical_emit_message(false, 'txcache-heartbeat', %s)::text"
        for n in range(100, 110):
            probes = stack.probe(f"public.items:id={n}")
            with stack.db.transaction():
                stack.db.execute("INSERT INTO items (id) VALUES (%s)", (n,))
                heartbeat = other.execute(emit, (str(int(time.time() * 1e6)),)).fetchone()
            commit = stack.truncated(probes)[f"public.items:id={n}"]
            assert commit is not None, f"commit after the heartbeat at {heartbeat} was lost"


def test_a_detached_partition_is_named_though_the_agent_never_saw_it_attached(stack: Stack) -> None:
    """Regression (found by ``txcache check``): a DETACH's notice named only the parent and
    the agent added the partition from its own record of the family. An agent that decoded
    the ATTACH only after the DETACH had committed re-read a catalog without the link, so
    the DETACH did not reach the partition's own name: a read of it after the DETACH claimed
    to hold back to the ATTACH, across writes that went out under the parent's name."""
    stack.write("CREATE TABLE ledger (part int, slot int) PARTITION BY LIST (part)")
    stack.write("CREATE TABLE ledger_2 (part int, slot int)")
    stack.caught_up()
    os.kill(running_agent(stack).process.pid, signal.SIGSTOP)
    try:
        stack.write("ALTER TABLE ledger ATTACH PARTITION ledger_2 FOR VALUES IN (2)")
        stack.write("INSERT INTO ledger VALUES (2, 1)")
        before_detach, after_detach = stack.write("ALTER TABLE ledger DETACH PARTITION ledger_2")
    finally:
        os.kill(running_agent(stack).process.pid, signal.SIGCONT)
    stack.caught_up()
    lo, _hi = stack.cache.execute_command("TXINTERVAL", after_detach, "TAGS", "public.ledger_2")[:2]
    assert lo >= before_detach, "a read of the detached partition holds from before its DETACH"
