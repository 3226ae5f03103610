"""Start and stop a ``txcache-agent`` as a child process."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg

from txcache._process import ManagedProcess, ProcessStartError, find_binary, wait_until

__all__ = ["AgentProcess", "agent_walsenders", "wait_for_stream_on"]

_STARTED = re.compile(r"invalidation stream started")
_STARTED_OR_STANDING_BY = re.compile(r"invalidation stream started|standing by")
_LISTENING = re.compile(r"txcache-agent listening address=(?P<host>[\d.]+):(?P<port>\d+)")


class AgentProcess(ManagedProcess):
    """One running ``txcache-agent``, ready once its invalidation stream has started (or,
    for a ``standby``, once it streams or stands by while another agent holds the lease).

    Its library endpoint listens on a free port unless ``--listen`` is among ``args``.
    """

    def __init__(
        self,
        dsn: str,
        nodes: Sequence[str],
        *args: str,
        binary: Path | None = None,
        start_timeout: float = 20.0,
        standby: bool = False,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        """Start the agent for database ``dsn`` feeding ``nodes`` (``host:port`` each);
        ``echo`` gets each line it logs."""
        self.binary = binary or find_binary("txcache-agent")
        listen = [] if any(arg.startswith("--listen") for arg in args) else ["--listen=127.0.0.1:0"]
        command = [
            str(self.binary),
            "--dsn",
            dsn,
            *(f"--node={node}" for node in nodes),
            *listen,
            *args,
        ]
        ready = _STARTED_OR_STANDING_BY if standby else _STARTED
        super().__init__(command, ready, start_timeout, echo)
        match = next(filter(None, map(_LISTENING.search, self.log)), None)
        if match is None:
            self.stop()
            raise ProcessStartError(
                f"txcache-agent did not say where it listens:\n{self.log_text()}"
            )
        self.host = match["host"]
        self.port = int(match["port"])


def agent_walsenders(dsn: str) -> int:
    """How many replication sessions of agents run on the server at ``dsn`` (each names
    itself ``txcache-agent …``): 1 where the stream is decoded, 0 elsewhere, 2 for a moment
    while one agent takes over from another."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name LIKE 'txcache-agent%'"
        ).fetchone()
    return int(row[0]) if row is not None else 0


def wait_for_stream_on(
    dsn: str, what: str, *, timeout: float = 60.0, log: Callable[[], str] = lambda: ""
) -> None:
    """Wait until the agent's stream is decoded on the server at ``dsn`` (one replication
    session of it there); :class:`~txcache.stack.WaitTimeout` naming ``what`` after
    ``timeout`` seconds, with ``log()``."""
    wait_until(lambda: agent_walsenders(dsn) == 1, what, timeout=timeout, interval=0.1, log=log)
