"""Start and stop a ``txcached`` cache node as a child process.

The node is started on a port it picks itself (``--port 0``); its first log line names the
address, which is read back here, so two nodes never race for a port.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from txcache._process import ManagedProcess, ProcessStartError, find_binary

__all__ = ["NodeProcess", "NodeStartError", "find_txcached"]

_LISTENING = re.compile(r"txcached listening address=(?P<host>[\d.:\[\]a-f]+):(?P<port>\d+)")

NodeStartError = ProcessStartError


def find_txcached() -> Path:
    """Locate the ``txcached`` binary: ``$TXCACHED_BIN``, this checkout's build, or ``PATH``."""
    return find_binary("txcached")


class NodeProcess(ManagedProcess):
    """One running ``txcached``."""

    def __init__(
        self,
        *args: str,
        binary: Path | None = None,
        start_timeout: float = 10.0,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        """Start the node with extra command-line ``args`` and wait until it listens (on a
        free port unless ``args`` name one); ``echo`` gets each line it logs."""
        self.binary = binary or find_txcached()
        port = [] if any(arg.startswith("--port") for arg in args) else ["--port", "0"]
        super().__init__([str(self.binary), *port, *args], _LISTENING, start_timeout, echo)
        assert self.ready_match is not None
        self.host = self.ready_match["host"]
        self.port = int(self.ready_match["port"])

    @property
    def address(self) -> str:
        """``host:port``, as the agent's ``--node`` takes it."""
        return f"{self.host}:{self.port}"
