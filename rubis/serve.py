"""Serve the RUBiS application with gunicorn: ``python -m rubis.serve [--bind …]``.

gunicorn with its threaded worker (``gthread``): ``--workers`` processes (default 2, one per
core of the development machine: the application is synchronous Python, so threads of one
process share one core) of ``--threads`` threads each (default 8: requests wait on
PostgreSQL and the cache nodes). The application is created once in the master
(``preload``), so every worker shares its virtual clock; each worker connects to the cache
on its first request. Idle keep-alive connections are held for ``--keep-alive`` seconds
(default 75, longer than the emulator's think times mostly are).

Settings come from the environment (``rubis.app``). Prints ``listening on HOST:PORT`` once
the port is bound (with ``--bind 127.0.0.1:0`` the port is chosen by the system).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gunicorn.app.base import BaseApplication

from rubis.app import Application, create_app

__all__ = ["main"]


class _Server(BaseApplication):  # type: ignore[misc]  # gunicorn is untyped
    """gunicorn running one ``Application`` object."""

    def __init__(self, application: Application, options: dict[str, Any]) -> None:
        self.application = application
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            if name in self.cfg.settings:  # control_socket_disable is new in gunicorn 25
                self.cfg.set(name, value)

    def load(self) -> Application:
        return self.application


def _when_ready(server: Any) -> None:
    """Print the bound addresses (the test harness and the benchmarks wait for them)."""
    for listener in server.LISTENERS:
        print(f"listening on {listener}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, create the application, serve until stopped (SIGTERM/SIGINT)."""
    parser = argparse.ArgumentParser(prog="python -m rubis.serve", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:8000", help="default 127.0.0.1:8000")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="per process (default 8)")
    parser.add_argument("--keep-alive", type=int, default=75, help="seconds (default 75)")
    parser.add_argument("--access-log", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    options = {
        "bind": args.bind,
        "workers": args.workers,
        "threads": args.threads,
        "worker_class": "gthread",
        "keepalive": args.keep_alive,
        "preload_app": True,
        "accesslog": "-" if args.access_log else None,
        "when_ready": _when_ready,
        "graceful_timeout": 5,
        "control_socket_disable": True,  # one fixed path per user: instances would collide
    }
    _Server(create_app(), options).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
