"""Run the RUBiS web application as a child process (``python -m rubis.serve``), for tests and
benchmarks: ``with AppServer(env) as server: … server.url …``.

The server binds a port the system chooses and prints it; ``AppServer`` waits for that line.
Its output goes to a log file (``server.log``), which the error of a failed start quotes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["AppServer"]

_LISTENING = re.compile(r"listening on (?:http://)?([\d.]+:\d+)")


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
        command = [sys.executable, "-m", "rubis.serve", "--bind", "127.0.0.1:0"]
        command += ["--workers", str(workers), "--threads", str(threads)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.address = self._wait(timeout)
        self.url = f"http://{self.address}"

    def _wait(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _LISTENING.search(self.log.read_text(errors="replace"))
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the RUBiS application did not start:\n{self.log.read_text()}")

    def stop(self) -> None:
        """Stop the server (SIGTERM: gunicorn's graceful stop), then its log."""
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
