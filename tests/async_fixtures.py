"""The async library on the ``lib`` stack: ``alib`` runs a test's async body on a fresh
event loop (``asyncio.run``) with a :class:`txcache.aio.AsyncCache` connected to the stack,
closed afterwards. Tests stay plain functions: no asyncio plugin is needed.

```python
def test_something(alib: AsyncLib):
    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            ...
    alib.run(body)
```
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import txcache
from library_fixtures import LibraryStack
from txcache.aio import AsyncCache

T = TypeVar("T")


class AsyncLib:
    """The ``lib`` stack, and a way to run async bodies against it."""

    def __init__(self, lib: LibraryStack) -> None:
        self.lib = lib

    def settings(self, **overrides: Any) -> dict[str, Any]:
        """What :func:`txcache.connect_async` gets: the stack's addresses, a 50 ms refresh
        (as the sync ``lib.cache``), then ``overrides``."""
        return {
            "dsn": self.lib.dsn,
            "nodes": self.lib.node_addresses,
            "agent": self.lib.agent_address,
            "refresh_interval": 0.05,
            **overrides,
        }

    def run(self, body: Callable[[AsyncCache], Awaitable[T]], **settings: Any) -> T:
        """``body(cache)`` on a new event loop, with a cache of ``settings`` (over
        :meth:`settings`) that is closed afterwards — and checked to have every pooled
        connection back."""

        async def main() -> T:
            cache = await txcache.connect_async(**self.settings(**settings))
            try:
                result = await body(cache)
                await assert_pool_whole(cache)
                return result
            finally:
                await cache.close()

        return asyncio.run(main())


async def assert_pool_whole(cache: AsyncCache, timeout: float = 5.0) -> None:
    """Every connection the pool made is back in it (none leaked by a transaction), once
    the connections it is still opening (a new pool opens in the background) and those
    still being given back (shielded from cancellation, they may finish after the block)
    are there."""
    deadline = time.monotonic() + timeout
    while True:
        stats = cache.pool.get_stats()
        if stats.get("pool_available", 0) == stats.get("pool_size", 0):
            return
        assert time.monotonic() < deadline, f"a pooled connection did not come back: {stats}"
        await asyncio.sleep(0.01)


async def fresh_pins(cache: AsyncCache, after: int = 0, timeout: float = 20.0) -> None:
    """Wait until the async cache knows a pin newer than ``after``, asking the agent for
    one each time (as :func:`library_fixtures.wait_for_pin` does for the sync cache)."""
    agent = cache.agent
    assert agent is not None
    deadline = time.monotonic() + timeout
    while not agent.pins(staleness=60, not_before=after + 1, now=time.time()):
        assert time.monotonic() < deadline, f"no pin newer than {after} within {timeout} s"
        await agent.pin_now()  # an agent nobody asked for a pin for a lease holds none
        await agent.refresh()
        await asyncio.sleep(0.02)


async def agent_back(cache: AsyncCache, timeout: float = 20.0) -> None:
    """Wait until the async cache's agent answers a refresh again (after a restart, once
    its endpoint's backoff has passed)."""
    agent = cache.agent
    assert agent is not None
    deadline = time.monotonic() + timeout
    while not await agent.refresh():
        assert time.monotonic() < deadline, f"the agent did not answer within {timeout} s"
        await asyncio.sleep(0.05)


@pytest.fixture
def alib(lib: LibraryStack) -> AsyncLib:
    """The ``lib`` stack (caught up, a pin known) for async test bodies."""
    lib.caught_up()
    lib.fresh_pins()
    return AsyncLib(lib)
