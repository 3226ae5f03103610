"""The client emulator's model: parsing, the next-state draw, the Back stack, think times."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from rubis.mix import exact_mix, simulated_mix
from rubis.transitions import (
    BACK,
    END_OF_SESSION,
    HOME,
    MAX_TRANSITIONS,
    STATE_COUNT,
    WRITE_STATES,
    Session,
    TransitionTable,
    draw_next,
    load_table,
    think_time_ms,
)

BROWSE, VIEW_ITEM, VIEW_USER_INFO, PUT_BID, STORE_BID = 3, 9, 10, 16, 17


class Scripted(random.Random):
    """A Random whose ``random()`` returns the given values, in order."""

    def __init__(self, *values: float) -> None:
        super().__init__(0)
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def table_of(moves: dict[int, dict[int, float]]) -> TransitionTable:
    """A table whose state ``s`` moves to ``r`` with ``moves[s][r]`` (rows include BACK and
    END_OF_SESSION); states not listed go Home."""
    columns = []
    for state in range(STATE_COUNT):
        column = [0.0] * (STATE_COUNT + 2)
        for row, probability in moves.get(state, {HOME: 1.0}).items():
            column[row] = probability
        columns.append(tuple(column))
    return TransitionTable("test", tuple(columns), (1000.0,) * STATE_COUNT)


@pytest.mark.parametrize("name", ["default", "browse_only"])
def test_columns_are_current_states_and_sum_to_about_one(name: str) -> None:
    table = load_table(name)
    assert len(table.columns) == STATE_COUNT
    assert all(len(column) == STATE_COUNT + 2 for column in table.columns)
    sums = [sum(column) for column in table.columns]
    assert min(sums) > 0.96
    assert max(sums) < 1.21
    # the other orientation does not sum to 1: Browse is the next state of nearly every page
    assert sum(column[BROWSE] for column in table.columns) > 3.8


def test_default_table_values() -> None:
    table = load_table("default")
    assert table.name == "Default transition set"
    home = table.columns[HOME]
    assert (home[1], home[BROWSE], home[21], home[25]) == (0.07, 0.7, 0.05, 0.15)
    assert table.columns[VIEW_ITEM][BACK] == 0.5
    assert table.columns[VIEW_USER_INFO][BACK] == 0.8
    assert table.columns[STORE_BID][END_OF_SESSION] == 0.2
    assert table.wait_ms[:4] == (3000.0, 10000.0, 3000.0, 2000.0)
    assert table.wait_ms[-1] == 7000.0


def test_draw_walks_the_column_cumulatively() -> None:
    assert draw_next([0.5, 0.3], 0.0) == 0
    assert draw_next([0.5, 0.3], 0.4999) == 0
    assert draw_next([0.5, 0.3], 0.5) == 1
    assert draw_next([0.5, 0.3], 0.79) == 1


def test_draw_stays_below_one_and_cuts_above_one() -> None:
    assert draw_next([0.5, 0.3], 0.8) is None
    assert draw_next([0.6, 0.6, 0.5], 0.9999) == 1  # row 2 is cut off


def test_back_pops_what_was_pushed() -> None:
    # Home -> ViewItem (push Home) -> ViewUserInfo (push ViewItem) -> Back -> Back
    table = table_of(
        {
            HOME: {VIEW_ITEM: 1.0},
            VIEW_ITEM: {VIEW_USER_INFO: 0.5, BACK: 0.5},
            VIEW_USER_INFO: {VIEW_USER_INFO: 0.5, BACK: 0.5},
        }
    )
    session = Session(table, Scripted(0.1, 0.1, 0.1, 0.9, 0.9, 0.9))
    pages = session.pages()
    assert [next(pages) for _ in range(7)] == [
        HOME,
        VIEW_ITEM,
        VIEW_USER_INFO,
        VIEW_USER_INFO,
        VIEW_USER_INFO,
        VIEW_ITEM,
        HOME,
    ]
    assert session.stack == []


def test_a_state_one_cannot_go_back_from_clears_the_stack() -> None:
    table = table_of({HOME: {VIEW_ITEM: 1.0}, VIEW_ITEM: {PUT_BID: 0.5, BACK: 0.5}})
    session = Session(table, Scripted(0.1, 0.1))
    session.advance()
    assert (session.state, session.stack) == (VIEW_ITEM, [HOME])
    session.advance()
    assert (session.state, session.stack) == (PUT_BID, [])


def test_staying_in_a_state_one_can_go_back_from_pushes_it() -> None:
    table = table_of({HOME: {VIEW_ITEM: 1.0}, VIEW_ITEM: {BACK: 0.5}})
    session = Session(table, Scripted(0.1, 0.7))
    session.advance()
    session.advance()
    assert (session.state, session.stack) == (VIEW_ITEM, [HOME, VIEW_ITEM])


def test_back_with_an_empty_stack_is_an_error_that_goes_home() -> None:
    table = table_of({VIEW_ITEM: {BACK: 1.0}})
    session = Session(table, Scripted(0.3), state=VIEW_ITEM)
    session.advance()
    assert (session.state, session.stack, session.ended) == (HOME, [], False)


def test_end_of_session_ends_the_pages() -> None:
    table = table_of({HOME: {BROWSE: 1.0}, BROWSE: {END_OF_SESSION: 1.0}})
    assert list(Session(table, random.Random(1)).pages()) == [HOME, BROWSE]


def test_sessions_are_capped_at_1000_requests() -> None:
    table = table_of({HOME: {BROWSE: 1.0}, BROWSE: {HOME: 1.0}})
    assert len(list(Session(table, random.Random(1)).pages())) == MAX_TRANSITIONS == 1000
    assert len(list(Session(table, random.Random(1), max_transitions=5).pages())) == 5


def test_exact_mix_of_a_table_solved_by_hand() -> None:
    # Home -> Browse; Browse -> Home or End with 1/2 each: 2 visits to each per session
    table = table_of({HOME: {BROWSE: 1.0}, BROWSE: {HOME: 0.5, END_OF_SESSION: 0.5}})
    mix = exact_mix(table)
    assert mix.requests_per_session == pytest.approx(4.0)
    assert mix.shares[HOME] == pytest.approx(0.5)
    assert mix.shares[BROWSE] == pytest.approx(0.5)


def test_simulated_frequencies_match_the_exact_mix() -> None:
    table = load_table("default")
    exact = exact_mix(table)
    assert exact.lost < 1e-8
    requests = 300_000
    simulated = simulated_mix(table, requests=requests, seed=11)
    for state in range(STATE_COUNT):
        p = exact.shares[state]
        # sessions make pages correlated: allow 3x the independent standard error, 5 sigma
        tolerance = 5 * 3 * math.sqrt(p * (1 - p) / requests) + 1e-9
        assert abs(simulated.shares[state] - p) < tolerance, state
    assert simulated.requests_per_session == pytest.approx(exact.requests_per_session, rel=0.05)


def test_the_bidding_mix_writes_about_9_percent() -> None:
    mix = exact_mix(load_table("default"))
    assert mix.write_share == pytest.approx(0.0922, abs=0.0005)
    assert mix.dynamic_write_share == pytest.approx(0.1173, abs=0.0005)
    assert mix.requests_per_session == pytest.approx(51.45, abs=0.01)


def test_the_browse_only_mix_never_writes() -> None:
    mix = exact_mix(load_table("browse_only"))
    assert mix.share_of(WRITE_STATES) == 0.0


def test_think_time_is_negative_exponential_with_a_7_s_mean() -> None:
    assert think_time_ms(Scripted(4.5e-5)) == 0
    assert think_time_ms(Scripted(4.54e-5)) == round(-7000 * math.log(4.54e-5))
    assert think_time_ms(Scripted(math.exp(-1))) == 7000
    rng = random.Random(5)
    draws = [think_time_ms(rng) for _ in range(100_000)]
    assert statistics.fmean(draws) == pytest.approx(7000, rel=0.02)


def test_peak_load_has_no_think_time() -> None:
    rng = Scripted()
    assert think_time_ms(rng, peak=True) == 0
