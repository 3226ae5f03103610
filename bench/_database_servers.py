"""The database servers of a benchmark by name — the primary and its read-only standbys —
with what the reports compare per server: CPU used, transactions run, and each server's own
CPU quota.

A standby that serves misses takes work off the primary, so a topology's report gives the
primary's CPU per request (which decides the speedup where the primary is the bottleneck)
apart from the standbys'.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from types import TracebackType
from typing import Any

import psycopg
from _cpu import database_cpu_seconds
from _cpu_quota import DatabaseCpuQuota, Throttling

__all__ = ["PRIMARY", "DatabaseServers"]

PRIMARY = "primary"
"""The primary's name among the servers."""

_TRANSACTIONS = """
SELECT coalesce(sum(xact_commit + xact_rollback), 0)::bigint FROM pg_stat_database
WHERE datname = current_database()
"""


def standby_name(index: int) -> str:
    """The name of standby ``index`` (from 1): the agent's ``--standby`` and the library's
    ``replicas`` call it so."""
    return f"standby{index}"


class DatabaseServers:
    """``servers``: the output of :func:`_common.postgres` (one server, or a
    :class:`~txcache.stack.ReplicatedPostgres` with its standbys); ``dbname``: the
    benchmark's database on them."""

    def __init__(self, servers: Any, dbname: str) -> None:
        """Name the servers: ``primary``, then ``standby1``, ``standby2``, …"""
        self.dbname = dbname
        if hasattr(servers, "primary"):
            standbys = [servers.standby, *servers.extra_standbys]
            self.by_name: dict[str, Any] = {PRIMARY: servers.primary}
            self.by_name |= {standby_name(i + 1): s for i, s in enumerate(standbys)}
        else:
            self.by_name = {PRIMARY: servers}
        self.quotas: dict[str, DatabaseCpuQuota] = {}
        self._exits = ExitStack()

    @property
    def standby_names(self) -> list[str]:
        """The standbys' names, in order."""
        return [name for name in self.by_name if name != PRIMARY]

    def dsn(self, name: str) -> str:
        """Server ``name``'s own DSN of the benchmark's database."""
        dsn: str = self.by_name[name].dsn_for(self.dbname)
        return dsn

    def replicas(self, count: int) -> str:
        """The library's ``replicas`` setting (``TXCACHE_REPLICAS``) for the first ``count``
        standbys."""
        return ";".join(f"{name}={self.dsn(name)}" for name in self.standby_names[:count])

    def agent_flags(self) -> tuple[str, ...]:
        """The agent's ``--standby`` flags: it pins every standby."""
        flags: tuple[str, ...] = ()
        for name in self.standby_names:
            flags += ("--standby", f"{name}={self.dsn(name)}")
        return flags

    def limit_cpu(self, cores: float) -> dict[str, int]:
        """Give every server its own cgroup limited to ``cores`` CPUs; the processes moved,
        per server. Undone on exit."""
        moved = {}
        for name, server in self.by_name.items():
            quota = DatabaseCpuQuota(cores, name=f"txcache-bench-{name}")
            self._exits.enter_context(quota)
            self.quotas[name] = quota
            moved[name] = quota.confine(server)
        return moved

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds each server has used so far (exited backends included)."""
        return {name: database_cpu_seconds(server) for name, server in self.by_name.items()}

    def transactions(self) -> dict[str, int]:
        """Transactions each server has run so far in the benchmark's database (a standby
        counts its own read-only ones)."""
        counts = {}
        for name in self.by_name:
            with psycopg.connect(self.dsn(name), autocommit=True) as conn:
                row = conn.execute(_TRANSACTIONS).fetchone()
            counts[name] = int(row[0]) if row else 0
        return counts

    def throttling(self) -> dict[str, Throttling]:
        """Each limited server's throttling so far (none without :meth:`limit_cpu`)."""
        return {name: quota.throttling() for name, quota in self.quotas.items()}

    def __enter__(self) -> DatabaseServers:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._exits.close()


def differences(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """``after - before`` per server."""
    return {name: after[name] - before.get(name, 0) for name in after}
