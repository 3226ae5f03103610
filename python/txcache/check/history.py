"""The verdict of the consistency checker, from what happened (pure logic, no I/O).

The database's history is the sequence of committed write transactions in commit order
(read by the checker from a logical slot of its own, not from txcache). Each writer logged
the absolute values it left behind, so the state after the k-th commit is known for every
*object* the readers observe: an account's ``balance`` and ``branch``, the members of a
``branch`` (sorted ids), the values of a ``list`` in entry order, the rows of a partition of
the ``ledger`` table, and the rows each definition of the view ``branch_view`` would show.

Two objects live in PostgreSQL's catalog, which is not versioned by snapshot: which
definition the view has and whether a partition is attached. A query at commit point ``k``
runs with the catalog of the moment it runs, over the data at ``k``; so a catalog value
observed at ``k`` may be the one at ``k`` or at any later point up to the read's end
(:data:`CATALOG_KINDS`).

A read-only transaction is consistent when one commit point ``k`` explains every value it
observed, with ``k`` not before its ``not_before`` commit, no staler than its staleness
limit allows, and not after it ended (docs/check.md). :func:`judge` finds the set of such
points by intersecting, per observation, the ranges of ``k`` where the observed value
held.

*Tenants* are caches of the same database in other session contexts (another
``search_path``, another role), each with its own tables under the same names. Every
commit is one tenant's; a tenant's :class:`History` replays only its own commits over the
commit order all share (:class:`CommitOrder`), so its readers are judged against its own
data exactly as the others are. Every row a tenant reads carries its tenant's name (its
*mark*); an observation marked with another tenant's name is a *cross-tenant* read — an
anomaly of its own kind, whatever the values.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CATALOG_KINDS",
    "PUBLIC_TENANT",
    "SCHEMA_WRITES",
    "VIEW_BRANCHES",
    "Commit",
    "CommitOrder",
    "History",
    "Read",
    "Verdict",
    "Visible",
    "Write",
    "describe_write",
    "judge",
    "requirements",
]

LIST_WINDOW = 20
"""How many of a list's last values readers observe (``workload.list_values``)."""

VIEW_BRANCHES: dict[str, tuple[int, ...]] = {"low": (0, 1), "high": (2, 3)}
"""The two definitions of the workload's view ``branch_view``: each shows ``(id, balance)``
of the accounts of these branches, and its own name in a column ``def``."""

CATALOG_KINDS = frozenset({"viewdef", "attached"})
"""Objects of the catalog: seen at commit point ``k`` as they were at ``k`` or later."""

SCHEMA_WRITES = frozenset({"reload", "attached", "viewdef", "ddl"})
"""The write kinds of schema operations (each in a transaction of its own)."""

PUBLIC_TENANT = "public"
"""The tenant of the stack's own DSN, whose tables are in ``public``; the only one with a
ledger, a view and schema operations."""

Object = tuple[Hashable, ...]
"""State: ``("balance", account)``, ``("branch", account)``, ``("members", branch)``,
``("list", list_id)``, ``("part", p)`` (a partition's ``(slot, amount)`` rows),
``("part_sum", p)`` (their ``(sum, count)``, ``None`` when empty), ``("viewrows", def)``,
and the catalog's ``("viewdef",)`` and ``("attached", p)``. Observations also use derived
objects (:func:`requirements`): ``("view",)``, ``("ledger", p)``, ``("ledger_sum", p)``."""

Write = tuple[str, int, object]
"""What a writer logged: ``("balance", account, value)``, ``("branch", account, branch)``,
``("append", list_id, (entry_id, value))``, ``("ledger", p, (slot, amount))``; schema
operations: ``("reload", p, rows)`` (TRUNCATE-and-reload of a partition: the rows it left),
``("attached", p, bool)``, ``("viewdef", 0, def)`` and ``("ddl", 0, what)`` (an index or a
column type changed: no value changes)."""

Requirement = tuple[Object, object]
"""A state or catalog object and the value it must have."""

