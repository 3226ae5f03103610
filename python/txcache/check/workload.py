"""The checker's workload: a small bank with branches and append-only lists.

Writers run read/write transactions — transfers between accounts, appends to lists, and
moves of an account to another branch (an update of an indexed column, so rows change tag
values) — and log the absolute values each left behind. Readers run read-only
transactions through nested cacheable functions and direct queries, with several
staleness limits and ``not_before`` tokens, and log every value they observed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

import txcache
from txcache.check.history import LIST_WINDOW, Object, Read, Write
from txcache.errors import SnapshotUnavailable

__all__ = [
    "ACCOUNTS",
    "BRANCHES",
    "LISTS",
    "SCHEMA",
    "Outcome",
    "WriterLog",
    "initial_state",
    "read_once",
    "write_once",
]

ACCOUNTS = 24
BRANCHES = 4
LISTS = 6
START_BALANCE = 100
STALENESS_CHOICES = (0.0, 1.0, 5.0, 30.0)

SCHEMA = f"""
CREATE TABLE accounts (id integer PRIMARY KEY, balance integer NOT NULL,
                       branch integer NOT NULL);
CREATE INDEX ON accounts (branch);
CREATE TABLE entries (id bigserial PRIMARY KEY, list integer NOT NULL, value integer NOT NULL);
CREATE INDEX ON entries (list);
INSERT INTO accounts SELECT i, {START_BALANCE}, i % {BRANCHES}
FROM generate_series(1, {ACCOUNTS}) i;
"""


def initial_state() -> dict[Object, object]:
    """The state SCHEMA creates, as the verdict's objects."""
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
    return state


# -- what readers call --------------------------------------------------------------------


@txcache.cacheable
def account(account_id: int) -> tuple[int, int] | None:
    """Balance and branch of one account."""
    row = txcache.query_one("SELECT balance, branch FROM accounts WHERE id = %s", (account_id,))
    return None if row is None else (int(row[0]), int(row[1]))


@txcache.cacheable
def branch_members(branch: int) -> tuple[int, ...]:
    """The ids of a branch's accounts, sorted."""
    rows = txcache.query("SELECT id FROM accounts WHERE branch = %s ORDER BY id", (branch,))
    return tuple(int(row[0]) for row in rows)


@txcache.cacheable
def list_values(list_id: int) -> tuple[int, ...]:
    """A list's last LIST_WINDOW values, in entry order."""
    rows = txcache.query(
        "SELECT value FROM entries WHERE list = %s ORDER BY id DESC LIMIT %s",
        (list_id, LIST_WINDOW),
    )
    return tuple(int(row[0]) for row in reversed(rows))


@txcache.cacheable
def branch_report(branch: int) -> tuple[tuple[int, tuple[int, int] | None], ...]:
    """Nested: the members of a branch, then each member's account."""
    return tuple((member, account(member)) for member in branch_members(branch))


