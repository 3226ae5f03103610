"""The shop under uvicorn in a subprocess, configured for a running stack through the
environment as README.md runs it: what its HTTP tests and its benchmark drive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from txcache.stack import Stack, free_port, tail, wait_until

EXAMPLES = Path(__file__).resolve().parents[1]
"""The directory uvicorn imports ``fastapi_shop`` from."""


class ShopServer:
    """``uvicorn --factory fastapi_shop.app:create_app`` (one worker: the process is the
    server) on a free port, serving ``stack`` with ``SHOP_STALENESS`` ``staleness`` and
    ``environment`` on top (``TXCACHE_MODE``, ``TXCACHE_DSN``, …); it answers once this
    returns. A context manager: leaving it stops the server."""

    def __init__(
        self,
        stack: Stack,
        log: Path,
        *,
        staleness: float = 30,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """Start the server, writing its output to ``log``, and wait until it answers."""
        self.stack = stack
        self.log = log
        self.url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, **stack.settings(), "SHOP_STALENESS": str(staleness)}
        env.update(environment or {})
        command = [sys.executable, "-m", "uvicorn", "--app-dir", str(EXAMPLES), "--factory"]
        command += ["fastapi_shop.app:create_app", "--host", "127.0.0.1"]
        command += ["--port", self.url.rsplit(":", 1)[1], "--log-level", "warning"]
        command += ["--no-access-log"]
        with log.open("w") as output:
            self.process = subprocess.Popen(
                command, env=env, stdout=output, stderr=subprocess.STDOUT
            )
        try:
            wait_until(self._ready, "the shop to answer", timeout=60, log=self.output)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        """The server's process (its only one)."""
        return self.process.pid

    def output(self) -> str:
        """The end of the server's log."""
        return tail(self.log.read_text())

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the shop exited ({self.process.returncode}):\n{self.output()}")
        try:
            return httpx.get(f"{self.url}/metrics", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM: uvicorn runs the app's shutdown)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> ShopServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
