"""The pin set of a read-only transaction (``txcache._pinset``): where the transaction can
still be serialized, as a set of certified pins plus ★ ("a snapshot taken now"). Pure logic,
no servers; a randomized model test at the end checks every operation against a trivial
reference (a set of timestamps and a flag)."""

from __future__ import annotations

import random

import pytest

from txcache._pinset import Pin, PinSet, newest_or_fresh


def pin(ts: int, snapshot_id: str | None = None, current_as_of: float = 0.0) -> Pin:
    return Pin(ts=ts, snapshot_id=snapshot_id or f"snap-{ts}", current_as_of=current_as_of)


def timestamps(pin_set: PinSet) -> list[int]:
    return [p.ts for p in pin_set]


# --- construction and reading --------------------------------------------------------------


def test_pins_are_kept_oldest_first_whatever_the_given_order() -> None:
    pin_set = PinSet([pin(30), pin(10), pin(20)])
    assert timestamps(pin_set) == [10, 20, 30]
    assert [p.ts for p in pin_set.pins] == [10, 20, 30]
    assert len(pin_set) == 3


def test_pins_with_the_same_timestamp_collapse_into_one() -> None:
    pin_set = PinSet([pin(10, "a"), pin(10, "b"), pin(20)])
    assert timestamps(pin_set) == [10, 20]
    assert len(pin_set) == 2


def test_star_is_possible_by_default_and_not_counted_as_a_pin() -> None:
    assert PinSet([]).star
    assert len(PinSet([])) == 0
    assert not PinSet([pin(1)], star=False).star


def test_pins_property_is_a_copy() -> None:
    pin_set = PinSet([pin(1), pin(2)])
    pin_set.pins.clear()
    assert timestamps(pin_set) == [1, 2]


def test_repr_lists_timestamps_and_star() -> None:
    assert repr(PinSet([pin(2), pin(1)])) == "PinSet([1, 2, ★])"
    assert repr(PinSet([pin(1)], star=False)) == "PinSet([1])"


def test_bounds_are_the_oldest_and_newest_timestamps() -> None:
    assert PinSet([pin(7), pin(3), pin(5)]).bounds() == (3, 7)
    assert PinSet([pin(4)]).bounds() == (4, 4)


def test_bounds_without_pins_is_none_even_with_star() -> None:
    assert PinSet([]).bounds() is None
    assert PinSet([], star=True).bounds() is None


def test_newest_is_the_pin_with_the_largest_timestamp() -> None:
    newest = pin(9, "newest")
    assert PinSet([pin(1), newest, pin(5)]).newest() is newest
    assert PinSet([]).newest() is None


# --- within: the half-open interval [lo, hi) -----------------------------------------------


def test_within_includes_lo_and_excludes_hi() -> None:
    pin_set = PinSet([pin(10), pin(20), pin(30)])
    assert [p.ts for p in pin_set.within(10, 30)] == [10, 20]
    assert [p.ts for p in pin_set.within(11, 31)] == [20, 30]
    assert [p.ts for p in pin_set.within(20, 21)] == [20]


def test_within_an_empty_or_inverted_interval_is_empty() -> None:
    pin_set = PinSet([pin(10), pin(20)])
    assert pin_set.within(20, 20) == []
    assert pin_set.within(25, 15) == []
    assert pin_set.within(0, 10) == []
    assert pin_set.within(21, 100) == []


def test_within_does_not_change_the_set() -> None:
    pin_set = PinSet([pin(10), pin(20)])
    pin_set.within(10, 11)
    assert timestamps(pin_set) == [10, 20]
    assert pin_set.star


# --- narrow --------------------------------------------------------------------------------


def test_narrow_keeps_the_pins_in_the_interval_and_drops_star() -> None:
    pin_set = PinSet([pin(10), pin(20), pin(30), pin(40)])
    assert pin_set.narrow(20, 40) is True
    assert timestamps(pin_set) == [20, 30]
    assert not pin_set.star
    assert pin_set.bounds() == (20, 30)


def test_narrow_that_would_empty_the_set_is_refused_and_changes_nothing() -> None:
    pin_set = PinSet([pin(10), pin(20)])
    assert pin_set.narrow(11, 20) is False
    assert timestamps(pin_set) == [10, 20]
    assert pin_set.star, "a refused narrowing must not drop ★ either"


def test_narrow_of_a_set_with_only_star_is_refused() -> None:
    pin_set = PinSet([])
    assert pin_set.narrow(0, 1_000_000) is False
    assert pin_set.star


