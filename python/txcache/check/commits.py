"""Commit order and times from the checker's own logical slot (``test_decoding``).

Read in the background while the workload runs (so the slot never holds much WAL), by
peeking and then advancing: a connection lost mid-read loses nothing, and a commit read
twice is counted once.
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time

import psycopg

from txcache.check.stack import CHECK_SLOT

__all__ = ["CommitReader"]

log = logging.getLogger("txcache.check")

_COMMIT = re.compile(r"COMMIT (\d+) \(at (.+)\)")
_PEEK = (
    "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, NULL, 20000, "
    "'include-timestamp', '1', 'skip-empty-xacts', '1')"
)


class CommitReader:
    """Every commit the database made, in commit order: ``(xid, commit time)``."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.commits: list[tuple[int, float]] = []
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="check-commits", daemon=True)

    def start(self) -> None:
        """Read in the background until :meth:`finish`."""
        self._thread.start()

    def finish(self, timeout: float = 60.0) -> None:
        """Stop the background reader, then read what is left."""
        self._stop.set()
        self._thread.join()
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

    def read_some(self) -> bool:
        """One batch; ``True`` if it found anything."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(_PEEK, (CHECK_SLOT,)).fetchall()
            if not rows:
                return False
            for _lsn, data in rows:
                self._take(str(data))
            conn.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (CHECK_SLOT, rows[-1][0])
            )
        return True

    def _take(self, data: str) -> None:
        match = _COMMIT.match(data)
        if match is None:
            return
        xid = int(match[1])
        if xid in self._seen:
            return
        self._seen.add(xid)
        when = datetime.datetime.fromisoformat(match[2]).timestamp()
        self.commits.append((xid, when))

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.read_some()
            except psycopg.Error as error:  # PostgreSQL restarting: try again later
                log.debug("reading the check slot failed: %s", error)
