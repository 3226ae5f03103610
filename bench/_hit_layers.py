"""Where a library hit's time goes, layer by layer (``library_hit_latency.py``).

This module measures the library's layers on purpose, so unlike the rest of the benchmark it
does not stop at ``get_item(…)``: it replays the steps ``CacheableFunction.__call__`` takes
on a hit with the same objects (the transaction's ``pin_set``, the cache's ``ring`` and
``serializer``, the function's ``keys``, ``CacheNode.lookup``) and times each, runs each in a
tight loop, and measures the pin set's cost as pins pile up. It uses no underscore names: a
step that moves inside the library shows here as a changed share, not as a broken
benchmark.

The pin-set measurement feeds a real :class:`txcache.Cache` from a :class:`CannedAgent` on
loopback, which lists as many synthetic pins as wanted (a real agent would need minutes of
commits for thousands) and passes every other command on to the real agent.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from typing import Any

import hiredis
from _common import call, resp
from _hit_measure import STALENESS, HitBench, Probe, Results, get_item, item_ids, perf_ns

import txcache

STEPS_CPU = ("current", "key", "ring", "bounds", "loads", "accept", "stats")
ROUND_TRIPS = frozenset({"socket", "lean_call", "endpoint_call", "txget", "hit"})
STEPS = (
    ("current", "`current_transaction()` (contextvar)"),
    ("key", "key: `CallKeys.key` (BLAKE2b of prefix + encoded args)"),
    ("ring", "ring: `NodeRing.node_for` (BLAKE2b + bisect)"),
    ("bounds", "pin-set bounds: `PinSet.bounds`"),
    ("txget", "`TXGET` round trip: `CacheNode.lookup` (Endpoint + RespConnection + Hit)"),
    ("loads", "deserialization: `SafeSerializer.loads` (BLAKE2b tag + msgpack)"),
    ("accept", "pin-set narrowing: `PinSet.narrow` (no database snapshot yet)"),
    ("stats", "counters: `FunctionStats.record_hit` (lock)"),
)


def breakdown_round(
    bench: HitBench, per: int, items: int, results: Results, transactions: int, offset: int
) -> None:
    """The hit path replayed step by step, each step timed; one real get_item call first
    in every transaction so the pin set is in the same state as in the hit loop."""
    cache = bench.cache
    assert cache.ring is not None
    keys, ring, serializer, settings = get_item.keys, cache.ring, cache.serializer, cache.settings
    scratch = txcache.FunctionStats("scratch")  # get_item's own counters stay exact
    samples: dict[str, list[int]] = {name: [] for name, _ in STEPS}
    totals: list[int] = []
    for t in range(transactions):
        ids = item_ids(per, items, offset + t * per)
        with cache.read_only(staleness=STALENESS) as tx:
            get_item(ids[0])
            for item_id in ids[1:]:
                t0 = perf_ns()
                current = txcache.current_transaction()
                t1 = perf_ns()
                key = keys.key((item_id,), {}, settings)
                t2 = perf_ns()
                node = ring.node_for(key)
                t3 = perf_ns()
                bounds = tx.pin_set.bounds()
                t4 = perf_ns()
                assert bounds is not None
                found = node.lookup(key, bounds[0], bounds[1], with_tags=False)
                t5 = perf_ns()
                value = serializer.loads(found.value, key=key)  # type: ignore[union-attr]
                t6 = perf_ns()
                interval = found.interval  # type: ignore[union-attr]
                accepted = tx.pin_set.narrow(interval.lo, interval.hi)
                t7 = perf_ns()
                scratch.record_hit(0.0)
                t8 = perf_ns()
                assert current is tx
                assert accepted, interval
                assert value[0] == item_id, value
                stamps = (t0, t1, t2, t3, t4, t5, t6, t7, t8)
                for (name, _), start, stop in zip(STEPS, stamps, stamps[1:], strict=False):
                    samples[name].append(stop - start)
                totals.append(t8 - t0)
    for name, label in STEPS:
        results.add(f"step_{name}", label, samples[name])
    results.add("step_total", "sum of the steps (timed back to back)", totals)


def _timed(cases: Sequence[tuple[str, Callable[[], Any]]], n: int) -> dict[str, float]:
    """Each case ``n`` times in a loop, mean ns per call; the round trips ``n``/10 times,
    each timed: the median minus the timer's own cost (robust to a stray wake-up)."""
    here: dict[str, float] = {}
    for name, function in cases:
        for _ in range(1000):  # warm up
            function()
        if name in ROUND_TRIPS:
            samples = []
            for _ in range(n // 10):
                start = perf_ns()
                function()
                samples.append(perf_ns() - start)
            here[name] = statistics.median(samples) - here["timer_pair"] / 2
            continue
        start = perf_ns()
        for _ in range(n):
            function()
        here[name] = (perf_ns() - start) / n
    return here


def tight_loops(bench: HitBench, probe: Probe, n: int, results: Results) -> None:
    """Each CPU-only step of the hit path ``n`` times in a loop, and the round-trip pieces,
    from a bare socket to ``get_item`` (:func:`_timed`)."""
    cache = bench.cache
    assert cache.ring is not None
    keys, ring, serializer, settings = get_item.keys, cache.ring, cache.serializer, cache.settings
    scratch = txcache.FunctionStats("scratch")
    found = probe.node.lookup(probe.key, probe.lo, probe.hi, with_tags=False)
    assert hasattr(found, "value"), found
    command = ("TXGET", probe.key, probe.lo, probe.hi)
    packed = hiredis.pack_command(command)  # type: ignore[arg-type]
    reader = hiredis.Reader()
    with (
        closing(socket.create_connection(probe.address)) as sock,
        closing(resp(probe.node.address)) as lean,
        cache.read_only(staleness=STALENESS) as tx,
    ):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def raw_socket() -> None:
            sock.sendall(packed)
            reader.feed(sock.recv(65536))
            assert reader.gets() is not False

        def timer_pair() -> None:
            perf_ns()
            perf_ns()

        get_item(1)
        lo, hi = found.interval.lo, found.interval.hi
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("timer_pair", timer_pair),
            ("current", txcache.current_transaction),
            ("key", lambda: keys.key((417,), {}, settings)),
            ("ring", lambda: ring.node_for(probe.key)),
            ("bounds", tx.pin_set.bounds),
            ("loads", lambda: serializer.loads(found.value)),
            ("accept", lambda: tx.pin_set.narrow(lo, hi)),
            ("stats", lambda: scratch.record_hit(0.0)),
            ("pack", lambda: hiredis.pack_command(command)),  # type: ignore[arg-type]
            ("socket", raw_socket),
            ("lean_call", lambda: lean.call(*command)),
            ("endpoint_call", lambda: probe.node.call(*command)),
            ("txget", lambda: probe.node.lookup(probe.key, probe.lo, probe.hi, with_tags=False)),
            ("hit", lambda: get_item(417)),
        ]
        results.tight[results.placement] = _timed(cases, n)


