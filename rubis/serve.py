"""Serve the RUBiS application with granian: ``python -m rubis.serve [--bind HOST:PORT …]``.

granian (a Rust HTTP server for Python) with its WSGI interface: ``--workers`` processes
(default 2, one per core of the development machine: the application is synchronous Python,
so one process uses at most one core), each running the application in ``--threads``
blocking threads (default 8: requests wait on PostgreSQL and the cache nodes). Each worker
imports the application and calls ``rubis.app.create_app`` (a factory); the virtual clock's
anchor is fixed here, before the workers start (``RUBIS_CLOCK_ANCHOR``), so that every
worker has the same virtual time. Each worker connects to the cache on its first request.

Settings come from the environment (``rubis.app``). Stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from granian.constants import Interfaces
from granian.server import Server

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and serve until stopped."""
    parser = argparse.ArgumentParser(prog="python -m rubis.serve", description=__doc__)
    parser.add_argument("--bind", default="127.0.0.1:8000", help="default 127.0.0.1:8000")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="per process (default 8)")
    parser.add_argument(
        "--backlog",
        type=int,
        default=1024,
        help="connections held before granian accepts them, and (halved per worker) "
        "connections served at once (default 1024: raise it past the client count)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    host, _, port = args.bind.rpartition(":")
    os.environ.setdefault("RUBIS_CLOCK_ANCHOR", repr(time.time()))
    Server(
        "rubis.app:create_app",
        address=host,
        port=int(port),
        interface=Interfaces.WSGI,
        factory=True,
        workers=args.workers,
        blocking_threads=args.threads,
        backlog=args.backlog,
        websockets=False,
        log_access=args.access_log,
    ).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
