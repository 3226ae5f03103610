"""The check's tenants: caches of one database whose sessions resolve the same names to
different tables (docs/check.md, "Tenants").

| tenant | its cache's DSN | ``accounts``, ``entries`` resolve to |
|---|---|---|
| ``public`` | the stack's own (a superuser) | ``public.*`` |
| ``path`` | the same, ``options=-c search_path=tenant_path,public`` | ``tenant_path.*`` |
| ``role`` | ``user=txcheck_<hex>``, a role made for the run | ``txcheck_<hex>.*`` |

(the role's by its default ``search_path``, ``"$user", public``).

Only the session context tells them apart: the same cacheable functions are called with the
same arguments through the same nodes and agent, so a key that did not name the context
would serve one tenant's rows to another. The role tenant owns its schema and has no
privilege on ``public``'s tables: a session of it that resolved a name to them would fail,
never read them. Roles are global to the server, so each run makes its own (a unique name)
and drops it at the end.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import make_conninfo

from txcache._keys import CallKeys
from txcache.check.history import PUBLIC_TENANT
from txcache.check.workload import tenant_tables_sql

if TYPE_CHECKING:
    from txcache._cacheable import CacheableFunction
    from txcache._config import Settings

__all__ = ["ROLE_PREFIX", "Tenant", "context_blind_keys", "drop_roles", "make_tenants"]

log = logging.getLogger("txcache.check")

ROLE_PREFIX = "txcheck_"
"""The role tenant's role (and schema) is this and eight hex digits, unique per run."""

PATH_SCHEMA = "tenant_path"


@dataclass(frozen=True)
class Tenant:
    """One tenant: the name its rows carry, where its tables are, how its sessions reach
    them."""

    name: str
    schema: str
    role: str | None = None
    """The login role its DSN names (``None``: the stack's own)."""
    search_path: str | None = None
    """The ``search_path`` its DSN's ``options`` set (``None``: the role's default)."""

    def dsn(self, stack_dsn: str) -> str:
        """Its cache's DSN: the stack's, with its role or search path."""
        changes: dict[str, Any] = {}
        if self.role is not None:
            changes["user"] = self.role
        if self.search_path is not None:
            changes["options"] = f"-c search_path={self.search_path}"
        return make_conninfo(stack_dsn, **changes) if changes else stack_dsn

    def describe(self) -> str:
        """How its sessions differ, in a few words (for reports)."""
        if self.role is not None:
            return f"login role {self.role}, default search path: schema {self.schema}"
        if self.search_path is not None:
            return f"the stack's DSN with search_path={self.search_path}"
        return "the stack's DSN: schema public"

    def sql(self) -> str:
        """What creates its schema and tables (its role too); empty for public's, which
        the workload's SCHEMA makes."""
        if self.name == PUBLIC_TENANT:
            return ""
        owner = f" AUTHORIZATION {self.role}" if self.role is not None else ""
        text = f"CREATE ROLE {self.role} LOGIN;\n" if self.role is not None else ""
        text += f"CREATE SCHEMA {self.schema}{owner};\n"
        text += tenant_tables_sql(self.schema, self.name)
        if self.role is not None:  # the entries' sequence follows its table
            for table in ("accounts", "entries"):
                text += f"ALTER TABLE {self.schema}.{table} OWNER TO {self.role};\n"
        return text


def make_tenants(enabled: bool = True) -> tuple[Tenant, ...]:
    """The public tenant, and (``enabled``) one by search path and one by a new role."""
    public = Tenant(PUBLIC_TENANT, "public")
    if not enabled:
        return (public,)
    role = f"{ROLE_PREFIX}{uuid.uuid4().hex[:8]}"
    by_path = Tenant("path", PATH_SCHEMA, search_path=f"{PATH_SCHEMA},public")
    return public, by_path, Tenant("role", role, role=role)


def drop_roles(dsn: str, tenants: Iterable[Tenant]) -> None:
    """Drop the tenants' roles and what they own (their schemas); a failure is logged, not
    raised (the run's verdict stands)."""
    for tenant in tenants:
        if tenant.role is None:
            continue
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as admin:
                admin.execute(f"DROP OWNED BY {tenant.role}")
                admin.execute(f"DROP ROLE {tenant.role}")
        except psycopg.Error as error:
            log.warning("dropping role %s failed: %s", tenant.role, error)


# -- the control: keys that ignore the session context ----------------------------------------


class _ContextBlindKeys(CallKeys):
    """A function's keys as a library that ignored the session context would make them —
    in ``no_consistency`` caches only, so that a consistent cache is never affected."""

    __slots__ = ()

    def key(
        self,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        settings: Settings | None = None,
        context: bytes = b"",
    ) -> bytes:
        blind = settings is not None and settings.mode == "no_consistency"
        return super().key(args, kwargs, settings, b"" if blind else context)


@contextlib.contextmanager
def context_blind_keys(functions: Iterable[CacheableFunction[Any, Any]]) -> Iterator[None]:
    """While inside, ``functions`` called through a ``no_consistency`` cache share their
    keys between tenants: the bug the session context in keys prevents, for the control
    phase to show that the verdict sees a cross-tenant read."""
    saved = [(function, function.keys) for function in functions]
    try:
        for function, _keys in saved:
            function.keys = _ContextBlindKeys(inspect.unwrap(function))
        yield
    finally:
        for function, keys in saved:
            function.keys = keys
