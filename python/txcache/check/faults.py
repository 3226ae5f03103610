"""Faults the checker injects, each bounded in time and on this machine only.

| kind | what happens |
|---|---|
| ``node-kill`` | ``kill -9`` of a cache node, restarted on its port half a second later |
| ``agent-kill`` | ``kill -9`` of the agent, restarted on its port half a second later |
| ``slot-lost`` | the agent stopped and its replication slot invalidated for real (WAL past
  ``max_slot_wal_keep_size``, then a checkpoint); restarted, it recreates the slot and
  resets every node |
| ``pinner-kill`` | the agent's pinner sessions are terminated in PostgreSQL |
| ``postgres-restart`` | PostgreSQL stops (fast) and starts again on its port |
| ``node-stall`` | a cache node stops reading its sockets (``SIGSTOP``) for two seconds |
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from txcache.check.stack import AGENT_SLOT, SLOT_WAL_KEEP
from txcache.stack import Stack

__all__ = ["FAULT_KINDS", "Fault", "FaultInjector"]

log = logging.getLogger("txcache.check")

FAULT_KINDS = (
    "node-kill",
    "agent-kill",
    "slot-lost",
    "pinner-kill",
    "postgres-restart",
    "node-stall",
)
_SEGMENT = 16 << 20  # PostgreSQL's default WAL segment size


@dataclass(frozen=True)
class Fault:
    """One injected fault: its kind and when it started and ended (Unix seconds)."""

    kind: str
    started: float
    ended: float
    error: str = ""
    """Why injecting it failed (empty: it was injected)."""


class FaultInjector:
    """Injects ``kinds`` in turn, one due every ``every`` seconds, until stopped."""

    def __init__(
        self,
        stack: Stack,
        kinds: Sequence[str],
        every: float,
        report: Callable[[str], None],
        keep_up: Callable[[], bool] | None = None,
    ) -> None:
        """``keep_up`` is called right before the lost-slot fault's checkpoint: whatever
        other slot must survive it (the checker's own) reads everything first, and there
        is no checkpoint unless it says it did."""
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kind(s): {', '.join(sorted(unknown))}")
        self.stack = stack
        self.kinds = list(kinds)
        self.every = every
        self.report = report
        self.keep_up = keep_up
        self.faults: list[Fault] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="check-faults", daemon=True)
        self._victim = itertools.count()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        # A fixed cadence: a slow fault (a PostgreSQL restart) does not push the later
        # kinds out of a short run.
        due = time.monotonic()
        for kind in itertools.cycle(self.kinds) if self.kinds else ():
            due += self.every
            if self._stop.wait(max(due - time.monotonic(), 0.0)):
                return
            started = time.time()
            self.report(f"fault: {kind}")
            error = ""
            try:
                getattr(self, "_" + kind.replace("-", "_"))()
            except Exception as failure:  # a fault that failed is reported, the run goes on
                log.exception("injecting %s failed", kind)
                error = repr(failure)
            self.faults.append(Fault(kind, started, time.time(), error))

    def _node_index(self) -> int:
        return next(self._victim) % len(self.stack.nodes)

    def _node_kill(self) -> None:
        index = self._node_index()
        self.stack.nodes[index].kill()
        time.sleep(0.5)
        self.stack.restart_node(index)

    def _agent_kill(self) -> None:
        assert self.stack.agent is not None
        self.stack.agent.kill()
        time.sleep(0.5)
        self.stack.restart_agent()

    def _slot_lost(self) -> None:
        """Stop the agent, push WAL past ``max_slot_wal_keep_size`` behind its slot and
        checkpoint until PostgreSQL invalidates the slot; then start the agent again."""
        assert self.stack.agent is not None
        self.stack.agent.kill()
        try:
            with psycopg.connect(self.stack.dsn, autocommit=True, connect_timeout=5) as admin:
                for _attempt in range(3):
                    self._push_wal_past_slot(admin)
                    if self.keep_up is not None and not self.keep_up():
                        raise RuntimeError("the checker's slot could not catch up: no checkpoint")
                    admin.execute("CHECKPOINT")
                    if _slot_status(admin, AGENT_SLOT) == "lost":
                        return
                raise RuntimeError(f"slot {AGENT_SLOT} was not invalidated")
        finally:
            self.stack.restart_agent()

    def _push_wal_past_slot(self, admin: psycopg.Connection[Any]) -> None:
        """Switch WAL segments (each after a record, or the switch does nothing) until the
        agent's slot holds more than ``max_slot_wal_keep_size`` and three more segments."""
        wanted = SLOT_WAL_KEEP + 3 * _SEGMENT
        for _ in range(64):
            row = admin.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (AGENT_SLOT,),
            ).fetchone()
            if row is None or row[0] is None or int(row[0]) > wanted:
                return
            admin.execute("SELECT pg_logical_emit_message(false, 'txcache-check', 'wal')")
            admin.execute("SELECT pg_switch_wal()")

    def _pinner_kill(self) -> None:
        with psycopg.connect(self.stack.dsn, autocommit=True, connect_timeout=5) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'txcache-agent pinner%%'"
            )

    def _postgres_restart(self) -> None:
        assert self.stack.postgres is not None
        self.stack.postgres.restart()

    def _node_stall(self) -> None:
        process = self.stack.nodes[self._node_index()].process
        os.kill(process.pid, signal.SIGSTOP)
        try:
            self._stop.wait(2.0)
        finally:
            os.kill(process.pid, signal.SIGCONT)


def _slot_status(admin: psycopg.Connection[Any], slot: str) -> str | None:
    """``wal_status`` of a replication slot (``None``: no such slot)."""
    row = admin.execute(
        "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    return None if row is None else str(row[0])
