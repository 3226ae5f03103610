"""The cache nodes for the async library: the versioned commands over one multiplexed
connection per node. What each reply means is :mod:`txcache._nodes`'s (shared with the sync
client), and so is the ring that places keys (:class:`~txcache._nodes.NodeRing`).

A hit is one round trip (``TXGET`` on the node's shared connection); a node that is down
gives an ``unavailable`` miss and skips stores at once, as in the sync library.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from txcache import _protocol as protocol
from txcache._nodes import Hit, Interval, Miss, insert_result, interval_result, lookup_result
from txcache.aio._resp import AsyncEndpoint

__all__ = ["AsyncCacheNode"]


class AsyncCacheNode(AsyncEndpoint):
    """One ``txcached``, spoken to with the versioned commands from any task."""

    def __init__(self, address: str, **options: Any) -> None:
        """A node at ``host:port``; ``options`` as :class:`AsyncEndpoint` takes them."""
        super().__init__(address, role="cache node", multiplex=True, **options)

    async def lookup(self, key: bytes, lo: int, hi: int, *, with_tags: bool) -> Hit | Miss:
        """``TXGET key lo hi [WITHTAGS]``."""
        reply = await self.run(protocol.txget(key, lo, hi, with_tags=with_tags))
        return lookup_result(self.address, reply)

    async def insert(
        self,
        key: bytes,
        value: bytes,
        lo: int,
        hi: int | None,
        snapshot: int | None,
        tags: Iterable[str],
    ) -> str | None:
        """``TXSET``; the outcome, or ``None`` when the node is down or refused it."""
        reply = await self.run(protocol.txset(key, value, lo, hi, snapshot=snapshot, tags=tags))
        return insert_result(self.address, reply)

    async def database_interval(self, snapshot: int, tags: Iterable[str]) -> Interval | None:
        """``TXINTERVAL``: where results read at ``snapshot`` from rows named by ``tags`` are
        known valid; ``None`` when the node cannot say."""
        reply = await self.run(protocol.txinterval(snapshot, tags))
        return interval_result(reply)
