"""The versioned commands of docs/protocol.md, through redis-py against a real txcached."""

from __future__ import annotations

from typing import Any, cast

import pytest
import redis

from conftest import info
from txcache.stack import wait_until

TAG_A1 = "public.a:id=1"
TAG_A2 = "public.a:id=2"


# redis-py's replies are untyped: these are RESP arrays of mixed values.


def txget(client: redis.Redis, key: str, lo: int, hi: int, *flags: object) -> list[Any]:
    return cast(list[Any], client.execute_command("TXGET", key, lo, hi, *flags))


def txset(
    client: redis.Redis, key: str, value: bytes, lo: int, hi: int | str, *rest: object
) -> list[Any]:
    return cast(list[Any], client.execute_command("TXSET", key, value, lo, hi, *rest))


def test_snapshot_before_the_horizon_is_valid_only_at_the_snapshot(client: redis.Redis) -> None:
    client.execute_command("TXHEARTBEAT", 100, 1)
    assert txset(client, "k", b"v", 0, "OPEN", "SNAPSHOT", 90, "TAGS", TAG_A1) == [
        b"inserted",
        90,
        91,
    ]


def test_open_version_counts_as_valid_through_n_and_is_truncated_by_a_matching_commit(
    client: redis.Redis,
) -> None:
    assert txset(client, "k", b"v1", 0, "OPEN", "SNAPSHOT", 100, "TAGS", TAG_A1) == [
        b"inserted",
        100,
        None,
    ]
    # No stream yet (N = 0): the open version is known valid only at its snapshot.
    assert txget(client, "k", 100, 200) == [b"v1", 100, 101, 1]
    assert client.execute_command("TXHEARTBEAT", 150, 1_000_000) == 1
    assert txget(client, "k", 100, 200) == [b"v1", 100, 151, 1]
    # A commit on another row leaves it open; a matching one truncates it.
    assert client.execute_command("TXINVALIDATE", 155, 1_000_001, TAG_A2) == 1
    assert txget(client, "k", 100, 200) == [b"v1", 100, 156, 1]
    assert client.execute_command("TXINVALIDATE", 160, 1_000_002, TAG_A1) == 1
    assert txget(client, "k", 100, 200) == [b"v1", 100, 160, 0]


def test_misses_say_why(client: redis.Redis) -> None:
    assert txget(client, "never", 1, 2) == [None, b"compulsory"]
    txset(client, "k", b"v", 0, "OPEN", "SNAPSHOT", 100, "TAGS", TAG_A1)
    client.execute_command("TXINVALIDATE", 160, 1, TAG_A1)
    assert txget(client, "k", 170, 180) == [None, b"staleness"]
    assert txget(client, "k", 50, 90) == [None, b"consistency"]
    stats = info(client, "txcache")
    assert stats["misses_compulsory"] == 1
    assert stats["misses_staleness"] == 1
    assert stats["misses_consistency"] == 1


def test_insert_computes_interval_from_history(client: redis.Redis) -> None:
    client.execute_command("TXHEARTBEAT", 100, 1)
    client.execute_command("TXINVALIDATE", 200, 2, TAG_A1)
    client.execute_command("TXINVALIDATE", 300, 3, TAG_A2)
    # Depends on a:id=1, computed at 250: valid since the commit at 200, still open.
    assert txset(client, "x", b"1", 0, "OPEN", "SNAPSHOT", 250, "TAGS", TAG_A1) == [
        b"inserted",
        200,
        None,
    ]
    # Depends on a:id=2, computed at 250: valid from the horizon, until the commit at 300.
    assert txset(client, "y", b"2", 0, "OPEN", "SNAPSHOT", 250, "TAGS", TAG_A2) == [
        b"inserted",
        100,
        300,
    ]
    # The wildcard matches every commit of the table.
    assert txset(client, "z", b"3", 0, "OPEN", "SNAPSHOT", 250, "TAGS", "public.a") == [
        b"inserted",
        200,
        300,
    ]
    # The cache-read interval narrows the result.
    assert txset(client, "w", b"4", 220, 240, "SNAPSHOT", 230, "TAGS", TAG_A1) == [
        b"inserted",
        220,
        240,
    ]


