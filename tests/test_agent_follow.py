"""Several agents, one active (``agent="host1:6390,host2:6390"``): the library talks to the
active one and follows a takeover (docs/library.md, "Failures").

First the pure logic (:mod:`txcache._agent_follow`: what a reply says, which agent a refresh
asks and adopts), then the async client's refresh over stand-in endpoints (the requests it
makes: one agent costs what it always did), then the real stack: an address where nothing
listens, a real standby agent and a takeover (the active agent killed or stopped), each
routed around or followed, in the sync and the async library.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

import pytest

import txcache
from async_fixtures import AsyncLib
from library_fixtures import LibraryStack, status_report, wait_for_pin
from txcache import _protocol as protocol
from txcache import _validate as validate
from txcache import aio
from txcache._agent_follow import (
    Follower,
    Verdict,
    agent_addresses,
    is_standby,
    no_answer_yet,
    verdict,
)
from txcache._agent_state import (
    FIRST_FRESH_PAUSE,
    LONGEST_FRESH_PAUSE,
    AgentState,
    CommitWaits,
    FreshPins,
)
from txcache._config import load_settings
from txcache._pinset import Pin
from txcache._protocol import Barrier, CatalogVersion, DatabaseIdentity
from txcache._resp import Command, ReplyError, read_reply
from txcache.aio import AsyncCache
from txcache.aio._agent import AsyncAgentClient
from txcache.cli._health import diagnose_agents
from txcache.cli._probe import AgentReport
from txcache.errors import ConfigurationError
from txcache.stack import free_port, wait_until

STANDBY_REPLY = ReplyError("STANDBY this agent is a standby (the active agent: 10.0.0.2:6390)")
PINS = [[120, b"00000003-1", 1_700_000_000_000_000]]
ANSWER = [PINS, [[100, [[b"public.items", [b"id"]]]]], [5, 9], [b"7001", 5, b"app"], [b"n:1"]]
"""Raw replies of an active agent to a refresh's PINS, TAGCOLUMNS, BARRIER, DATABASE,
NODES."""


# -- what a reply says ------------------------------------------------------------------------


def test_a_standby_is_known_by_its_reply_code() -> None:
    assert is_standby(STANDBY_REPLY)
    assert is_standby(ReplyError("STANDBY"))
    assert not is_standby(ReplyError("ERR STANDBY is not the code"))
    assert not is_standby(ReplyError("STANDBYS are not standbys"))
    assert not is_standby(b"STANDBY")  # an answer, not an error reply
    assert not is_standby(None)


def test_a_refresh_s_replies_are_answered_standby_down_or_refused() -> None:
    assert verdict(ANSWER) is Verdict.ANSWERED
    assert verdict(None) is Verdict.DOWN
    assert verdict([PINS, None]) is Verdict.DOWN  # cut off mid-refresh (the sync client)
    assert verdict([STANDBY_REPLY] * 5) is Verdict.STANDBY
    assert verdict([STANDBY_REPLY]) is Verdict.STANDBY  # the sync client stops at the first
    assert verdict([PINS, ReplyError("ERR the stream is down")]) is Verdict.REFUSED


def test_a_standby_s_refusal_of_a_fresh_pin_is_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fresh = FreshPins()
    with caplog.at_level(logging.WARNING, logger="txcache"):
        assert fresh.result(STANDBY_REPLY, now=0.0) is None
        assert not caplog.records, "the next refresh finds the active agent, and says so"
        assert fresh.wanted(now=0.0), "nor does it pause fresh pins"
        assert fresh.result(ReplyError("ERR no snapshot"), now=0.0) is None
    [record] = caplog.records
    assert "could not take a fresh pin: ERR no snapshot" in record.getMessage()


def test_after_a_fresh_pin_the_agent_could_not_give_none_is_asked_for_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stream held back fails every PIN for as long as it lasts: transactions take the
    listed pins meanwhile, instead of each waiting out a PIN of its own."""
    fresh = FreshPins()
    held_back = ReplyError("ERR PIN: no pin certified within 1000 ms")
    with caplog.at_level(logging.WARNING, logger="txcache"):
        assert fresh.result(held_back, now=10.0) is None
        assert not fresh.wanted(now=10.0 + FIRST_FRESH_PAUSE / 2)
        assert fresh.wanted(now=10.0 + FIRST_FRESH_PAUSE)
        assert fresh.result(held_back, now=11.0) is None  # still failing: twice as long
        assert not fresh.wanted(now=11.0 + FIRST_FRESH_PAUSE)
        assert fresh.wanted(now=11.0 + 2 * FIRST_FRESH_PAUSE)
        for step in range(20):
            fresh.result(held_back, now=12.0 + step)
        assert fresh.wanted(now=31.0 + LONGEST_FRESH_PAUSE)
    assert len(caplog.records) == 1, "logged as it starts, not for every PIN"
    pin = Pin(5, "s-5", 0.0)
    assert fresh.result(pin, now=40.0) is pin
    assert fresh.result(held_back, now=40.0) is None
    assert fresh.wanted(now=40.0 + FIRST_FRESH_PAUSE), "a pin starts the pauses anew"


