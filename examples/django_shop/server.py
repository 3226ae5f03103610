"""The shop under granian (WSGI) in a subprocess, configured for a running stack through the
environment as README.md runs it, and ``manage.py`` run with the same environment: what its
HTTP tests and its benchmark drive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

from txcache.stack import Stack, free_port, tail, wait_until

PROJECT = Path(__file__).resolve().parent
"""The Django project's directory: ``manage.py``, and where granian imports
``django_shop.wsgi`` from."""


class DjangoShopServer:
    """``granian --interface wsgi django_shop.wsgi:application`` (one worker process of
    ``threads`` blocking threads) on a free port, serving ``stack`` with ``SHOP_STALENESS``
    ``staleness`` and ``environment`` on top (``TXCACHE_MODE``, ``TXCACHE_DSN``, …); it
    answers once this returns. A context manager: leaving it stops the server.

    The database is not migrated here: :meth:`manage` runs ``manage.py migrate`` (and any
    other command) with the server's environment, before the first page or while it serves.
    """

    def __init__(
        self,
        stack: Stack,
        log: Path,
        *,
        staleness: float = 30,
        threads: int = 4,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """Start the server, writing its output to ``log``, and wait until it answers."""
        self.stack = stack
        self.log = log
        self.url = f"http://127.0.0.1:{free_port()}"
        self.environment = {
            **os.environ,
            **stack.settings(),
            "SHOP_STALENESS": str(staleness),
            "DJANGO_SETTINGS_MODULE": "django_shop.settings",
            "PYTHONPATH": str(PROJECT),  # for manage.py's subprocesses too
            **(environment or {}),
        }
        command = [sys.executable, "-m", "granian", "--interface", "wsgi", "--workers", "1"]
        command += ["--blocking-threads", str(threads), "--host", "127.0.0.1"]
        command += ["--port", self.url.rsplit(":", 1)[1], "--working-dir", str(PROJECT)]
        command += ["django_shop.wsgi:application"]
        with log.open("w") as output:
            self.process = subprocess.Popen(
                command, env=self.environment, stdout=output, stderr=subprocess.STDOUT
            )
        try:
            wait_until(self._ready, "the shop to answer", timeout=60, log=self.output)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        """granian's main process, which runs no Python request: its worker does."""
        return self.process.pid

    @property
    def worker_pids(self) -> list[int]:
        """granian's worker processes (one), which run the Django application: whose CPU
        time is the app's (Linux: the main process's children, from /proc)."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def manage(self, *args: str, timeout: float = 300) -> str:
        """Run ``manage.py args`` with the server's environment; its output. Raises
        :class:`RuntimeError` with the command's output if it fails."""
        done = subprocess.run(
            [sys.executable, str(PROJECT / "manage.py"), *args],
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)}:\n{done.stdout}{done.stderr}")
        return done.stdout

    def output(self) -> str:
        """The end of the server's log."""
        return tail(self.log.read_text())

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the shop exited ({self.process.returncode}):\n{self.output()}")
        try:
            # The one page that needs no database: the server answers before migrations.
            return httpx.get(f"{self.url}/metrics", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM: granian stops its worker and exits)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> DjangoShopServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