# -- the pin set as pins pile up -------------------------------------------------------------

PIN_COUNTS = (1, 60, 600, 2400)
"""Live pins a transaction may start with: none committed (this benchmark), 3 s of commits
at ``--pin-interval 50ms``, 30 s (``staleness=30``), 120 s (the agent's default
``--max-staleness``)."""


def _encode(value: Any) -> bytes:
    """A RESP2 reply (what hiredis parsed, back into bytes)."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, hiredis.ReplyError):
        return b"-" + str(value).encode() + b"\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, list):
        return b"*%d\r\n" % len(value) + b"".join(_encode(item) for item in value)
    data = value.encode() if isinstance(value, str) else bytes(value)
    return b"$%d\r\n%s\r\n" % (len(data), data)


class CannedAgent:
    """A stand-in for ``txcache-agent`` on loopback: ``PINS`` lists the pins last given to
    :meth:`list_pins`; any other command gets the reply the real agent gave to it once."""

    def __init__(self, real: str) -> None:
        """Listen on a free port; ``real`` is the agent's ``host:port``."""
        self.real = real
        self.replies: dict[bytes, bytes] = {}
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="canned-agent", daemon=True).start()

    def list_pins(self, pins: Sequence[tuple[int, str, float]]) -> None:
        """From now on ``PINS`` answers ``pins`` (timestamp, snapshot id, current as of)."""
        entries = [[ts, name.encode(), int(current * 1e6), b"1:1:"] for ts, name, current in pins]
        self.replies[b"PINS"] = _encode(entries)

    def close(self) -> None:
        """Stop listening (connections end with the process: their threads are daemons)."""
        self.listener.close()

    def _reply(self, request: list[bytes]) -> bytes:
        name = request[0].upper()
        if name not in self.replies:
            with closing(resp(self.real)) as agent:
                self.replies[name] = _encode(call(agent, *request))
        return self.replies[name]

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = hiredis.Reader()
        with connection:
            while data := connection.recv(65536):
                reader.feed(data)
                replies = []
                while (request := reader.gets()) is not False:
                    replies.append(self._reply(request))
                connection.sendall(b"".join(replies))


