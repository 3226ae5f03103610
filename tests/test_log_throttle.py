"""txcache._log_throttle: an event repeated on every transaction is logged once per
interval, the next line counting what was held back. Pure logic, on a fake clock."""

from __future__ import annotations

import logging

import pytest

from txcache._log_throttle import LogThrottle


def test_one_line_per_interval_and_the_next_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    throttle = LogThrottle(logging.getLogger("txcache.test"), interval=60, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="txcache.test"):
        for _ in range(5):
            throttle.log(logging.INFO, "fell back: %s", "agent down")
        now[0] += 61
        throttle.log(logging.INFO, "fell back: %s", "agent down")
    assert [r.getMessage() for r in caplog.records] == [
        "fell back: agent down",
        "fell back: agent down (4 more like it since the last such line, not logged)",
    ]


def test_a_level_the_logger_drops_costs_no_line_and_no_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    throttle = LogThrottle(logging.getLogger("txcache.test"), clock=lambda: 0.0)
    with caplog.at_level(logging.WARNING, logger="txcache.test"):
        throttle.log(logging.INFO, "quiet")
        throttle.log(logging.WARNING, "loud")
    assert [r.getMessage() for r in caplog.records] == ["loud"]
