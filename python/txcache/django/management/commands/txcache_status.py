"""``manage.py txcache_status``: ``txcache status`` for the nodes, the agent and the
database of the ``TXCACHE`` setting (docs/setup.md): each part's state, the problems found
and what to do; with ``--metrics``, the cacheable functions of application processes —
cached querysets per model among them."""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from txcache.cli import status
from txcache.cli._arguments import wait_seconds
from txcache.django import conf

__all__ = ["Command"]


class Command(BaseCommand):  # type: ignore[misc]
    """Print what ``txcache status`` prints; exit status 1 if a part is down or degraded."""

    help = (
        "Report how the cache nodes, the agent and the database of the TXCACHE setting are, "
        "with every problem found and what to do (what `txcache status` prints)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """``txcache status``'s options, but the connection settings (from ``TXCACHE``)."""
        parser.add_argument(
            "--metrics",
            default="",
            metavar="URL,...",
            help="application processes' /metrics (txcache.metrics) to show function statistics of",
        )
        parser.add_argument("--slot", default="txcache", help="the agent's replication slot")
        parser.add_argument(
            "--timeout",
            type=wait_seconds,
            default=2.0,
            help="seconds to wait for each endpoint, above 0 and at most 86400 (default: 2)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        """Ask every part and print the report."""
        library = conf.library_settings(conf.txcache_settings())
        namespace = argparse.Namespace(
            nodes=list(library.nodes),
            agent=list(library.agents),
            metrics=[url.strip() for url in options["metrics"].split(",") if url.strip()],
            dsn=library.dsn,
            slot=options["slot"],
            password=library.password,
            tls_ca=library.tls_ca,
            timeout=options["timeout"],
            json=options["json"],
            setup_command="python manage.py txcache_setup",
        )
        printed, errors = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            code = status.run(namespace)
        self.stdout.write(printed.getvalue(), ending="")
        if code:
            raise CommandError(errors.getvalue().strip() or "not every part is up", returncode=code)
