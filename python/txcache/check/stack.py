"""The stack a check runs against: :class:`txcache.stack.Stack` with the checker's settings
(its own embedded PostgreSQL, so that a fault can restart it; two nodes; the agent pinning
and beating often), the tenants' schemas and roles, and the checker's own slot. With a
standby (``--standby-postgres``), PostgreSQL is a :class:`~txcache.stack.ReplicatedPostgres`
with synchronous commits, every DSN names both servers, and both slots are failover slots:
a promotion keeps the history and every invalidation. With ``--primary-spare`` the standby
is asynchronous instead, so that the primary commits while it is down."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

import psycopg
from psycopg import sql

from txcache._postgres import major_version
from txcache._replicated import FAILOVER_SLOTS_SINCE
from txcache._setup import EVENT_TRIGGER_NAMES
from txcache.check.tenants import Tenant, drop_roles
from txcache.check.workload import SCHEMA
from txcache.stack import ReplicatedPostgres, Stack, StackOptions, hosts_dsn

__all__ = [
    "AGENT_SLOT",
    "CHECK_SLOT",
    "SLOT_WAL_KEEP",
    "CheckRefused",
    "CheckStack",
    "running_stack",
]

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
    membership="database",  # as a fleet runs: the node-leave fault changes it
)
"""What a check starts."""


@dataclasses.dataclass(frozen=True)
class CheckStack:
    """What a check runs against."""

    stack: Stack
    servers: ReplicatedPostgres | None = None
    """The primary and its standby (``--standby-postgres``), which the stack's DSN names."""
    replicas: tuple[tuple[str, str], ...] = ()
    """With ``--standby-reads``: each server's own DSN by name, as the agent's
    ``--standby`` flags and the libraries' ``replicas`` name them (whichever is the standby
    serves misses; the primary refuses to pin as one)."""
    decoding_standby: bool = False
    """With ``--decode-on-standby``: the agent decodes the stream on the standby, and moves
    it to the other server when that one fails (``--decode-from`` naming both)."""
    primary_spare: bool = False
    """With ``--primary-spare``: the primary keeps a spare slot (``--decode-primary-slot
    spare``) and the standby is asynchronous: the stream moves to the primary's spare while
    the standby is down, and back once it returns."""


class CheckRefused(Exception):
    """The check cannot run as asked (the message says why); nothing was checked."""


@contextlib.contextmanager
def running_stack(
    tenants: Sequence[Tenant] = (),
    *,
    standby_postgres: bool = False,
    ddl_tracking: str = "triggers",
    standby_reads: bool = False,
    decode_on_standby: bool = False,
    primary_spare: bool = False,
) -> Iterator[CheckStack]:
    """A fresh PostgreSQL (with ``standby_postgres``, a primary and its standby) with the
    workload's schema and the ``tenants``' (their roles too), set up to track them all, with
    the checker's slot, two nodes and the agent; the roles dropped and everything stopped on
    exit. With ``ddl_tracking`` ``fingerprint`` the DDL event triggers are dropped once
    set up, as where a service allows none, and the agent checks fingerprints. With
    ``standby_reads`` (and ``standby_postgres``) the agent also pins whichever server is
    the standby (``--standby``, one per server); with ``decode_on_standby`` it decodes the
    stream there (``--decode-from`` naming the standby, then the primary), and with
    ``primary_spare`` the primary keeps a spare slot, the standby then asynchronous (a
    synchronous one down stops every commit, the agent's lease renewal among them)."""
    if primary_spare and not decode_on_standby:
        raise CheckRefused("--primary-spare needs --decode-on-standby")
    if standby_reads and not standby_postgres:
        raise CheckRefused("--standby-reads needs --standby-postgres")
    if decode_on_standby and not standby_postgres:
        raise CheckRefused("--decode-on-standby needs --standby-postgres")
    agent_args = OPTIONS.agent_args
    if ddl_tracking != "triggers":
        agent_args = (*agent_args, "--ddl-tracking", ddl_tracking)
    options = dataclasses.replace(
        OPTIONS,
        schema_sql=SCHEMA + "".join(tenant.sql() for tenant in tenants),
        schemas=tuple(dict.fromkeys(("public", *(tenant.schema for tenant in tenants)))),
        agent_args=agent_args,
    )
    with contextlib.ExitStack() as exits:
        servers = None
        if standby_postgres:
            _check_failover_slots()
            settings = options.server_settings()
            replicated = ReplicatedPostgres(settings, synchronous=not primary_spare)
            servers = exits.enter_context(replicated)
            options = dataclasses.replace(options, dsn=servers.dsn)
        replicas = tuple(servers.server_dsns().items()) if servers and standby_reads else ()
        if replicas:
            flags = (arg for name, dsn in replicas for arg in ("--standby", f"{name}={dsn}"))
            options = dataclasses.replace(options, agent_args=(*options.agent_args, *flags))
        if servers is not None and servers.standby is not None and decode_on_standby:
            # The standby first; the primary, last, takes the stream when it is gone (after
            # a promotion, the old primary's port holds the new standby).
            decode_from = hosts_dsn((servers.standby, servers.primary))
            decoding: tuple[str, ...] = ("--decode-from", decode_from)
            decoding += ("--decode-failover-after", "3s")
            if primary_spare:
                decoding += ("--decode-primary-slot", "spare", "--decode-spare-after", "2s")
            options = dataclasses.replace(options, agent_args=(*options.agent_args, *decoding))
        stack = exits.enter_context(Stack(options))
        try:
            with psycopg.connect(stack.dsn, autocommit=True) as admin:
                if ddl_tracking != "triggers":
                    for trigger in EVENT_TRIGGER_NAMES:
                        admin.execute(
                            sql.SQL("DROP EVENT TRIGGER {}").format(sql.Identifier(trigger))
                        )
                failover = ", failover => true" if servers is not None else ""
                admin.execute(
                    f"SELECT pg_create_logical_replication_slot(%s, 'test_decoding'{failover})",
                    (CHECK_SLOT,),
                )
            yield CheckStack(stack, servers, replicas, decode_on_standby, primary_spare)
        finally:
            drop_roles(stack.dsn, tenants)


def _check_failover_slots() -> None:
    """Refuse a PostgreSQL whose slots cannot survive a promotion, before starting it."""
    version = major_version()
    if version < FAILOVER_SLOTS_SINCE:
        raise CheckRefused(
            f"--standby-postgres needs PostgreSQL {FAILOVER_SLOTS_SINCE} or later (failover "
            f"slots); this is {version}"
        )
