"""The checker's workload: a small bank with branches, append-only lists, a partitioned
ledger and a view — and, now and then, schema changes.

Writers run read/write transactions — transfers between accounts, appends to lists, moves
of an account to another branch (an update of an indexed column, so rows change tag
values), updates of ledger rows — and log the absolute values each left behind. A few
percent of write transactions are *schema operations*, each alone in its transaction: the
view redefined, a ledger partition truncated and reloaded, a partition detached or attached
again, an index on ``accounts.balance`` created or dropped, the entries' columns retyped
(a table rewrite). Readers run read-only transactions through nested cacheable functions
and direct queries, with several staleness limits and ``not_before`` tokens, and log every
value they observed.

Each *tenant* (:mod:`txcache.check.tenants`) has its own ``accounts`` and ``entries`` under
those names, every row carrying the tenant's name in a column ``tenant``, and its own
readers and writers, which call the same cacheable functions with the same arguments
through a cache of their own. Only the public tenant has the ledger and the view, and runs
the schema operations.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

import txcache
from txcache._cacheable import CacheableFunction
from txcache.check.history import (
    LIST_WINDOW,
    PUBLIC_TENANT,
    VIEW_BRANCHES,
    Object,
    Read,
    Write,
)
from txcache.errors import SnapshotUnavailable

__all__ = [
    "ACCOUNTS",
    "BRANCHES",
    "LISTS",
    "PARTS",
    "SCHEMA",
    "SCHEMA_OPERATIONS",
    "SCHEMA_SHARE",
    "Attribution",
    "Outcome",
    "WriterLog",
    "attribute",
    "initial_state",
    "read_once",
    "tenant_tables_sql",
    "write_once",
]

ACCOUNTS = 24
BRANCHES = 4
LISTS = 6
START_BALANCE = 100
STALENESS_CHOICES = (0.0, 1.0, 5.0, 30.0)
PARTS = 3
"""Partitions of ``ledger`` (``ledger_0`` …), one per value of ``part``."""
SLOTS = 4
"""Rows per partition."""
START_AMOUNT = 10
DETACHABLE = 2
"""The partition that is detached and attached again. The others stay attached, so that an
empty read of them through ``ledger`` can only be a TRUNCATE seen from an older snapshot."""
SCHEMA_SHARE = 0.01
"""The share of write transactions that are schema operations."""


SCHEMA_LOCK = 7_245_001
"""An advisory lock key: schema operations run one at a time, so that each knows the state
it changes (and two never wait for each other's locks)."""
SCHEMA_LOCK_TIMEOUT = "300ms"
"""A schema operation waiting longer for a lock gives up (counted, not an error): below
``deadlock_timeout`` (1 s), so readers that lock in another order never see a deadlock."""
PARTITIONS = tuple(f"ledger_{part}" for part in range(PARTS))


def _view_sql(name: str) -> str:
    """The definition ``name`` of ``branch_view`` (``CREATE OR REPLACE``). Its filter is an
    ``IN`` list, which gives each definition its own fine tags: a read tagged by one
    definition is not invalidated by writes only the other reads."""
    branches = VIEW_BRANCHES[name]
    where = f"branch IN ({', '.join(str(branch) for branch in branches)})"
    return (
        f"CREATE OR REPLACE VIEW branch_view AS SELECT '{name}'::text AS def, id, balance "
        f"FROM accounts WHERE {where}"
    )


_PARTITIONS_SQL = "".join(
    f"CREATE TABLE {table} PARTITION OF ledger FOR VALUES IN ({part});\n"
    for part, table in enumerate(PARTITIONS)
)


def tenant_tables_sql(schema: str, tenant: str) -> str:
    """A tenant's ``accounts`` and ``entries`` in ``schema`` (a plain identifier), each row
    marked with ``tenant`` (a plain word): what a read of them returns says whose it is."""
    mark = f"tenant text NOT NULL DEFAULT '{tenant}' CHECK (tenant = '{tenant}')"
    return f"""
CREATE TABLE {schema}.accounts (id integer PRIMARY KEY, balance integer NOT NULL,
                                branch integer NOT NULL, {mark});
CREATE INDEX ON {schema}.accounts (branch);
CREATE TABLE {schema}.entries (id bigserial PRIMARY KEY, list integer NOT NULL,
                               value integer NOT NULL, {mark});
CREATE INDEX ON {schema}.entries (list);
INSERT INTO {schema}.accounts (id, balance, branch) SELECT i, {START_BALANCE}, i % {BRANCHES}
FROM generate_series(1, {ACCOUNTS}) i;
"""


SCHEMA = f"""{tenant_tables_sql("public", PUBLIC_TENANT)}
CREATE TABLE ledger (part integer NOT NULL, slot integer NOT NULL, amount integer NOT NULL,
                     PRIMARY KEY (part, slot)) PARTITION BY LIST (part);
{_PARTITIONS_SQL}INSERT INTO ledger SELECT p, s, {START_AMOUNT}
FROM generate_series(0, {PARTS - 1}) p, generate_series(0, {SLOTS - 1}) s;
{_view_sql("low")};
"""


def initial_state(tenant: str = PUBLIC_TENANT) -> dict[Object, object]:
    """The state SCHEMA (or :func:`tenant_tables_sql`) creates for ``tenant``, as the
    verdict's objects (the history derives the view's rows and the partitions' sums)."""
    state: dict[Object, object] = {}
    for account in range(1, ACCOUNTS + 1):
        state["balance", account] = START_BALANCE
        state["branch", account] = account % BRANCHES
    for branch in range(BRANCHES):
        members = [a for a in range(1, ACCOUNTS + 1) if a % BRANCHES == branch]
        state["members", branch] = tuple(members)
    for list_id in range(LISTS):
        state["list", list_id] = ()
        state["entries", list_id] = ()
    if tenant != PUBLIC_TENANT:
        return state
    for part in range(PARTS):
        state["part", part] = tuple((slot, START_AMOUNT) for slot in range(SLOTS))
        state["attached", part] = True
    state["viewdef",] = "low"
    return state


# -- what readers call --------------------------------------------------------------------

Rows = tuple[tuple[int, int], ...]
Account = tuple[int, int, str]
"""Balance, branch and the tenant whose row it is."""
Marked = tuple[tuple[int, str], ...]
"""Values, each with the tenant whose row it came from."""

# Tables by unqualified name: which tenant's they are is the session's search path.


@txcache.cacheable
def account(account_id: int) -> Account | None:
    """Balance and branch of one account (and whose it is)."""
    row = txcache.query_one(
        "SELECT balance, branch, tenant FROM accounts WHERE id = %s", (account_id,)
    )
    return None if row is None else (int(row[0]), int(row[1]), str(row[2]))


@txcache.cacheable
def branch_members(branch: int) -> Marked:
    """The ids of a branch's accounts, sorted (and whose they are)."""
    rows = txcache.query("SELECT id, tenant FROM accounts WHERE branch = %s ORDER BY id", (branch,))
    return tuple((int(row[0]), str(row[1])) for row in rows)


@txcache.cacheable
def list_values(list_id: int) -> Marked:
    """A list's last LIST_WINDOW values, in entry order (and whose they are)."""
    rows = txcache.query(
        "SELECT value, tenant FROM entries WHERE list = %s ORDER BY id DESC LIMIT %s",
        (list_id, LIST_WINDOW),
    )
    return tuple((int(row[0]), str(row[1])) for row in reversed(rows))


@txcache.cacheable
def branch_report(branch: int) -> tuple[tuple[int, str, Account | None], ...]:
    """Nested: the members of a branch, then each member's account."""
    return tuple((member, mark, account(member)) for member, mark in branch_members(branch))


@txcache.cacheable
def pair(first: int, second: int) -> tuple[Account | None, Account | None]:
    """Nested: two accounts (a transfer's two sides)."""
    return account(first), account(second)


@txcache.cacheable
def view_rows() -> tuple[str | None, Rows]:
    """Through the view: the name of its definition (``None`` if it shows no row; several
    names joined by ``+``, which no definition explains) and its ``(id, balance)`` rows."""
    rows = txcache.query("SELECT def, id, balance FROM branch_view ORDER BY id")
    names = sorted({str(row[0]) for row in rows})
    return ("+".join(names) if names else None), tuple((int(r[1]), int(r[2])) for r in rows)


@txcache.cacheable
def ledger_rows(part: int) -> Rows:
    """One partition's ``(slot, amount)`` rows, read through the partitioned table."""
    rows = txcache.query("SELECT slot, amount FROM ledger WHERE part = %s ORDER BY slot", (part,))
    return tuple((int(row[0]), int(row[1])) for row in rows)


@txcache.cacheable
def ledger_sums(below: int) -> tuple[tuple[int, int, int], ...]:
    """``(part, sum, count)`` of every partition ``part < below`` with rows, through the
    partitioned table."""
    rows = txcache.query(
        "SELECT part, sum(amount), count(*) FROM ledger WHERE part < %s "
        "GROUP BY part ORDER BY part",
        (below,),
    )
    return tuple((int(row[0]), int(row[1]), int(row[2])) for row in rows)


@txcache.cacheable
def partition_rows(part: int) -> Rows:
    """One partition's rows, read from the partition itself (attached or not)."""
    rows = txcache.query(f"SELECT slot, amount FROM {PARTITIONS[part]} ORDER BY slot")
    return tuple((int(row[0]), int(row[1])) for row in rows)


@txcache.cacheable
def schema_report(part: int) -> tuple[tuple[str | None, Rows], Rows, Rows]:
    """Nested: the view, and one partition through its table and directly."""
    return view_rows(), ledger_rows(part), partition_rows(part)


READER_FUNCTIONS: tuple[CacheableFunction[Any, Any], ...] = (
    account,
    branch_members,
    list_values,
    branch_report,
    pair,
    view_rows,
    ledger_rows,
    ledger_sums,
    partition_rows,
    schema_report,
)

_MARKS: dict[frozenset[str], str] = {}
"""One string per set of tenants (most reads name one): a long check keeps a mark per
observation."""


def _see(read: Read, obj: Object, value: object, marks: Iterable[str] = ()) -> None:
    """Log an observation, with the tenants whose rows it came from (``marks``; none for
    the public tenant's ledger and view, which have no column for it)."""
    owners = frozenset(marks)
    mark = _MARKS.get(owners)
    if mark is None:
        mark = _MARKS.setdefault(owners, "+".join(sorted(owners)))
    read.observed.append((obj, value))
    read.marks.append(mark)


def _observe_account(read: Read, account_id: int, seen: Account | None) -> None:
    if seen is not None:
        _see(read, ("balance", account_id), seen[0], (seen[2],))
        _see(read, ("branch", account_id), seen[1], (seen[2],))


def _read_account(rng: random.Random, read: Read) -> None:
    account_id = rng.randint(1, ACCOUNTS)
    _observe_account(read, account_id, account(account_id))


def _read_members(rng: random.Random, read: Read) -> None:
    branch = rng.randrange(BRANCHES)
    members = branch_members(branch)
    _see(read, ("members", branch), tuple(m for m, _ in members), (t for _, t in members))


def _read_list(rng: random.Random, read: Read) -> None:
    list_id = rng.randrange(LISTS)
    values = list_values(list_id)
    _see(read, ("list", list_id), tuple(v for v, _ in values), (t for _, t in values))


def _read_branch_report(rng: random.Random, read: Read) -> None:
    branch = rng.randrange(BRANCHES)
    report = branch_report(branch)
    members = tuple(member for member, _, _ in report)
    _see(read, ("members", branch), members, (mark for _, mark, _ in report))
    for member, _mark, seen in report:
        _observe_account(read, member, seen)


def _read_pair(rng: random.Random, read: Read) -> None:
    first, second = rng.sample(range(1, ACCOUNTS + 1), 2)
    for account_id, seen in zip((first, second), pair(first, second), strict=True):
        _observe_account(read, account_id, seen)


def _read_direct(rng: random.Random, read: Read) -> None:
    account_id = rng.randint(1, ACCOUNTS)
    row = txcache.query_one("SELECT balance, tenant FROM accounts WHERE id = %s", (account_id,))
    if row is not None:
        _see(read, ("balance", account_id), int(row[0]), (str(row[1]),))


def _read_view(rng: random.Random, read: Read) -> None:
    _see(read, ("view",), view_rows())


def _read_ledger(rng: random.Random, read: Read) -> None:
    part = rng.randrange(PARTS)
    _see(read, ("ledger", part), ledger_rows(part))


def _read_ledger_sums(rng: random.Random, read: Read) -> None:
    parts = range(PARTS)
    sums = {part: (total, count) for part, total, count in ledger_sums(max(parts) + 1)}
    for part in parts:
        _see(read, ("ledger_sum", part), sums.get(part))


def _read_partition(rng: random.Random, read: Read) -> None:
    part = rng.randrange(PARTS)
    _see(read, ("part", part), partition_rows(part))


def _read_schema_report(rng: random.Random, read: Read) -> None:
    part = rng.randrange(PARTS)
    view, through_table, directly = schema_report(part)
    _see(read, ("view",), view)
    _see(read, ("ledger", part), through_table)
    _see(read, ("part", part), directly)


ReadStep = Callable[[random.Random, Read], None]

_TENANT_READS: tuple[ReadStep, ...] = (
    _read_account,
    _read_members,
    _read_list,
    _read_branch_report,
    _read_pair,
    _read_direct,
)
"""What every tenant reads: its own accounts and entries."""

_READS: tuple[ReadStep, ...] = (
    *_TENANT_READS,
    _read_view,
    _read_ledger,
    _read_ledger_sums,
    _read_partition,
    _read_schema_report,
)
"""What the public tenant reads: its accounts and entries, the view and the ledger."""


# -- outcomes -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one tenant's threads did in a phase (shared, under a lock)."""

    tenant: str = PUBLIC_TENANT
    reads: list[Read] = field(default_factory=list)
    writes: list[WriterLog] = field(default_factory=list)
    errors: list[tuple[float, str, str]] = field(default_factory=list)
    """(time, side, error) of every exception the application saw."""
    retried: int = 0
    """Read-only transactions that raised SnapshotUnavailable and were retried."""
    gave_up: int = 0
    """Schema operations that gave up waiting for a lock (``SCHEMA_LOCK_TIMEOUT``)."""
    tokens: list[int] = field(default_factory=list)
    """xids of recent commits readers may use as ``not_before`` (with ``token_values``)."""
    token_values: dict[int, int] = field(default_factory=dict)
    cache_hits: int = 0
    """Cacheable calls of its read-only transactions answered from the cache (every try)."""
    cache_lookups: int = 0
    """Cacheable calls of its read-only transactions (hits and misses, nested ones too)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(eq=False)
class WriterLog:
    """One write transaction: its xid (32 bits), its writes, and whether it committed
    (``None``: unknown, the connection died during COMMIT). Logs compare (and hash) by
    identity: two may hold the same values."""

    xid: int
    writes: tuple[Write, ...]
    committed: bool | None
    tenant: str = PUBLIC_TENANT
    answered: float = 0.0
    """When COMMIT returned (Unix seconds, this machine's clock): the commit was visible by
    then, while its commit record's time can be much earlier (a commit waits for a
    synchronous standby before it becomes visible). ``inf`` when COMMIT failed: a commit
    whose answer was lost may become visible only later (at a promotion)."""
    began: float = 0.0
    """When it asked for its xid: its commit record cannot be older."""
    ended: float = math.inf
    """When its COMMIT returned or failed: its commit record cannot be newer."""

    def may_be(self, commit_time: float) -> bool:
        """Whether it may be the commit the slot reported at ``commit_time`` (the server's
        clock, this machine's: the stack runs here)."""
        return self.began - CLOCK_SLACK <= commit_time <= self.ended + CLOCK_SLACK


CLOCK_SLACK = 0.01
"""Seconds between a commit record's timestamp and this process's clock readings around it
(both the same clock; rounding only)."""


@dataclass
class Attribution:
    """Which writer's log each commit the slot reported is (see :func:`attribute`)."""

    logs: dict[int, WriterLog]
    """By the commit's xid."""
    foreign: int = 0
    """Commits no writer logged."""
    shared: int = 0
    """Commits whose xid more than one log had; told apart by time, or else by outcome."""
    ambiguous: int = 0
    """Of those, commits that neither told apart: the latest begun was taken."""

    committed: dict[WriterLog, float] = field(default_factory=dict)
    """The logs a commit is attributed to (their transactions committed), with its time."""


def attribute(commits: Sequence[tuple[int, float]], logs: Iterable[WriterLog]) -> Attribution:
    """Each commit's writer log, by xid and time. A promotion can hand out again an xid
    the old primary had given a transaction that never reached the standby (its writer
    saw COMMIT fail), so an xid alone may name two logs: the one whose transaction was
    running when the commit record was written is the commit's; when both were, the one
    whose COMMIT returned. A log whose transaction was not running then is not the
    commit's, even when it is the only one of that xid."""
    by_xid: dict[int, list[WriterLog]] = {}
    for log in logs:
        by_xid.setdefault(log.xid, []).append(log)
    attribution = Attribution({})
    for xid, when in commits:
        same_xid = by_xid.get(xid, [])
        attribution.shared += int(len(same_xid) > 1)
        candidates = [log for log in same_xid if log.may_be(when)]
        if not candidates:
            attribution.foreign += 1
            continue
        candidates = [log for log in candidates if log.committed] or candidates
        attribution.ambiguous += int(len(candidates) > 1)
        log = max(candidates, key=lambda log: log.began)
        attribution.logs[xid] = log
        attribution.committed[log] = when
    return attribution


# -- one transaction of each side -----------------------------------------------------------


def write_once(
    cache: txcache.Cache,
    rng: random.Random,
    outcome: Outcome,
    schema_share: float = SCHEMA_SHARE,
) -> None:
    """One read/write transaction of ``outcome``'s tenant (for the public tenant, a schema
    operation with probability ``schema_share``); logs it in ``outcome``."""
    writes: list[Write] = []
    xid = None
    body_done = False
    began = time.time()
    public = outcome.tenant == PUBLIC_TENANT
    schema = public and rng.random() < schema_share
    try:
        with cache.read_write() as tx:
            if schema:
                # Waited for before the transaction has an xid: a transaction with one holds
                # back every logical slot's restart point while it runs.
                tx.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            began = time.time()
            row = tx.query_one("SELECT pg_current_xact_id()::text")
            assert row is not None
            xid = int(row[0]) & 0xFFFFFFFF
            if schema:
                _schema_operation(tx, rng, writes)
            else:
                _write_operation(tx, rng, writes, ledger=public)
            body_done = True
    except psycopg.errors.LockNotAvailable:  # a schema operation's lock_timeout: rolled back
        with outcome.lock:
            outcome.gave_up += 1
        return
    except psycopg.Error as error:
        with outcome.lock:
            outcome.errors.append((time.time(), "write", repr(error)))
            if body_done and xid is not None:
                log = WriterLog(
                    xid, tuple(writes), None, outcome.tenant, math.inf, began, time.time()
                )
                outcome.writes.append(log)
        return
    answered = time.time()
    token = tx.commit_timestamp if rng.random() < 0.3 else None
    with outcome.lock:
        log = WriterLog(xid, tuple(writes), True, outcome.tenant, answered, began, answered)
        outcome.writes.append(log)
        if token is not None and xid is not None:
            outcome.tokens.append(xid)
            outcome.token_values[xid] = token
            del outcome.tokens[:-50]


def _write_operation(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write], *, ledger: bool
) -> None:
    """A transfer, an append, a move to another branch or (with ``ledger``: the public
    tenant's) a ledger update."""
    choice = rng.randrange(6 if ledger else 5)
    if choice <= 2:
        _transfer(tx, rng, writes)
    elif choice == 3:
        _append(tx, rng, writes)
    elif choice == 4:
        account_id = rng.randint(1, ACCOUNTS)
        branch = rng.randrange(BRANCHES)
        tx.execute("UPDATE accounts SET branch = %s WHERE id = %s", (branch, account_id))
        writes.append(("branch", account_id, branch))
    else:
        _update_ledger(tx, rng, writes)


def _append(tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]) -> None:
    """Append a value to a list, and delete what no reader can see any more: the entries
    behind its newest LIST_WINDOW. The table stays small, so rewriting it (the retype
    operation) stays cheap however long the check runs. The deleted rows are behind the
    window in every later state too (ids only grow), so the replay need not know them."""
    list_id = rng.randrange(LISTS)
    value = rng.randint(0, 999)
    row = tx.query_one(
        "INSERT INTO entries (list, value) VALUES (%s, %s) RETURNING id", (list_id, value)
    )
    assert row is not None
    writes.append(("append", list_id, (int(row[0]), value)))
    tx.execute(
        "DELETE FROM entries WHERE list = %s AND id < (SELECT min(id) FROM (SELECT id FROM "
        "entries WHERE list = %s ORDER BY id DESC LIMIT %s) AS newest)",
        (list_id, list_id, LIST_WINDOW),
    )


