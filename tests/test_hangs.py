"""A part that hangs (stopped with SIGSTOP: connections are accepted by the kernel, nothing
is answered) costs the calls in flight one timeout, once: the library marks it down and
only a probe in the background calls it again, so no later request waits on it, and it is
used again once it answers (docs/library.md, "Failures").
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import txcache
from library_fixtures import LibraryStack
from txcache._resp import Endpoint
from txcache.aio._resp import AsyncEndpoint
from txcache.stack import NodeProcess, wait_until

TIMEOUT = 0.4
"""The reply timeout of the endpoints here."""

QUICK = 0.1
"""Longest a call may take once the server is known down (it makes no call at all)."""


def timed(call: Callable[[], object]) -> tuple[object, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def test_a_stopped_node_costs_one_timeout_then_nothing_until_it_answers() -> None:
    with NodeProcess() as node:
        endpoint = Endpoint(node.address, role="cache node", timeout=TIMEOUT)
        assert endpoint.call("PING") == b"PONG"
        with node.paused():
            reply, took = timed(lambda: endpoint.call("PING"))
            assert reply is None
            assert took >= TIMEOUT * 0.9
            assert not endpoint.is_up()
            # Longer than the first probe's delay: requests still never wait.
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                reply, took = timed(lambda: endpoint.call("PING"))
                assert reply is None
                assert took < QUICK, f"a call waited {took:.3f} s on a node known down"
                time.sleep(0.02)
        wait_until(endpoint.is_up, "the probe to find the node back", timeout=15)
        assert endpoint.call("PING") == b"PONG"
        endpoint.close()


def test_the_async_endpoint_probes_in_a_task_the_same_way() -> None:
    with NodeProcess() as node:

        async def scenario() -> None:
            endpoint = AsyncEndpoint(node.address, role="cache node", timeout=TIMEOUT)
            try:
                await paused_node_scenario(endpoint)
            finally:
                endpoint.close()

        async def paused_node_scenario(endpoint: AsyncEndpoint) -> None:
            assert await endpoint.call("PING") == b"PONG"
            with node.paused():
                started = time.monotonic()
                assert await endpoint.call("PING") is None
                assert time.monotonic() - started >= TIMEOUT * 0.9
                deadline = time.monotonic() + 1.5
                while time.monotonic() < deadline:
                    started = time.monotonic()
                    assert await endpoint.call("PING") is None
                    assert time.monotonic() - started < QUICK
                    await asyncio.sleep(0.02)
            for _ in range(750):  # 15 s
                if endpoint.is_up():
                    break
                await asyncio.sleep(0.02)
            assert endpoint.is_up(), "the probe task did not find the node back"
            assert await endpoint.call("PING") == b"PONG"

        asyncio.run(scenario())


@txcache.cacheable
def item_name(item_id: int) -> str:
    row = txcache.query_one("SELECT name FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return str(row[0])


class Load:
    """Threads reading cacheable values in read-only transactions, each read timed."""

    def __init__(self, lib: LibraryStack, threads: int = 4) -> None:
        self.lib = lib
        self.latencies: list[list[tuple[float, float]]] = [[] for _ in range(threads)]
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _run(self, index: int) -> None:
        item = 0
        while not self._stop.is_set():
            item = item % 20 + 1
            started = time.monotonic()
            try:
                with self.lib.cache.read_only(staleness=30):
                    item_name(item)
            except BaseException as error:
                self.errors.append(error)
                return
            self.latencies[index].append((started, time.monotonic() - started))

    def slow_reads(self, hung_at: float, limit: float) -> list[list[tuple[float, float]]]:
        """Per thread, the reads still running at ``hung_at`` or begun after it that took
        longer than ``limit`` (one that ended before cannot have waited for the hung part):
        when each began (seconds after ``hung_at``) and how long it took."""
        return [
            [
                (round(began - hung_at, 3), round(took, 3))
                for began, took in thread
                if began + took >= hung_at and took > limit
            ]
            for thread in self.latencies
        ]

    def count_after(self, moment: float) -> int:
        return sum(1 for thread in self.latencies for began, _ in thread if began >= moment)


def test_a_stopped_node_or_agent_stalls_no_request_twice(database: str) -> None:
    with LibraryStack(database, node_timeout=TIMEOUT, agent_timeout=2 * TIMEOUT) as lib:
        lib.caught_up()
        lib.fresh_pins()
        assert lib.agent is not None
        parts = [("node", lib.nodes[0], TIMEOUT), ("agent", lib.agent, 2 * TIMEOUT)]
        with Load(lib) as load:
            wait_until(lambda: load.count_after(0) > 50, "the load to run", timeout=20)
            for name, part, timeout in parts:
                with part.paused():
                    hung_at = time.monotonic()
                    time.sleep(3.0)  # several probe periods
                    served = load.count_after(hung_at + timeout)
                    assert served > 20, f"{name} stopped: only {served} reads completed"
                # At most the read in flight when it hung waited a timeout, per thread.
                slow = load.slow_reads(hung_at, limit=timeout * 0.8)
                assert max(map(len, slow)) <= 1, (
                    f"{name} stopped (timeout {timeout:g} s): slow reads per thread, (began "
                    f"after the stop, took) in seconds: {slow}"
                )
                wait_until(
                    lambda: (
                        lib.cache.ring is not None
                        and all(node.is_up() for node in lib.cache.ring.nodes)
                        and lib.cache.agent is not None
                        and lib.cache.agent.endpoint.is_up()
                    ),
                    f"the library to use the {name} again",
                    timeout=20,
                )
        assert not load.errors, load.errors