def test_withtags_returns_the_tags_of_an_open_version(client: redis.Redis) -> None:
    txset(client, "k", b"v", 0, "OPEN", "SNAPSHOT", 10, "TAGS", TAG_A1, "public.b")
    value, lo, hi, is_open, tags = txget(client, "k", 10, 10, "WITHTAGS")
    assert (value, lo, hi, is_open) == (b"v", 10, 11, 1)
    assert sorted(tags) == [b"public.a:id=1", b"public.b"]


def test_commit_at_or_before_lo_never_truncates(client: redis.Redis) -> None:
    txset(client, "k", b"v", 0, "OPEN", "SNAPSHOT", 100, "TAGS", TAG_A1)
    assert client.execute_command("TXINVALIDATE", 100, 1, TAG_A1) == 1
    assert txget(client, "k", 100, 100) == [b"v", 100, 101, 1]


def test_extension_and_nondeterminism_are_counted(client: redis.Redis) -> None:
    txset(client, "k", b"same", 10, 20)
    assert txset(client, "k", b"same", 15, 30) == [b"extended", 10, 30]
    assert txset(client, "k", b"other", 25, 40) == [b"nondeterministic", None, None]
    assert txget(client, "k", 25, 25) == [b"same", 10, 30, 0]
    stats = info(client, "txcache")
    assert stats["extensions"] == 1
    assert stats["nondeterminism_warnings"] == 1


def test_snapshot_outside_the_cache_interval_is_refused(client: redis.Redis) -> None:
    client.execute_command("TXHEARTBEAT", 100, 1)
    client.execute_command("TXINVALIDATE", 200, 2, TAG_A1)
    # Cache reads allow [100, 150) but the query ran at 250: it cannot vouch for 100..150.
    with pytest.raises(redis.ResponseError, match="lies outside the interval"):
        txset(client, "k", b"v", 100, 150, "SNAPSHOT", 250, "TAGS", TAG_A1)
    assert txget(client, "k", 0, 1000) == [None, b"compulsory"]


def test_duplicate_invalidations_are_ignored_and_status_reports_position(
    client: redis.Redis,
) -> None:
    assert client.execute_command("TXSTATUS") == [0, None, 0]
    assert client.execute_command("TXINVALIDATE", 50, 7, TAG_A1) == 1
    assert client.execute_command("TXINVALIDATE", 50, 7, TAG_A1) == 0
    assert client.execute_command("TXINVALIDATE", 40, 7, TAG_A1) == 0
    # A late heartbeat does not move N, but its wall-clock time still counts.
    assert client.execute_command("TXHEARTBEAT", 45, 8) == 0
    assert client.execute_command("TXSTATUS") == [50, 50, 8]


def test_reset_bounds_open_versions_at_n(client: redis.Redis) -> None:
    client.execute_command("TXHEARTBEAT", 100, 1)
    assert txset(client, "k", b"v", 0, "OPEN", "SNAPSHOT", 100, "TAGS", TAG_A1)[2] is None
    assert client.execute_command("TXRESET", 500, 2) == b"OK"
    # Still valid through the old N (100), never beyond: the gap may have changed it.
    assert txget(client, "k", 0, 1000) == [b"v", 100, 101, 0]
    assert client.execute_command("TXSTATUS")[0] == 500


def test_invalidation_reaches_keys_on_every_shard(client: redis.Redis) -> None:
    keys = [f"key-{i}" for i in range(64)]
    for key in keys:
        txset(client, key, b"v", 0, "OPEN", "SNAPSHOT", 10, "TAGS", TAG_A1)
    client.execute_command("TXINVALIDATE", 20, 1, "public.a")
    for key in keys:
        assert txget(client, key, 10, 30) == [b"v", 10, 20, 0]


