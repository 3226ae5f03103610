"""The verdict of the consistency checker, from what happened (pure logic, no I/O).

The database's history is the sequence of committed write transactions in commit order
(read by the checker from a logical slot of its own, not from txcache). Each writer logged
the absolute values it left behind, so the state after the k-th commit is known for every
*object* the readers observe: an account's ``balance`` and ``branch``, the members of a
``branch`` (sorted ids), the values of a ``list`` in entry order.

A read-only transaction is consistent when one commit point ``k`` explains every value it
observed, with ``k`` not before its ``not_before`` commit, no staler than its staleness
limit allows, and not after it ended (docs/check.md). :func:`judge` finds the set of such
points by intersecting, per observation, the ranges of ``k`` where the object had the
observed value.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Commit",
    "History",
    "Read",
    "Verdict",
    "Write",
    "judge",
]

LIST_WINDOW = 20
"""How many of a list's last values readers observe (``workload.list_values``)."""

Object = tuple[Hashable, ...]
"""``("balance", account)``, ``("branch", account)``, ``("members", branch)``,
``("list", list_id)``."""

Write = tuple[str, int, object]
"""What a writer logged: ``("balance", account, value)``, ``("branch", account, branch)``,
``("append", list_id, (entry_id, value))``."""


@dataclass(frozen=True)
class Commit:
    """One committed write transaction."""

    xid: int
    """Its 32-bit transaction id, as logical decoding reports it."""
    time: float
    """Its commit time (Unix seconds, the server's clock)."""
    writes: tuple[Write, ...]


@dataclass
class Read:
    """One read-only transaction: what it observed and within which bounds."""

    began: float
    ended: float
    staleness: float
    not_before: int | None
    """The xid of the commit it must see (its ``not_before`` token), if any."""
    observed: list[tuple[Object, object]] = field(default_factory=list)
    mode: str = "consistent"
    path: str = ""
    """How the library served it (snapshot, moves, fallback), for the anomaly report."""
    snapshot: tuple[int, int, frozenset[int]] | None = None
    """For a transaction that fell back to the database: its snapshot (xmin, xmax, the
    in-progress xids; 32-bit). It is judged by what that snapshot sees, not by a prefix of
    commit order: PostgreSQL's guarantee, which a snapshot on a primary gives."""


@dataclass(frozen=True)
class Verdict:
    """The outcome for one read-only transaction."""

    read: Read
    points: tuple[int, int] | None
    """The first and last commit point explaining everything it saw; ``None``: none does."""
    bounds: tuple[int, int]
    """The commit points its staleness, ``not_before`` and end allowed."""
    explanation: str = ""


