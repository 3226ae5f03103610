"""Start and stop a ``txcache-agent`` as a child process."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from txcache._process import ManagedProcess, find_binary

__all__ = ["AgentProcess"]

_STARTED = re.compile(r"invalidation stream started")


class AgentProcess(ManagedProcess):
    """One running ``txcache-agent``, ready once its invalidation stream has started."""

    def __init__(
        self,
        dsn: str,
        nodes: Sequence[str],
        *args: str,
        binary: Path | None = None,
        start_timeout: float = 20.0,
    ) -> None:
        """Start the agent for database ``dsn`` feeding ``nodes`` (``host:port`` each)."""
        self.binary = binary or find_binary("txcache-agent")
        command = [str(self.binary), "--dsn", dsn, *(f"--node={node}" for node in nodes), *args]
        super().__init__(command, _STARTED, start_timeout)
