"""Faults the checker injects, each bounded in time and on this machine only.

| kind | what happens |
|---|---|
| ``node-kill`` | ``kill -9`` of a cache node, restarted on its port half a second later |
| ``agent-kill`` | ``kill -9`` of the agent, restarted on its port half a second later |
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

import psycopg

from txcache.check.stack import CheckStack

__all__ = ["FAULT_KINDS", "Fault", "FaultInjector"]

log = logging.getLogger("txcache.check")

FAULT_KINDS = ("node-kill", "agent-kill", "pinner-kill", "postgres-restart", "node-stall")


@dataclass(frozen=True)
class Fault:
    """One injected fault: its kind and when it started and ended (Unix seconds)."""

    kind: str
    started: float
    ended: float


class FaultInjector:
    """Injects ``kinds`` in turn, one due every ``every`` seconds, until stopped."""

    def __init__(
        self,
        stack: CheckStack,
        kinds: Sequence[str],
        every: float,
        report: Callable[[str], None],
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kind(s): {', '.join(sorted(unknown))}")
        self.stack = stack
        self.kinds = list(kinds)
        self.every = every
        self.report = report
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
            try:
                getattr(self, "_" + kind.replace("-", "_"))()
            except Exception:  # a fault that failed is reported, the run goes on
                log.exception("injecting %s failed", kind)
            self.faults.append(Fault(kind, started, time.time()))

    def _node_index(self) -> int:
        return next(self._victim) % len(self.stack.nodes)

    def _node_kill(self) -> None:
        index = self._node_index()
        self.stack.nodes[index].kill()
        time.sleep(0.5)
        self.stack.start_node(index)

    def _agent_kill(self) -> None:
        assert self.stack.agent is not None
        self.stack.agent.kill()
        time.sleep(0.5)
        self.stack.start_agent()

    def _pinner_kill(self) -> None:
        with psycopg.connect(self.stack.dsn, autocommit=True, connect_timeout=5) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'txcache-agent pinner%%'"
            )

    def _postgres_restart(self) -> None:
        self.stack.postgres.restart()

    def _node_stall(self) -> None:
        process = self.stack.nodes[self._node_index()].process
        os.kill(process.pid, signal.SIGSTOP)
        try:
            self._stop.wait(2.0)
        finally:
            os.kill(process.pid, signal.SIGCONT)
