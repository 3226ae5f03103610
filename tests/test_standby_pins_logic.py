"""Standby pins in the library, without servers: how a refresh merges the agent's pins on
standbys with the primary's (``AgentState``), how the default policy prefers them, how a
standby pin that fails gives way to the primary's pin at its commit point, how a standby
that failed is down until a probe finds it answering (``ReplicaHealth``), and how the
queries that ran on standbys are counted."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from txcache import metrics
from txcache._agent_state import AgentState, UsedPins, refresh_commands, refresh_result
from txcache._pinset import Pin, PinSet, newest_or_fresh, prefer_standbys
from txcache._protocol import Barrier, DatabaseIdentity
from txcache._read_only_core import ReadOnlyCore
from txcache._replicas import MISSING_IN_A_ROW, ReplicaHealth
from txcache._resp import ReplyError
from txcache._stats import OperationLatency
from txcache.stack import wait_until


def pin(ts: int, server: str | None = None, current_as_of: float | None = None) -> Pin:
    now = time.time() if current_as_of is None else current_as_of
    return Pin(ts=ts, snapshot_id=f"{server or 'p'}-{ts}", current_as_of=now, server=server)


def published(state: AgentState, primary: list[Pin], standby: list[Pin]) -> list[Pin]:
    database = DatabaseIdentity("1", 5, "app")
    state._publish(primary, [], Barrier(0, 100), database, (), standby, source="agent")
    return state.pins(staleness=60, not_before=None, now=time.time())


def test_a_refresh_asks_standby_pins_only_with_replicas() -> None:
    used = UsedPins(primary={5}, standby={7})
    assert [c.arguments for c in refresh_commands(used)][-1] == ("NODES",)
    asked = [c.arguments for c in refresh_commands(used, replicas=True)]
    assert asked[0] == ("PINS", "5")
    assert asked[-1] == ("STANDBYPINS", "7", "WANTED")
    # Transactions that ran only on the primary want standby pins too; none, none.
    primary_only = refresh_commands(UsedPins(primary={5}), replicas=True)
    assert primary_only[-1].arguments == ("STANDBYPINS", "WANTED")
    assert refresh_commands(UsedPins(), replicas=True)[-1].arguments == ("STANDBYPINS",)


def test_an_agent_that_cannot_answer_standbypins_lists_none() -> None:
    replies = [[], [], Barrier(0, 1), DatabaseIdentity("1", 5, "app"), ("n:1",)]
    assert refresh_result(replies) == (
        [],
        [],
        Barrier(0, 1),
        DatabaseIdentity("1", 5, "app"),
        ("n:1",),
        [],
    )
    error = ReplyError("ERR unknown command 'STANDBYPINS'")
    assert refresh_result([*replies, error])[-1] == []  # type: ignore[index]
    standby = pin(3, "s1")
    assert refresh_result([*replies, [standby]])[-1] == [standby]  # type: ignore[index]


def test_standby_pins_of_the_replicas_named_join_the_primary_s_in_order() -> None:
    state = AgentState(0.25, replicas=["s1"])
    pins = published(state, [pin(10), pin(30)], [pin(20, "s1"), pin(25, "other")])
    assert [(p.ts, p.server) for p in pins] == [(10, None), (20, "s1"), (30, None)]


def test_a_standby_pin_at_a_primary_pin_s_commit_point_keeps_it_as_its_fallback() -> None:
    state = AgentState(0.25, replicas=["s1", "s2"])
    primary = pin(10)
    pins = published(state, [primary], [pin(10, "s1"), pin(10, "s2")])
    assert [p.ts for p in pins] == [10]
    assert pins[0].server in ("s1", "s2")
    assert pins[0].fallback == primary


def test_a_standby_pin_is_current_as_of_the_later_of_its_own_and_its_fallback_s() -> None:
    state = AgentState(0.25, replicas=["s1"])
    merged = state._merged([pin(10, current_as_of=200.0)], [pin(10, "s1", current_as_of=100.0)])
    assert merged[0].server == "s1"
    assert merged[0].current_as_of == 200.0


def test_without_replicas_standby_pins_are_ignored() -> None:
    state = AgentState(0.25)
    assert [p.server for p in published(state, [pin(10)], [pin(20, "s1")])] == [None]


def test_a_replica_name_the_agent_never_pins_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``replicas={"east": …}`` beside an agent's ``--standby s1=…``: no miss would ever run
    there, and nothing else would say why."""
    state = AgentState(0.25, replicas=["s1", "east"])
    with caplog.at_level(logging.ERROR, logger="txcache"):
        for ts in range(1, 60):
            published(state, [pin(10 * ts)], [pin(10 * ts + 5, "s1")])
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert "names standby(s) east, but the agent pins only s1" in said[0]
    quiet = AgentState(0.25, replicas=["s1"])
    with caplog.at_level(logging.ERROR, logger="txcache"):
        for ts in range(1, 60):
            published(quiet, [pin(10 * ts)], [pin(10 * ts + 5, "s1")])
    assert len(caplog.records) == 1, "a name the agent pins is not said"


