"""The checker's verdict (pure logic): one commit point must explain every observation."""

from __future__ import annotations

from txcache.check.history import Commit, History, Read, judge

INITIAL = {
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


def read(*observed, began=100.0, ended=100.0, staleness=1000.0, not_before=None) -> Read:
    return Read(began, ended, staleness, not_before, list(observed))


def test_values_of_one_commit_point_are_consistent():
    verdict = judge(history(), read((("balance", 1), 90), (("balance", 2), 110)))
    assert verdict.points == (1, 3)


def test_the_two_sides_of_a_transfer_from_different_points_are_an_anomaly():
    verdict = judge(history(), read((("balance", 1), 90), (("balance", 2), 100)))
    assert verdict.points is None
    assert "('balance', 1) = 90: 1..3" in verdict.explanation
    assert "('balance', 2) = 100: 0..0" in verdict.explanation


def test_members_follow_moves_between_branches():
    assert judge(history(), read((("members", 1), (1, 2)), (("branch", 1), 1))).points == (2, 3)
    moved_but_not_listed = read((("members", 1), (2,)), (("branch", 1), 1))
    assert judge(history(), moved_but_not_listed).points is None


def test_lists_show_their_appends():
    assert judge(history(), read((("list", 0), (42,)))).points == (3, 3)
    assert judge(history(), read((("list", 0), ()), (("branch", 1), 1))).points == (2, 2)


def test_staleness_bounds_how_old_the_point_may_be():
    # at t = 100 with staleness 60 (+0.5 slack) the state after commit 2 (current until 30)
    # is too old; only the last state is allowed
    stale = read((("list", 0), ()), staleness=60.0)
    assert judge(history(), stale).points is None
    assert judge(history(), read((("list", 0), ()), staleness=75.0)).points == (2, 2)


def test_not_before_excludes_points_before_the_token():
    token = read((("balance", 1), 100), not_before=101)
    assert judge(history(), token).points is None
    assert judge(history(), read((("balance", 1), 90), not_before=101)).points == (1, 3)


def test_a_read_cannot_see_commits_after_it_ended():
    early = read((("list", 0), (42,)), began=15.0, ended=15.0)
    assert judge(history(), early).points is None
    assert judge(history(), read((("balance", 1), 90), began=15.0, ended=15.0)).points == (1, 1)


def test_an_unobserved_read_is_explained_by_its_bounds():
    assert judge(history(), read()).points == (0, 3)


def test_a_snapshot_read_is_judged_by_what_its_snapshot_sees():
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


def test_a_commit_of_an_xid_at_or_above_xmax_is_invisible_even_before_a_visible_one():
    # 102 wrote its commit record before 101, but 101 left the proc array first: the
    # snapshot (xmax = latestCompletedXid + 1 = 102) sees 101 and not 102, whose xid is not
    # listed as in progress. Regression: the replay applied 102 because it came first.
    reordered = [COMMITS[1], COMMITS[0]]
    snapshot = (102, 102, frozenset())
    sees = read((("branch", 1), 0), (("balance", 1), 90))
    sees.snapshot = snapshot
    verdict = judge(History(INITIAL, reordered, slack=0.5), sees)
    assert verdict.points is not None, verdict.explanation
    misses = read((("branch", 1), 1))
    misses.snapshot = snapshot
    assert judge(History(INITIAL, reordered, slack=0.5), misses).points is None


def test_a_snapshot_taken_before_any_commit_sees_the_initial_state():
    early = read((("balance", 1), 100), (("members", 0), (1,)))
    early.snapshot = (101, 101, frozenset())
    assert judge(history(), early).points == (0, 0)