Observation = tuple[Object, object]
"""An object and the value a read-only transaction saw."""


@dataclass(frozen=True)
class Commit:
    """One committed write transaction."""

    xid: int
    """Its 32-bit transaction id, as logical decoding reports it."""
    time: float
    """Its commit time (Unix seconds, the server's clock)."""
    writes: tuple[Write, ...]
    lsn: int = 0
    """Its position in the WAL as the checker's slot reports it (0: unknown)."""
    tenant: str = PUBLIC_TENANT
    """Whose tables it wrote (each writer writes one tenant's)."""
    answered: float = 0.0
    """When its writer's COMMIT returned: it was visible by then (0: take :attr:`time`;
    ``inf``: the answer was lost, so no read is owed it)."""


@dataclass
class Read:
    """One read-only transaction: what it observed and within which bounds."""

    began: float
    ended: float
    staleness: float
    not_before: int | None
    """The xid of the commit it must see (its ``not_before`` token), if any."""
    observed: list[Observation] = field(default_factory=list)
    mode: str = "consistent"
    path: str = ""
    """How the library served it (snapshot, moves, fallback), for the anomaly report."""
    pin: int | None = None
    """The pin (a WAL position) its database transaction ended on, if any: the report
    names the commit point it corresponds to."""
    snapshot: tuple[int, int, frozenset[int]] | None = None
    """For a transaction that fell back to the database: its snapshot (xmin, xmax, the
    in-progress xids; 32-bit). It is judged by what that snapshot sees, not by a prefix of
    commit order: PostgreSQL's guarantee, which a snapshot on a primary gives."""
    tenant: str = PUBLIC_TENANT
    """The tenant whose cache ran it: it is judged against that tenant's history."""
    server: str | None = None
    """The standby its database transaction ran on (``--standby-reads``); ``None``: the
    primary, or none."""
    marks: list[str] = field(default_factory=list)
    """Per observation (in order; missing at the end: none), the tenants whose rows it came
    from, joined by ``+`` (empty: rows without a mark, or none)."""

    def owners(self, index: int) -> tuple[str, ...]:
        """The tenants whose rows observation ``index`` came from."""
        mark = self.marks[index] if index < len(self.marks) else ""
        return tuple(mark.split("+")) if mark else ()

    def foreign(self) -> list[tuple[Object, object, tuple[str, ...]]]:
        """The observations that came (also) from another tenant's rows: ``(object, value,
        the other tenants)``."""
        found = []
        for index, (obj, value) in enumerate(self.observed):
            others = tuple(owner for owner in self.owners(index) if owner != self.tenant)
            if others:
                found.append((obj, value, others))
        return found

    def own_observations(self) -> list[Observation]:
        """The observations of the tenant's own data (or unmarked): what its history must
        explain."""
        return [
            (obj, value)
            for index, (obj, value) in enumerate(self.observed)
            if all(owner == self.tenant for owner in self.owners(index))
        ]


@dataclass(frozen=True)
class Verdict:
    """The outcome for one read-only transaction."""

    read: Read
    points: tuple[int, int] | None
    """The first and last commit point explaining everything it saw of its own tenant's
    data; ``None``: none does (the read is *inconsistent*)."""
    bounds: tuple[int, int]
    """The commit points its staleness, ``not_before`` and end allowed."""
    explanation: str = ""
    cross_tenant: bool = False
    """Whether it observed another tenant's data (an anomaly whatever ``points`` says)."""

    @property
    def anomalous(self) -> bool:
        """Inconsistent, or a cross-tenant read, or both."""
        return self.points is None or self.cross_tenant


@dataclass(frozen=True)
class Visible:
    """What a database snapshot sees (:meth:`History.visible_state`)."""

    last: int
    """The last commit point it sees; every later commit is invisible."""
    earliest: int
    """The commit point before the first commit it misses (``last`` when it misses none):
    the catalog it read with is at least that new."""
    values: dict[Object, object]


