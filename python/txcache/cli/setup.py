"""``txcache setup``: prepare a PostgreSQL database for txcache (see ``docs/setup.md``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from txcache._setup import SetupError, setup_database
from txcache.cli._arguments import add_dsn, add_slot

__all__ = ["add_parser", "run"]

EXIT_MISSING = 3
"""Exit status of ``--check`` when a real run would change something."""


def add_parser(subparsers: Any) -> None:
    """Register ``setup`` and its options."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "setup",
        help="prepare a database: publication, replica identity, DDL trigger, slot",
        description=(
            "Prepare a PostgreSQL database for txcache, idempotently: a publication of the "
            "tracked schemas, REPLICA IDENTITY FULL on their tables where PostgreSQL allows "
            "it, a DDL event trigger and a logical replication slot. Each step reports what "
            "it found or did."
        ),
    )
    add_dsn(parser)
    parser.add_argument(
        "--schema",
        dest="schemas",
        action="append",
        metavar="SCHEMA",
        help="a schema whose tables are tracked; repeat for several (default: public)",
    )
    add_slot(parser)
    parser.add_argument(
        "--publication", default="txcache", help="publication name (default: txcache)"
    )
    parser.add_argument(
        "--key-identity",
        dest="key_identity",
        action="append",
        metavar="TABLE",
        help="a tracked table (schema.table) that keeps its primary key as replica identity "
        "instead of FULL: its writes cost the database less, and its updates invalidate "
        "more cached results; repeat for several, and on every run "
        '(docs/setup.md, "Replica identity")',
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"only verify and report, change nothing; exit {EXIT_MISSING} if something is missing",
    )
    parser.add_argument(
        "--print-sql",
        action="store_true",
        help="change nothing; print the SQL an administrator must run (planned for a role "
        "that may do everything) to stdout and the report to stderr; exit "
        f"{EXIT_MISSING} if there is SQL to run",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run setup, print the report; on an error print it to stderr and return 1."""
    try:
        report = setup_database(
            args.dsn,
            schemas=args.schemas or ["public"],
            slot=args.slot,
            publication=args.publication,
            check=args.check or args.print_sql,
            administrator=args.print_sql,
            key_identity=args.key_identity or (),
        )

    except SetupError as error:
        print(f"txcache setup: error: {error}", file=sys.stderr)
        return 1
    if args.print_sql:
        print(report.format(), file=sys.stderr)
        print(report.script(), end="")
    else:
        print(report.format())
    return EXIT_MISSING if report.missing else 0