def test_the_catalog_covers_only_up_to_the_primary_s_newest_pin() -> None:
    # STANDBYPINS is asked after TAGCOLUMNS: a standby pin newer than the primary's newest
    # may be newer than the catalog the same refresh returned.
    state = AgentState(0.25, replicas=["s1"])
    published(state, [pin(10)], [pin(20, "s1")])
    assert state.covers(10)
    assert not state.covers(20)


def test_the_default_policy_with_replicas_prefers_the_newest_standby_pin() -> None:
    policy = prefer_standbys(newest_or_fresh(5.0))
    now = time.time()
    pin_set = PinSet([pin(10, "s1"), pin(20, "s1"), pin(30)])
    chosen = policy(pin_set, now)
    assert chosen is not None
    assert (chosen.ts, chosen.server) == (20, "s1")
    only_primary = PinSet([pin(30, current_as_of=now)])
    assert policy(only_primary, now) == only_primary.newest()


def test_a_substituted_pin_takes_the_place_of_the_standby_s() -> None:
    primary = pin(10)
    standby = Pin(10, "s-10", time.time(), server="s1", fallback=primary)
    pin_set = PinSet([standby, pin(20)], star=False)
    pin_set.substitute(standby, primary)
    assert [(p.ts, p.server) for p in pin_set] == [(10, None), (20, None)]
    assert not pin_set.star


def test_a_standby_that_failed_is_down_until_a_probe_finds_it_answering() -> None:
    answering = threading.Event()
    probed: list[str] = []

    def probe(dsn: str) -> str | None:
        probed.append(dsn)
        return None if answering.is_set() else "no answer"

    health = ReplicaHealth((("s1", "host=a"),), probe, first_pause=0.01)
    try:
        assert health.usable("s1")
        assert not health.usable("unknown")
        health.failed("s1", "hung")
        assert not health.usable("s1")
        wait_until(lambda: len(probed) >= 2, "two probes of a standby that stays down")
        assert not health.usable("s1")  # a failed probe changes nothing
        answering.set()
        wait_until(lambda: health.usable("s1"), "the probe to find the standby answering")
        assert set(probed) == {"host=a"}
    finally:
        health.close()


def test_a_transaction_leaves_out_the_pins_of_a_standby_that_is_down() -> None:
    """Not even its cache lookups use them: a hit at one would bind the transaction to a
    commit point only the primary's pin of it could then serve. A pin the primary shares
    gives way to the primary's; the others go."""
    health = ReplicaHealth((("s1", "host=a"),), lambda dsn: "no answer", first_pause=60)
    pins = [Pin(10, "s-10", time.time(), server="s1", fallback=pin(10)), pin(20, "s1"), pin(30)]
    agent = SimpleNamespace(pin_set=lambda **_: PinSet(pins, star=False))
    cache: Any = SimpleNamespace(  # the attributes a transaction's start reads
        follow_members=lambda: None,
        mode="consistent",
        ring=object(),
        agent=agent,
        replica_health=health,
    )
    try:
        before = ReadOnlyCore(cache, staleness=5, not_before=None).pin_set
        assert [(p.ts, p.server) for p in before] == [(10, "s1"), (20, "s1"), (30, None)]
        health.failed("s1", "hung")
        after = ReadOnlyCore(cache, staleness=5, not_before=None).pin_set
        assert [(p.ts, p.server) for p in after] == [(10, None), (30, None)]
    finally:
        health.close()