def pin_set_scaling(bench: HitBench, tight: int, results: Results) -> None:
    """What beginning a transaction and its first hit cost in the pin set as the number of
    live pins grows, with a cache whose agent is a :class:`CannedAgent` listing synthetic
    pins 50 ms apart: ``AgentClient.pin_set`` (what ``read_only`` begins with),
    ``PinSet.bounds`` + ``PinSet.narrow`` (a first hit's pin-set work), and
    ``AgentClient.refresh`` (what the refresher thread does every ``refresh_interval``:
    three round trips and the parse of the list). Tight loops, no database."""
    canned = CannedAgent(bench.stack.agent_address)
    # An hour between background refreshes: only the timed calls refresh.
    nodes = bench.stack.node_addresses
    cache = txcache.connect(bench.dsn, nodes=nodes, agent=canned.address, refresh_interval=3600.0)
    agent = cache.agent
    assert agent is not None
    try:
        for count in PIN_COUNTS:
            now = time.time()
            # 50 ms apart, the newest 25 ms old: none exactly at the staleness limit, where
            # the list's microseconds would decide.
            pins = [
                (1_000_000 + 1000 * n, f"00000003-{n:08X}-1", now - 0.05 * (count - n) + 0.025)
                for n in range(count)
            ]
            canned.list_pins(pins)
            assert agent.refresh(), "the canned agent did not answer"
            live = sum(current >= now - STALENESS for _, _, current in pins)
            lo = pins[count // 2][0]  # a cached value valid over the newer half

            def begin(agent: Any = agent, now: float = now) -> txcache.PinSet:
                pin_set: txcache.PinSet = agent.pin_set(
                    staleness=STALENESS, not_before=None, now=now
                )
                return pin_set

            assert len(begin()) == live, (len(begin()), live)
            loops = max(200, tight // (10 * count))
            start = perf_ns()
            for _ in range(loops):
                begin()
            begin_ns = (perf_ns() - start) / loops
            sets = [begin() for _ in range(loops)]
            start = perf_ns()
            for pin_set in sets:
                pin_set.bounds()
                assert pin_set.narrow(lo, 2**62)
            first_hit_ns = (perf_ns() - start) / loops
            kept = begin()
            oldest = kept.bounds()
            assert oldest is not None
            start = perf_ns()
            for _ in range(loops):  # a hit valid at every pin: the narrowing changes nothing
                kept.bounds()
                kept.narrow(oldest[0], 2**62)
            later_hit_ns = (perf_ns() - start) / loops
            refreshes = max(20, tight // (50 * count))
            start = perf_ns()
            for _ in range(refreshes):
                agent.refresh()
            results.pin_scaling[count] = {
                "live": live,
                "begin_ns": begin_ns,
                "first_hit_ns": first_hit_ns,
                "later_hit_ns": later_hit_ns,
                "refresh_ns": (perf_ns() - start) / refreshes,
            }
    finally:
        cache.close()
        canned.close()
