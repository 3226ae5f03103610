"""The checker's verdict (pure logic): one commit point must explain every observation."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from txcache.check.faults import Fault
from txcache.check.history import (
    PUBLIC_TENANT,
    Commit,
    CommitOrder,
    History,
    Object,
    Read,
    Verdict,
    judge,
)
from txcache.check.report import when
from txcache.check.workload import WriterLog, attribute

INITIAL: dict[Object, object] = {
    ("balance", 1): 100,
    ("balance", 2): 100,
    ("branch", 1): 0,
    ("branch", 2): 1,
    ("members", 0): (1,),
    ("members", 1): (2,),
    ("list", 0): (),
    ("entries", 0): (),
}
# t = 10: transfer 1 → 2; t = 20: account 1 moves to branch 1; t = 30: append to list 0
COMMITS = [
    Commit(101, 10.0, (("balance", 1, 90), ("balance", 2, 110))),
    Commit(102, 20.0, (("branch", 1, 1),)),
    Commit(103, 30.0, (("append", 0, (7, 42)),)),
]


def history() -> History:
    return History(INITIAL, COMMITS, slack=0.5)


def read(
    *observed: tuple[Object, Any],
    began: float = 100.0,
    ended: float = 100.0,
    staleness: float = 1000.0,
    not_before: int | None = None,
) -> Read:
    return Read(began, ended, staleness, not_before, list(observed))


def test_values_of_one_commit_point_are_consistent() -> None:
    verdict = judge(history(), read((("balance", 1), 90), (("balance", 2), 110)))
    assert verdict.points == (1, 3)


def test_the_two_sides_of_a_transfer_from_different_points_are_an_anomaly() -> None:
    verdict = judge(history(), read((("balance", 1), 90), (("balance", 2), 100)))
    assert verdict.points is None
    assert "('balance', 1) = 90: 1..3" in verdict.explanation
    assert "('balance', 2) = 100: 0..0" in verdict.explanation


def test_members_follow_moves_between_branches() -> None:
    assert judge(history(), read((("members", 1), (1, 2)), (("branch", 1), 1))).points == (2, 3)
    moved_but_not_listed = read((("members", 1), (2,)), (("branch", 1), 1))
    assert judge(history(), moved_but_not_listed).points is None


def test_lists_show_their_appends() -> None:
    assert judge(history(), read((("list", 0), (42,)))).points == (3, 3)
    assert judge(history(), read((("list", 0), ()), (("branch", 1), 1))).points == (2, 2)


def test_staleness_bounds_how_old_the_point_may_be() -> None:
    # at t = 100 with staleness 60 (+0.5 slack) the state after commit 2 (current until 30)
    # is too old; only the last state is allowed
    stale = read((("list", 0), ()), staleness=60.0)
    assert judge(history(), stale).points is None
    assert judge(history(), read((("list", 0), ()), staleness=75.0)).points == (2, 2)


def test_a_value_no_allowed_point_explains_says_where_it_held_and_how_it_differs() -> None:
    stale = judge(history(), read((("list", 0), ()), staleness=60.0))
    assert "('list', 0) = (): nowhere allowed (held at 0..2; at point 3: it was (42,); " in (
        stale.explanation
    )
    assert "it has more (), fewer (42,)" in stale.explanation
    phantom = judge(history(), read((("list", 0), (41, 42)), staleness=60.0))
    assert "held at no point of the history" in phantom.explanation
    assert "it has more (41,), fewer ()" in phantom.explanation


def test_a_commit_is_owed_only_once_its_writer_was_answered() -> None:
    # Commit 3's record is at t = 30 but it waited for a synchronous standby until t = 95:
    # a fresh read at t = 90 need not see it, one at t = 100 must.
    waited = [*COMMITS[:2], dataclasses.replace(COMMITS[2], answered=95.0)]
    without_the_append = read((("list", 0), ()), began=90.0, ended=90.0, staleness=0.0)
    assert judge(History(INITIAL, waited, slack=0.5), without_the_append).points == (2, 2)
    assert judge(history(), without_the_append).points is None
    late = read((("list", 0), ()), began=100.0, ended=100.0, staleness=0.0)
    assert judge(History(INITIAL, waited, slack=0.5), late).points is None


def test_not_before_excludes_points_before_the_token() -> None:
    token = read((("balance", 1), 100), not_before=101)
    assert judge(history(), token).points is None
    assert judge(history(), read((("balance", 1), 90), not_before=101)).points == (1, 3)


def test_a_read_cannot_see_commits_after_it_ended() -> None:
    early = read((("list", 0), (42,)), began=15.0, ended=15.0)
    assert judge(history(), early).points is None
    assert judge(history(), read((("balance", 1), 90), began=15.0, ended=15.0)).points == (1, 1)


def test_an_unobserved_read_is_explained_by_its_bounds() -> None:
    assert judge(history(), read()).points == (0, 3)


def test_a_snapshot_read_is_judged_by_what_its_snapshot_sees() -> None:
    # commit 101 (transfer) visible, 102 (move) still in progress for the snapshot, though
    # its commit record came before 103's (visibility out of commit order), 103 visible
    snapshot = (101, 104, frozenset({102}))
    sees = read((("branch", 1), 0), (("list", 0), (42,)), (("balance", 2), 110))
    sees.snapshot = snapshot
    assert judge(history(), sees).points == (3, 3)
    misses = read((("branch", 1), 1))
    misses.snapshot = snapshot
    verdict = judge(history(), misses)
    assert verdict.points is None
    assert "the snapshot holds 0" in verdict.explanation


def test_a_commit_of_an_xid_at_or_above_xmax_is_invisible_even_before_a_visible_one() -> None:
    # 102 wrote its commit record before 101, but 101 left the proc array first: the
    # snapshot (xmax = latestCompletedXid + 1 = 102) sees 101 and not 102, whose xid is not
    # listed as in progress. Regression: the replay applied 102 because it came first.
    reordered = [COMMITS[1], COMMITS[0]]
    snapshot: tuple[int, int, frozenset[int]] = (102, 102, frozenset())
    sees = read((("branch", 1), 0), (("balance", 1), 90))
    sees.snapshot = snapshot
    verdict = judge(History(INITIAL, reordered, slack=0.5), sees)
    assert verdict.points is not None, verdict.explanation
    misses = read((("branch", 1), 1))
    misses.snapshot = snapshot
    assert judge(History(INITIAL, reordered, slack=0.5), misses).points is None


def test_a_snapshot_never_sees_a_commit_made_after_its_read_ended() -> None:
    # The read ended at t = 15, before the append (t = 30) whose xid, 103, the snapshot
    # counts as ended (below xmin, or listed between xmin and xmax as not in progress): an
    # xid a promotion gave out again, to the later commit. The snapshot sees 101 only.
    for snapshot in [(104, 104, frozenset[int]()), (101, 104, frozenset({102}))]:
        early = read((("list", 0), ()), (("balance", 1), 90), began=15.0, ended=15.0)
        early.snapshot = snapshot
        assert judge(history(), early).points == (1, 1)


def test_a_snapshot_taken_before_any_commit_sees_the_initial_state() -> None:
    early = read((("balance", 1), 100), (("members", 0), (1,)))
    early.snapshot = (101, 101, frozenset())
    assert judge(history(), early).points == (0, 0)


# -- schema changes: the view, the partitioned ledger, DDL without value changes -------------

LOW, HIGH = "low", "high"  # the view's two definitions: branches (0, 1) and (2, 3)
ROWS = ((0, 10), (1, 10))
SCHEMA_INITIAL: dict[Object, object] = {
    ("balance", 1): 100,
    ("balance", 2): 100,
    ("branch", 1): 0,
    ("branch", 2): 2,
    ("members", 0): (1,),
    ("members", 2): (2,),
    ("part", 0): ROWS,
    ("part", 2): ROWS,
    ("attached", 0): True,
    ("attached", 2): True,
    ("viewdef",): LOW,
}
# t = 10: the view becomes HIGH; t = 20: ledger_0 truncated and reloaded (same rows);
# t = 30: a transfer 1 → 2; t = 40: ledger_2 detached; t = 50: a row of ledger_0 updated;
# t = 60: an index created (no value changes); t = 70: ledger_2 attached again
SCHEMA_COMMITS = [
    Commit(201, 10.0, (("viewdef", 0, HIGH),)),
    Commit(202, 20.0, (("reload", 0, ROWS),)),
    Commit(203, 30.0, (("balance", 1, 90), ("balance", 2, 110))),
    Commit(204, 40.0, (("attached", 2, False),)),
    Commit(205, 50.0, (("ledger", 0, (1, 15)),)),
    Commit(206, 60.0, (("ddl", 0, "index on accounts.balance created"),)),
    Commit(207, 70.0, (("attached", 2, True),)),
]


def schema_history() -> History:
    return History(SCHEMA_INITIAL, SCHEMA_COMMITS, slack=0.5)


def at(point: int, *observed: tuple[Object, Any]) -> Read:
    """A read whose bounds allow exactly the commit points ``point``..7 at most: it began
    (staleness 0) while ``point`` was current and ended at t = 100."""
    return read(*observed, began=10.0 * point + 5.0, staleness=0.0)


def test_the_view_shows_its_definitions_rows_of_the_state_at_the_commit_point() -> None:
    assert judge(schema_history(), read((("view",), (LOW, ((1, 100),))))).points == (0, 0)
    # HIGH over the state before the transfer (from point 0 on: a query there may already
    # run with HIGH), then after it
    assert judge(schema_history(), read((("view",), (HIGH, ((2, 100),))))).points == (0, 2)
    assert judge(schema_history(), read((("view",), (HIGH, ((2, 110),))))).points == (3, 7)


def test_a_view_definition_may_be_newer_than_the_commit_point_but_never_older() -> None:
    # At point 0, still LOW, a query may already run with HIGH (the catalog is not
    # versioned): HIGH's rows over the initial data, with the initial balance of account 1.
    newer = read((("view",), (HIGH, ((2, 100),))), (("balance", 1), 100), began=5.0)
    newer.staleness = 0.0
    assert judge(schema_history(), newer).points == (0, 2)
    # LOW after the redefinition committed is an anomaly: nothing later made it LOW again.
    older = at(3, (("view",), (LOW, ((1, 90),))))
    verdict = judge(schema_history(), older)
    assert verdict.points is None
    assert "('viewdef',) = 'high'" in verdict.explanation


def test_a_view_that_showed_no_row_fits_either_definition() -> None:
    # Both definitions show a row here, so an empty result fits no commit point.
    assert judge(schema_history(), read((("view",), (None, ())))).points is None


def test_a_truncate_and_reload_leaves_the_rows_so_an_empty_partition_is_an_anomaly() -> None:
    assert judge(schema_history(), at(2, (("ledger", 0), ROWS))).points == (2, 4)
    verdict = judge(schema_history(), at(2, (("ledger", 0), ())))
    assert verdict.points is None
    assert "nowhere allowed" in verdict.explanation
    assert "2: TRUNCATE-and-reload of ledger_0" in verdict.explanation
    assert judge(schema_history(), at(2, (("ledger_sum", 0), None))).points is None
    assert judge(schema_history(), at(2, (("part", 0), ()))).points is None


def test_a_partition_read_directly_or_through_its_table_follows_its_updates() -> None:
    updated = ((0, 10), (1, 15))
    assert judge(schema_history(), at(5, (("part", 0), updated))).points == (5, 7)
    assert judge(schema_history(), at(5, (("ledger", 0), updated))).points == (5, 7)
    assert judge(schema_history(), at(5, (("ledger_sum", 0), (25, 2)))).points == (5, 7)
    assert judge(schema_history(), at(5, (("ledger", 0), ROWS))).points is None


def test_a_detached_partition_is_empty_through_its_table_but_keeps_its_rows() -> None:
    detached = at(4, (("ledger", 2), ()), (("ledger_sum", 2), None), (("part", 2), ROWS))
    assert judge(schema_history(), detached).points == (4, 6)
    # attached again at 7: its rows are back
    assert judge(schema_history(), at(7, (("ledger", 2), ROWS))).points == (7, 7)
    assert judge(schema_history(), at(7, (("ledger", 2), ()))).points is None


def test_a_detach_may_be_seen_from_an_older_point_but_only_up_to_the_reads_end() -> None:
    # A query at point 3 that runs after the detach (point 4) sees the partition detached.
    early_detach = read((("ledger", 2), ()), (("balance", 1), 90), began=35.0, ended=45.0)
    early_detach.staleness = 0.0
    assert judge(schema_history(), early_detach).points == (3, 4)
    # The same read ending before the detach committed cannot have seen it.
    too_early = read((("ledger", 2), ()), (("balance", 1), 90), began=35.0, ended=36.0)
    too_early.staleness = 0.0
    assert judge(schema_history(), too_early).points is None


def test_a_ddl_without_value_changes_is_a_commit_point_like_any_other() -> None:
    token = read((("ledger", 0), ((0, 10), (1, 15))), not_before=206)
    assert judge(schema_history(), token).points == (6, 7)


def test_a_snapshot_read_sees_the_catalog_of_its_snapshot_or_later() -> None:
    # The snapshot sees commits up to 3 (the transfer); the view's definition is HIGH.
    sees = read((("view",), (HIGH, ((2, 110),))), (("ledger", 2), ROWS))
    sees.snapshot = (204, 204, frozenset())
    assert judge(schema_history(), sees).points == (3, 3)
    # A query on that snapshot may run after the detach: ledger_2 empty through the table.
    detached_later = read((("ledger", 2), ()))
    detached_later.snapshot = (204, 204, frozenset())
    assert judge(schema_history(), detached_later).points == (3, 3)
    # But it never shows a truncated partition empty.
    truncated = read((("ledger", 0), ()))
    truncated.snapshot = (204, 204, frozenset())
    verdict = judge(schema_history(), truncated)
    assert verdict.points is None
    assert "the snapshot holds ('part', 0) = ((0, 10), (1, 10))" in verdict.explanation


# -- tenants: each judged by its own history; another tenant's rows are an anomaly ----------

# The same objects in two tenants' tables. t = 10: a transfer 1 → 2 in the public tenant's;
# t = 20: one in the path tenant's (other amounts); t = 30: an append to the path tenant's
# list 0.
TENANT_COMMITS = [
    Commit(301, 10.0, (("balance", 1, 90), ("balance", 2, 110))),
    Commit(302, 20.0, (("balance", 1, 70), ("balance", 2, 130)), tenant="path"),
    Commit(303, 30.0, (("append", 0, (7, 42)),), tenant="path"),
]


def tenant_histories() -> dict[str, History]:
    order = CommitOrder(TENANT_COMMITS)
    return {
        tenant: History(INITIAL, order, slack=0.5, tenant=tenant)
        for tenant in (PUBLIC_TENANT, "path")
    }


def marked(tenant: str, *observed: tuple[Object, object, str]) -> Read:
    """A read by ``tenant`` of ``(object, value, whose rows)``."""
    seen = read(*((obj, value) for obj, value, _ in observed))
    seen.tenant = tenant
    seen.marks = [owner for _, _, owner in observed]
    return seen


def test_a_tenants_history_replays_only_its_own_commits() -> None:
    histories = tenant_histories()
    path = marked("path", (("balance", 1), 70, "path"), (("balance", 2), 130, "path"))
    assert judge(histories["path"], path).points == (2, 3)
    # 100 and 100 held in the path tenant's tables until its own transfer (point 2), though
    # the public tenant's changed at point 1
    before = marked("path", (("balance", 1), 100, "path"), (("balance", 2), 100, "path"))
    assert judge(histories["path"], before).points == (0, 1)
    public = marked(PUBLIC_TENANT, (("balance", 1), 90, PUBLIC_TENANT), (("list", 0), (), ""))
    assert judge(histories[PUBLIC_TENANT], public).points == (1, 3)


def test_a_read_of_another_tenants_rows_is_a_cross_tenant_anomaly() -> None:
    histories = tenant_histories()
    # The public tenant's balance served to the path tenant: 90 never held in its own
    # tables, and the mark names whose rows they were.
    leaked = marked("path", (("balance", 1), 90, PUBLIC_TENANT), (("balance", 2), 130, "path"))
    verdict = judge(histories["path"], leaked)
    assert verdict.anomalous
    assert verdict.cross_tenant
    assert verdict.points == (2, 3), "its own observations are still judged, and consistent"
    assert "cross-tenant read by tenant 'path'" in verdict.explanation
    assert "('balance', 1) = 90 came from the rows of 'public'" in verdict.explanation


def test_another_tenants_rows_are_an_anomaly_even_when_the_values_are_the_same() -> None:
    # Both tenants' account 1 had 100 until point 1: the values cannot tell, the mark can.
    histories = tenant_histories()
    same = marked("path", (("balance", 1), 100, PUBLIC_TENANT))
    same.began = same.ended = 5.0
    verdict = judge(histories["path"], same)
    assert verdict.cross_tenant
    assert verdict.points is not None


def test_a_value_mixing_two_tenants_rows_is_a_cross_tenant_read_too() -> None:
    histories = tenant_histories()
    mixed = marked("path", (("members", 0), (1,), f"path+{PUBLIC_TENANT}"))
    verdict = judge(histories["path"], mixed)
    assert verdict.cross_tenant
    assert "came from the rows of 'public'" in verdict.explanation


def test_an_inconsistent_read_of_its_own_rows_is_not_a_cross_tenant_one() -> None:
    histories = tenant_histories()
    torn = marked("path", (("balance", 1), 70, "path"), (("balance", 2), 100, "path"))
    verdict = judge(histories["path"], torn)
    assert verdict.points is None
    assert not verdict.cross_tenant
    assert verdict.anomalous


def test_a_tenants_snapshot_read_sees_only_its_own_commits() -> None:
    histories = tenant_histories()
    # The snapshot sees 301 and 302, not 303 (in progress): the path tenant's list is empty
    # and its balances those of its own transfer.
    sees = marked("path", (("balance", 1), 70, "path"), (("list", 0), (), ""))
    sees.snapshot = (301, 304, frozenset({303}))
    assert judge(histories["path"], sees).points == (2, 2)


def test_a_read_is_judged_by_its_own_tenants_history_only() -> None:
    with pytest.raises(ValueError, match="judged by 'public'"):
        judge(tenant_histories()[PUBLIC_TENANT], marked("path"))


def test_an_anomaly_is_placed_against_the_faults_that_started_just_before_it() -> None:
    read = Read(1_000_100.0, 1_000_100.5, 1.0, None, [])
    verdict = Verdict(read, None, (0, 0))
    faults = [
        Fault("node-leave", 1_000_050.0, 1_000_052.0),  # 50 s before: too early
        Fault("promote-stop", 1_000_090.5, 1_000_091.0),
        Fault("node-kill", 1_000_101.0, 1_000_101.5),  # after it began
    ]
    placed = when(verdict, faults)
    assert placed.startswith("began ")
    assert placed.endswith("faults started in the 20 s before: promote-stop 9.5 s before")
    assert when(verdict, []).endswith(": none")


def test_a_reused_xid_is_the_commit_of_the_transaction_running_when_it_was_written() -> None:
    # xid 7 was the old primary's for a transaction lost with it (its COMMIT failed at
    # t = 10); the promoted standby gave 7 out again to one that committed at t = 12.
    lost = WriterLog(7, (("append", 4, (5, 187)),), None, "role", math.inf, 9.0, 10.0)
    kept = WriterLog(7, (("balance", 1, 90),), True, "path", 12.5, 11.0, 12.5)
    for logs in ([lost, kept], [kept, lost]):
        attribution = attribute([(7, 12.0)], logs)
        assert attribution.logs[7] is kept
        assert attribution.committed == {kept: 12.0}
        assert (attribution.shared, attribution.ambiguous, attribution.foreign) == (1, 0, 0)
    # Within the first one's window only: the first one's, whatever became of the other.
    assert attribute([(7, 9.5)], [kept, lost]).logs[7] is lost


def test_a_reused_xid_both_logs_explain_goes_to_the_one_whose_commit_returned() -> None:
    failed = WriterLog(7, (), None, "role", math.inf, 9.0, 13.0)
    answered = WriterLog(7, (), True, "path", 12.5, 11.0, 12.5)
    attribution = attribute([(7, 12.0)], [answered, failed])
    assert attribution.logs[7] is answered
    assert attribution.ambiguous == 0
    twice = attribute([(7, 12.0)], [failed, dataclasses.replace(failed, tenant="path")])
    assert (twice.shared, twice.ambiguous) == (1, 1)
    assert attribute([(8, 12.0)], [failed]).foreign == 1
    # The only log of the xid, but not running then: not the commit's.
    late = attribute([(7, 20.0)], [answered])
    assert (late.logs, late.committed, late.foreign) == ({}, {}, 1)