def test_after_a_commit_wait_that_timed_out_none_is_waited_for_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stalled stream times out every COMMITLSN: commits take the WAL position after them
    as their token meanwhile, instead of each write waiting out a COMMITLSN of its own."""
    waits = CommitWaits()
    stalled = ReplyError("TIMEOUT transaction 812 not decoded within 1000 ms")
    with caplog.at_level(logging.WARNING, logger="txcache"):
        assert waits.result(stalled, now=10.0) is None
        assert not waits.wanted(now=10.0 + FIRST_FRESH_PAUSE / 2)
        assert waits.wanted(now=10.0 + FIRST_FRESH_PAUSE)
        assert waits.result(stalled, now=11.0) is None  # still stalled: twice as long
        assert not waits.wanted(now=11.0 + FIRST_FRESH_PAUSE)
        assert waits.result(ReplyError("NOTDECODED nothing of 813"), now=20.0) is None
        assert waits.result(None, now=20.0) is None
        assert waits.wanted(now=20.0), "an answer without a wait is no stall"
    assert len(caplog.records) == 1, "logged as it starts, not for every commit"
    assert waits.result(4242, now=30.0) == 4242
    assert waits.result(stalled, now=30.0) is None
    assert waits.wanted(now=30.0 + FIRST_FRESH_PAUSE), "a decoded commit starts them anew"


# -- which agent a refresh asks and adopts ----------------------------------------------------


def walk(follower: Follower, found: dict[int, Verdict]) -> tuple[int | None, list[int]]:
    """A refresh as the clients run it, agent ``i`` answering ``found[i]``: the agent
    adopted (``None``: none answered) and the agents asked, in order."""
    asked = []
    for index in follower.order():
        asked.append(index)
        if found[index] is Verdict.ANSWERED:
            follower.adopt(index)
            return index, asked
        if not follower.goes_on(index, REPLIES[found[index]]):
            return None, asked
    return None, asked


# Short names for the table below.
ANSWERED, STANDBY, DOWN, REFUSED = (
    Verdict.ANSWERED,
    Verdict.STANDBY,
    Verdict.DOWN,
    Verdict.REFUSED,
)


REPLIES: dict[Verdict, list[Any] | None] = {
    Verdict.STANDBY: [ReplyError("STANDBY another agent holds the lease")],
    Verdict.DOWN: None,
    Verdict.REFUSED: [ReplyError("ERR no")],
}
"""A refresh's replies that say each verdict."""


@pytest.mark.parametrize(
    ("found", "adopted", "asked"),
    [
        ([ANSWERED], 0, [0]),
        ([DOWN], None, [0]),
        ([ANSWERED, DOWN], 0, [0]),  # the others are not asked while the active answers
        ([DOWN, ANSWERED], 1, [0, 1]),
        ([STANDBY, ANSWERED], 1, [0, 1]),
        ([STANDBY, DOWN, ANSWERED], 2, [0, 1, 2]),
        ([DOWN, REFUSED, ANSWERED], 2, [0, 1, 2]),  # past a failing standby
        ([REFUSED, ANSWERED], None, [0]),  # the active agent's own error: ask it again
        ([DOWN, STANDBY, STANDBY], None, [0, 1, 2]),  # mid-takeover: no one active yet
    ],
)
def test_a_refresh_adopts_the_first_agent_that_answers(
    found: list[Verdict], adopted: int | None, asked: list[int]
) -> None:
    follower = Follower([f"agent{i}:6390" for i in range(len(found))])
    assert walk(follower, dict(enumerate(found))) == (adopted, asked)
    assert follower.active == (adopted or 0)