def requirements(obj: Object, value: object) -> list[tuple[Requirement, ...]]:
    """What observing ``value`` of ``obj`` requires of a commit point: any one of the
    alternatives, each a tuple of requirements that must all hold there.

    A plain object requires itself. Reads through the view require its definition (a
    catalog object) and that definition's rows; an empty result (``(None, ())``) names no
    definition, so either will do. Reads through the partitioned table require the
    partition attached and its rows — or, when they found nothing, detached.
    """
    kind = obj[0]
    if kind == "view":
        assert isinstance(value, tuple)
        definition, rows = value
        names = tuple(VIEW_BRANCHES) if definition is None else (definition,)
        return [((("viewdef",), name), (("viewrows", name), rows)) for name in names]
    if kind in ("ledger", "ledger_sum"):
        part = obj[1]
        data: Object = ("part", part) if kind == "ledger" else ("part_sum", part)
        alternatives: list[tuple[Requirement, ...]] = [((("attached", part), True), (data, value))]
        if value in ((), None):
            alternatives.append(((("attached", part), False),))
        return alternatives
    return [((obj, value),)]


class CommitOrder:
    """The committed write transactions in commit order, with what every tenant's
    :class:`History` looks up the same way: each xid's commit point, commit times, WAL
    positions, the schema operations. Built once and shared (a long check has millions of
    commits)."""

    def __init__(self, commits: Sequence[Commit]) -> None:
        self.commits = list(commits)
        self.position = {commit.xid: index + 1 for index, commit in enumerate(self.commits)}
        # Commit timestamps are taken just before the commit record is written, so they are
        # almost but not exactly in commit order: search their running maximum.
        self.times = list(itertools.accumulate((c.time for c in self.commits), max))
        # When each commit was visible at the latest: its writer's answer (a commit waits
        # for a synchronous standby between its record and becoming visible). A read that
        # began after it must see it, so a read must see every commit up to the last one
        # visible before it began: search the minimum from each commit on.
        visible = (max(c.time, c.answered) for c in self.commits)
        self.visible_by = list(itertools.accumulate(reversed(list(visible)), min))[::-1]
        self.lsns = [commit.lsn for commit in self.commits]
        # Every tenant's, in every tenant's reports: a DDL's barrier and catalog readings
        # concern them all.
        self.schema = [
            (point, describe_write(write))
            for point, commit in enumerate(self.commits, start=1)
            for write in commit.writes
            if write[0] in SCHEMA_WRITES
        ]
        by_xid = sorted(self.position.items())
        self.xids = [xid for xid, _ in by_xid]
        self.latest_below = list(itertools.accumulate((i for _, i in by_xid), max))
        # The earliest commit among the xids from each index on: where a scan for commits of
        # xids at or above a snapshot's xmax must start.
        self.earliest_from = list(itertools.accumulate((i for _, i in reversed(by_xid)), min))[::-1]


