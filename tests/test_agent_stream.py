"""The agent's invalidation stream, end to end: real PostgreSQL, txcache-agent, txcached.

Each test registers *probes* at the node: open versions that depend on one tag each. A
commit carrying a matching tag truncates the probe at the commit's LSN, so which probes a
write truncated shows exactly which tags reached the node, and when.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import redis

from agent_fixtures import Stack
from conftest import info
from txcache import AgentProcess


def test_insert_update_delete_tag_old_and_new_values(stack: Stack):
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
    assert before < hit[f"{item}:category=5"] <= after
    assert hit[f"{item}:category=5"] == hit[f"{item}:category=6"]
    assert hit[f"{item}:id=2"] is None

    # A delete tags the old row's values.
    probes = stack.probe(f"{item}:sku=a:1 b", f"{item}:category=6", f"{item}:category=5")
    stack.write("DELETE FROM items WHERE id = 1")
    hit = stack.truncated(probes)
    assert hit[f"{item}:sku=a:1 b"] is not None
    assert hit[f"{item}:category=6"] is not None
    assert hit[f"{item}:category=5"] is None


def test_truncate_and_ddl_invalidate_the_whole_table(stack: Stack):
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


def test_transactions_arrive_in_commit_order(stack: Stack):
    probes = stack.probe(*(f"public.items:id={n}" for n in range(10)))
    for n in range(10):
        stack.write("INSERT INTO items (id) VALUES (%s)", n)
    bounds = [stack.truncated(probes)[f"public.items:id={n}"] for n in range(10)]
    assert all(bound is not None for bound in bounds)
    assert bounds == sorted(bounds)
    assert len(set(bounds)) == 10


def test_a_fresh_node_is_reset_once_then_streamed(stack: Stack):
    stack.caught_up()
    assert info(stack.cache, "txcache")["resets"] == 1


def test_heartbeats_move_the_node_when_nothing_commits(stack: Stack):
    first = stack.caught_up()
    time.sleep(0.3)
    assert stack.cache.execute_command("TXSTATUS")[0] > first
    assert info(stack.cache, "txcache")["heartbeats"] > 0


def test_nothing_is_lost_when_the_agent_is_killed(stack: Stack):
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
                time.sleep(0.002)

    thread = threading.Thread(target=writer)
    thread.start()
    agent = stack.agent
    killer = random.Random(11)
    for _ in range(3):
        time.sleep(killer.uniform(0.05, 0.4))
        agent.kill()
        agent = AgentProcess(stack.dsn, [stack.node.address], "--heartbeat-interval", "50ms")
    stack.agent = agent
    stop.set()
    thread.join()
    hit = stack.truncated(probes)
    missing = sorted(n for n in updated if hit[f"public.items:id={n}"] is None)
    assert not missing, f"updates of rows {missing} never reached the node"
    spurious = sorted(n for n in range(rows) if n not in updated and hit[f"public.items:id={n}"])
    assert not spurious, f"rows {spurious} were never updated but their probes were truncated"
    # Replayed from the slot, not reset: the node kept every open entry it could.
    assert info(stack.cache, "txcache")["resets"] == resets_before


def test_tag_column_catalog_is_served_with_versions(stack: Stack):
    endpoint = redis.Redis(host=stack.agent.host, port=stack.agent.port, protocol=2)
    versions = endpoint.execute_command("TAGCOLUMNS")
    since, tables = versions[-1]
    columns = dict(tables)[b"public.items"]
    assert sorted(columns) == [b"added", b"category", b"id", b"ref", b"sku"]
    before, after = stack.write("CREATE INDEX ON items (price)")
    stack.caught_up()
    since, tables = endpoint.execute_command("TAGCOLUMNS")[-1]
    assert before < since <= after
    assert b"price" in dict(tables)[b"public.items"]
    endpoint.close()


def test_a_commit_right_after_a_heartbeat_is_not_swallowed(stack: Stack):
    """Regression: a heartbeat decoded at LSN L vouched for L itself, where the next commit
    record may start; that commit's invalidation was then dropped as a duplicate."""
    emit = "SELECT pg_logical_emit_message(false, 'txcache-heartbeat', %s, true)::text"
    with psycopg.connect(stack.dsn, autocommit=True) as other:
        for n in range(100, 110):
            probes = stack.probe(f"public.items:id={n}")
            with stack.db.transaction():
                stack.db.execute("INSERT INTO items (id) VALUES (%s)", (n,))
                heartbeat = other.execute(emit, (str(int(time.time() * 1e6)),)).fetchone()
            commit = stack.truncated(probes)[f"public.items:id={n}"]
            assert commit is not None, f"commit after the heartbeat at {heartbeat} was lost"
