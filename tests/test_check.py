"""A short run of the consistency checker (``txcache check``) in the test suite: every
kind of fault at least once, every kind of schema operation, no anomaly, and the
no_consistency control must show some."""

from __future__ import annotations

from txcache.check import CheckOptions, run_check
from txcache.check.faults import FAULT_KINDS
from txcache.check.report import as_markdown

SCHEMA_KINDS = {"view", "truncate-reload", "detach", "attach", "index", "retype"}


def test_a_short_check_under_every_fault_finds_no_anomaly_and_the_control_finds_some():
    # Schema operations at 3 % of writes (1 % by default): enough of each kind in 40 s even
    # on a loaded machine.
    options = CheckOptions(
        duration=40,
        control_duration=12,
        fault_every=6,
        readers=3,
        writers=2,
        schema_share=0.03,
    )
    report = run_check(options, progress=lambda line: None)
    print(as_markdown(report, "tests/test_check.py"))
    checked, control = report.checked, report.control
    assert {fault.kind for fault in checked.faults} == set(FAULT_KINDS)
    assert [fault for fault in checked.faults if fault.error] == []
    assert set(checked.schema_ops) == SCHEMA_KINDS
    assert checked.reads > 500
    assert checked.writes_committed > 500
    assert checked.anomalies == [], checked.anomalies[0].explanation
    assert checked.errors_unexpected == []
    assert checked.cache_hits > 0
    assert control is not None
    assert control.anomalies, "a checker that finds nothing in the control is broken"
    assert report.foreign_commits == 0
    assert report.missing_commits == 0
    assert report.passed
