"""Values computed without DDL triggers wait for a pin that verifies their catalog (pure
logic: the verdict, the queue's settling, its limits; and the pins' wire form)."""

from __future__ import annotations

from txcache import protocol
from txcache._pending_stores import UNVERIFIED, LaterPins, PendingStore, PendingStores
from txcache._pinset import Pin


def pin(ts: int, fingerprint: str, after: int) -> Pin:
    return Pin(ts, f"snap-{ts}", 0.0, None, fingerprint, after)


def waiting(
    position: int, fingerprint: str, outcomes: list[str | None], since: float = 0.0
) -> PendingStore[str]:
    request = (b"data", 1, None, 1, ["t"])
    return PendingStore("node", b"key", request, position, fingerprint, outcomes.append, since)


def test_no_pin_taken_after_the_queries_leaves_the_verdict_open() -> None:
    assert LaterPins([pin(10, "a", 100), pin(20, "a", 200)]).verdict(200, "a") is None


def test_a_later_pin_with_the_same_fingerprint_verifies() -> None:
    assert LaterPins([pin(10, "a", 100), pin(20, "a", 201)]).verdict(200, "a") is True


def test_later_pins_all_with_another_fingerprint_refute() -> None:
    assert LaterPins([pin(10, "a", 100), pin(20, "b", 201)]).verdict(200, "a") is False


def test_one_later_pin_with_the_same_fingerprint_is_enough() -> None:
    """No schema change committed between the snapshot and that pin, which was taken after
    the queries: a change after it does not concern them."""
    assert LaterPins([pin(20, "a", 201), pin(30, "b", 300)]).verdict(200, "a") is True


def test_settling_stores_the_verified_drops_the_refuted_and_keeps_the_open() -> None:
    outcomes: list[str | None] = []
    stores: PendingStores[str] = PendingStores()
    verified, refuted = waiting(100, "a", outcomes), waiting(100, "x", outcomes)
    open_ = waiting(500, "a", outcomes)
    for store in (verified, refuted, open_):
        stores.add(store)

    ready = stores.settle([pin(20, "a", 201)], now=1.0)

    assert ready == [verified]
    assert outcomes == [UNVERIFIED]  # the refuted one
    assert len(stores) == 1
    assert stores.settle([pin(30, "a", 501)], now=2.0) == [open_]
    assert len(stores) == 0


def test_a_value_that_waits_too_long_is_dropped_never_stored() -> None:
    outcomes: list[str | None] = []
    stores: PendingStores[str] = PendingStores(wait=5.0)
    stores.add(waiting(100, "a", outcomes, since=0.0))
    assert stores.settle([], now=4.0) == []
    assert stores.settle([], now=6.0) == []
    assert outcomes == [UNVERIFIED]
    assert len(stores) == 0


def test_beyond_the_limit_the_oldest_is_dropped() -> None:
    outcomes: list[str | None] = []
    stores: PendingStores[str] = PendingStores(limit=2)
    first = waiting(1, "a", outcomes)
    stores.add(first)
    stores.add(waiting(2, "a", outcomes))
    stores.add(waiting(3, "a", outcomes))
    assert outcomes == [UNVERIFIED]
    assert first not in stores.settle([pin(9, "a", 10)], now=0.0)


def test_one_block_stores_a_bounded_batch_and_the_rest_waits() -> None:
    outcomes: list[str | None] = []
    stores: PendingStores[str] = PendingStores()
    for _ in range(5):
        stores.add(waiting(1, "a", outcomes))
    assert len(stores.settle([pin(9, "a", 10)], now=0.0, most=2)) == 2
    assert len(stores) == 3
    assert len(stores.settle([pin(9, "a", 10)], now=0.0, most=5)) == 3
    assert outcomes == []


def test_what_waits_when_the_cache_closes_is_dropped_and_counted() -> None:
    outcomes: list[str | None] = []
    stores: PendingStores[str] = PendingStores()
    stores.add(waiting(1, "a", outcomes))
    stores.drop_all()
    assert outcomes == [UNVERIFIED]
    assert len(stores) == 0


def test_a_pin_of_an_agent_without_ddl_triggers_carries_its_fingerprint() -> None:
    command = protocol.pin()
    with_fingerprint = command.read([7, b"s-1", 2_000_000, b"1:2:", b"9f", 42])
    assert with_fingerprint == Pin(7, "s-1", 2.0, "1:2:", "9f", 42)
    assert command.read([7, b"s-1", 2_000_000, b"1:2:"]) == Pin(7, "s-1", 2.0, "1:2:")
