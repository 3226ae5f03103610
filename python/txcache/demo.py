"""``make demo``: a cache node at work, step by step.

Starts a ``txcached``, then plays the part of the application library and of the agent by
hand, printing each command and reply: a versioned insert from a database snapshot, lookups
over a pin-set range, an invalidation from a commit, a consistency miss and a staleness miss,
and the node's statistics. (The full stack — PostgreSQL, the agent and the library — replaces
the hand-played parts as those components land.)
"""

from __future__ import annotations

import time
from typing import Any

import redis

from txcache._node_process import NodeProcess

__all__ = ["main"]

_SHOWN_STATISTICS = (
    "hits",
    "misses_compulsory",
    "misses_consistency",
    "misses_staleness",
    "inserts",
    "invalidations",
    "versions_truncated",
    "keys",
    "versions",
)


def _step(client: redis.Redis, *command: Any, why: str) -> Any:
    reply = client.execute_command(*command)  # type: ignore[no-untyped-call]
    shown = " ".join(str(part) for part in command)
    print(f"  > {shown}\n    {reply!r}\n    ({why})")
    return reply


def _play(client: redis.Redis) -> None:
    now = int(time.time() * 1_000_000)
    print("\nThe agent reports two commits (LSN 1000 and 2000):")
    _step(client, "TXINVALIDATE", 1000, now, "public.items:id=7", why="a write to item 7")
    _step(client, "TXINVALIDATE", 2000, now, "public.users:id=3", why="a write to user 3")
    print("\nThe library caches get_item(42), computed at snapshot 2500:")
    _step(client, "TXHEARTBEAT", 3000, now, why="nothing committed up to 3000")
    _step(
        client, "TXSET", "get_item(42)", "<item 42 v1>", 0, "OPEN",
        "SNAPSHOT", 2500, "TAGS", "public.items:id=42",
        why="no commit touched item 42 since the history began: valid from 1000, still open",
    )  # fmt: skip
    _step(client, "TXGET", "get_item(42)", 2800, 3200, why="a transaction at 2800..3200 hits")
    print("\nA commit at 4000 updates item 42:")
    _step(client, "TXINVALIDATE", 4000, now, "public.items:id=42", why="the agent's message")
    _step(client, "TXGET", "get_item(42)", 4100, 4200, why="a fresh transaction misses")
    _step(client, "TXGET", "get_item(42)", 3500, 4200, why="one that may run at 3500 still hits")
    _step(client, "TXHEARTBEAT", 4200, now, why="nothing else committed up to 4200")
    _step(
        client, "TXSET", "get_item(42)", "<item 42 v2>", 0, "OPEN",
        "SNAPSHOT", 4100, "TAGS", "public.items:id=42", why="the new version, valid from 4000",
    )  # fmt: skip
    _step(client, "TXGET", "get_item(42)", 1000, 1500, why="an old pin: v1 was valid then")
    _step(client, "TXGET", "get_item(42)", 100, 500, why="before v1's interval: a miss")


def main() -> None:
    """Run the demo against a fresh node and print its statistics."""
    with NodeProcess("--max-memory", "64mb") as node:
        print(f"txcached listening on {node.host}:{node.port}")
        client = redis.Redis(host=node.host, port=node.port, protocol=2)
        _play(client)
        stats = client.info("txcache")
        print("\nNode statistics (INFO txcache):")
        for field in _SHOWN_STATISTICS:
            print(f"  {field:>20}: {stats.get(field)}")
        client.close()


if __name__ == "__main__":
    main()