def test_narrow_upper_bound_is_exclusive() -> None:
    pin_set = PinSet([pin(10)])
    assert pin_set.narrow(0, 10) is False
    assert pin_set.narrow(10, 11) is True
    assert timestamps(pin_set) == [10]


def test_successive_narrowings_intersect() -> None:
    pin_set = PinSet([pin(ts) for ts in range(0, 100, 10)])
    assert pin_set.narrow(20, 80)
    assert pin_set.narrow(50, 200)
    assert timestamps(pin_set) == [50, 60, 70]


# --- restrict ------------------------------------------------------------------------------


def test_restrict_keeps_the_common_pins_and_drops_star() -> None:
    pin_set = PinSet([pin(1), pin(2), pin(3)])
    assert pin_set.restrict([pin(3), pin(1), pin(99)]) is True
    assert timestamps(pin_set) == [1, 3]
    assert not pin_set.star


def test_restrict_matches_pins_by_timestamp() -> None:
    held = pin(5, "held")
    pin_set = PinSet([held])
    assert pin_set.restrict([pin(5, "another snapshot id")])
    assert pin_set.pins == [held], "the set keeps its own pin"


def test_restrict_with_nothing_in_common_is_refused_and_changes_nothing() -> None:
    pin_set = PinSet([pin(1), pin(2)])
    assert pin_set.restrict([pin(3)]) is False
    assert pin_set.restrict([]) is False
    assert timestamps(pin_set) == [1, 2]
    assert pin_set.star


# --- reify ---------------------------------------------------------------------------------


def test_reify_replaces_star_with_the_pin() -> None:
    pin_set = PinSet([pin(10), pin(30)])
    fresh = pin(20, "fresh")
    pin_set.reify(fresh)
    assert not pin_set.star
    assert timestamps(pin_set) == [10, 20, 30]
    assert fresh in pin_set.pins


def test_reify_newer_than_every_pin_becomes_the_newest() -> None:
    pin_set = PinSet([pin(10)])
    fresh = pin(50, "fresh")
    pin_set.reify(fresh)
    assert pin_set.newest() is fresh
    assert pin_set.bounds() == (10, 50)


def test_reify_at_the_timestamp_of_a_held_pin_replaces_that_pin() -> None:
    pin_set = PinSet([pin(10), pin(20, "old"), pin(30)])
    fresh = pin(20, "fresh", current_as_of=99.0)
    pin_set.reify(fresh)
    assert timestamps(pin_set) == [10, 20, 30]
    assert pin_set.within(20, 21) == [fresh]
    assert len(pin_set) == 3
    assert not pin_set.star


def test_reify_of_an_empty_set_gives_one_pin() -> None:
    pin_set = PinSet([])
    fresh = pin(7)
    pin_set.reify(fresh)
    assert pin_set.pins == [fresh]
    assert pin_set.bounds() == (7, 7)
    assert not pin_set.star


# --- discard -------------------------------------------------------------------------------


def test_discard_forgets_the_pin() -> None:
    pin_set = PinSet([pin(1), pin(2), pin(3)])
    pin_set.discard(pin(2))
    assert timestamps(pin_set) == [1, 3]
    assert pin_set.star, "discarding a pin says nothing about ★"


def test_discard_of_an_absent_pin_changes_nothing() -> None:
    pin_set = PinSet([pin(1), pin(3)])
    pin_set.discard(pin(2))
    pin_set.discard(pin(0))
    pin_set.discard(pin(4))
    assert timestamps(pin_set) == [1, 3]


def test_discard_may_empty_the_set() -> None:
    pin_set = PinSet([pin(1)], star=False)
    pin_set.discard(pin(1))
    assert len(pin_set) == 0
    assert pin_set.bounds() is None
    assert pin_set.newest() is None


# --- the policy: newest_or_fresh -----------------------------------------------------------


def test_policy_chooses_star_when_there_are_no_pins_and_star_is_possible() -> None:
    assert newest_or_fresh()(PinSet([]), 1000.0) is None


def test_policy_chooses_star_when_the_newest_pin_is_older_than_max_age() -> None:
    pin_set = PinSet([pin(1, current_as_of=100.0), pin(2, current_as_of=90.0)])
    assert newest_or_fresh(max_age=5.0)(pin_set, 105.5) is None


def test_policy_chooses_the_newest_pin_when_it_is_fresh_enough() -> None:
    newest = pin(2, current_as_of=100.0)
    pin_set = PinSet([pin(1, current_as_of=104.0), newest])
    assert newest_or_fresh(max_age=5.0)(pin_set, 103.0) is newest


