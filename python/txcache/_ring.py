"""Consistent hashing of keys over cache nodes, for the sync and the async node clients
alike: each node owns many points on a ring, so adding or removing one moves only its
share of the keys. While a node is down its keys go to the next node up on the ring, and
come back once it answers again: any node may hold any key, since every value carries the
interval it is valid in."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

__all__ = ["NodeClient", "NodeRing"]

_POINTS_PER_NODE = 160


class NodeClient(Protocol):
    """What the ring, and every decision without I/O, need of a node client (sync or
    async): its address, whether it is up, closing it."""

    address: str

    def is_up(self) -> bool: ...

    def close(self) -> None: ...


# Covariant: a ring of sync nodes is a ring of node clients (what the shared decisions see).
N = TypeVar("N", bound=NodeClient, covariant=True)


class NodeRing(Generic[N]):
    """Consistent hashing of keys over nodes: each node owns many points on a ring, so
    adding or removing one moves only its share of the keys. The same ring places keys for
    the sync and the async node clients."""

    def __init__(self, nodes: Sequence[N]) -> None:
        """A ring over ``nodes`` (at least one)."""
        if not nodes:
            raise ValueError("a NodeRing needs at least one cache node")
        self.nodes: Sequence[N] = tuple(nodes)
        points = sorted(
            (_point(f"{node.address}#{index}".encode()), position)
            for position, node in enumerate(self.nodes)
            for index in range(_POINTS_PER_NODE)
        )
        self._points = [point for point, _ in points]
        self._owners = [self.nodes[position] for _, position in points]

    def node_for(self, key: bytes) -> N:
        """The node that holds ``key``: its owner on the ring or, while the owner is down,
        the next node on the ring that is up (the owner itself when none is: its calls
        then miss at once)."""
        start = bisect.bisect(self._points, _point(key)) % len(self._owners)
        owner = self._owners[start]
        if owner.is_up():
            return owner
        return self._next_up(start) or owner

    def _next_up(self, start: int) -> N | None:
        """The first node up after point ``start``, going round the ring once."""
        seen: set[int] = set()
        for step in range(1, len(self._owners)):
            node = self._owners[(start + step) % len(self._owners)]
            if node.is_up():
                return node
            seen.add(id(node))
            if len(seen) == len(self.nodes):
                return None
        return None

    def any_up(self) -> N | None:
        """Some node that is up, for questions every node can answer."""
        return next((node for node in self.nodes if node.is_up()), None)

    def close(self) -> None:
        """Close every node's connections."""
        for node in self.nodes:
            node.close()


def _point(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