class History:
    """Every object's value after each commit point (0 = the initial state), for one
    tenant: its own commits change its objects, the others' leave them as they were."""

    def __init__(
        self,
        initial: dict[Object, object],
        commits: Sequence[Commit] | CommitOrder,
        *,
        slack: float,
        tenant: str = PUBLIC_TENANT,
    ) -> None:
        """``initial``: the tenant's state before the first commit (objects derived from
        others — the view's rows, partitions' sums — are added); ``commits`` in commit
        order (every tenant's, or their shared :class:`CommitOrder`); ``slack``: seconds of
        clock and decoding uncertainty allowed around the bounds."""
        self.order = commits if isinstance(commits, CommitOrder) else CommitOrder(commits)
        self.commits = self.order.commits
        self.slack = slack
        self.tenant = tenant
        self._changes: dict[Object, tuple[list[int], list[object]]] = {}
        self._replay(_derived(initial))
        self._held: dict[tuple[Object, object], list[int]] = self._index()

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
            if commit.tenant != self.tenant:
                continue
            for obj in _apply(state, commit.writes):
                points, values = changes[obj]
                if points and points[-1] == index:
                    values[-1] = state[obj]
                elif not values or values[-1] != state[obj]:
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

    def catalog_ranges(
        self, obj: Object, value: object, within: tuple[int, int]
    ) -> list[tuple[int, int]]:
        """The points ``k`` of ``within`` at which a query could see the catalog object
        ``obj`` with ``value``: it had it at some point from ``k`` to the end of
        ``within`` (a query at ``k`` runs with the catalog of the moment it runs)."""
        low, high = within
        ranges = self.value_ranges(obj, value, within)
        if not ranges:
            return []
        reach = max(min(end, high) for _start, end in ranges)
        return [(low, reach)] if reach >= low else []

    def observation_ranges(
        self, obj: Object, value: object, within: tuple[int, int]
    ) -> list[tuple[int, int]]:
        """The points of ``within`` that explain observing ``value`` of ``obj`` (a plain,
        catalog or derived object: :func:`requirements`)."""
        found: list[tuple[int, int]] = []
        for alternative in requirements(obj, value):
            ranges = [within]
            for required, wanted in alternative:
                ranges = _intersect(ranges, self._requirement_ranges(required, wanted, within))
                if not ranges:
                    break
            found += ranges
        return _union(found)

    def _requirement_ranges(
        self, obj: Object, value: object, within: tuple[int, int]
    ) -> list[tuple[int, int]]:
        if obj[0] in CATALOG_KINDS:
            return self.catalog_ranges(obj, value, within)
        return self.value_ranges(obj, value, within)

    def value_at(self, obj: Object, point: int) -> object:
        """The value of ``obj`` at commit point ``point``."""
        points, values = self._changes.get(obj, ([0], [None]))
        return values[bisect.bisect_right(points, point) - 1]

    def visible_state(
        self,
        snapshot: tuple[int, int, frozenset[int]],
        objects: Iterable[Object],
        until: int | None = None,
    ) -> Visible:
        """The values of ``objects`` in what ``snapshot`` sees, and the last commit it sees.

        Every commit after that last visible one is invisible; before it, a commit can be
        missing when it became visible out of commit order: its xid was in progress at the
        snapshot, or at or above its xmax (``latestCompletedXid + 1``: a transaction whose
        commit record was written before a visible one's, but which had not yet left the
        proc array). No commit after point ``until`` (the last made before the read ended)
        is seen: an xid the snapshot counts as ended may be one a promotion gave out again
        afterwards, to a later commit."""
        xmin, xmax, in_progress = snapshot
        order = self.order
        limit = len(self.commits) if until is None else until
        below = bisect.bisect_left(order.xids, xmin)  # every commit of an xid < xmin is seen
        last = order.latest_below[below - 1] if below else 0
        if last > limit:  # rare: scan for the latest such commit made in time
            last = max((p for x, p in order.position.items() if x < xmin and p <= limit), default=0)
        for xid in range(xmin, xmax):
            if xid not in in_progress and order.position.get(xid, limit + 1) <= limit:
                last = max(last, order.position[xid])
        missing = [
            order.position[x] for x in in_progress if order.position.get(x, last + 1) <= last
        ]
        above = bisect.bisect_left(order.xids, xmax)
        if above < len(order.xids):
            for index in range(order.earliest_from[above], last + 1):
                if self.commits[index - 1].xid >= xmax:
                    missing.append(index)
        missing.sort()
        wanted = set(objects)
        if not missing:
            return Visible(last, last, {obj: self.value_at(obj, last) for obj in wanted})
        # Rebuild from just before the first missing commit, skipping the missing ones.
        base = missing[0] - 1
        state = {obj: self.value_at(obj, base) for obj in self._changes}
        skipped = set(missing)
        for index in range(missing[0], last + 1):
            commit = self.commits[index - 1]
            if index not in skipped and commit.tenant == self.tenant:
                _apply(state, commit.writes)
        return Visible(last, base, {obj: state.get(obj) for obj in wanted})

    def bounds(self, read: Read) -> tuple[int, int]:
        """The commit points ``read`` may be serialized at, ignoring what it observed."""
        # State k was current from commit k until commit k + 1.
        oldest = read.began - read.staleness - self.slack
        times = self.order.times
        low = bisect.bisect_left(self.order.visible_by, oldest)  # first visible after `oldest`
        if read.not_before is not None:
            low = max(low, self.order.position.get(read.not_before, len(self.commits) + 1))
        high = bisect.bisect_right(times, read.ended + self.slack)
        return low, high

    def locate(self, lsn: int) -> str:
        """Where WAL position ``lsn`` (a pin) lies among the commits. The slot reports a
        commit at the end of its record and a pin names the start of its last commit's
        record, so a pin just below a commit's position shows that commit."""
        lsns = self.order.lsns
        point = bisect.bisect_right(lsns, lsn)
        after = f", commit {point + 1} ends at {lsns[point]}" if point < len(lsns) else ""
        return f"after commit {point}{after}"

    def schema_changes(self, low: int, high: int) -> list[tuple[int, str]]:
        """The schema operations committed at points ``low..high``, described."""
        schema = self.order.schema
        start = bisect.bisect_left(schema, (low, ""))
        stop = bisect.bisect_left(schema, (high + 1, ""))
        return schema[start:stop]