class History:
    """Every object's value after each commit point (0 = the initial state)."""

    def __init__(
        self, initial: dict[Object, object], commits: Sequence[Commit], *, slack: float
    ) -> None:
        """``initial``: the state before the first commit; ``commits`` in commit order;
        ``slack``: seconds of clock and decoding uncertainty allowed around the bounds."""
        self.commits = list(commits)
        self.slack = slack
        self.position = {commit.xid: index + 1 for index, commit in enumerate(self.commits)}
        # Commit timestamps are taken just before the commit record is written, so they are
        # almost but not exactly in commit order: search their running maximum.
        self._times = list(itertools.accumulate((c.time for c in self.commits), max))
        self._changes: dict[Object, tuple[list[int], list[object]]] = {}
        self._replay(initial)
        self._held: dict[tuple[Object, object], list[int]] = self._index()
        by_xid = sorted(self.position.items())
        self._xids = [xid for xid, _ in by_xid]
        self._latest_below = list(itertools.accumulate((i for _, i in by_xid), max))
        # The earliest commit among the xids from each index on: where a scan for commits of
        # xids at or above a snapshot's xmax must start.
        self._earliest_from = list(itertools.accumulate((i for _, i in reversed(by_xid)), min))[
            ::-1
        ]

    def _index(self) -> dict[tuple[Object, object], list[int]]:
        """For every (object, value), the indices into the object's changes where it took
        the value: a lookup costs a dict access and a bisect, not a scan of the history."""
        held: dict[tuple[Object, object], list[int]] = defaultdict(list)
        for obj, (_points, values) in self._changes.items():
            for index, value in enumerate(values):
                held[obj, _hashable(value)].append(index)
        return dict(held)

    def _replay(self, initial: dict[Object, object]) -> None:
        state = dict(initial)
        changes: dict[Object, tuple[list[int], list[object]]] = defaultdict(lambda: ([], []))
        for obj, value in initial.items():
            changes[obj][0].append(0)
            changes[obj][1].append(value)
        for index, commit in enumerate(self.commits, start=1):
            for obj in _apply(state, commit.writes):
                points, values = changes[obj]
                if points and points[-1] == index:
                    values[-1] = state[obj]
                else:
                    points.append(index)
                    values.append(state[obj])
        self._changes = dict(changes)

    def value_ranges(
        self, obj: Object, value: object, within: tuple[int, int] | None = None
    ) -> list[tuple[int, int]]:
        """The commit points (inclusive ranges) at which ``obj`` had ``value``, those that
        meet ``within`` only if given."""
        points, _values = self._changes.get(obj, ([0], [None]))
        indices = self._held.get((obj, _hashable(value)), [])
        last = len(self.commits)
        if within is not None:
            # Changes that started after `within` ends cannot meet it; the one in force when
            # it begins can.
            first = max(bisect.bisect_right(points, within[0]) - 1, 0)
            stop = bisect.bisect_right(points, within[1])
            indices = indices[
                bisect.bisect_left(indices, first) : bisect.bisect_left(indices, stop)
            ]
        ranges = []
        for index in indices:
            end = points[index + 1] - 1 if index + 1 < len(points) else last
            ranges.append((points[index], end))
        return ranges

    def value_at(self, obj: Object, point: int) -> object:
        """The value of ``obj`` at commit point ``point``."""
        points, values = self._changes.get(obj, ([0], [None]))
        return values[bisect.bisect_right(points, point) - 1]

    def visible_state(
        self, snapshot: tuple[int, int, frozenset[int]], objects: Iterable[Object]
    ) -> tuple[int, dict[Object, object]]:
        """The values of ``objects`` in what ``snapshot`` sees, and the last commit it sees.

        Every commit after that last visible one is invisible; before it, a commit can be
        missing when it became visible out of commit order: its xid was in progress at the
        snapshot, or at or above its xmax (``latestCompletedXid + 1``: a transaction whose
        commit record was written before a visible one's, but which had not yet left the
        proc array)."""
        xmin, xmax, in_progress = snapshot
        below = bisect.bisect_left(self._xids, xmin)  # every commit of an xid < xmin is seen
        last = self._latest_below[below - 1] if below else 0
        for xid in range(xmin, xmax):
            if xid not in in_progress and xid in self.position:
                last = max(last, self.position[xid])
        missing = [self.position[x] for x in in_progress if self.position.get(x, last + 1) <= last]
        above = bisect.bisect_left(self._xids, xmax)
        if above < len(self._xids):
            for index in range(self._earliest_from[above], last + 1):
                if self.commits[index - 1].xid >= xmax:
                    missing.append(index)
        missing.sort()
        wanted = set(objects)
        if not missing:
            return last, {obj: self.value_at(obj, last) for obj in wanted}
        # Rebuild from just before the first missing commit, skipping the missing ones.
        base = missing[0] - 1
        state = {obj: self.value_at(obj, base) for obj in self._changes}
        skipped = set(missing)
        for index in range(missing[0], last + 1):
            if index not in skipped:
                _apply(state, self.commits[index - 1].writes)
        return last, {obj: state.get(obj) for obj in wanted}

    def bounds(self, read: Read) -> tuple[int, int]:
        """The commit points ``read`` may be serialized at, ignoring what it observed."""
        # State k was current from commit k until commit k + 1.
        oldest = read.began - read.staleness - self.slack
        low = bisect.bisect_left(self._times, oldest)  # first commit after `oldest`
        if read.not_before is not None:
            low = max(low, self.position.get(read.not_before, len(self.commits) + 1))
        high = bisect.bisect_right(self._times, read.ended + self.slack)
        return low, high


