"""The stack a check runs against: :class:`txcache.stack.Stack` with the checker's settings
(its own embedded PostgreSQL, so that a fault can restart it; two nodes; the agent pinning
and beating often), the tenants' schemas and roles, and the checker's own slot."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

import psycopg

from txcache.check.tenants import Tenant, drop_roles
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
def running_stack(tenants: Sequence[Tenant] = ()) -> Iterator[Stack]:
    """A fresh PostgreSQL with the workload's schema and the ``tenants``' (their roles
    too), set up to track them all, with the checker's slot, two nodes and the agent; the
    roles dropped and everything stopped on exit."""
    options = dataclasses.replace(
        OPTIONS,
        schema_sql=SCHEMA + "".join(tenant.sql() for tenant in tenants),
        schemas=tuple(dict.fromkeys(("public", *(tenant.schema for tenant in tenants)))),
    )
    with Stack(options) as stack:
        try:
            with psycopg.connect(stack.dsn, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')",
                    (CHECK_SLOT,),
                )
            yield stack
        finally:
            drop_roles(stack.dsn, tenants)
