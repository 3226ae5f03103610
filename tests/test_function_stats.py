"""Per-function statistics against the real stack: what each kind of call counts."""

from __future__ import annotations

from typing import Any

import pytest

import txcache
from library_fixtures import LibraryStack


@txcache.cacheable
def price(item_id: int) -> int:
    """A cacheable read that raises for a missing item."""
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    if row is None:
        raise LookupError(f"no item {item_id}")
    return int(row[0])


def test_calls_that_raise_are_counted_as_errors(lib: LibraryStack) -> None:
    before: dict[str, Any] = price.stats.as_dict()
    with lib.cache.read_only(staleness=30):
        assert price(1) == 10
        with pytest.raises(LookupError):
            price(999)
    with lib.cache.read_write(), pytest.raises(LookupError):
        price(998)  # uncached (a read/write transaction), and raising
    after: dict[str, Any] = price.stats.as_dict()
    assert after["errors"] == before["errors"] + 2
    assert sum(after["misses"].values()) == sum(before["misses"].values()) + 1
    assert after["uncached"] == before["uncached"] + 1
