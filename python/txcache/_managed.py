"""Managed PostgreSQL services: how ``txcache setup`` recognises one, and what it tells
the operator to change there.

A managed service gives no one a superuser; it grants what txcache needs (logical
decoding, replication, event triggers) through settings and roles of its own, and some
change what PostgreSQL would otherwise promise (slots dropped, event triggers that do not
fire for the platform's roles). Each service is recognised by a role it creates in every
cluster. What each says comes from the service's documentation and is listed, with what was
and was not verified, in docs/managed-postgres.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

__all__ = ["SERVICES", "Service", "find_service"]


@dataclass(frozen=True)
class Service:
    """A managed PostgreSQL service and its ways of granting what txcache needs."""

    name: str
    marker: str
    """A role only this service creates: its presence names the service."""
    logical_decoding: str
    """How to turn logical decoding on (what makes ``wal_level`` logical there)."""
    replication: str
    """How a role gets the right to replicate (``{role}``: the role's name)."""
    event_triggers: str
    """Who may create the DDL event triggers there."""
    caveats: tuple[str, ...] = ()
    """What differs from PostgreSQL's own promises, and what txcache does about it."""


_NOT_FIRED = (
    "event triggers do not fire for DDL run by the platform's own roles: run schema changes "
    "as an ordinary role (the database owner), whose DDL fires them"
)

SERVICES: Sequence[Service] = (
    Service(
        "Amazon RDS / Aurora",
        "rds_superuser",
        logical_decoding="set rds.logical_replication = 1 in the DB parameter group (Aurora: "
        "the DB cluster parameter group) and reboot the instance",
        replication="GRANT rds_replication TO {role} (as the master user)",
        event_triggers="a member of rds_superuser (the master user)",
    ),
    Service(
        "Google Cloud SQL",
        "cloudsqlsuperuser",
        logical_decoding="set the database flag cloudsql.logical_decoding = on (the instance "
        "restarts)",
        replication="ALTER ROLE {role} WITH REPLICATION (as a member of cloudsqlsuperuser)",
        event_triggers="a member of cloudsqlsuperuser",
    ),
    Service(
        "Google AlloyDB",
        "alloydbsuperuser",
        logical_decoding="set the database flag alloydb.logical_decoding = on (the instance "
        "restarts)",
        replication="ALTER ROLE {role} WITH REPLICATION (as a member of alloydbsuperuser)",
        event_triggers="a member of alloydbsuperuser",
    ),
    Service(
        "Azure Database for PostgreSQL flexible server",
        "azure_pg_admin",
        logical_decoding="set the server parameter wal_level = logical and restart the server",
        replication="ALTER ROLE {role} WITH REPLICATION (as the administrator)",
        event_triggers="the administrator (a member of azure_pg_admin)",
        caveats=(
            "a high-availability failover loses the logical slot unless the pg_failover_slots "
            "extension is loaded (server parameters shared_preload_libraries and "
            "azure.extensions); a lost slot makes txcache-agent reset every cache node",
        ),
    ),
    Service(
        "Neon",
        "neon_superuser",
        logical_decoding="enable logical replication in the project's settings (it restarts "
        "the computes and cannot be turned off)",
        replication="roles created in the Neon console, API or CLI (members of "
        "neon_superuser) may replicate",
        event_triggers="a member of neon_superuser",
        caveats=(
            _NOT_FIRED,
            "Neon removes a replication slot inactive for about 40 hours, and a branch "
            "restore removes every slot: txcache-agent then resets every cache node; keep "
            "the agent running",
        ),
    ),
    Service(
        "Supabase",
        "supabase_admin",
        logical_decoding="logical decoding is on by default",
        replication="ALTER ROLE {role} WITH REPLICATION (as postgres)",
        event_triggers="postgres",
        caveats=(_NOT_FIRED,),
    ),
)


def find_service(conn: psycopg.Connection[tuple[object, ...]]) -> Service | None:
    """The managed service the connection's server belongs to, if one is recognised."""
    markers = [service.marker for service in SERVICES]
    found = conn.execute(
        "SELECT rolname::text FROM pg_roles WHERE rolname = ANY(%s)", (markers,)
    ).fetchall()
    present = {name for (name,) in found}
    return next((service for service in SERVICES if service.marker in present), None)