def test_the_failures_of_transactions_in_flight_are_one_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hung standby fails every transaction that was waiting on it at about one time:
    one warning, one probe."""
    probes = threading.Semaphore(0)

    def probe(dsn: str) -> str | None:
        probes.release()
        return None

    health = ReplicaHealth((("s1", "host=a"),), probe, first_pause=0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="txcache"):
            for _ in range(5):
                health.failed("s1", "no answer")
        assert len(caplog.records) == 1
        assert "standby s1 cannot serve misses (no answer)" in caplog.text
        wait_until(lambda: health.usable("s1"), "the probe to find the standby answering")
        assert probes.acquire(timeout=0)
        assert not probes.acquire(timeout=0.2)  # one probe, not one per failure
    finally:
        health.close()


def test_with_two_standbys_the_default_policy_takes_each_one_s_newest_pin_in_turn() -> None:
    policy = prefer_standbys(newest_or_fresh(5.0), standbys=2)
    pin_set = PinSet([pin(10, "s2"), pin(20, "s1"), pin(30, "s1"), pin(40)])
    chosen = [policy(pin_set, time.time()) for _ in range(4)]
    assert [(p.ts, p.server) for p in chosen if p is not None] == [
        (30, "s1"),
        (10, "s2"),
        (30, "s1"),
        (10, "s2"),
    ]


def test_standbys_pinned_at_one_commit_point_each_keep_a_share_of_the_points() -> None:
    state = AgentState(0.25, replicas=["s1", "s2"])
    points = range(1000, 1100)
    both = [pin(ts, server) for ts in points for server in ("s1", "s2")]
    pins = published(state, [pin(ts) for ts in points], both)
    assert [p.ts for p in pins] == list(points)
    kept = {server: sum(p.server == server for p in pins) for server in ("s1", "s2")}
    assert min(kept.values()) >= 30, kept
    assert all(p.fallback is not None and p.fallback.server is None for p in pins)
    state_again = AgentState(0.25, replicas=["s1", "s2"])
    again = published(state_again, [pin(ts) for ts in points], both[::-1])
    assert [p.server for p in again] == [p.server for p in pins], "the order does not matter"


def test_queries_on_standbys_are_counted_per_standby_and_exported() -> None:
    latency = OperationLatency()
    latency.record_query(0.001)
    latency.record_query(0.002, "s1")
    latency.record_query(0.003, "s1")
    latency.record_query(0.004, "s2")
    assert latency.standby_counts() == {"s1": 2, "s2": 1}
    assert latency.as_dict()["queries"] == 4
    assert latency.as_dict()["standby_queries"] == 3
    metric = next(m for m in metrics.METRICS if m.name == "txcache_standby_queries")
    sources = metrics.Sources([], [], [], latency)
    assert list(metric.samples(sources)) == [({"standby": "s1"}, 2.0), ({"standby": "s2"}, 1.0)]


def test_fresh_pins_given_and_not_are_counted_and_exported() -> None:
    latency = OperationLatency()
    latency.record_fresh_pin(True)
    latency.record_fresh_pin(True)
    latency.record_fresh_pin(False)
    sources = metrics.Sources([], [], [], latency)
    exported = {
        metric.name: list(metric.samples(sources))
        for metric in metrics.METRICS
        if metric.name.startswith("txcache_fresh_pins")
    }
    assert exported == {
        "txcache_fresh_pins": [({}, 2.0)],
        "txcache_fresh_pins_unavailable": [({}, 1.0)],
    }


def test_a_standby_whose_pins_name_no_snapshot_there_is_down_saying_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The ``replicas`` entry names the primary or another standby: the agent's pins of it
    are never there. After a run of them, and none imported, it is down with a warning
    that names the setting; a pin imported in between starts the count again."""
    health = ReplicaHealth(
        (("s1", "host=a"),), lambda dsn: "no answer", first_pause=60, missing_for=0
    )
    try:
        for _ in range(MISSING_IN_A_ROW - 1):
            health.snapshot_missing("s1")
        health.served("s1")  # a pin that went, among pins imported
        for _ in range(MISSING_IN_A_ROW - 1):
            health.snapshot_missing("s1")
        assert health.usable("s1")
        with caplog.at_level(logging.WARNING, logger="txcache"):
            health.snapshot_missing("s1")
        assert not health.usable("s1")
        assert "is replicas['s1'] the server the agent's --standby s1=… names" in caplog.text
    finally:
        health.close()
    # Within MISSING_FOR of the first, a run is pins that went with an agent's term.
    brief = ReplicaHealth((("s1", "host=a"),), lambda dsn: "no answer", first_pause=60)
    try:
        for _ in range(3 * MISSING_IN_A_ROW):
            brief.snapshot_missing("s1")
        assert brief.usable("s1")
    finally:
        brief.close()
