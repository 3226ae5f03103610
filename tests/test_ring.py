"""The ring that places keys on cache nodes (:class:`txcache._ring.NodeRing`), as pure
logic: which node owns a key, how many keys move when a node comes or goes, and where a
down node's keys go meanwhile."""

from __future__ import annotations

from collections import Counter

import pytest

from txcache._ring import NodeRing

KEYS = [f"key {i}".encode() for i in range(6000)]


class FakeNode:
    """A node client as the ring sees it: an address, up or down."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.up = True

    def is_up(self) -> bool:
        return self.up

    def close(self) -> None:
        self.up = False


def placement(ring: NodeRing[FakeNode]) -> dict[bytes, str]:
    return {key: ring.node_for(key).address for key in KEYS}


def test_keys_spread_over_every_node() -> None:
    ring = NodeRing([FakeNode(f"n:{i}") for i in range(3)])
    shares = Counter(placement(ring).values())
    assert set(shares) == {"n:0", "n:1", "n:2"}
    assert all(1500 < count < 2500 for count in shares.values()), shares


def test_a_node_that_joins_takes_only_its_share() -> None:
    before = placement(NodeRing([FakeNode("n:0"), FakeNode("n:1")]))
    after = placement(NodeRing([FakeNode("n:0"), FakeNode("n:1"), FakeNode("n:2")]))
    moved = [key for key in KEYS if before[key] != after[key]]
    assert all(after[key] == "n:2" for key in moved), "keys move only to the new node"
    assert 1500 < len(moved) < 2500


def test_the_same_addresses_place_keys_alike_in_any_order() -> None:
    one = placement(NodeRing([FakeNode("n:0"), FakeNode("n:1")]))
    other = placement(NodeRing([FakeNode("n:1"), FakeNode("n:0")]))
    assert one == other, "every library that follows the agent agrees"


def test_a_down_node_s_keys_go_to_the_next_node_up_and_come_back() -> None:
    nodes = [FakeNode(f"n:{i}") for i in range(3)]
    ring = NodeRing(nodes)
    before = placement(ring)
    nodes[1].up = False
    during = placement(ring)
    assert "n:1" not in during.values()
    assert all(during[key] == before[key] for key in KEYS if before[key] != "n:1"), (
        "the keys of the nodes up stay where they were"
    )
    nodes[1].up = True
    assert placement(ring) == before


def test_with_every_node_down_a_key_stays_with_its_owner() -> None:
    nodes = [FakeNode("n:0"), FakeNode("n:1")]
    ring = NodeRing(nodes)
    before = placement(ring)
    for node in nodes:
        node.up = False
    assert placement(ring) == before


def test_a_ring_needs_a_node() -> None:
    with pytest.raises(ValueError, match="at least one"):
        NodeRing([])
