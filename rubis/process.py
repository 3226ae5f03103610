"""Run the RUBiS web application as a child process (``python -m rubis.serve``), for tests and
benchmarks: ``with AppServer(env) as server: … server.url …``.

The server is given a port that was free a moment before, and ``AppServer`` waits until it
accepts connections. Its output goes to a log file (``server.log``), which the error of a
failed start quotes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from txcache._process import WaitTimeout, free_port, wait_until

__all__ = ["AppServer"]


class AppServer:
    """A running ``rubis.serve`` with the given environment variables added."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        workers: int = 2,
        threads: int = 8,
        timeout: float = 30.0,
    ) -> None:
        self.log = Path(tempfile.mkstemp(prefix="rubis-app-", suffix=".log")[1])
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        command = [sys.executable, "-m", "rubis.serve", "--bind", self.address]
        command += ["--workers", str(workers), "--threads", str(threads)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        try:
            wait_until(self._accepting, "the RUBiS application", timeout=timeout, interval=0.05)
        except WaitTimeout:
            self.stop()
            raise RuntimeError(
                f"the RUBiS application did not start:\n{self.log.read_text()}"
            ) from None

    def _accepting(self) -> bool:
        """Whether the server accepts connections; raises if it exited instead."""
        if self.process.poll() is not None:
            raise RuntimeError(
                f"the RUBiS application exited with status {self.process.returncode}:\n"
                f"{self.log.read_text()}"
            )
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 15 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