def describe_write(write: Write) -> str:
    """A schema operation in words, for anomaly reports."""
    kind, key, value = write
    if kind == "reload":
        return f"TRUNCATE-and-reload of ledger_{key}"
    if kind == "attached":
        return f"ledger_{key} {'attached' if value else 'detached'}"
    if kind == "viewdef":
        return f"branch_view redefined as {value!r}"
    return str(value)


# -- replaying writes -----------------------------------------------------------------------


def _derived(initial: dict[Object, object]) -> dict[Object, object]:
    """``initial`` with the objects derived from others: each view definition's rows (when
    there is a view: the public tenant's) and each partition's sum."""
    state = dict(initial)
    if ("viewdef",) in state:
        for name in VIEW_BRANCHES:
            state["viewrows", name] = _view_rows(state, name)
    for obj in [obj for obj in state if obj[0] == "part"]:
        state["part_sum", obj[1]] = _part_sum(state[obj])
    return state


_PAIRS: dict[tuple[int, object], tuple[int, object]] = {}
"""One object per ``(id, balance)`` pair: the view's rows are kept after every commit that
changes an account, and most of their pairs repeat."""


def _view_rows(state: dict[Object, object], name: str) -> tuple[tuple[int, object], ...]:
    """What definition ``name`` of the view shows: ``(id, balance)`` by id."""
    rows = []
    for branch in VIEW_BRANCHES[name]:
        members: Any = state.get(("members", branch), ())
        for member in members:
            pair = (member, state.get(("balance", member)))
            rows.append(_PAIRS.setdefault(pair, pair))
    return tuple(sorted(rows))


def _part_sum(rows: Any) -> tuple[int, int] | None:
    """A partition's ``(sum, count)`` as ``GROUP BY part`` shows it; ``None``: no group."""
    return (sum(amount for _slot, amount in rows), len(rows)) if rows else None


