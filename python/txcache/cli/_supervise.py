"""Keep a development stack running (``txcache up``): a part that exits is restarted.

A cache node, the agent or the embedded PostgreSQL that exits by itself — a crash, a kill,
the OOM killer — is started again on its port after a delay that doubles with each failure
in a row (1 s up to 30 s), and the restart is logged with the tail of the part's log. A part
that stayed up for a minute starts again from the shortest delay. PostgreSQL's data is
kept: it restarts on the same cluster and recovers as after a crash. Nothing is stopped
until the user asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from txcache._postgres import PostgresStartError
from txcache.stack import PartFailed, Stack, tail

__all__ = ["FIRST_DELAY", "MAX_DELAY", "STABLE_AFTER", "Supervisor"]

FIRST_DELAY = 1.0
"""Seconds before the first restart of a part that exited."""

MAX_DELAY = 30.0
"""The longest delay between restarts of a part that keeps failing."""

STABLE_AFTER = 60.0
"""Seconds a restarted part must stay up before its delay starts again from
:data:`FIRST_DELAY`."""


@dataclass
class _Backoff:
    delay: float = FIRST_DELAY
    due: float | None = None  # when to restart; None while the part runs
    restarted: float = 0.0


class Supervisor:
    """Watches one :class:`~txcache.stack.Stack`; :meth:`check` restarts what exited."""

    def __init__(
        self, stack: Stack, log: Callable[[str], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Supervise ``stack``, logging each event through ``log``."""
        self.stack = stack
        self.log = log
        self.clock = clock
        self._parts: dict[str, _Backoff] = {}

    def check(self) -> None:
        """Notice the parts that exited and restart those whose delay is over. PostgreSQL
        first: the agent cannot start without it."""
        postgres = self.stack.postgres
        if postgres is not None:
            self._watch(
                "PostgreSQL",
                postgres.running,
                lambda: tail(postgres.log_tail()),
                self._restart_postgres,
            )
            if not postgres.running():
                return
        for index, node in enumerate(self.stack.nodes):
            self._watch(
                f"cache node {index + 1} (txcached on {node.address})",
                node.alive,
                lambda node=node: tail(node.log_text()),  # type: ignore[misc]
                lambda index=index: self.stack.restart_node(index),  # type: ignore[misc]
            )
        agent = self.stack.agent
        if agent is not None:
            self._watch(
                f"the agent (txcache-agent on {self.stack.agent_address})",
                agent.alive,
                lambda: tail(agent.log_text()),
                self.stack.restart_agent,
            )

    def _watch(
        self,
        name: str,
        alive: Callable[[], bool],
        log_tail: Callable[[], str],
        restart: Callable[[], None],
    ) -> None:
        now = self.clock()
        backoff = self._parts.setdefault(name, _Backoff())
        if alive():
            if backoff.due is None and now - backoff.restarted >= STABLE_AFTER:
                backoff.delay = FIRST_DELAY
            return
        if backoff.due is None:
            backoff.due = now + backoff.delay
            self.log(
                f"{name} exited; its log ends with:\n{log_tail()}\n"
                f"restarting it in {backoff.delay:g} s (the rest of the stack keeps running)"
            )
            return
        if now < backoff.due:
            return
        try:
            restart()
        except (PartFailed, PostgresStartError) as failure:
            backoff.delay = min(2 * backoff.delay, MAX_DELAY)
            backoff.due = now + backoff.delay
            self.log(f"{name} did not restart: {failure}\nnext attempt in {backoff.delay:g} s")
            return
        backoff.due = None
        backoff.restarted = now
        backoff.delay = min(2 * backoff.delay, MAX_DELAY)
        self.log(f"{name} restarted")

    def _restart_postgres(self) -> None:
        postgres = self.stack.postgres
        assert postgres is not None
        postgres.restart()