def _apply(state: dict[Object, object], writes: Iterable[Write]) -> set[Object]:
    """Apply one commit's writes to ``state``; returns the objects that changed."""
    changed: set[Object] = set()
    for kind, key, value in writes:
        if kind == "balance":
            state["balance", key] = value
            changed.add(("balance", key))
        elif kind == "branch":
            old = state.get(("branch", key))
            state["branch", key] = value
            changed.add(("branch", key))
            for branch, joins in ((old, False), (value, True)):
                members: Any = set(state.get(("members", branch), ()))  # type: ignore[call-overload]
                if joins:
                    members.add(key)
                else:
                    members.discard(key)
                state["members", branch] = tuple(sorted(members))
                changed.add(("members", branch))
        elif kind == "append":
            entries: Any = state.get(("entries", key), ())
            # The newest LIST_WINDOW entries by id are all a reader can see, and all that
            # decides which it sees after the next append.
            entries = tuple(sorted((*entries, value)))[-LIST_WINDOW:]
            state["entries", key] = entries
            state["list", key] = tuple(item for _, item in entries)
            changed.update((("list", key), ("entries", key)))
        else:
            raise ValueError(f"unknown write {kind!r}")
    return changed


def judge(history: History, read: Read) -> Verdict:
    """Whether one commit point explains everything ``read`` observed."""
    low, high = history.bounds(read)
    if read.snapshot is not None:
        return _judge_snapshot(history, read, low, high)
    candidates = [(low, high)]
    for obj, value in read.observed:
        candidates = _intersect(candidates, history.value_ranges(obj, value, (low, high)))
        if not candidates:
            return Verdict(read, None, (low, high), _explain(history, read, low, high))
    return Verdict(read, (candidates[0][0], candidates[-1][1]), (low, high))


def _judge_snapshot(history: History, read: Read, low: int, high: int) -> Verdict:
    """A read on a snapshot of its own: everything it saw must be what the snapshot sees,
    and the snapshot must be within the read's bounds."""
    assert read.snapshot is not None
    last, values = history.visible_state(read.snapshot, (obj for obj, _ in read.observed))
    wrong = [(obj, seen) for obj, seen in read.observed if values[obj] != seen]
    if not wrong and low <= last <= high:
        return Verdict(read, (last, last), (low, high))
    lines = [f"served: {read.path}", f"snapshot sees commits up to {last}, allowed {low}..{high}"]
    lines += [
        f"  {obj} = {_short(seen)}, the snapshot holds {_short(values[obj])}" for obj, seen in wrong
    ]
    return Verdict(read, None, (low, high), "\n".join(lines))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _hashable(value: object) -> object:
    """Values as dict keys (observed values are ints and tuples already)."""
    return tuple(value) if isinstance(value, list) else value


def _intersect(left: list[tuple[int, int]], right: list[tuple[int, int]]) -> list[tuple[int, int]]:
    found = []
    for a_start, a_end in left:
        for b_start, b_end in right:
            start, end = max(a_start, b_start), min(a_end, b_end)
            if start <= end:
                found.append((start, end))
    return sorted(found)


def _explain(history: History, read: Read, low: int, high: int) -> str:
    """Which observations disagree with the allowed points (the first few)."""
    lines = [f"allowed commit points {low}..{high}; observed (and where each value held):"]
    if read.path:
        lines.insert(0, f"served: {read.path}")
    for obj, value in read.observed[:40]:
        ranges = history.value_ranges(obj, value, (low, high))
        where = ", ".join(f"{max(a, low)}..{min(b, high)}" for a, b in ranges[:4])
        if not where:
            newest = _short(history.value_at(obj, high))
            where = f"nowhere allowed (at point {high} it was {newest})"
        lines.append(f"  {obj} = {_short(value)}: {where}")
    return "\n".join(lines)
