"""A primary and its streaming standby that fail over and are made whole again: the
failover tests, the failover benchmark and the checker's ``promote-*`` faults run on it.

Both servers are :class:`~txcache._postgres.EmbeddedPostgres` on two ports that never
change: whichever is primary, :attr:`ReplicatedPostgres.dsn` names both with
``target_session_attrs=read-write``, as an application's DSN for a failover pair does.
The standby synchronizes the primary's failover slots (PostgreSQL 17 and later), and the
primary sends no change to a logical client before the standby has it
(``synchronized_standby_slots``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Literal

import psycopg

from txcache._postgres import (
    EmbeddedPostgres,
    PostgresStartError,
    Setting,
    major_version,
    standby_name,
)
from txcache._process import free_ports, wait_until

__all__ = ["FAILOVER_SLOTS_SINCE", "STANDBY_SLOT", "ReplicatedPostgres", "hosts_dsn"]

FAILOVER_SLOTS_SINCE = 17
"""The first major version whose standbys keep copies of logical slots (failover slots)."""

STANDBY_SLOT = "txcache_standby"
"""The physical slot the standby streams through (on whichever server is primary)."""

_STANDBY_SETTINGS: dict[str, Setting] = {
    "hot_standby_feedback": "on",
    "sync_replication_slots": "on",  # a primary ignores it: both servers start with it
}
# Set here with ALTER SYSTEM, on each primary in turn: a caller's `-c` would override them.
_MANAGED = ("synchronous_standby_names", "synchronized_standby_slots")
_SYNC_TIMEOUT = 30.0  # seconds for a new standby to become the synchronous one


def hosts_dsn(
    servers: Sequence[EmbeddedPostgres],
    dbname: str = "postgres",
    user: str = EmbeddedPostgres.user,
) -> str:
    """A libpq keyword DSN naming each of ``servers`` in order (``host=a,b port=1,2``), as
    the agent's ``--decode-from`` takes them, each given 2 s to answer."""
    hosts = ",".join(server.host for server in servers)
    ports = ",".join(str(server.port) for server in servers)
    return f"host={hosts} port={ports} user={user} dbname={dbname} connect_timeout=2"


