"""Key contexts a framework registers (``txcache.register_key_context``): request-scoped
state a cacheable function may depend on without an argument, such as Django's active time
zone. Pure logic: the keys, no database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import txcache
from library_fixtures import LibraryStack
from txcache import _keys


@pytest.fixture
def zone() -> Iterator[list[str]]:
    """A registered key context ``"zone"`` whose value the test sets."""
    current = ["Asia/Tokyo"]
    txcache.register_key_context("zone", lambda: current[0])
    yield current
    del _keys._key_contexts["zone"]


def test_a_registered_context_is_part_of_every_key(zone: list[str]) -> None:
    @txcache.cacheable
    def items_on_day(day: str) -> list[int]:
        return []

    tokyo = items_on_day.key("2026-03-01")
    zone[0] = "America/Los_Angeles"
    assert items_on_day.key("2026-03-01") != tokyo
    zone[0] = "Asia/Tokyo"
    assert items_on_day.key("2026-03-01") == tokyo


def test_a_function_independent_of_a_context_leaves_it_out(zone: list[str]) -> None:
    @txcache.cacheable(independent_of={"zone"})
    def price(item_id: int) -> int:
        return item_id

    before = price.key(1)
    zone[0] = "UTC"
    assert price.key(1) == before


def test_without_a_registered_context_keys_are_unchanged() -> None:
    @txcache.cacheable
    def f(x: int) -> int:
        return x

    first = f.key(1)
    txcache.register_key_context("zone", lambda: "UTC")
    try:
        assert f.key(1) != first
    finally:
        del _keys._key_contexts["zone"]
    assert f.key(1) == first


def test_a_manual_invalidation_names_the_call_in_every_context(zone: list[str]) -> None:
    @txcache.cacheable(manual_invalidation=True)
    def rate(currency: str) -> float:
        return 1.0

    named = rate.keys.invalidation_key(("EUR",), {})
    zone[0] = "Europe/Paris"
    assert rate.keys.invalidation_key(("EUR",), {}) == named
    assert rate.key("EUR") != named


def test_a_context_value_without_a_canonical_form_is_refused(zone: list[str]) -> None:
    txcache.register_key_context("zone", object)

    @txcache.cacheable
    def f(x: int) -> int:
        return x

    with pytest.raises(txcache.UnsupportedArgument, match="<zone>"):
        f.key(1)


@txcache.cacheable
def zone_label() -> str:
    """Depends on every registered key context."""
    return "label"


@txcache.cacheable(independent_of={"zone"})
def claims_independence() -> str:
    """Declared independent of "zone", but calls a function that is not."""
    return zone_label()


def test_a_call_that_depends_on_a_context_refuses_an_outer_function_declared_independent(
    zone: list[str], lib: LibraryStack
) -> None:
    lib.caught_up()
    lib.fresh_pins()
    with (
        lib.cache.read_only(staleness=60),
        pytest.raises(txcache.UncacheableQuery, match="declared independent of the key"),
    ):
        claims_independence()