def test_the_active_agent_is_asked_first_then_the_others_in_order() -> None:
    follower = Follower(["a:1", "b:2", "c:3"])
    assert follower.order() == [0, 1, 2]
    follower.adopt(2)
    assert follower.order() == [2, 0, 1]
    assert follower.address == "c:3"


def test_a_change_of_active_agent_is_logged_once_with_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    follower = Follower(["a:1", "b:2"])
    with caplog.at_level(logging.WARNING, logger="txcache"):
        for _ in range(3):
            walk(follower, {0: STANDBY, 1: ANSWERED})
        walk(follower, {0: ANSWERED, 1: DOWN})  # b answers: a is not asked
        walk(follower, {0: ANSWERED, 1: DOWN})
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "txcache: following the agent at b:2 (the agent at a:1 is a standby)",
        "txcache: following the agent at a:1 (the agent at b:2 is unreachable)",
    ]


def test_a_follower_needs_an_agent() -> None:
    with pytest.raises(ValueError, match="no agent"):
        Follower([])


# -- the setting ------------------------------------------------------------------------------


def test_the_agent_setting_names_one_agent_or_several() -> None:
    one = load_settings({"dsn": "dbname=app", "agent": " 127.0.0.1:6390 "}, {})
    assert (one.agent, one.agents) == ("127.0.0.1:6390", ("127.0.0.1:6390",))
    several = load_settings({}, {"TXCACHE_DSN": "dbname=app", "TXCACHE_AGENT": "a:1, b:2"})
    assert (several.agent, several.agents) == ("a:1,b:2", ("a:1", "b:2"))
    listed = load_settings({"dsn": "dbname=app", "agent": ["rediss://a:1", "b:2"]}, {})
    assert listed.agents == ("rediss://a:1", "b:2")
    assert load_settings({"dsn": "dbname=app"}, {}).agents == ()


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ("a:1,agent", "'agent' is not host:port"),
        (["a:1", "b:http"], "'b:http' is not host:port"),
        ("a:1, a:1", "'a:1' is listed twice"),
        (["a:1", 5], "5 is not a string"),
    ],
)
def test_a_bad_agent_among_several_is_named(given: Any, named: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings({"dsn": "dbname=app", "agent": given}, {})
    message = str(raised.value)
    assert message.startswith("setting agent (given as the argument agent=) must be host:port")
    assert "or several: a comma-separated string or a list of strings" in message
    assert named in message


def test_addresses_split_and_the_silence_of_one_agent_or_several() -> None:
    assert agent_addresses(" a:1 ,b:2,") == ("a:1", "b:2")
    assert agent_addresses(["a:1", " b:2 "]) == ("a:1", "b:2")
    assert validate.agents("a:1") == "a:1"
    assert no_answer_yet(["a:1"]) == (
        "the agent at a:1 has not answered yet; transactions read the database until it does"
    )
    assert no_answer_yet(["a:1", "b:2"]).startswith("none of the agents at a:1, b:2 has")


# -- the coverage of the catalog across a takeover --------------------------------------------


def _refreshed(newest: int) -> tuple[list[Pin], list[CatalogVersion], Barrier, DatabaseIdentity]:
    pins = [Pin(newest, "s", time.time())]
    return pins, [CatalogVersion(1, ())], Barrier(0, newest), DatabaseIdentity("7", 5, "app")


def test_another_agent_s_refresh_covers_only_its_own_pins() -> None:
    state = AgentState(refresh_interval=60)
    state._publish(*_refreshed(200), source="a:1")
    assert state.covers(200)
    state._publish(*_refreshed(150), source="a:1")
    assert state.covers(200), "one agent's catalog covers what it listed before"
    state._publish(*_refreshed(150), source="b:2")
    assert not state.covers(200), "the new agent may not have decoded that far"
    assert state.covers(150)
    assert state.followed == "b:2"
    # Its newer pins do not make it speak for the old agent's snapshots either.
    state._publish(*_refreshed(300), source="b:2")
    assert state.covers(300)
    assert not state.covers(100), "older than the first pin the new agent listed"
    assert state.columns_at(100) == (False, None)


# -- the async client's refresh over stand-in endpoints ---------------------------------------


class FakeEndpoint:
    """An agent as :class:`AsyncAgentClient` sees it: ``replies`` to every refresh (``None``:
    no reply), counting the round trips; while not ``up``, ``None`` at once, as
    :class:`~txcache.aio._resp.AsyncEndpoint` gives it."""

    def __init__(self, address: str, replies: Sequence[Any] | None, *, pin: Any = None) -> None:
        self.address = address
        self.replies = replies
        self.pin = pin
        """The raw reply to ``PIN``."""
        self.up = True
        self.timeout = 2.0
        self.round_trips = 0

    def is_up(self) -> bool:
        return self.up

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any] | None:
        if not self.up:  # as the real endpoint: no request to a server known down
            return None
        self.round_trips += 1
        return None if self.replies is None else list(self.replies)

    async def run(self, command: Command[Any]) -> Any:
        if not self.up:
            return None
        self.round_trips += 1
        return read_reply(command, self.pin)

    def close(self) -> None:
        pass