class ReplicatedPostgres:
    """A primary and its streaming standby, each on a port of its own. ``settings`` are
    both servers' (see :class:`~txcache._postgres.EmbeddedPostgres`). With
    ``synchronous``, a commit waits for the standby to have it (and only then becomes
    visible), so that a promotion after a crash loses no commit anyone saw; without it, a
    crash may lose the last ones, as with any asynchronous standby.

    :meth:`fail_over` stops or crashes the primary and promotes the standby;
    :meth:`rebuild_standby` makes a new standby of the new primary on the freed port.
    :meth:`add_standby` adds read-only standbys beside it (the scale-out tests and
    benchmarks; they take no part in a failover). A context manager: leaving it stops them
    all.
    """

    def __init__(
        self, settings: Mapping[str, Setting] | None = None, *, synchronous: bool = False
    ) -> None:
        """Start the primary, then its standby (a base backup of it), on two free ports;
        :class:`~txcache._postgres.PostgresStartError` before PostgreSQL 17."""
        fixed = sorted(set(settings or {}) & set(_MANAGED))
        if fixed:
            raise ValueError(f"ReplicatedPostgres sets {', '.join(fixed)} itself")
        version = major_version()
        if version < FAILOVER_SLOTS_SINCE:
            raise PostgresStartError(
                f"a standby that keeps the logical slots needs PostgreSQL "
                f"{FAILOVER_SLOTS_SINCE} or later (failover slots); this is {version}"
            )
        self._settings = {**(settings or {}), **_STANDBY_SETTINGS}
        self.synchronous = synchronous
        first = free_ports(2)
        self.ports = (first, first + 1)
        """The two ports, the primary's first at the start; the DSN names both."""
        self.primary = EmbeddedPostgres(self._settings, port=self.ports[0])
        self.standby: EmbeddedPostgres | None = None
        self.extra_standbys: list[EmbeddedPostgres] = []
        """The standbys :meth:`add_standby` made, in order."""
        self._free_port = self.ports[1]
        try:
            self.rebuild_standby()
        except BaseException:
            self.stop()
            raise

    @property
    def dsn(self) -> str:
        """Database ``postgres`` as ``postgres`` on whichever server is primary."""
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str, user: str = EmbeddedPostgres.user) -> str:
        """A libpq keyword DSN naming both servers, asking for the writable one."""
        host = EmbeddedPostgres.host
        return (
            f"host={host},{host} port={self.ports[0]},{self.ports[1]} user={user} "
            f"dbname={dbname} target_session_attrs=read-write"
        )

    @property
    def standby_application_name(self) -> str:
        """The standby's ``application_name`` in the primary's ``pg_stat_replication``."""
        return standby_name(STANDBY_SLOT)

    def restart_standby(self, settings: Mapping[str, Setting]) -> None:
        """Restart the standby with ``settings`` over both servers' (``hot_standby_feedback``
        off, say: the command line's settings win over ``ALTER SYSTEM``)."""
        if self.standby is None:
            raise RuntimeError("there is no standby to restart")
        self.standby.restart({**self._settings, **settings})

    def server_dsns(self, dbname: str = "postgres") -> dict[str, str]:
        """Each server's own DSN (whichever is primary now), by a name of its port
        (``port5433``): a standby's clients name them so, since a promotion swaps the
        roles and a new standby takes the freed port."""
        host, user = EmbeddedPostgres.host, EmbeddedPostgres.user
        return {
            f"port{port}": f"host={host} port={port} user={user} dbname={dbname}"
            for port in self.ports
        }

    def fail_over(self, how: Literal["stop", "crash"]) -> None:
        """Stop the primary (``stop``: a fast shutdown, which sends the standby everything
        first; ``crash``: an immediate one), remove its cluster and promote the standby.
        The new primary has no standby but the extra ones cascading from it, and waits for
        none, until :meth:`rebuild_standby`."""
        if self.standby is None:
            raise RuntimeError("no standby to promote: rebuild_standby() first")
        old, new = self.primary, self.standby
        # Those of the primary would stream from a server that is gone; those cascading
        # from the standby follow it onto its new timeline.
        if any(extra.upstream is old for extra in self.extra_standbys):
            raise RuntimeError("fail_over() with extra standbys of the primary: they take no part")
        # The new roles first: whatever fails below, the old primary is gone.
        self.primary, self.standby, self._free_port = new, None, old.port
        if how == "crash":
            old.crash()
        old.stop()
        with psycopg.connect(new.dsn, autocommit=True) as db:
            promoted = db.execute("SELECT pg_promote(wait => true, wait_seconds => 60)")
            if promoted.fetchone() != (True,):
                raise RuntimeError(f"the standby was not promoted:\n{new.log_tail()}")

    def rebuild_standby(self) -> None:
        """A new standby of the primary, on the port the old primary had; with
        ``synchronous``, it returns once that is the synchronous standby."""
        if self.standby is not None:
            raise RuntimeError("there is a standby already")
        with psycopg.connect(self.primary.dsn, autocommit=True) as db:
            db.execute(
                "SELECT pg_create_physical_replication_slot(%s) WHERE NOT EXISTS ("
                "SELECT FROM pg_replication_slots WHERE slot_name = %s)",
                (STANDBY_SLOT, STANDBY_SLOT),
            )
        # The base backup copies the primary's settings file before the primary is told
        # to wait for this standby: promoted, the standby waits for none until rebuilt.
        self.standby = EmbeddedPostgres(
            self._settings, replica_of=(self.primary, STANDBY_SLOT), port=self._free_port
        )
        with psycopg.connect(self.primary.dsn, autocommit=True) as db:
            db.execute(f"ALTER SYSTEM SET synchronized_standby_slots = '{STANDBY_SLOT}'")
            if self.synchronous:  # by name: '*' would take a logical client too
                name = standby_name(STANDBY_SLOT)
                db.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
            db.execute("SELECT pg_reload_conf()")
        if self.synchronous:
            wait_until(
                self._standby_is_synchronous,
                "the new standby to be the synchronous one",
                timeout=_SYNC_TIMEOUT,
                log=self.primary.log_tail,
            )

    def add_standby(self, upstream: EmbeddedPostgres | None = None) -> EmbeddedPostgres:
        """One more asynchronous standby of the primary — or, cascading, of ``upstream``
        (a standby: it follows whatever timeline that one takes) — on a free port,
        streaming through a physical slot of its own (``txcache_standby_2``, …) and with
        the same settings; it returns once the standby accepts connections."""
        source = upstream or self.primary
        slot = f"{STANDBY_SLOT}_{len(self.extra_standbys) + 2}"
        with psycopg.connect(source.dsn, autocommit=True) as db:
            db.execute("SELECT pg_create_physical_replication_slot(%s)", (slot,))
        standby = EmbeddedPostgres(self._settings, replica_of=(source, slot))
        self.extra_standbys.append(standby)
        return standby

    def _standby_is_synchronous(self) -> bool:
        with psycopg.connect(self.primary.dsn, autocommit=True) as db:
            row = db.execute(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                (standby_name(STANDBY_SLOT),),
            ).fetchone()
        return row == ("sync",)

    def slots_synced(self, slots: Iterable[str], position: int = 0) -> bool:
        """Whether the standby holds a persistent copy of each of ``slots``, confirmed up to
        ``position`` at least (a promotion then keeps them).

        The standby takes a copy only once the primary's slot is past the standby's own
        catalog horizon, which moves at a running-transactions record: one is logged here
        (PostgreSQL writes one every 15 s, and the standby backs off to 30 s between
        attempts that found nothing to copy)."""
        if self.standby is None:
            return False
        with psycopg.connect(self.primary.dsn, autocommit=True) as db:
            db.execute("SELECT pg_log_standby_snapshot()")
        wanted = list(slots)
        with psycopg.connect(self.standby.dsn) as db:
            rows = db.execute(
                "SELECT slot_name, (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint "
                "FROM pg_replication_slots "
                "WHERE synced AND NOT temporary AND slot_name = ANY(%s)",
                (wanted,),
            ).fetchall()
        confirmed = {str(name): int(lsn) for name, lsn in rows}
        return all(confirmed.get(slot, -1) >= position for slot in wanted)

    def stop(self) -> None:
        """Stop every server and remove their clusters. Idempotent."""
        for standby in self.extra_standbys:
            standby.stop()
        if self.standby is not None:
            self.standby.stop()
        self.primary.stop()

    def __enter__(self) -> ReplicatedPostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
