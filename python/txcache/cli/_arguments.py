"""The arguments several ``txcache`` commands share, defined once: the database (``--dsn``)
and the agents' replication slot (``--slot``), each defaulting to the environment variable
the library and the agent read."""

from __future__ import annotations

import argparse
import os

__all__ = ["add_dsn", "add_slot"]


def add_dsn(parser: argparse.ArgumentParser) -> None:
    """``--dsn``: the database (default: ``$TXCACHE_DSN``, else libpq's ``PG*`` variables)."""
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TXCACHE_DSN", ""),
        help="libpq connection string or URI (default: $TXCACHE_DSN, else libpq's PG* "
        "environment variables)",
    )


def add_slot(parser: argparse.ArgumentParser) -> None:
    """``--slot``: the agents' logical replication slot (default: ``$TXCACHE_SLOT``, else
    ``txcache``, as the agent's own default)."""
    parser.add_argument(
        "--slot",
        default=os.environ.get("TXCACHE_SLOT", "txcache"),
        help="the agents' logical replication slot (default: $TXCACHE_SLOT, else txcache)",
    )
