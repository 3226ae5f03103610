# Generated from python/txcache/aio/_nodes.py by tools/async_to_sync.py. Do not edit:
# change the source and run `make generate` (`make lint` fails if this file differs).
"""The cache nodes as a client: the versioned commands (``TXGET``, ``TXSET`` — not waited
for —, ``TXINTERVAL``; docs/protocol.md), and ``DEL`` for the audit, over the node's transport (one
connection multiplexed across tasks in the async driver). It is generated from its async twin
(``tools/async_to_sync.py``). What each reply means is :mod:`txcache._node_replies`'s, and
the ring that places keys is :class:`~txcache._ring.NodeRing`.

A hit is one round trip; a node that is down gives an ``unavailable`` miss and skips stores
at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from txcache import _protocol as protocol
from txcache._node_replies import (
    delete_result,
    follows_another_database,
    insert_result,
    interval_result,
    lookup_result,
)
from txcache._protocol import Hit, Interval, Miss, Stored
from txcache._resp import Endpoint, ReplyError

__all__ = ["CacheNode"]

T = TypeVar("T")


def _ignore_reply(reply: object) -> None:
    """What a ``TXRELEASE`` reply is to the caller: nothing to act on."""


class CacheNode(Endpoint):
    """One ``txcached``, spoken to with the versioned commands."""

    def __init__(self, address: str, **options: Any) -> None:
        """A node at ``host:port``; ``options`` as :class:`Endpoint` takes them."""
        super().__init__(address, role="cache node", **options)

    def lookup(
        self, key: bytes, lo: int, hi: int, *, with_tags: bool, lease_ms: int | None = None
    ) -> Hit | Miss:
        """``TXGET key lo hi [WITHTAGS] [LEASE ms]``."""
        reply = self.run(protocol.txget(key, lo, hi, with_tags=with_tags, lease_ms=lease_ms))
        return lookup_result(self.address, self._served(reply))

    def release(self, key: bytes) -> None:
        """``TXRELEASE key``, not waited for: ends the key's lease without a store (best
        effort: a node that is down, or did not release it, ends it when it expires). Not
        waiting lets a cancellation or an interruption go on without a round trip."""
        self.send_later(protocol.txrelease(key), _ignore_reply)

    def store(
        self,
        key: bytes,
        value: bytes,
        lo: int,
        hi: int | None,
        snapshot: int | None,
        tags: Iterable[str],
        on_outcome: Callable[[str | None], None],
    ) -> None:
        """``TXSET``, not waited for (the caller's value is ready; the node stores it while
        the caller goes on): ``on_outcome`` gets the outcome (``inserted``, ``extended``,
        ``nondeterministic``, ``empty``; ``None`` when the node is down or refused it) once
        the reply is read — as it arrives in the async driver, before the connection's next
        reply or at the cache's next housekeeping (each refresh) in the sync one."""
        address = self.address

        def stored(reply: Stored | ReplyError | None) -> None:
            on_outcome(insert_result(address, self._served(reply)))

        command = protocol.txset(key, value, lo, hi, snapshot=snapshot, tags=tags)
        self.send_later(command, stored)

    def database_interval(self, snapshot: int, tags: Iterable[str]) -> Interval | None:
        """``TXINTERVAL``: where results read at ``snapshot`` from rows named by ``tags`` are
        known valid; ``None`` when the node cannot say."""
        reply = self.run(protocol.txinterval(snapshot, tags))
        return interval_result(self._served(reply))

    def _served(self, reply: T) -> T | None:
        """``reply``, or ``None`` (the node down) when it is the node's refusal of this
        cache's database: a stream of another database's agent claimed the node after this
        connection greeted it, and its next connection's greeting is refused too."""
        if follows_another_database(reply):
            self.refused(f"follows another database's stream now: {reply}")
            return None
        return reply

    def delete(self, key: bytes) -> int | None:
        """``DEL key``: every cached version of ``key`` removed (an audit's invalidation);
        how many keys were (0 or 1), or ``None`` when the node is down or refused it."""
        reply = self.run(protocol.delete(key))
        return delete_result(self.address, reply)
