"""TXINTERVAL (docs/protocol.md): the database interval of a snapshot and tags, storing nothing.

Checked against a real txcached through redis-py: fixed cases, then a differential check of
random streams where TXINTERVAL, the interval TXSET stores for the same snapshot and tags, what
TXGET reports for that version, and a reference model of the rules must all agree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import cast

import pytest
import redis

TAG_A1 = "public.a:id=1"
TAG_A2 = "public.a:id=2"


def txinterval(client: redis.Redis, s: int, *tags: str) -> list[int]:
    reply = client.execute_command("TXINTERVAL", s, *(("TAGS", *tags) if tags else ()))
    return cast(list[int], reply)  # redis-py's replies are untyped


def test_before_any_message_the_interval_holds_at_the_snapshot_alone(client: redis.Redis) -> None:
    # N = 0: a snapshot above it is open from s, known valid at s alone; at N there is no history.
    assert txinterval(client, 5, TAG_A1) == [5, 6, 1]
    assert txinterval(client, 0, TAG_A1) == [0, 1, 0]


def test_interval_follows_the_history(client: redis.Redis) -> None:
    client.execute_command("TXHEARTBEAT", 100, 1)
    client.execute_command("TXINVALIDATE", 120, 2, TAG_A1)
    client.execute_command("TXINVALIDATE", 200, 3, TAG_A2)
    client.execute_command("TXINVALIDATE", 260, 4, "public.a:id=3")
    client.execute_command("TXHEARTBEAT", 300, 5)
    # No later matching commit: open, valid through N.
    assert txinterval(client, 250, TAG_A1) == [120, 301, 1]
    # Bounded by the first later matching commit; from the horizon when none is earlier.
    assert txinterval(client, 150, TAG_A2) == [100, 200, 0]
    assert txinterval(client, 200, TAG_A2) == [200, 301, 1]
    # The query's wildcard matches every row of its table.
    assert txinterval(client, 250, "public.a") == [200, 260, 0]
    # A commit's wildcard matches every fine tag of its table.
    client.execute_command("TXINVALIDATE", 310, 6, "public.a")
    assert txinterval(client, 250, TAG_A1) == [120, 310, 0]
    # Several tags: the latest earlier and the first later commit matching any of them.
    assert txinterval(client, 150, TAG_A1, "public.b:id=1") == [120, 310, 0]
    # Below the horizon, above N, and a query that reads no table.
    assert txinterval(client, 99, TAG_A1) == [99, 100, 0]
    assert txinterval(client, 400, TAG_A1) == [400, 401, 1]
    assert txinterval(client, 250) == [100, 311, 1]
    assert client.execute_command("TXINTERVAL", 250, "TAGS") == [100, 311, 1]


def test_nothing_is_stored(client: redis.Redis) -> None:
    client.execute_command("TXHEARTBEAT", 100, 1)
    txinterval(client, 100, TAG_A1)
    assert client.dbsize() == 0
    assert int(client.info("txcache")["inserts"]) == 0


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (("TXINTERVAL",), "wrong number of arguments"),
        (("TXINTERVAL", "x"), "TXINTERVAL: s must be a timestamp"),
        (("TXINTERVAL", -1), "TXINTERVAL: s must be a timestamp"),
        (("TXINTERVAL", 1, "TAGS", ":c=1"), "TXINTERVAL: .*empty table name"),
        (("TXINTERVAL", 1, "TAGS", "t:c"), "TXINTERVAL: .*neither"),
        (("TXINTERVAL", 1, TAG_A1), "syntax error"),
    ],
)
def test_bad_arguments_get_an_error_naming_them(
    client: redis.Redis, command: tuple[object, ...], message: str
) -> None:
    with pytest.raises(redis.ResponseError, match=message):
        client.execute_command(*command)
    assert client.ping()


@dataclass
class Model:
    """The stream the node was sent, and the rules of the database interval over it."""

    commits: list[tuple[int, list[str]]]
    horizon: int | None = None
    n: int = 0

    @staticmethod
    def matches(query: str, commit: str) -> bool:
        same_table = query.partition(":")[0] == commit.partition(":")[0]
        return same_table and (":" not in query or ":" not in commit or query == commit)

    def expected(self, s: int, tags: list[str]) -> list[int]:
        if s > self.n:
            return [s, s + 1, 1]
        if self.horizon is None or s < self.horizon:
            return [s, s + 1, 0]
        matching = [
            ts
            for ts, commit_tags in self.commits
            if any(self.matches(q, c) for q in tags for c in commit_tags)
        ]
        lo = max([ts for ts in matching if ts <= s] + [self.horizon])
        later = [ts for ts in matching if s < ts <= self.n]
        return [lo, min(later), 0] if later else [lo, max(self.n, lo) + 1, 1]


TABLES = ("public.a", "public.b")


def random_tag(rng: random.Random) -> str:
    table = rng.choice(TABLES)
    return table if rng.random() < 0.1 else f"{table}:id={rng.randint(1, 4)}"


def test_txinterval_agrees_with_txset_txget_and_the_rules(client: redis.Redis) -> None:
    rng = random.Random(20240611)
    model = Model(commits=[])
    ts, clock, key = 1000, 1, 0
    client.execute_command("TXHEARTBEAT", ts, clock)
    model.horizon = model.n = ts
    for _ in range(6):
        for _ in range(25):
            ts, clock = ts + rng.randint(1, 10), clock + 1
            if rng.random() < 0.2:
                assert client.execute_command("TXHEARTBEAT", ts, clock) == 1
            else:
                tags = [random_tag(rng) for _ in range(rng.randint(1, 3))]
                assert client.execute_command("TXINVALIDATE", ts, clock, *tags) == 1
                model.commits.append((ts, tags))
            model.n = ts
        for _ in range(40):
            s = rng.randint(990, model.n + 20)
            tags = [random_tag(rng) for _ in range(rng.randint(0, 3))]
            lo, hi, is_open = interval = txinterval(client, s, *tags)
            assert interval == model.expected(s, tags), (s, tags)
            key += 1
            extra = ("TAGS", *tags) if tags else ()
            stored = client.execute_command("TXSET", key, b"v", 0, "OPEN", "SNAPSHOT", s, *extra)
            # TXSET reports the stored interval (open as nil); TXINTERVAL its effective form.
            assert stored == [b"inserted", lo, None if is_open else hi], (s, tags)
            assert client.execute_command("TXGET", key, s, s) == [b"v", lo, hi, is_open]
