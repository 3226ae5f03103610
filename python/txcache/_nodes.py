"""The cache nodes, as the library sees them: consistent hashing, health, the versioned
commands (``TXGET``, ``TXSET``, ``TXINTERVAL``; docs/protocol.md).

A node that cannot be reached is *down* (:class:`~txcache._resp.Endpoint`): a lookup misses
with kind ``unavailable`` and an insert is skipped, at once, until the retry time. Nothing
here raises for a node failure: a dead node means slower, never an error (docs/library.md).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from txcache._resp import Endpoint, ReplyError

__all__ = ["CacheNode", "Hit", "Interval", "Miss", "NodeRing"]

log = logging.getLogger("txcache")

_POINTS_PER_NODE = 160


@dataclass(frozen=True, slots=True)
class Interval:
    """A validity interval ``[lo, hi)`` as a node reports it; ``open``: still valid past
    ``hi - 1``, which is only as far as the node has seen."""

    lo: int
    hi: int
    open: bool


@dataclass(frozen=True, slots=True)
class Hit:
    """A cached version valid somewhere in the requested range."""

    value: bytes
    interval: Interval
    tags: tuple[str, ...]
    """The open version's tags (asked for with ``WITHTAGS``), for enclosing functions."""


@dataclass(frozen=True, slots=True)
class Miss:
    """No usable version: ``kind`` is the node's miss type (``compulsory``, ``capacity``,
    ``staleness``, ``consistency``) or the library's (``unavailable``: the node is down;
    ``error``: it refused the request)."""

    kind: str


class CacheNode(Endpoint):
    """One ``txcached``, spoken to with the versioned commands."""

    def __init__(self, address: str, **options: Any) -> None:
        """A node at ``host:port``; ``options`` as :class:`Endpoint` takes them."""
        super().__init__(address, role="cache node", **options)

    def lookup(self, key: bytes, lo: int, hi: int, *, with_tags: bool) -> Hit | Miss:
        """``TXGET key lo hi [WITHTAGS]``."""
        command: tuple[str | bytes | int, ...] = ("TXGET", key, lo, hi)
        reply = self.call(*command, "WITHTAGS") if with_tags else self.call(*command)
        if reply is None:
            return Miss("unavailable")
        if isinstance(reply, ReplyError) or not isinstance(reply, list):
            log.warning("cache node %s refused TXGET: %s", self.address, reply)
            return Miss("error")
        if reply[0] is None:
            return Miss(reply[1].decode())
        value, lo_, hi_, is_open = reply[:4]
        tags = tuple(tag.decode() for tag in reply[4]) if with_tags else ()
        return Hit(value, Interval(lo_, hi_, bool(is_open)), tags)

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
        command: list[str | bytes | int] = ["TXSET", key, value, lo, "OPEN" if hi is None else hi]
        if snapshot is not None:
            command += ["SNAPSHOT", snapshot, "TAGS", *tags]
        reply = self.call(*command)
        if reply is None:
            return None
        if isinstance(reply, ReplyError):
            log.warning("cache node %s refused TXSET: %s", self.address, reply)
            return None
        outcome: str = reply[0].decode()
        return outcome

    def database_interval(self, snapshot: int, tags: Iterable[str]) -> Interval | None:
        """``TXINTERVAL``: where results read at ``snapshot`` from rows named by ``tags`` are
        known valid; ``None`` when the node cannot say."""
        reply = self.call("TXINTERVAL", snapshot, "TAGS", *tags)
        if reply is None or isinstance(reply, ReplyError):
            return None
        lo, hi, is_open = reply
        return Interval(lo, hi, bool(is_open))


class NodeRing:
    """Consistent hashing of keys over nodes: each node owns many points on a ring, so
    adding or removing one moves only its share of the keys."""

    def __init__(self, nodes: Sequence[CacheNode]) -> None:
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

    def node_for(self, key: bytes) -> CacheNode:
        """The node that holds ``key``."""
        index = bisect.bisect(self._points, _point(key))
        return self._owners[index % len(self._owners)]

    def any_up(self) -> CacheNode | None:
        """Some node that is up, for questions every node can answer."""
        return next((node for node in self.nodes if node.is_up()), None)

    def close(self) -> None:
        """Close every node's connections."""
        for node in self.nodes:
            node.close()


def _point(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