def client_of(monkeypatch: pytest.MonkeyPatch, *endpoints: FakeEndpoint) -> AsyncAgentClient:
    client = AsyncAgentClient(",".join(e.address for e in endpoints), refresh_interval=60)
    monkeypatch.setattr(client, "endpoints", endpoints)
    return client


def test_one_agent_costs_one_round_trip_per_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        only = FakeEndpoint("a:1", ANSWER)
        client = client_of(monkeypatch, only)
        for _ in range(3):
            assert await client.refresh()
        assert only.round_trips == 3
        assert [pin.ts for pin in client.pins(staleness=1e9, not_before=None, now=0)] == [120]
        only.up = False
        assert not await client.refresh()
        assert only.round_trips == 3, "an agent known down is not asked"
        assert client.endpoint.address == only.address

    asyncio.run(body())


def test_an_agent_from_before_nodes_leaves_them_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        old = FakeEndpoint("a:1", [*ANSWER[:4], ReplyError("ERR unknown command 'NODES'")])
        client = client_of(monkeypatch, old)
        assert await client.refresh()
        assert client.members is None, "the library keeps the nodes it was given"
        old.replies = ANSWER
        assert await client.refresh()
        assert client.members == ("n:1",)

    asyncio.run(body())


def test_a_nodes_reply_with_an_address_that_is_not_one_leaves_the_nodes_as_they_were() -> None:
    """A broken or hostile agent's NODES would otherwise make every transaction raise where
    the ring is built: the reply counts as wrong, as an agent from before NODES does."""
    command = protocol.nodes()
    assert read_reply(command, [b"n:1", b"rediss://n:2"]) == ("n:1", "rediss://n:2")
    refused = read_reply(command, [b"n:1", b"'; DROP TABLE x; --"])
    assert isinstance(refused, ReplyError)
    assert "NODES listed" in str(refused)


def test_a_standby_named_first_is_passed_over_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        standby = FakeEndpoint("a:1", [STANDBY_REPLY] * 5, pin=STANDBY_REPLY)
        active = FakeEndpoint("b:2", ANSWER, pin=PINS[0])
        client = client_of(monkeypatch, standby, active)
        for _ in range(3):
            assert await client.refresh()
        assert (standby.round_trips, active.round_trips) == (1, 3)
        assert client.endpoint.address == active.address
        assert client.followed == "b:2"
        assert await client.pin_now() is not None, "requests go to the active agent"
        assert (standby.round_trips, active.round_trips) == (1, 4)

    with caplog.at_level(logging.WARNING, logger="txcache"):
        asyncio.run(body())
    assert [record.getMessage() for record in caplog.records] == [
        "txcache: following the agent at b:2 (the agent at a:1 is a standby)"
    ]


