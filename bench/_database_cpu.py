"""The database server's CPU over a window, split by who used it: the application's
sessions, the agent's (by role: pinners, lease, catalog readings, ...), the walsender that
decodes the change stream, and the server's own background processes.

A session is named by ``pg_stat_activity`` (its ``application_name``: the agent names every
session it opens ``txcache-agent <role> …``) at the window's start and end; the CPU of a
process that ended inside the window is reaped into the postmaster's, and reported with the
postmaster's own.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from _cpu import cpu_seconds

__all__ = ["KINDS", "DatabaseCpuSplit"]

KINDS = (
    "application",
    "agent: pinners",
    "agent: other sessions",
    "walsender",
    "background",
    "postmaster and ended sessions",
)
"""The rows of a split, in report order."""

_SESSIONS = """
SELECT pid, backend_type, coalesce(application_name, '') FROM pg_catalog.pg_stat_activity
"""


def _kind(backend_type: str, application: str) -> str:
    if backend_type == "walsender":
        return "walsender"
    if backend_type != "client backend":
        return "background"
    if application.startswith("txcache-agent pinner"):
        return "agent: pinners"
    if application.startswith("txcache-agent"):
        return "agent: other sessions"
    return "application"


def _live_cpu(pid: int, *, reaped: bool = False) -> float | None:
    """:func:`~_cpu.cpu_seconds` of ``pid``; ``None`` once it has exited."""
    try:
        return cpu_seconds(pid, reaped=reaped)
    except OSError:
        return None


class DatabaseCpuSplit:
    """Counts the database's CPU from construction to :meth:`seconds`."""

    def __init__(self, dsn: str) -> None:
        """Start counting on the server of ``dsn`` (any database of it)."""
        self.dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            stat = Path(f"/proc/{conn.info.backend_pid}/stat").read_text()
        self.postmaster = int(stat.rsplit(")", 1)[1].split()[1])  # a backend's parent
        self.kinds, self.start = self._sample()

    def _sample(self) -> tuple[dict[int, str], dict[int, float]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            own = conn.info.backend_pid
            rows = conn.execute(_SESSIONS).fetchall()
        kinds = {pid: _kind(kind, app) for pid, kind, app in rows if pid != own}
        cpu = {pid: seconds for pid in kinds if (seconds := _live_cpu(pid)) is not None}
        reaped = _live_cpu(self.postmaster, reaped=True)
        cpu[self.postmaster] = reaped if reaped is not None else 0.0
        return kinds, cpu

    def seconds(self) -> dict[str, float]:
        """CPU seconds per kind (:data:`KINDS`) since construction."""
        kinds, end = self._sample()
        totals = dict.fromkeys(KINDS, 0.0)
        totals["postmaster and ended sessions"] = end[self.postmaster] - self.start[self.postmaster]
        for pid, seconds in end.items():
            if pid == self.postmaster:
                continue
            kind = kinds.get(pid) or self.kinds.get(pid) or "background"
            totals[kind] += seconds - self.start.get(pid, 0.0)
        # A session alive at the start but ended since: its CPU before the start was
        # counted at the start and is in the postmaster's reaped total now.
        for pid, seconds in self.start.items():
            if pid != self.postmaster and pid not in end:
                totals["postmaster and ended sessions"] -= seconds
        return {kind: round(max(0.0, value), 3) for kind, value in totals.items()}