def _apply(state: dict[Object, object], writes: Iterable[Write]) -> set[Object]:
    """Apply one commit's writes to ``state``; returns the objects that changed."""
    changed: set[Object] = set()
    for kind, key, value in writes:
        if kind in ("balance", "branch"):
            _apply_account(state, kind, key, value, changed)
        elif kind == "append":
            entries: Any = state.get(("entries", key), ())
            # The newest LIST_WINDOW entries by id are all a reader can see, and all that
            # decides which it sees after the next append.
            entries = tuple(sorted((*entries, value)))[-LIST_WINDOW:]
            state["entries", key] = entries
            state["list", key] = tuple(item for _, item in entries)
            changed.update((("list", key), ("entries", key)))
        elif kind in ("ledger", "reload"):
            _apply_ledger(state, kind, key, value, changed)
        elif kind in ("attached", "viewdef"):
            obj: Object = ("attached", key) if kind == "attached" else ("viewdef",)
            state[obj] = value
            changed.add(obj)
        elif kind != "ddl":  # an index or a column type: no value changes
            raise ValueError(f"unknown write {kind!r}")
    has_view = ("viewdef",) in state
    if has_view and any(obj[0] == "balance" or obj[0] == "branch" for obj in changed):
        for name in VIEW_BRANCHES:
            state["viewrows", name] = _view_rows(state, name)
            changed.add(("viewrows", name))
    return changed


def _apply_account(
    state: dict[Object, object], kind: str, key: int, value: object, changed: set[Object]
) -> None:
    if kind == "balance":
        state["balance", key] = value
        changed.add(("balance", key))
        return
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


def _apply_ledger(
    state: dict[Object, object], kind: str, key: int, value: Any, changed: set[Object]
) -> None:
    if kind == "ledger":  # one row updated: (slot, amount)
        rows: Any = dict(state.get(("part", key), ()))  # type: ignore[call-overload]
        rows[value[0]] = value[1]
        state["part", key] = tuple(sorted(rows.items()))
    else:  # truncated and reloaded: the rows it left
        state["part", key] = tuple(sorted(value))
    state["part_sum", key] = _part_sum(state["part", key])
    changed.update((("part", key), ("part_sum", key)))


# -- the verdict ----------------------------------------------------------------------------


def judge(history: History, read: Read) -> Verdict:
    """Whether ``read`` observed another tenant's data, and whether one commit point of its
    tenant's ``history`` explains everything it observed of its own."""
    if read.tenant != history.tenant:
        raise ValueError(f"a read of tenant {read.tenant!r} judged by {history.tenant!r}'s history")
    foreign = read.foreign()
    own = read.own_observations() if foreign else read.observed
    verdict = _judge_own(history, read, own)
    if not foreign:
        return verdict
    lines = [f"cross-tenant read by tenant {read.tenant!r}:"]
    lines += [
        f"  {obj} = {_short(value)} came from the rows of {' and '.join(map(repr, others))}"
        for obj, value, others in foreign
    ]
    if verdict.explanation:
        lines += ["and of its own data:", verdict.explanation]
    return dataclasses.replace(verdict, explanation="\n".join(lines), cross_tenant=True)


def _judge_own(history: History, read: Read, observed: list[Observation]) -> Verdict:
    """Whether one commit point explains every observation of ``observed`` (``read``'s own
    data)."""
    low, high = history.bounds(read)
    if read.snapshot is not None:
        return _judge_snapshot(history, read, observed, low, high)
    candidates = [(low, high)]
    for obj, value in observed:
        candidates = _intersect(candidates, history.observation_ranges(obj, value, (low, high)))
        if not candidates:
            explanation = _explain(history, read, observed, low, high)
            return Verdict(read, None, (low, high), explanation)
    return Verdict(read, (candidates[0][0], candidates[-1][1]), (low, high))


def _judge_snapshot(
    history: History, read: Read, observed: list[Observation], low: int, high: int
) -> Verdict:
    """A read on a snapshot of its own: everything it saw must be what the snapshot sees
    (the catalog: as at the snapshot or later), and the snapshot must be within the read's
    bounds."""
    assert read.snapshot is not None
    wanted = {
        required
        for obj, value in observed
        for alternative in requirements(obj, value)
        for required, _ in alternative
        if required[0] not in CATALOG_KINDS
    }
    visible = history.visible_state(read.snapshot, wanted, until=high)
    catalog_window = (visible.earliest, max(high, visible.last))
    wrong = [
        (obj, seen)
        for obj, seen in observed
        if not any(
            _holds(history, alternative, visible.values, catalog_window)
            for alternative in requirements(obj, seen)
        )
    ]
    if not wrong and low <= visible.last <= high:
        return Verdict(read, (visible.last, visible.last), (low, high))
    lines = [f"snapshot sees commits up to {visible.last}, allowed {low}..{high}"]
    if read.path:
        lines.insert(0, f"served: {read.path}")
    for obj, seen in wrong:
        held = [
            _short(visible.values[required])
            if required == obj
            else f"{required} = {_short(visible.values[required])}"
            for required, _ in requirements(obj, seen)[0]
            if required[0] not in CATALOG_KINDS
        ]
        lines.append(f"  {obj} = {_short(seen)}, the snapshot holds {', '.join(held)}")
    lines += _schema_lines(history, visible.earliest + 1, high)
    return Verdict(read, None, (low, high), "\n".join(lines))


