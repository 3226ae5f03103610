"""Run the RUBiS web application as a child process (``python -m rubis.serve``), for tests and
benchmarks: ``with AppServer(env) as server: … server.url …``.

The server is given a port that was free a moment before, and ``AppServer`` waits until it
accepts connections. Its output goes to a log file (``server.log``), which the error of a
failed start quotes.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from txcache.stack import ServerProcess, free_port

__all__ = ["AppServer"]


class AppServer(ServerProcess):
    """A running ``rubis.serve`` with the given environment variables added, in a process
    group of its own."""

    what = "the RUBiS application"

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        workers: int = 2,
        threads: int = 8,
        backlog: int = 1024,
        timeout: float = 30.0,
    ) -> None:
        """Start the server on a free port and wait until it accepts connections (and
        holds ``backlog`` more: ``rubis.serve --backlog``)."""
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        command = [sys.executable, "-m", "rubis.serve", "--bind", self.address]
        command += ["--workers", str(workers), "--threads", str(threads)]
        command += ["--backlog", str(backlog)]
        log = Path(tempfile.mkstemp(prefix="rubis-app-", suffix=".log")[1])
        super().__init__(command, env={**os.environ, **env}, log=log, timeout=timeout,
                         new_session=True)  # fmt: skip

    def ready(self) -> bool:
        """Whether the server accepts connections."""
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
        except OSError:
            return False
        return True
