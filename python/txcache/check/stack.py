"""The stack a check runs against: :class:`txcache.stack.Stack` with the checker's settings
(its own embedded PostgreSQL, so that a fault can restart it; two nodes; the agent pinning
and beating often) and the checker's own slot."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg

from txcache.check.workload import SCHEMA
from txcache.stack import Stack, StackOptions

__all__ = ["AGENT_SLOT", "CHECK_SLOT", "SLOT_WAL_KEEP", "running_stack"]

CHECK_SLOT = "txcache_check"
"""The checker's own logical slot (test_decoding): commit order and times, independent of
the system under test."""

AGENT_SLOT = "txcache"
"""The agent's slot (``txcache setup``'s default), which the lost-slot fault invalidates."""

SLOT_WAL_KEEP = 64 << 20
"""``max_slot_wal_keep_size`` in bytes: small, so that the lost-slot fault is quick; the
checker's own slot is read every second and caught up before that fault's checkpoint."""

OPTIONS = StackOptions(
    nodes=2,
    max_memory="64mb",
    max_staleness=None,
    postgres_settings={"max_slot_wal_keep_size": f"{SLOT_WAL_KEEP >> 20}MB"},
    schema_sql=SCHEMA,
    slot=AGENT_SLOT,
    agent_args=(
        *("--pin-interval", "200ms", "--heartbeat-interval", "50ms"),
        *("--max-staleness", "30s", "--pin-lease", "5s"),
    ),
    agent_start_timeout=60.0,  # after a PostgreSQL restart or a lost slot
)
"""What a check starts."""


@contextlib.contextmanager
def running_stack() -> Iterator[Stack]:
    """A fresh PostgreSQL with the workload's schema, set up, with the checker's slot,
    two nodes and the agent; everything stopped on exit."""
    with Stack(OPTIONS) as stack:
        with psycopg.connect(stack.dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (CHECK_SLOT,)
            )
        yield stack
