"""A staleness above what the cache nodes keep is said once: the nodes hold no value older
than their ``--max-staleness``, so no transaction is ever that stale."""

from __future__ import annotations

import logging

import pytest

from library_fixtures import LibraryStack
from txcache.stack import wait_until


def test_a_staleness_above_the_nodes_maximum_is_warned_about_once(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    limit = wait_until(lambda: lib.cache.nodes_max_staleness, "the nodes' --max-staleness")
    with caplog.at_level(logging.WARNING, logger="txcache"):
        with lib.cache.read_only(staleness=limit):
            pass
        assert not caplog.records
        for _ in range(2):
            with lib.cache.read_only(staleness=limit + 60):
                pass
    [warning] = [record.getMessage() for record in caplog.records]
    assert f"staleness {limit + 60:g} s is above the cache nodes' --max-staleness" in warning
    assert "larger --max-staleness" in warning
