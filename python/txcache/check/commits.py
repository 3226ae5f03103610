"""Commit order and times from the checker's own logical slot (``test_decoding``).

Read in the background while the workload runs (so the slot never holds much WAL), by
peeking and then advancing: a connection lost mid-read loses nothing, and a commit read
twice is counted once.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import re
import threading
import time
from typing import Any

import psycopg

from txcache._lsn import parse_lsn
from txcache.check.stack import CHECK_SLOT

__all__ = ["CommitReader"]

log = logging.getLogger("txcache.check")

_COMMIT = re.compile(r"COMMIT (\d+) \(at (.+)\)")
# Before 17, test_decoding's skip-empty-xacts also drops the BEGIN and COMMIT of a
# transaction whose only change is a transactional message (measured on 15): its commit
# would be missing from the history. There every transaction is listed, empty or not.
_PEEK = (
    "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, %s::pg_lsn, %s, "
    "'include-timestamp', '1', 'skip-empty-xacts', %s)"
)
_BATCH = 20000
_SNAPSHOT_EVERY = 3
"""Background reads between two running-transactions records."""
_CATCH_UP_PATIENCE = 30.0
"""Seconds :meth:`CommitReader.catch_up` waits for transactions older than the WAL it
must release."""
# A record that flushes the WAL before it (17+: a message that asks to; before: one in a
# transaction of its own, whose commit flushes).
_FLUSH = "SELECT pg_logical_emit_message(false, 'txcache-check', 'flush', true)"
_FLUSH_BEFORE_17 = "SELECT pg_logical_emit_message(true, 'txcache-check', 'flush')"
_FLUSH_BEFORE_17_DECODED = "message: transactional: 1 prefix: txcache-check, sz: 5 content:flush"
# Rows txcache itself writes (the agents' lease, renewed twice a second; the agent's record
# of the shared catalogs) and its notices (the agent's, of a schema change it found: every
# workload transaction that changes the schema also writes a message of its own): not the
# workload's commits.
_TXCACHE_OWN = ("table txcache.", "message: transactional: 1 prefix: txcache-ddl,")
# A running-transactions record (16+: asked for; before: a logical slot logs one as it is
# created, and a temporary one goes at once). Named per session: two sessions asking at
# once must not meet on one name.
_LOG_RUNNING = "SELECT pg_log_standby_snapshot()"
_LOG_RUNNING_BEFORE_16 = (
    "SELECT pg_drop_replication_slot(slot_name) FROM pg_create_logical_replication_slot("
    "'txcache_check_running_' || pg_backend_pid(), 'test_decoding', true)"
)
_HELD = (
    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint::text "
    "FROM pg_replication_slots WHERE slot_name = %s"
)
_OLDEST_XACT = (
    "SELECT pid, application_name, backend_xid, xact_start, state, left(query, 80) "
    "FROM pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY age(backend_xid) DESC LIMIT 1"
)
_CAUGHT_UP = 8 << 20
"""Bytes of WAL the slot may still hold after :meth:`CommitReader.catch_up`."""


class CommitReader:
    """Every commit the database made, in commit order: ``(xid, commit time)``."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.commits: list[tuple[int, float]] = []
        self.lsns: dict[int, int] = {}
        """Each commit's position in the WAL, as the slot reports it (for anomaly reports:
        where a pin lies among the commits)."""
        self._seen: set[int] = set()
        self.repeated_xids = 0
        """Commits of an xid already read at another position (left out of the history, so
        the check fails: the slot showed a commit that was then lost, or an xid twice)."""
        self._empty = False  # no change or message yet in the transaction being read
        # One reader at a time: the background thread and catch_up (a fault's) both read.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="check-commits", daemon=True)

    def start(self) -> None:
        """Read in the background until :meth:`finish`."""
        self._thread.start()

    def finish(self, timeout: float = 60.0) -> None:
        """Stop the background reader, then read what is left."""
        self._stop.set()
        self._thread.join()
        if self.slot_lost():
            raise RuntimeError(
                f"the checker's own slot {CHECK_SLOT} was invalidated: commits are missing "
                "from the history, so there is no verdict (it must keep up: catch_up)"
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                while self.read_some():
                    pass
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def read_some(self, upto: str | None = None) -> bool:
        """One batch (everything up to the WAL position ``upto`` if given); ``True`` if it
        found anything."""
        with self._lock, psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            return self._read(conn, upto)

    def _read(self, conn: psycopg.Connection[Any], upto: str | None) -> bool:
        limit = None if upto is not None else _BATCH
        skip_empty = "1" if conn.info.server_version >= 170000 else "0"
        rows = conn.execute(_PEEK, (CHECK_SLOT, upto, limit, skip_empty)).fetchall()
        for lsn, data in rows:
            self._take(str(lsn), str(data))
        # Up to `upto` itself: the slot's restart point can then pass the records after the
        # last commit (a running-transactions record, which is what lets it move).
        target = upto if upto is not None else (rows[-1][0] if rows else None)
        if target is not None:
            conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (CHECK_SLOT, target))
        return bool(rows)

    def catch_up(self) -> bool:
        """Read every commit so far and bring the slot's restart point up to now — right
        before a checkpoint that invalidates slots holding too much WAL (the lost-slot
        fault), which must not take this one; ``False`` if it still holds more than
        ``_CAUGHT_UP`` bytes after ``_CATCH_UP_PATIENCE`` seconds (then there must be no
        checkpoint). The restart point moves only at a running-transactions record, one
        per read, and never past the start of a transaction still running with an xid:
        log one, flush it (decoding reads only flushed WAL), read twice, and again until
        such transactions have ended."""
        deadline = time.monotonic() + _CATCH_UP_PATIENCE
        with self._lock, psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            while True:
                version = conn.info.server_version
                conn.execute(_LOG_RUNNING if version >= 160000 else _LOG_RUNNING_BEFORE_16)
                conn.execute(_FLUSH if version >= 170000 else _FLUSH_BEFORE_17)
                for _ in range(2):
                    self._read(conn, _scalar(conn, "SELECT pg_current_wal_flush_lsn()::text"))
                held = int(_scalar(conn, _HELD, (CHECK_SLOT,)))
                if held <= _CAUGHT_UP:
                    return True
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            oldest = conn.execute(_OLDEST_XACT).fetchone()
        log.warning(
            "the checker's slot still holds %s bytes of WAL after catching up (oldest "
            "transaction with an xid: %s)",
            held,
            oldest,
        )
        return False

    def slot_lost(self) -> bool:
        """Whether PostgreSQL invalidated the checker's slot (it would have lost commits)."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            status = _scalar(
                conn,
                "SELECT coalesce(wal_status, 'lost') FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (CHECK_SLOT,),
            )
        return status == "lost"

    def _take(self, lsn: str, data: str) -> None:
        if data.startswith("BEGIN "):
            self._empty = True
            return
        match = _COMMIT.match(data)
        if match is None:
            self._empty = self._empty and (
                data == _FLUSH_BEFORE_17_DECODED or data.startswith(_TXCACHE_OWN)
            )
            return
        if self._empty:  # it wrote nothing, or only our flush or txcache's own rows and notices
            return
        xid = int(match[1])
        if xid in self._seen:  # read again (same position), or the xid came back
            if self.lsns.get(xid) != parse_lsn(lsn):
                self.repeated_xids += 1
                log.warning("commit of xid %s at %s, already read at another position", xid, lsn)
            return
        self._seen.add(xid)
        when = datetime.datetime.fromisoformat(match[2]).timestamp()
        self.commits.append((xid, when))
        self.lsns[xid] = parse_lsn(lsn)

    def _run(self) -> None:
        for count in itertools.count():
            if self._stop.wait(1.0):
                return
            try:
                if count % _SNAPSHOT_EVERY == 0:
                    self._log_running_transactions()
                self.read_some()
            except psycopg.Error as error:  # PostgreSQL restarting: try again later
                log.debug("reading the check slot failed: %s", error)

    def _log_running_transactions(self) -> None:
        """A running-transactions record now: the slot's restart point (the WAL it holds)
        moves only at one, and PostgreSQL writes one every 15 s at most; a table rewrite
        can write more than ``max_slot_wal_keep_size`` in that time."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            version = conn.info.server_version
            conn.execute(_LOG_RUNNING if version >= 160000 else _LOG_RUNNING_BEFORE_16)


def _scalar(conn: psycopg.Connection[Any], query: str, params: tuple[object, ...] = ()) -> str:
    """The first column of the first row, as text."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query!r}")
    return str(row[0])