def test_policy_at_exactly_max_age_still_uses_the_newest_pin() -> None:
    newest = pin(2, current_as_of=100.0)
    assert newest_or_fresh(max_age=5.0)(PinSet([newest]), 105.0) is newest


def test_policy_judges_age_by_the_newest_pin_only() -> None:
    """An older pin that happens to be fresher does not matter: the newest is the one."""
    pin_set = PinSet([pin(1, current_as_of=200.0), pin(2, current_as_of=100.0)])
    assert newest_or_fresh(max_age=5.0)(pin_set, 150.0) is None


def test_policy_never_chooses_star_once_star_is_impossible() -> None:
    stale = pin(2, current_as_of=0.0)
    pin_set = PinSet([pin(1, current_as_of=0.0), stale], star=False)
    assert newest_or_fresh(max_age=5.0)(pin_set, 1_000_000.0) is stale


def test_policy_max_age_is_a_parameter() -> None:
    newest = pin(1, current_as_of=100.0)
    pin_set = PinSet([newest])
    assert newest_or_fresh(max_age=60.0)(pin_set, 150.0) is newest
    assert newest_or_fresh(max_age=10.0)(pin_set, 150.0) is None
    assert newest_or_fresh()(pin_set, 104.0) is newest
    assert newest_or_fresh()(pin_set, 106.0) is None


# --- randomized model test -----------------------------------------------------------------


class Model:
    """The reference: a set of timestamps and whether ★ is possible."""

    def __init__(self, stamps: set[int], star: bool) -> None:
        self.stamps = set(stamps)
        self.star = star

    def narrow(self, lo: int, hi: int) -> bool:
        kept = {ts for ts in self.stamps if lo <= ts < hi}
        if not kept:
            return False
        self.stamps, self.star = kept, False
        return True

    def restrict(self, others: set[int]) -> bool:
        kept = self.stamps & others
        if not kept:
            return False
        self.stamps, self.star = kept, False
        return True

    def reify(self, ts: int) -> None:
        self.stamps.add(ts)
        self.star = False

    def discard(self, ts: int) -> None:
        self.stamps.discard(ts)


def check_same(pin_set: PinSet, model: Model, rng: random.Random) -> None:
    stamps = sorted(model.stamps)
    assert timestamps(pin_set) == stamps
    assert len(pin_set) == len(stamps)
    assert pin_set.star == model.star
    assert pin_set.bounds() == ((stamps[0], stamps[-1]) if stamps else None)
    newest = pin_set.newest()
    assert (newest.ts if newest else None) == (stamps[-1] if stamps else None)
    lo, hi = sorted(rng.randrange(-5, 60) for _ in range(2))
    assert [p.ts for p in pin_set.within(lo, hi)] == [ts for ts in stamps if lo <= ts < hi]


@pytest.mark.parametrize("seed", range(300))
def test_pin_set_behaves_like_a_set_of_timestamps_and_a_star_flag(seed: int) -> None:
    rng = random.Random(seed)
    initial = {rng.randrange(50) for _ in range(rng.randrange(0, 8))}
    star = rng.random() < 0.8
    pin_set = PinSet([pin(ts) for ts in initial], star=star)
    model = Model(initial, star)
    reified: dict[int, Pin] = {}
    check_same(pin_set, model, rng)
    for _ in range(40):
        had_something = len(model.stamps) > 0
        operation = rng.choice(["narrow", "restrict", "reify", "discard"])
        if operation == "narrow":
            lo = rng.randrange(-5, 55)
            hi = lo + rng.randrange(-3, 25)
            expected = model.narrow(lo, hi)
            assert pin_set.narrow(lo, hi) is expected
        elif operation == "restrict":
            others = {rng.randrange(50) for _ in range(rng.randrange(0, 10))}
            expected = model.restrict(others)
            assert pin_set.restrict([pin(ts, "other") for ts in others]) is expected
        elif operation == "reify":
            fresh = pin(rng.randrange(50), f"fresh-{rng.random()}")
            model.reify(fresh.ts)
            pin_set.reify(fresh)
            reified[fresh.ts] = fresh
        else:
            present = sorted(model.stamps)
            ts = rng.choice(present) if present and rng.random() < 0.7 else rng.randrange(50)
            model.discard(ts)
            pin_set.discard(pin(ts))
            reified.pop(ts, None)
        check_same(pin_set, model, rng)
        if had_something and operation != "discard":
            assert len(pin_set) > 0, f"{operation} emptied a set that had pins"
        # A reified pin is the one the set holds at its timestamp, until discarded.
        for ts, fresh in reified.items():
            if ts in model.stamps:
                assert pin_set.within(ts, ts + 1) == [fresh]
