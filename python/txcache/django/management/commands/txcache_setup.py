"""``manage.py txcache_setup``: ``txcache setup`` on the database of ``TXCACHE["DATABASE"]``
(docs/setup.md): the publication, replica identity, DDL trigger and slot the agent needs,
created idempotently, each step reported."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from txcache import SetupError, setup_database
from txcache.cli.setup import EXIT_MISSING
from txcache.django import conf

__all__ = ["Command"]


class Command(BaseCommand):  # type: ignore[misc]
    """Prepare the txcache database; ``--check`` only reports (exit status 3 if a step is
    missing, 1 on an error)."""

    help = (
        "Prepare the database of TXCACHE['DATABASE'] for txcache, idempotently: a "
        "publication of the tracked schemas, REPLICA IDENTITY FULL on their tables, a DDL "
        "event trigger and a logical replication slot (what `txcache setup` does)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """``txcache setup``'s options, but the DSN (from ``DATABASES``)."""
        parser.add_argument(
            "--schema",
            dest="schemas",
            action="append",
            metavar="SCHEMA",
            help="a schema whose tables are tracked; repeat for several (default: public)",
        )
        parser.add_argument("--slot", default="txcache", help="the replication slot")
        parser.add_argument("--publication", default="txcache", help="the publication")
        parser.add_argument(
            "--check", action="store_true", help="only verify and report, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run setup and print its report."""
        dsn = conf.library_settings(conf.txcache_settings()).dsn
        try:
            report = setup_database(
                dsn,
                schemas=options["schemas"] or ["public"],
                slot=options["slot"],
                publication=options["publication"],
                check=options["check"],
            )
        except SetupError as error:
            raise CommandError(f"txcache setup: {error}") from error
        self.stdout.write(report.format())
        if report.missing:
            raise CommandError("txcache setup --check: steps are missing", returncode=EXIT_MISSING)
