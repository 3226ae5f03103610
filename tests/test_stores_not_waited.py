"""Stores not waited for (docs/library.md, "How a read-only transaction runs", step 6): a
``TXSET`` is sent and the caller goes on; its outcome is handed over once the node's reply
is read — before the connection's next reply or by ``settle`` in the sync endpoint, as it
arrives in the async one — and ``None`` when the reply can never come. Against real nodes.
"""

from __future__ import annotations

import asyncio
import time

from conftest import StartNode
from txcache._nodes import CacheNode
from txcache.aio._nodes import AsyncCacheNode
from txcache.protocol import Hit

STORE = (b"value", 5, None, 5, ("public.items:id=1",))
"""A value valid from 5 on, read at snapshot 5, with one tag."""


def test_a_store_s_outcome_comes_before_the_next_reply(start_node: StartNode) -> None:
    node = CacheNode(start_node("--max-memory", "16mb").address)
    outcomes: list[str | None] = []
    try:
        for key in (b"a", b"b", b"c"):
            node.store(key, *STORE, outcomes.append)
        assert outcomes == [], "nothing read yet: the caller went on"
        found = node.lookup(b"a", 5, 6, with_tags=False)
        assert outcomes == ["inserted"] * 3, "the replies owed were read first, in order"
        assert isinstance(found, Hit), "one connection: the stores were applied first"
    finally:
        node.close()


def test_settle_reads_what_a_quiet_connection_owes(start_node: StartNode) -> None:
    node = CacheNode(start_node("--max-memory", "16mb").address)
    outcomes: list[str | None] = []
    try:
        node.store(b"a", *STORE, outcomes.append)
        node.settle()
        assert outcomes == ["inserted"]
        node.store(b"a", *STORE, outcomes.append)
    finally:
        node.close()
    assert outcomes == ["inserted", "extended"], "closing reads what is owed first"


def test_a_reply_that_never_comes_is_none(start_node: StartNode) -> None:
    process = start_node("--max-memory", "16mb")
    node = CacheNode(process.address, timeout=0.3)
    outcomes: list[str | None] = []
    try:
        assert node.call("PING") == b"PONG"
        with process.paused():
            node.store(b"a", *STORE, outcomes.append)
            node.settle()
        assert outcomes == [None]
        assert not node.is_up()
        node.store(b"b", *STORE, outcomes.append)
        assert outcomes == [None, None], "a node known down: at once"
    finally:
        node.close()


def test_the_async_outcome_arrives_by_itself(start_node: StartNode) -> None:
    address = start_node("--max-memory", "16mb").address

    async def body() -> None:
        node = AsyncCacheNode(address, timeout=30)
        outcomes: list[str | None] = []
        try:
            await node.store(b"a", *STORE, outcomes.append)
            found = await node.lookup(b"a", 5, 6, with_tags=False)
            assert isinstance(found, Hit), "one connection: the store was applied first"
            assert outcomes == ["inserted"]
            await node.store(b"b", *STORE, outcomes.append)
            deadline = time.monotonic() + 10
            while len(outcomes) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            assert outcomes == ["inserted", "inserted"], "no other call needed"
        finally:
            node.close()
        await node.store(b"c", *STORE, outcomes.append)
        assert outcomes[-1] is None, "a closed node: at once"

    asyncio.run(body())