def _transfer(tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]) -> None:
    first, second = rng.sample(range(1, ACCOUNTS + 1), 2)
    amount = rng.randint(1, 10)
    # Lock in id order: transfers never deadlock each other.
    for account_id, delta in sorted(((first, -amount), (second, amount))):
        row = tx.query_one(
            "UPDATE accounts SET balance = balance + %s WHERE id = %s RETURNING balance",
            (delta, account_id),
        )
        assert row is not None
        writes.append(("balance", account_id, int(row[0])))


def _update_ledger(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    """One ledger row changed through the partitioned table — or through the partition
    itself when the table lacks the row (its partition is detached, or a TRUNCATE-and-reload
    committed after this statement's snapshot: TRUNCATE is not MVCC-safe)."""
    part, slot, delta = rng.randrange(PARTS), rng.randrange(SLOTS), rng.randint(-5, 5)
    for table in ("ledger", PARTITIONS[part]):
        row = tx.query_one(
            f"UPDATE {table} SET amount = amount + %s WHERE part = %s AND slot = %s "
            "RETURNING amount",
            (delta, part, slot),
        )
        if row is not None:
            writes.append(("ledger", part, (slot, int(row[0]))))
            return
    # Still nothing: a transaction without a change is not decoded, and every committed
    # write must be in the checker's commit order (a reader may wait for it: not_before).
    tx.execute(_DECODED)


# -- schema operations ------------------------------------------------------------------------


_DECODED = "SELECT pg_logical_emit_message(true, 'txcache-check', 'no change')"
"""Makes a transaction decoded whatever it changed (a message is a change)."""


def _schema_operation(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    """One schema operation, after every earlier one committed (the advisory lock, taken
    first), so that what it reads of the catalog is the state it changes."""
    tx.execute(f"SET LOCAL lock_timeout = '{SCHEMA_LOCK_TIMEOUT}'")
    rng.choice(SCHEMA_OPERATIONS)(tx, rng, writes)
    # Without DDL triggers (no notice in it) a schema change alone is not decoded either.
    tx.execute(_DECODED)


def _redefine_view(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    """``CREATE OR REPLACE VIEW``: the other definition."""
    # A lock on the view first (a read of nothing: LOCK TABLE on a view would lock the
    # accounts exclusively too): taking it brings this session's catalog caches up to
    # date, so the definition read is the last one committed.
    tx.execute("SELECT FROM branch_view LIMIT 0")
    row = tx.query_one("SELECT pg_get_viewdef('branch_view'::regclass)")
    assert row is not None
    name = "low" if "'high'" in str(row[0]) else "high"
    tx.execute(_view_sql(name))
    writes.append(("viewdef", 0, name))


def _reload_partition(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    """TRUNCATE a partition directly, then insert its rows again: the same rows, so a reader
    that sees it empty saw the TRUNCATE from an older snapshot."""
    part = rng.randrange(PARTS)
    table = PARTITIONS[part]
    # Locked first: no update slips in between the rows read and the TRUNCATE.
    tx.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    rows = [
        (int(slot), int(amount)) for slot, amount in tx.query(f"SELECT slot, amount FROM {table}")
    ]
    tx.execute(f"TRUNCATE {table}")
    tx.execute(
        f"INSERT INTO {table} (part, slot, amount) "
        "SELECT %s, slot, amount FROM unnest(%s::integer[], %s::integer[]) AS r(slot, amount)",
        (part, [slot for slot, _ in rows], [amount for _, amount in rows]),
    )
    writes.append(("reload", part, tuple(sorted(rows))))


def _toggle_partition(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    """Detach the detachable partition, or attach it again."""
    table = PARTITIONS[DETACHABLE]
    row = tx.query_one("SELECT relispartition FROM pg_class WHERE oid = %s::regclass", (table,))
    assert row is not None
    attached = bool(row[0])
    if attached:
        tx.execute(f"ALTER TABLE ledger DETACH PARTITION {table}")
    else:
        tx.execute(f"ALTER TABLE ledger ATTACH PARTITION {table} FOR VALUES IN ({DETACHABLE})")
    writes.append(("attached", DETACHABLE, not attached))


def _toggle_index(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    """Create an index on ``accounts.balance`` (a new tag column), or drop it."""
    # pg_class read with the statement's snapshot: to_regclass would consult this session's
    # catalog caches, which a DDL committed meanwhile has not yet reached.
    row = tx.query_one(
        "SELECT EXISTS (SELECT FROM pg_class WHERE relname = 'accounts_balance_idx' "
        "AND relnamespace = 'public'::regnamespace)"
    )
    assert row is not None
    if row[0]:
        tx.execute("DROP INDEX accounts_balance_idx")
        writes.append(("ddl", 0, "index on accounts.balance dropped"))
    else:
        tx.execute("CREATE INDEX accounts_balance_idx ON accounts (balance)")
        writes.append(("ddl", 0, "index on accounts.balance created"))


def _retype_entries(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    """``entries.list`` (a tag column) and ``entries.value`` (a result column: a statement
    psycopg prepared returning it can no longer run) to bigint, or back to integer: the
    table is rewritten."""
    row = tx.query_one(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'entries'::regclass AND attname = 'list'"
    )
    assert row is not None
    new = "integer" if row[0] == "bigint" else "bigint"
    columns = ("list", "value")
    changes = ", ".join(f"ALTER COLUMN {column} TYPE {new}" for column in columns)
    tx.execute(f"ALTER TABLE entries {changes}")
    writes.append(("ddl", 0, f"entries.{' and entries.'.join(columns)} retyped to {new}"))


SchemaOperation = Callable[[txcache.ReadWriteTransaction, random.Random, list[Write]], None]
SCHEMA_OPERATIONS: Sequence[SchemaOperation] = (
    _redefine_view,
    _reload_partition,
    _reload_partition,  # twice: TRUNCATE is what breaks snapshots
    _toggle_partition,
    _toggle_index,
    _retype_entries,
)


def schema_kind(writes: Sequence[Write]) -> str | None:
    """The kind of schema operation a transaction's writes record (``None``: none)."""
    for kind, _key, value in writes:
        if kind == "reload":
            return "truncate-reload"
        if kind == "attached":
            return "attach" if value else "detach"
        if kind == "viewdef":
            return "view"
        if kind == "ddl":
            return "index" if "index" in str(value) else "retype"
    return None


# -- reads ----------------------------------------------------------------------------------


def read_once(cache: txcache.Cache, rng: random.Random, outcome: Outcome, mode: str) -> None:
    """One read-only transaction of ``outcome``'s tenant (retried on SnapshotUnavailable, at
    most three tries); logs it."""
    staleness = rng.choice(STALENESS_CHOICES)
    token_xid = None
    with outcome.lock:
        if outcome.tokens and rng.random() < 0.3:
            token_xid = rng.choice(outcome.tokens)
    token = outcome.token_values.get(token_xid) if token_xid is not None else None
    for _attempt in range(3):
        read = Read(time.time(), 0.0, staleness, token_xid, mode=mode, tenant=outcome.tenant)
        try:
            _read_in(cache, rng, outcome, read, token)
        except SnapshotUnavailable:
            with outcome.lock:
                outcome.retried += 1
            continue
        except Exception as error:  # the application saw it: count it, never hide it
            with outcome.lock:
                outcome.errors.append((time.time(), "read", repr(error)))
            return
        read.ended = time.time()
        with outcome.lock:
            outcome.reads.append(read)
        return


def _read_in(
    cache: txcache.Cache, rng: random.Random, outcome: Outcome, read: Read, token: int | None
) -> None:
    """One try of ``read``: two to five of the tenant's reads in one read-only transaction; its
    cache hits and lookups counted whatever happens."""
    steps = _READS if outcome.tenant == PUBLIC_TENANT else _TENANT_READS
    with cache.read_only(read.staleness, not_before=token) as tx:
        try:
            for _ in range(rng.randint(2, 5)):
                rng.choice(steps)(rng, read)
        finally:
            with outcome.lock:
                outcome.cache_hits += tx.hits
                outcome.cache_lookups += tx.hits + tx.misses
        read.path = _path(tx)
        read.pin = tx.snapshot.ts if tx.snapshot is not None else None
        read.server = tx.snapshot.server if tx.snapshot is not None else None
        if tx.database_snapshot is not None:
            read.snapshot = _snapshot(tx.database_snapshot)


def _snapshot(text: str) -> tuple[int, int, frozenset[int]]:
    """``xmin:xmax:xip,…`` (64-bit xids) as 32-bit xids, as logical decoding names them."""
    xmin, xmax, in_progress = text.split(":")
    low32 = 0xFFFFFFFF
    running = frozenset(int(x) & low32 for x in in_progress.split(",") if x)
    return int(xmin) & low32, int(xmax) & low32, running


def _path(tx: txcache.ReadOnlyTransaction) -> str:
    """What the library did: the snapshot, moves, fallback, the pins left."""
    snapshot = tx.snapshot.ts if tx.snapshot is not None else None
    bounds = tx.pin_set.bounds()
    return (
        f"snapshot {snapshot}, pins {bounds} ({len(tx.pin_set)}), moves {tx.moves}, "
        f"uncached {tx.uncached}, read cache {tx.read_cache}"
    )


def loop(step: Callable[[], None], stop: threading.Event) -> None:
    """Run ``step`` until ``stop`` is set."""
    while not stop.is_set():
        step()