def test_an_active_agent_that_fails_otherwise_is_not_abandoned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        failing = FakeEndpoint("a:1", [ReplyError("ERR the stream is down")] * 5)
        other = FakeEndpoint("b:2", ANSWER)
        client = client_of(monkeypatch, failing, other)
        client.note_used(120)
        assert not await client.refresh()
        assert other.round_trips == 0
        assert client.endpoint.address == failing.address
        assert client.take_used().primary == {120}, "the pins used are reported by the next refresh"

    asyncio.run(body())


def test_with_no_agent_answering_the_active_one_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        down = FakeEndpoint("a:1", None)
        standby = FakeEndpoint("b:2", [STANDBY_REPLY] * 5)
        client = client_of(monkeypatch, down, standby)
        assert not await client.refresh()
        assert client.endpoint.address == down.address
        down.up = False  # as the endpoint marks itself after the failure
        standby.replies = ANSWER  # the takeover
        assert await client.refresh()
        assert client.endpoint.address == standby.address
        assert down.round_trips == 1, "an agent known down is passed over without a request"
        standby.up = False
        assert not await client.refresh()
        assert standby.round_trips == 2

    asyncio.run(body())


# -- txcache status ---------------------------------------------------------------------------


def test_status_wants_exactly_one_active_agent_among_those_answering() -> None:
    active = AgentReport("a:1", pins=[Pin(1, "s", 0.0)])
    standby = AgentReport("b:2", standby="this agent is a standby (the active agent: a:1)")
    down = AgentReport("c:3", state="unreachable", error="refused")
    assert diagnose_agents([active, standby, down]) == []
    assert diagnose_agents([down]) == [], "reported as unreachable already"
    [none_active] = diagnose_agents([standby, down])
    assert none_active.what.startswith("no agent given is active (b:2: this agent is a standby")
    [several] = diagnose_agents([active, AgentReport("d:4"), standby])
    assert several.what.startswith("several agents answer as the active one (a:1, d:4)")


# -- the real stack ---------------------------------------------------------------------------

reads: list[int] = []


@txcache.cacheable
def price(item_id: int) -> int:
    reads.append(item_id)
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


@txcache.cacheable
async def price_async(item_id: int) -> int:
    reads.append(item_id)
    row = await aio.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


def truth(lib: LibraryStack) -> list[int]:
    rows = lib.admin.execute("SELECT price FROM items ORDER BY id").fetchall()
    return [int(row[0]) for row in rows]


def prices(cache: txcache.Cache) -> list[int]:
    with cache.read_only(staleness=60):
        return [price(item_id) for item_id in range(1, 21)]


def assert_cached(lib: LibraryStack, cache: txcache.Cache) -> None:
    """Transactions of ``cache`` get pins and hit the cache: a read, then the same read
    again, which runs no function."""
    wait_for_pin(cache)
    assert prices(cache) == truth(lib)
    reads.clear()
    assert prices(cache) == truth(lib)
    assert reads == [], "cached"


def followed(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "following the agent" in r.getMessage()]


