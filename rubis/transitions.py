"""The RUBiS client emulator's model: transition tables, sessions, think times. No I/O.

A transition file (``rubis/data/*_transitions.txt``, tab-separated, from the RUBiS
distribution) holds a 29 x 27 matrix and a wait-time column. **Column = current state,
row = next state**: every column sums to about 1 (0.97 to 1.21), no row does — although the
file's corner cell reads "To >>> / From vvvv", which suggests the opposite. Rows 0-26 are the
27 interactions, row 27 is Back, row 28 End of Session; the last column of row ``i`` is state
``i``'s wait time in ms. A third trailing row, "Header probability", is not read (RUBiS's
client does not read it either).

``Session`` follows RUBiS's ``TransitionTable.nextState`` and ``UserSession``:

- a session starts at Home with an empty Back stack and requests at most 1,000 pages;
- next state: draw u in [0, 1) and walk the current state's column accumulating
  probabilities; the first row with u < running sum wins. A column summing below 1 can hit
  nothing: the user stays. A column summing above 1 cuts later rows off (in the default
  table, End of Session is unreachable from every state but the five writes);
- Back pops the previous state; any other move pushes the state left when the new state's
  Back probability is non-zero, and clears the stack otherwise. Back with an empty stack is
  an error page, which sends the user Home (RUBiS printed an error and went on);
- End of Session ends the session.
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rubis import data

__all__ = [
    "BACK",
    "END_OF_SESSION",
    "HOME",
    "MAX_TRANSITIONS",
    "STATES",
    "STATE_COUNT",
    "WRITE_STATES",
    "Session",
    "TransitionTable",
    "draw_next",
    "load_table",
    "parse_table",
    "think_time_ms",
]

#: The 27 interactions, by index (row and column of the transition files).
STATES: tuple[str, ...] = (
    "Home",
    "Register",
    "RegisterUser",
    "Browse",
    "BrowseCategories",
    "SearchItemsInCategory",
    "BrowseRegions",
    "BrowseCategoriesInRegion",
    "SearchItemsInRegion",
    "ViewItem",
    "ViewUserInfo",
    "ViewBidHistory",
    "BuyNowAuth",
    "BuyNow",
    "StoreBuyNow",
    "PutBidAuth",
    "PutBid",
    "StoreBid",
    "PutCommentAuth",
    "PutComment",
    "StoreComment",
    "Sell",
    "SelectCategoryToSellItem",
    "SellItemForm",
    "RegisterItem",
    "AboutMeAuth",
    "AboutMe",
)
STATE_COUNT = len(STATES)
HOME = 0
BACK = STATE_COUNT
END_OF_SESSION = STATE_COUNT + 1
#: RegisterUser, StoreBuyNow, StoreBid, StoreComment, RegisterItem.
WRITE_STATES = frozenset({2, 14, 17, 20, 24})
#: RUBiS's cap on the requests of one session.
MAX_TRANSITIONS = 1_000

_ROWS = STATE_COUNT + 2


@dataclass(frozen=True, slots=True)
class TransitionTable:
    """A parsed transition file.

    ``columns[s][r]`` is the probability of moving from state ``s`` to row ``r`` (a state,
    ``BACK`` or ``END_OF_SESSION``); ``wait_ms[s]`` is state ``s``'s wait time.
    """

    name: str
    columns: tuple[tuple[float, ...], ...]
    wait_ms: tuple[float, ...]

    def back_probability(self, state: int) -> float:
        """The probability of Back from ``state``: non-zero marks states one can go back
        from, which is what the stack rule tests."""
        return self.columns[state][BACK]


def parse_table(text: str) -> TransitionTable:
    """Parse a RUBiS transition file (tab-separated; its corner cell spans two lines)."""
    rows = list(csv.reader(io.StringIO(text), delimiter="\t"))
    header = next(i for i, row in enumerate(rows) if row and row[-1].startswith("Transition"))
    matrix = rows[header + 1 : header + 1 + _ROWS]
    if len(matrix) != _ROWS or any(len(row) < STATE_COUNT + 2 for row in matrix):
        raise ValueError("a transition table has 29 rows of 27 probabilities and a wait time")
    values = [[float(cell) for cell in row[1 : STATE_COUNT + 1]] for row in matrix]
    columns = tuple(tuple(values[r][s] for r in range(_ROWS)) for s in range(STATE_COUNT))
    wait_ms = tuple(float(matrix[s][STATE_COUNT + 1]) for s in range(STATE_COUNT))
    return TransitionTable(rows[0][1] if len(rows[0]) > 1 else "", columns, wait_ms)


def load_table(name: str = "default") -> TransitionTable:
    """``default`` (the bidding mix) or ``browse_only``, from ``rubis/data``."""
    return parse_table(data.read_text(f"{name}_transitions.txt"))


def draw_next(column: Sequence[float], u: float) -> int | None:
    """The row chosen by ``u`` in [0, 1): the first whose running sum exceeds ``u``, or
    ``None`` (stay) when the column sums to ``u`` or less."""
    cumulative = 0.0
    for row, probability in enumerate(column):
        cumulative += probability
        if u < cumulative:
            return row
    return None


def think_time_ms(rng: random.Random, *, peak: bool = False) -> int:
    """TPC-W's think time as RUBiS draws it: 0 if r < 4.54e-5, else -7000 ln r, rounded
    (mean 7 s); always 0 with ``peak`` (peak-load runs)."""
    if peak:
        return 0
    r = rng.random()
    if r < 4.54e-5:
        return 0
    return int(-7000.0 * math.log(r) + 0.5)


@dataclass(slots=True)
class Session:
    """One emulated user's walk through the table; ``pages()`` yields the states to request.

    ``rng`` supplies every draw, so a session is reproducible from its seed.
    """

    table: TransitionTable
    rng: random.Random
    max_transitions: int = MAX_TRANSITIONS
    state: int = HOME
    stack: list[int] = field(default_factory=list)
    requests: int = 0
    ended: bool = False

    def pages(self) -> Iterator[int]:
        """The states requested, in order, until End of Session or the cap."""
        while not self.ended and self.requests < self.max_transitions:
            self.requests += 1
            yield self.state
            self.advance()

    def advance(self) -> None:
        """Draw the next state and apply the Back stack rule."""
        before = self.state
        row = draw_next(self.table.columns[before], self.rng.random())
        if row == END_OF_SESSION:
            self.ended = True
        elif row == BACK:
            self._back()
        else:
            self.state = before if row is None else row
            if self.table.back_probability(self.state) != 0:
                self.stack.append(before)
            else:
                self.stack.clear()

    def error(self) -> None:
        """An error page: the user goes Home with an empty stack."""
        self.state = HOME
        self.stack.clear()

    def _back(self) -> None:
        """Back: pop the previous state; with nothing to pop, an error."""
        if self.stack:
            self.state = self.stack.pop()
        else:
            self.error()