@txcache.cacheable
def pair(first: int, second: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """Nested: two accounts (a transfer's two sides)."""
    return account(first), account(second)


READER_FUNCTIONS = (account, branch_members, list_values, branch_report, pair)


def _observe_account(out: list[tuple[Object, object]], account_id: int, seen: Any) -> None:
    if seen is not None:
        out.append((("balance", account_id), seen[0]))
        out.append((("branch", account_id), seen[1]))


def _one_read(rng: random.Random, out: list[tuple[Object, object]]) -> None:
    choice = rng.randrange(6)
    if choice == 0:
        account_id = rng.randint(1, ACCOUNTS)
        _observe_account(out, account_id, account(account_id))
    elif choice == 1:
        branch = rng.randrange(BRANCHES)
        out.append((("members", branch), branch_members(branch)))
    elif choice == 2:
        list_id = rng.randrange(LISTS)
        out.append((("list", list_id), list_values(list_id)))
    elif choice == 3:
        branch = rng.randrange(BRANCHES)
        report = branch_report(branch)
        out.append((("members", branch), tuple(member for member, _ in report)))
        for member, seen in report:
            _observe_account(out, member, seen)
    elif choice == 4:
        first, second = rng.sample(range(1, ACCOUNTS + 1), 2)
        for account_id, seen in zip((first, second), pair(first, second), strict=True):
            _observe_account(out, account_id, seen)
    else:
        account_id = rng.randint(1, ACCOUNTS)
        row = txcache.query_one("SELECT balance FROM accounts WHERE id = %s", (account_id,))
        if row is not None:
            out.append((("balance", account_id), int(row[0])))


# -- outcomes -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What the workload's threads did (shared, under a lock)."""

    reads: list[Read] = field(default_factory=list)
    writes: list[WriterLog] = field(default_factory=list)
    errors: list[tuple[float, str, str]] = field(default_factory=list)
    """(time, side, error) of every exception the application saw."""
    retried: int = 0
    """Read-only transactions that raised SnapshotUnavailable and were retried."""
    tokens: list[int] = field(default_factory=list)
    """xids of recent commits readers may use as ``not_before`` (with ``token_values``)."""
    token_values: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class WriterLog:
    """One write transaction: its xid (32 bits), its writes, and whether it committed
    (``None``: unknown, the connection died during COMMIT)."""

    xid: int
    writes: tuple[Write, ...]
    committed: bool | None


# -- one transaction of each side -----------------------------------------------------------


def write_once(cache: txcache.Cache, rng: random.Random, outcome: Outcome) -> None:
    """One read/write transaction; logs it in ``outcome``."""
    writes: list[Write] = []
    xid = None
    body_done = False
    try:
        with cache.read_write() as tx:
            row = tx.query_one("SELECT pg_current_xact_id()::text")
            assert row is not None
            xid = int(row[0]) & 0xFFFFFFFF
            _write_operation(tx, rng, writes)
            body_done = True
    except psycopg.Error as error:
        with outcome.lock:
            outcome.errors.append((time.time(), "write", repr(error)))
            if body_done and xid is not None:
                outcome.writes.append(WriterLog(xid, tuple(writes), None))
        return
    token = tx.commit_timestamp if rng.random() < 0.3 else None
    with outcome.lock:
        outcome.writes.append(WriterLog(xid, tuple(writes), True))
        if token is not None and xid is not None:
            outcome.tokens.append(xid)
            outcome.token_values[xid] = token
            del outcome.tokens[:-50]


def _write_operation(
    tx: txcache.ReadWriteTransaction, rng: random.Random, writes: list[Write]
) -> None:
    choice = rng.randrange(5)
    if choice <= 2:
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
    elif choice == 3:
        list_id = rng.randrange(LISTS)
        value = rng.randint(0, 999)
        row = tx.query_one(
            "INSERT INTO entries (list, value) VALUES (%s, %s) RETURNING id", (list_id, value)
        )
        assert row is not None
        writes.append(("append", list_id, (int(row[0]), value)))
    else:
        account_id = rng.randint(1, ACCOUNTS)
        branch = rng.randrange(BRANCHES)
        tx.execute("UPDATE accounts SET branch = %s WHERE id = %s", (branch, account_id))
        writes.append(("branch", account_id, branch))


def read_once(cache: txcache.Cache, rng: random.Random, outcome: Outcome, mode: str) -> None:
    """One read-only transaction (retried once on SnapshotUnavailable); logs it."""
    staleness = rng.choice(STALENESS_CHOICES)
    token_xid = None
    with outcome.lock:
        if outcome.tokens and rng.random() < 0.3:
            token_xid = rng.choice(outcome.tokens)
    token = outcome.token_values.get(token_xid) if token_xid is not None else None
    for _attempt in range(3):
        read = Read(time.time(), 0.0, staleness, token_xid, mode=mode)
        try:
            with cache.read_only(staleness, not_before=token) as tx:
                for _ in range(rng.randint(2, 5)):
                    _one_read(rng, read.observed)
                read.path = _path(tx)
                if tx.database_snapshot is not None:
                    read.snapshot = _snapshot(tx.database_snapshot)
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