def _holds(
    history: History,
    alternative: tuple[Requirement, ...],
    values: dict[Object, object],
    catalog_window: tuple[int, int],
) -> bool:
    """Whether a snapshot's ``values`` (and its catalog, from ``catalog_window``) meet
    every requirement of ``alternative``."""
    for required, wanted in alternative:
        if required[0] in CATALOG_KINDS:
            if not history.catalog_ranges(required, wanted, catalog_window):
                return False
        elif _hashable(values[required]) != _hashable(wanted):
            return False
    return True


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


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, with overlapping or adjacent ranges merged."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _explain(history: History, read: Read, observed: list[Observation], low: int, high: int) -> str:
    """Which observations disagree with the allowed points (the first few), and the schema
    changes among those points."""
    lines = [f"allowed commit points {low}..{high}; observed (and where each value held):"]
    if read.pin is not None:
        lines.insert(0, f"its last pin {read.pin} lies {history.locate(read.pin)}")
    if read.path:
        lines.insert(0, f"served: {read.path}")
    for obj, value in observed[:40]:
        ranges = history.observation_ranges(obj, value, (low, high))
        where = ", ".join(f"{max(a, low)}..{min(b, high)}" for a, b in ranges[:4])
        if not where:
            where = f"nowhere allowed ({_elsewhere(history, obj, value, high)})"
        lines.append(f"  {obj} = {_short(value)}: {where}")
    return "\n".join(lines + _schema_lines(history, low, high))


def _schema_lines(history: History, low: int, high: int) -> list[str]:
    """The schema operations committed at points ``low..high`` (the last 8)."""
    changes = history.schema_changes(low, high)
    if not changes:
        return []
    lines = [f"schema changes at points {low}..{high} (the last 8):"]
    return lines + [f"  {point}: {what}" for point, what in changes[-8:]]


def _elsewhere(history: History, obj: Object, value: object, high: int) -> str:
    """For an observation no allowed point explains: the points of the whole history that
    do (a stale value, or one served too early) or that none does, and what it was at
    ``high`` — for a sequence, which items the observation has more and fewer (values are
    shortened; the difference is what tells a lost invalidation from a phantom row)."""
    ever = history.observation_ranges(obj, value, (0, len(history.order.commits)))
    held = ", ".join(f"{a}..{b}" for a, b in ever[-4:]) if ever else "no point of the history"
    text = f"held at {held}; at point {high}: {_state_at(history, obj, value, high)}"
    then = history.value_at(obj, high)
    if isinstance(value, tuple) and isinstance(then, tuple):
        more = [item for item in value if item not in then]
        fewer = [item for item in then if item not in value]
        text += f"; it has more {_short(tuple(more))}, fewer {_short(tuple(fewer))}"
    return text


def _state_at(history: History, obj: Object, value: object, point: int) -> str:
    """What the objects an observation depends on held at ``point``."""
    required = [item for alternative in requirements(obj, value) for item, _ in alternative]
    if required == [obj]:
        return f"it was {_short(history.value_at(obj, point))}"
    unique = list(dict.fromkeys(required))
    return ", ".join(f"{item} = {_short(history.value_at(item, point))}" for item in unique)
