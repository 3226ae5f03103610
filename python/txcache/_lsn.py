"""WAL positions: txcache's timestamps are PostgreSQL LSNs as integers (bytes from 0/0)."""

from __future__ import annotations

from typing import Any

import psycopg

__all__ = ["WAL_POSITION", "parse_lsn", "wal_position"]

WAL_POSITION = "SELECT (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"
"""The database's current WAL insert position, as an integer, in SQL."""


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` (PostgreSQL's text form of an LSN) as an integer; ``ValueError``
    if malformed."""
    high, slash, low = text.partition("/")
    if not slash:
        raise ValueError(f"not an LSN: {text!r}")
    return (int(high, 16) << 32) | int(low, 16)


def wal_position(connection: psycopg.Connection[Any]) -> int:
    """The database's current WAL insert position (where the next commit will be after)."""
    row = connection.execute(WAL_POSITION).fetchone()
    assert row is not None
    return int(row[0])