@pytest.mark.parametrize("dead_first", [True, False], ids=["dead-first", "dead-last"])
def test_an_address_where_nothing_listens_is_routed_around(
    lib: LibraryStack, dead_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    named = [dead, lib.agent_address] if dead_first else [lib.agent_address, dead]
    lib.caught_up()
    with (
        caplog.at_level(logging.WARNING, logger="txcache"),
        lib.connect(agent=",".join(named), refresh_interval=0.05) as cache,
    ):
        assert cache.settings.agents == tuple(named)
        assert cache.uncached_reason is None
        assert_cached(lib, cache)
        assert cache.agent is not None
        assert cache.agent.endpoint.address == lib.agent_address
    switch = f"txcache: following the agent at {lib.agent_address} (the agent at {dead} is "
    assert followed(caplog) == ([f"{switch}unreachable)"] if dead_first else [])


@pytest.mark.parametrize("dead_first", [True, False], ids=["dead-first", "dead-last"])
def test_the_async_library_routes_around_an_address_where_nothing_listens(
    alib: AsyncLib, dead_first: bool
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    real = alib.lib.agent_address
    named = [dead, real] if dead_first else [real, dead]

    async def read(cache: AsyncCache) -> list[int]:
        async with cache.read_only(staleness=60):
            return [await price_async(item_id) for item_id in range(1, 21)]

    async def body(cache: AsyncCache) -> None:
        agent = cache.agent
        assert agent is not None
        deadline = time.monotonic() + 20
        while not agent.pins(staleness=60, not_before=None, now=time.time()):
            assert time.monotonic() < deadline, "no pin through the active agent"
            await agent.pin_now()
            await agent.refresh()
            await asyncio.sleep(0.02)
        assert agent.endpoint.address == real
        assert await read(cache) == truth(alib.lib)
        reads.clear()
        assert await read(cache) == truth(alib.lib)
        assert reads == [], "cached"

    alib.run(body, agent=named)


def test_a_standby_named_first_is_passed_over(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    lib.caught_up()
    standby = lib.start_standby_agent()
    standby_address = f"127.0.0.1:{standby.port}"
    with (
        caplog.at_level(logging.WARNING, logger="txcache"),
        lib.connect(agent=f"{standby_address},{lib.agent_address}", refresh_interval=0.05) as cache,
    ):
        assert_cached(lib, cache)
        assert cache.agent is not None
        assert cache.agent.endpoint.address == lib.agent_address
    assert followed(caplog) == [
        f"txcache: following the agent at {lib.agent_address} (the agent at {standby_address} "
        "is a standby)"
    ]


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_takeover_is_followed(
    lib: LibraryStack, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The active agent killed (its sessions end: taken over in about a second) or stopped
    (taken over once its lease expires): the library follows the standby that took over,
    and its transactions hit the cache again. The standby's connections, which the
    takeover ends, are replaced without the standby ever being taken for down."""
    lib.caught_up()
    standby = lib.start_standby_agent()
    standby_address = f"127.0.0.1:{standby.port}"
    active = lib.agent
    assert active is not None
    with (
        caplog.at_level(logging.WARNING, logger="txcache"),
        lib.connect(
            agent=[lib.agent_address, standby_address], refresh_interval=0.05, agent_timeout=0.5
        ) as cache,
    ):
        agent = cache.agent
        assert agent is not None
        assert_cached(lib, cache)
        assert agent.endpoint.address == lib.agent_address
        if how == "kill":
            active.kill()
        else:
            os.kill(active.process.pid, signal.SIGSTOP)
        try:
            wait_until(
                lambda: agent.endpoint.address == standby_address,
                "the library to follow the standby",
                timeout=30,
                log=standby.log_text,
            )
            assert_cached(lib, cache)
        finally:
            if how == "stop":
                os.kill(active.process.pid, signal.SIGCONT)
    assert not [r for r in caplog.messages if f"agent {standby_address} is unreachable" in r]


def test_status_reports_each_agent_and_which_is_a_standby(lib: LibraryStack) -> None:
    standby = lib.start_standby_agent()
    standby_address = f"127.0.0.1:{standby.port}"
    code, text = status_report(lib.node_addresses, [standby_address, lib.agent_address])
    assert f"agent {standby_address}: up, standby: this agent is a standby" in text
    assert f"agent {lib.agent_address}: up" in text
    assert "4 of 4 endpoint(s) up" in text
    assert "bytes behind the agent" in text, "the lag is the active agent's"
    assert code == 0, text


def test_an_agent_s_refusal_is_logged_once_with_what_to_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    follower = Follower(["127.0.0.1:1"])
    refusal = [ReplyError("NOAUTH Authentication required.")]
    with caplog.at_level(logging.WARNING, logger="txcache"):
        for _ in range(3):
            follower.order()
            assert not follower.goes_on(0, refusal)
    [line] = [record.getMessage() for record in caplog.records]
    assert "refuses the library's requests (NOAUTH Authentication required.)" in line
    assert "it requires a password" in line
    follower.adopt(0)  # it answered: a refusal after that is news again
    with caplog.at_level(logging.WARNING, logger="txcache"):
        follower.goes_on(0, refusal)
    assert len(caplog.records) == 2
