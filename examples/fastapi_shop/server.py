"""The shop under uvicorn in a subprocess, configured for a running stack through the
environment as README.md runs it: what its HTTP tests and its benchmark drive."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from txcache.stack import ServerProcess, Stack, answers_http, free_port

EXAMPLES = Path(__file__).resolve().parents[1]
"""The directory uvicorn imports ``fastapi_shop`` from."""


class ShopServer(ServerProcess):
    """``uvicorn --factory fastapi_shop.app:create_app`` (one worker: the process is the
    server) on a free port, serving ``stack`` with ``SHOP_STALENESS`` ``staleness`` and
    ``environment`` on top (``TXCACHE_MODE``, ``TXCACHE_DSN``, …); it answers once this
    returns. A context manager: leaving it stops the server (uvicorn runs the app's
    shutdown on ``SIGTERM``)."""

    what = "the shop"

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
        self.url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, **stack.settings(), "SHOP_STALENESS": str(staleness)}
        env.update(environment or {})
        command = [sys.executable, "-m", "uvicorn", "--app-dir", str(EXAMPLES), "--factory"]
        command += ["fastapi_shop.app:create_app", "--host", "127.0.0.1"]
        command += ["--port", self.url.rsplit(":", 1)[1], "--log-level", "warning"]
        command += ["--no-access-log"]
        super().__init__(command, env=env, log=log)

    def ready(self) -> bool:
        """Whether the app answers (its ``/metrics`` needs no database)."""
        return answers_http(f"{self.url}/metrics")
