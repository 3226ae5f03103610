"""The shop under granian (WSGI) in a subprocess, configured for a running stack through the
environment as README.md runs it, and ``manage.py`` run with the same environment: what its
HTTP tests and its benchmark drive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from txcache.stack import ServerProcess, Stack, answers_http, free_port

PROJECT = Path(__file__).resolve().parent
"""The Django project's directory: ``manage.py``, and where granian imports
``django_shop.wsgi`` from."""


class DjangoShopServer(ServerProcess):
    """``granian --interface wsgi django_shop.wsgi:application`` (one worker process of
    ``threads`` blocking threads) on a free port, serving ``stack`` with ``SHOP_STALENESS``
    ``staleness`` and ``environment`` on top (``TXCACHE_MODE``, ``TXCACHE_DSN``, …); it
    answers once this returns. A context manager: leaving it stops the server (granian
    stops its worker on ``SIGTERM``).

    The database is not migrated here: :meth:`manage` runs ``manage.py migrate`` (and any
    other command) with the server's environment, before the first page or while it serves.
    """

    what = "the shop"

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
        self.url = f"http://127.0.0.1:{free_port()}"
        self.environment = {
            **os.environ,
            **stack.settings(),
            "SHOP_STALENESS": str(staleness),
            "DJANGO_SETTINGS_MODULE": "django_shop.settings",
            "PYTHONPATH": str(PROJECT),  # django_shop and shop, whatever the working directory
            **(environment or {}),
        }
        command = [sys.executable, "-m", "granian", "--interface", "wsgi", "--workers", "1"]
        command += ["--blocking-threads", str(threads), "--host", "127.0.0.1"]
        command += ["--port", self.url.rsplit(":", 1)[1], "--working-dir", str(PROJECT)]
        command += ["django_shop.wsgi:application"]
        super().__init__(command, env=self.environment, log=log)

    def ready(self) -> bool:
        """Whether the site answers (its ``/metrics`` needs no database: the server answers
        before the first migration)."""
        return answers_http(f"{self.url}/metrics")

    @property
    def worker_pids(self) -> list[int]:
        """granian's worker processes (one), which run the Django application: its CPU
        time is theirs, not :attr:`pid`'s (granian's main process; Linux: its children,
        from /proc)."""
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