def test_the_global_tag_bounds_every_open_version_and_every_later_insert(
    client: redis.Redis,
) -> None:
    client.execute_command("TXHEARTBEAT", 100, 1)
    keys = [f"key-{i}" for i in range(16)]
    for i, key in enumerate(keys):
        tags = ("TAGS", TAG_A1) if i % 2 else ()
        assert txset(client, key, b"v", 0, "OPEN", "SNAPSHOT", 100, *tags) == [
            b"inserted",
            100,
            None,
        ]
    # DDL whose dependents cannot be known: one commit that may have changed any row.
    assert client.execute_command("TXINVALIDATE", 150, 2, "*") == 1
    for key in keys:
        assert txget(client, key, 100, 200) == [b"v", 100, 150, 0]
    # In the history too: a value computed before it ends there, even one that read no table.
    assert txset(client, "late", b"v", 0, "OPEN", "SNAPSHOT", 120) == [b"inserted", 100, 150]
    client.execute_command("TXHEARTBEAT", 200, 3)
    assert client.execute_command("TXINTERVAL", 160, "TAGS", TAG_A2) == [150, 201, 1]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (("TXGET", "k", 5, 4), r"lo \(5\) must not exceed hi \(4\)"),
        (("TXGET", "k", "x", 4), "lo must be a timestamp"),
        (("TXGET", "k", 1, 2, "BOGUS"), "syntax error"),
        (("TXSET", "k", "v", 0, "OPEN"), "snapshot"),
        (("TXSET", "k", "v", 5, 5), "empty validity interval"),
        (("TXSET", "k", "v", 0, "OPEN", "SNAPSHOT", 1, "TAGS", ":c=1"), "empty table name"),
        (("TXINVALIDATE", 1, 1, "t:c"), "neither"),
        (("TXINVALIDATE", -1, 1), "ts must be a timestamp"),
        (("TXHEARTBEAT", 1), "wrong number of arguments"),
    ],
)
def test_bad_arguments_get_an_error_naming_them(
    client: redis.Redis, command: tuple[object, ...], message: str
) -> None:
    with pytest.raises(redis.ResponseError, match=message):
        client.execute_command(*command)
    assert client.ping()


def test_versioned_and_plain_keys_do_not_mix(client: redis.Redis) -> None:
    client.set("plain", b"v")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        txget(client, "plain", 1, 2)
    txset(client, "versioned", b"v", 1, 2)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.get("versioned")
    assert client.delete("versioned") == 1
    assert txget(client, "versioned", 1, 2) == [None, b"compulsory"]


# -- leases (TXGET … LEASE, TXRELEASE) --------------------------------------------------------


def test_a_miss_with_lease_grants_it_once_and_tells_the_others_how_long_it_lasts(
    client: redis.Redis,
) -> None:
    assert txget(client, "hot", 1, 2, "LEASE", 5000) == [None, b"compulsory", 0]
    held = txget(client, "hot", 1, 2, "LEASE", 5000)
    assert held[:2] == [None, b"compulsory"]
    assert 0 < held[2] <= 5000
    # The waiter does not go to the database: a lease wait, not a miss.
    counts = info(client)
    assert (counts["misses_compulsory"], counts["lease_waits"]) == (1, 1)
    # Without LEASE a miss is as it always was; WITHTAGS and LEASE go together.
    assert txget(client, "hot", 1, 2) == [None, b"compulsory"]
    assert txget(client, "hot", 1, 2, "WITHTAGS", "LEASE", 10)[2] > 0


def test_a_store_ends_the_lease_and_a_release_does_too(client: redis.Redis) -> None:
    assert txget(client, "k", 100, 200, "LEASE", 5000)[2] == 0
    txset(client, "k", b"v", 100, 150)
    assert txget(client, "k", 100, 200, "LEASE", 5000) == [b"v", 100, 150, 0]
    # Outside the stored interval it misses again, and the lease is free.
    assert txget(client, "k", 300, 400, "LEASE", 5000)[2] == 0
    assert client.execute_command("TXRELEASE", "k") == 1
    assert client.execute_command("TXRELEASE", "k") == 0
    assert txget(client, "k", 300, 400, "LEASE", 5000)[2] == 0


def test_an_expired_lease_passes_to_the_next_caller(client: redis.Redis) -> None:
    assert txget(client, "k", 1, 2, "LEASE", 1)[2] == 0
    wait_until(lambda: txget(client, "k", 1, 2, "LEASE", 1)[2] == 0, "the 1 ms lease to expire")


@pytest.mark.parametrize("duration", ["0", "60001", "-1", "x", "1.5"])
def test_a_lease_outside_1_ms_to_a_minute_is_refused(client: redis.Redis, duration: str) -> None:
    with pytest.raises(redis.ResponseError, match="lease"):
        txget(client, "k", 1, 2, "LEASE", duration)
