"""A primary and its streaming standby that fail over and are made whole again: the
failover tests and the checker's ``promote`` fault run on it.

Both servers are :class:`~txcache._postgres.EmbeddedPostgres` on two ports that never
change: whichever is primary, :attr:`ReplicatedPostgres.dsn` names both with
``target_session_attrs=read-write``, as an application's DSN for a failover pair does.
The standby synchronizes the primary's failover slots (PostgreSQL 17 and later), and the
primary sends no change to a logical client before the standby has it
(``synchronized_standby_slots``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Literal

import psycopg

from txcache._postgres import EmbeddedPostgres, Setting

__all__ = ["STANDBY_SLOT", "ReplicatedPostgres"]

STANDBY_SLOT = "txcache_standby"
"""The physical slot the standby streams through (on whichever server is primary)."""

_STANDBY_NAME = f"standby_{STANDBY_SLOT}"
"""The standby's ``application_name`` (:class:`~txcache._postgres.EmbeddedPostgres` names a
standby after its slot)."""

_STANDBY_SETTINGS: dict[str, Setting] = {
    "hot_standby_feedback": "on",
    "sync_replication_slots": "on",  # a primary ignores it: both servers start with it
}


class ReplicatedPostgres:
    """A primary and its streaming standby, each on a port of its own. ``settings`` are
    both servers' (see :class:`~txcache._postgres.EmbeddedPostgres`). With
    ``synchronous``, a commit waits for the standby to have it (and only then becomes
    visible), so that a promotion after a crash loses no commit anyone saw; without it, a
    crash may lose the last ones, as with any asynchronous standby.

    :meth:`fail_over` stops or crashes the primary and promotes the standby;
    :meth:`rebuild_standby` makes a new standby of the new primary on the freed port. A
    context manager: leaving it stops both.
    """

    def __init__(
        self, settings: Mapping[str, Setting] | None = None, *, synchronous: bool = False
    ) -> None:
        """Start the primary, then its standby (a base backup of it)."""
        self._settings = {**(settings or {}), **_STANDBY_SETTINGS}
        self.synchronous = synchronous
        self.primary = EmbeddedPostgres(self._settings)
        self.standby: EmbeddedPostgres | None = None
        self._free_port = 0
        try:
            self._add_standby(port=0)
        except BaseException:
            self.primary.stop()
            raise
        assert self.standby is not None
        self.ports: tuple[int, int] = (self.primary.port, self.standby.port)

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

    def fail_over(self, how: Literal["stop", "crash"]) -> None:
        """Stop the primary (``stop``: a fast shutdown, which sends the standby everything
        first; ``crash``: an immediate one), remove its cluster and promote the standby.
        The new primary has no standby, and waits for none, until :meth:`rebuild_standby`."""
        if self.standby is None:
            raise RuntimeError("no standby to promote: rebuild_standby() first")
        old, new = self.primary, self.standby
        if how == "crash":
            old.crash()
        old.stop()
        with psycopg.connect(new.dsn, autocommit=True) as db:
            promoted = db.execute("SELECT pg_promote(wait => true, wait_seconds => 60)")
            if not bool(promoted.fetchone() == (True,)):
                raise RuntimeError(f"the standby was not promoted:\n{new.log_tail()}")
        self.primary, self.standby = new, None
        self._free_port = old.port

    def rebuild_standby(self) -> None:
        """A new standby of the primary, on the port the old primary had."""
        if self.standby is not None:
            raise RuntimeError("there is a standby already")
        self._add_standby(port=self._free_port)

    def _add_standby(self, port: int) -> None:
        # The standby's settings file is copied from the primary's before the primary is
        # told to wait for it: promoted, it waits for no standby until it has one.
        with psycopg.connect(self.primary.dsn, autocommit=True) as db:
            db.execute(
                "SELECT pg_create_physical_replication_slot(%s) WHERE NOT EXISTS ("
                "SELECT FROM pg_replication_slots WHERE slot_name = %s)",
                (STANDBY_SLOT, STANDBY_SLOT),
            )
        self.standby = EmbeddedPostgres(
            self._settings, replica_of=(self.primary, STANDBY_SLOT), port=port
        )
        with psycopg.connect(self.primary.dsn, autocommit=True) as db:
            db.execute(f"ALTER SYSTEM SET synchronized_standby_slots = '{STANDBY_SLOT}'")
            if self.synchronous:  # by name: '*' would take a logical client too
                db.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{_STANDBY_NAME}'")
            db.execute("SELECT pg_reload_conf()")

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
        """Stop both servers and remove their clusters. Idempotent."""
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
