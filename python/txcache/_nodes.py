"""The cache nodes, as the library sees them: consistent hashing, health, the versioned
commands (``TXGET``, ``TXSET``, ``TXINTERVAL``; docs/protocol.md, encoded and decoded by
:mod:`txcache._protocol`).

A node that cannot be reached is *down* (:class:`~txcache._resp.Endpoint`): a lookup misses
with kind ``unavailable`` and an insert is skipped, at once, until the retry time. Nothing
here raises for a node failure: a dead node means slower, never an error (docs/library.md).
What each reply means (:func:`lookup_result`, :func:`insert_result`, :func:`interval_result`)
and the ring are shared with the async node client (:mod:`txcache.aio._nodes`).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from txcache import _protocol as protocol
from txcache._protocol import Hit, Interval, Miss
from txcache._resp import Endpoint, ReplyError

# Hit, Interval and Miss are the protocol's reply types, exported here too because the
# library's modules know them as the node's.
__all__ = [
    "CacheNode",
    "Hit",
    "Interval",
    "Miss",
    "NodeRing",
    "insert_result",
    "interval_result",
    "lookup_result",
]

log = logging.getLogger("txcache")

_POINTS_PER_NODE = 160


def lookup_result(address: str, reply: Hit | Miss | ReplyError | None) -> Hit | Miss:
    """What a ``TXGET`` reply means: the hit or miss, ``unavailable`` when the node is down,
    ``error`` (logged) when it refused the request."""
    if reply is None:
        return Miss("unavailable")
    if isinstance(reply, ReplyError):
        log.warning("cache node %s refused TXGET: %s", address, reply)
        return Miss("error")
    return reply


def insert_result(address: str, reply: protocol.Stored | ReplyError | None) -> str | None:
    """The outcome of a ``TXSET`` reply; ``None`` when the node is down or refused it."""
    if reply is None:
        return None
    if isinstance(reply, ReplyError):
        log.warning("cache node %s refused TXSET: %s", address, reply)
        return None
    return reply.outcome


def interval_result(reply: Interval | ReplyError | None) -> Interval | None:
    """The interval of a ``TXINTERVAL`` reply; ``None`` when the node cannot say."""
    if reply is None or isinstance(reply, ReplyError):
        return None
    return reply


class CacheNode(Endpoint):
    """One ``txcached``, spoken to with the versioned commands."""

    def __init__(self, address: str, **options: Any) -> None:
        """A node at ``host:port``; ``options`` as :class:`Endpoint` takes them."""
        super().__init__(address, role="cache node", **options)

    def lookup(self, key: bytes, lo: int, hi: int, *, with_tags: bool) -> Hit | Miss:
        """``TXGET key lo hi [WITHTAGS]``."""
        reply = self.run(protocol.txget(key, lo, hi, with_tags=with_tags))
        return lookup_result(self.address, reply)

    def insert(
        self,
        key: bytes,
        value: bytes,
        lo: int,
        hi: int | None,
        snapshot: int | None,
        tags: Iterable[str],
    ) -> str | None:
        """``TXSET``; returns the outcome (``inserted``, ``extended``, ``nondeterministic``,
        ``empty``), or ``None`` when the node is down or refused it."""
        reply = self.run(protocol.txset(key, value, lo, hi, snapshot=snapshot, tags=tags))
        return insert_result(self.address, reply)

    def database_interval(self, snapshot: int, tags: Iterable[str]) -> Interval | None:
        """``TXINTERVAL``: where results read at ``snapshot`` from rows named by ``tags`` are
        known valid; ``None`` when the node cannot say."""
        reply = self.run(protocol.txinterval(snapshot, tags))
        return interval_result(reply)


class _Node(Protocol):
    """What the ring needs of a node client (sync or async)."""

    address: str

    def is_up(self) -> bool: ...

    def close(self) -> None: ...


N = TypeVar("N", bound=_Node)


class NodeRing(Generic[N]):
    """Consistent hashing of keys over nodes: each node owns many points on a ring, so
    adding or removing one moves only its share of the keys. The same ring places keys for
    the sync and the async node clients."""

    def __init__(self, nodes: Sequence[N]) -> None:
        """A ring over ``nodes`` (at least one)."""
        if not nodes:
            raise ValueError("a NodeRing needs at least one cache node")
        self.nodes = list(nodes)
        points = sorted(
            (_point(f"{node.address}#{index}".encode()), position)
            for position, node in enumerate(self.nodes)
            for index in range(_POINTS_PER_NODE)
        )
        self._points = [point for point, _ in points]
        self._owners = [self.nodes[position] for _, position in points]

    def node_for(self, key: bytes) -> N:
        """The node that holds ``key``."""
        index = bisect.bisect(self._points, _point(key))
        return self._owners[index % len(self._owners)]

    def any_up(self) -> N | None:
        """Some node that is up, for questions every node can answer."""
        return next((node for node in self.nodes if node.is_up()), None)

    def close(self) -> None:
        """Close every node's connections."""
        for node in self.nodes:
            node.close()


def _point(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
