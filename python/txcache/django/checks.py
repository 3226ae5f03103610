"""System checks of the Django integration (``manage.py check``; ``runserver`` and
``migrate`` run them too). Registered by the app config; each message names the setting and
the fix. They read settings (and import the middleware classes and the URLconf named there,
as Django's own checks do): nothing connects to the database, the nodes or the agent.

=================  ======================================================================
``txcache.E001``   ``TXCACHE`` is missing, not a dict, or has an unknown or malformed key
``txcache.E002``   ``TXCACHE["DATABASE"]`` is not an alias of ``DATABASES``
``txcache.E003``   that alias's ``ENGINE`` is not ``txcache.django.db``
``txcache.E004``   another alias uses ``txcache.django.db`` (one txcache database per process)
``txcache.E005``   Django's PostgreSQL backend runs on psycopg 2 (txcache needs psycopg 3)
``txcache.E006``   ``AUTOCOMMIT`` is off for the alias
``txcache.E007``   ``OPTIONS["assume_role"]`` is set for the alias
``txcache.E008``   a library setting is malformed (``txcache.ConfigurationError``)
``txcache.E009``   ``SESSION_SAVE_EVERY_REQUEST`` with database sessions and the middleware
``txcache.E010``   ``TOKEN_MAX_AGE`` is shorter than ``STALENESS`` or a view's staleness
``txcache.E011``   ``TXCACHE["DSN"]`` names another database than the alias's ``NAME``
``txcache.W001``   no cache nodes or no agent: every transaction runs uncached
``txcache.W002``   ``SessionMiddleware`` (database sessions) comes before the middleware
``txcache.W003``   ``ATOMIC_REQUESTS`` on the txcache database with the middleware
``txcache.W004``   ``DATABASE_ROUTERS`` is set (a router may take queries to another alias)
``txcache.W005``   a middleware below the txcache one handles view exceptions
``txcache.W006``   a ``connection_created`` receiver (its session changes miss txcache's
                   connections)
=================  ======================================================================
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLResolver, get_resolver
from django.utils.module_loading import import_string

from txcache.django import conf
from txcache.django.decorators import policy_of
from txcache.errors import ConfigurationError

__all__ = ["CHECKS", "check_database", "check_middleware", "check_settings"]

ENGINE = "txcache.django.db"
MIDDLEWARE = "txcache.django.middleware.TransactionMiddleware"
SESSION_MIDDLEWARE = "django.contrib.sessions.middleware.SessionMiddleware"
DATABASE_SESSIONS = (
    "django.contrib.sessions.backends.db",
    "django.contrib.sessions.backends.cached_db",
)
_DOCS = "docs/django.md"


def _settings() -> conf.TxcacheSettings | None:
    try:
        return conf.txcache_settings()
    except ImproperlyConfigured:
        return None


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001, E008, E010, E011, W001: the ``TXCACHE`` setting and the library settings it
    gives."""
    try:
        chosen = conf.txcache_settings()
    except ImproperlyConfigured as error:
        return [Error(str(error), hint=f"See {_DOCS}, 'Settings'.", id="txcache.E001")]
    if settings.DATABASES.get(chosen.database, {}).get("ENGINE") != ENGINE:
        return []  # E002 or E003 says so
    try:
        library = conf.library_settings(chosen)
    except (ConfigurationError, ImproperlyConfigured) as error:
        return [Error(str(error), hint="See docs/settings.md.", id="txcache.E008")]
    messages = _dsn_database(chosen)
    if chosen.token_max_age < library.staleness:
        messages.append(_token_outlived("STALENESS", chosen.token_max_age, library.staleness))
    if library.mode != "bypass" and (not library.nodes or library.agent is None):
        messages.append(
            Warning(
                "TXCACHE names no cache nodes or no agent: every transaction runs against the "
                "database alone, uncached",
                hint="Set TXCACHE['NODES'] and TXCACHE['AGENT'] (or TXCACHE_NODES and "
                "TXCACHE_AGENT), or TXCACHE['MODE'] = 'bypass' to say so.",
                id="txcache.W001",
            )
        )
    return messages


def _dsn_database(chosen: conf.TxcacheSettings) -> list[CheckMessage]:
    """E011: a ``DSN`` given must reach the alias's database (host names may differ: a
    pooler, another name for the server)."""
    given = chosen.library.get("dsn")
    if given is None or conf.on_test_database(chosen.database):
        return []  # on a test database, a DSN given takes the alias's NAME
    named = psycopg.conninfo.conninfo_to_dict(str(given)).get("dbname")
    expected = settings.DATABASES[chosen.database].get("NAME")
    if not named or not expected or named == expected:
        return []
    return [
        Error(
            f"TXCACHE['DSN'] names the database {named!r}, DATABASES[{chosen.database!r}] "
            f"names {expected!r}: the ORM would read one outside txcache transactions and "
            "the other inside",
            hint="Give the DSN the alias's NAME, or leave DSN out (it is made from DATABASES).",
            id="txcache.E011",
        )
    ]


def _token_outlived(what: str, max_age: float, staleness: float) -> CheckMessage:
    """E010: a client's token expires while a read-only request may still read data older
    than the write it stands for."""
    return Error(
        f"TXCACHE['TOKEN_MAX_AGE'] ({max_age:g} s) is shorter than the staleness of "
        f"{what} ({staleness:g} s): a client's token is ignored once it expires, and its next "
        "read-only request may read data from before its own write for the rest of that "
        "staleness",
        hint="Set TOKEN_MAX_AGE to the longest staleness of read-only requests or more (the "
        "default is 300 s).",
        id="txcache.E010",
    )


def _token_outlived_by_views(max_age: float) -> list[CheckMessage]:
    """E010 for the views of the URLconf marked with a longer staleness than
    ``TOKEN_MAX_AGE`` (``@staleness``, ``@read_only(staleness=…)``)."""
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # Django's own URL checks report a URLconf that does not load
        return []
    return [
        _token_outlived(f"the view {name}", max_age, staleness)
        for name, view in _views(patterns)
        if (staleness := policy_of(view).staleness) is not None and max_age < staleness
    ]


def _views(patterns: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """Every view of ``patterns``, by its dotted path, included URLconfs too."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _views(pattern.url_patterns)
        else:
            yield pattern.lookup_str, pattern.callback


def check_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E002 to E007, W004: the database whose ORM queries run in txcache transactions."""
    chosen = _settings()
    if chosen is None:
        return []  # E001 says why
    alias = chosen.database
    if alias not in settings.DATABASES:
        return [
            Error(
                f"TXCACHE['DATABASE'] is {alias!r}, which DATABASES does not define",
                hint="Name the alias whose ENGINE is 'txcache.django.db'.",
                id="txcache.E002",
            )
        ]
    found = settings.DATABASES[alias]
    messages: list[CheckMessage] = []
    if found.get("ENGINE") != ENGINE:
        messages.append(
            Error(
                f"DATABASES[{alias!r}]['ENGINE'] is {found.get('ENGINE')!r}: the ORM's queries "
                "would not run in txcache transactions",
                hint=f"Set it to {ENGINE!r} (Django's PostgreSQL backend, routed).",
                id="txcache.E003",
            )
        )
    others = [name for name, each in settings.DATABASES.items()
              if name != alias and each.get("ENGINE") == ENGINE]  # fmt: skip
    if others:
        messages.append(
            Error(
                f"DATABASES {', '.join(map(repr, others))} also use {ENGINE!r}; only "
                f"TXCACHE['DATABASE'] ({alias!r}) runs in txcache transactions",
                hint="Give other aliases 'django.db.backends.postgresql'.",
                id="txcache.E004",
            )
        )
    messages += _psycopg()
    messages += _options(alias, found)
    messages += _routers(alias)
    messages += _connection_receivers()
    return messages


# Receivers of connection_created that change nothing txcache's connections need:
# txcache's own guard, and django.contrib.postgres's type registration (hstore, citext: a
# known limit, docs/django.md).
_KNOWN_RECEIVERS = frozenset(
    (
        "txcache.django.db.guards._install",
        "django.contrib.postgres.signals.register_type_handlers",
    )
)


def _connection_receivers() -> list[CheckMessage]:
    """W006: what a ``connection_created`` receiver does to Django's own connection (a
    ``SET search_path``, a ``SET ROLE``) never reaches the cache's pooled connections,
    where the ORM's statements run inside txcache transactions."""
    from django.db.backends.signals import connection_created

    unknown = sorted(
        name for name in map(_receiver_name, connection_created.receivers)
        if name is not None and name not in _KNOWN_RECEIVERS
    )  # fmt: skip
    if not unknown:
        return []
    return [
        Warning(
            f"connection_created has receivers ({', '.join(unknown)}): what they do to a "
            "new Django connection does not happen on txcache's pooled connections, where "
            "the ORM's statements run inside txcache transactions",
            hint="Give session settings to the database instead (OPTIONS['options'] = "
            "'-c search_path=…', ALTER ROLE … SET); then silence txcache.W006.",
            id="txcache.W006",
        )
    ]


def _receiver_name(entry: tuple[Any, ...]) -> str | None:
    """The dotted name of a receiver of a Django signal's ``receivers`` list (``None``:
    garbage-collected)."""
    receiver = entry[1]
    if isinstance(receiver, weakref.ReferenceType):
        receiver = receiver()
    if receiver is None:
        return None
    function = getattr(receiver, "__func__", receiver)
    module = getattr(function, "__module__", type(function).__module__)
    return f"{module}.{getattr(function, '__qualname__', type(function).__qualname__)}"


def _routers(alias: str) -> list[CheckMessage]:
    if not getattr(settings, "DATABASE_ROUTERS", None):
        return []
    return [
        Warning(
            f"DATABASE_ROUTERS is set: a query a router sends to another alias than "
            f"TXCACHE['DATABASE'] ({alias!r}) runs outside txcache transactions — refused "
            "inside cacheable functions and for .txcache() querysets when they run, and "
            "outside the request's commit point elsewhere. A hit is not refused: its key "
            f"names {alias!r}'s session, not the router's choice, so a router that chooses "
            "per request (a tenant) would have one tenant served another's cached value",
            hint=f"Have the routers send the models read through the cache to {alias!r}, "
            "or make the router's choice part of every key (txcache.register_key_context("
            "'tenant', <reader of the request's tenant>)); then silence txcache.W004 "
            "(SILENCED_SYSTEM_CHECKS).",
            id="txcache.W004",
        )
    ]


def _psycopg() -> list[CheckMessage]:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if is_psycopg3:
        return []
    return [
        Error(
            "Django's PostgreSQL backend loaded psycopg 2: txcache runs on psycopg 3",
            hint="pip install 'psycopg[binary]>=3.2' (txcache's own dependency) and make it "
            "importable; Django prefers it to psycopg2.",
            id="txcache.E005",
        )
    ]


def _options(alias: str, found: dict[str, Any]) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    if found.get("AUTOCOMMIT", True) is False:
        messages.append(
            Error(
                f"DATABASES[{alias!r}]['AUTOCOMMIT'] is False: txcache transactions are "
                "opened by the application (read_only/read_write, the middleware), not left "
                "open by Django",
                hint="Remove AUTOCOMMIT; use transaction.atomic() inside the blocks.",
                id="txcache.E006",
            )
        )
    if found.get("OPTIONS", {}).get("assume_role"):
        messages.append(
            Error(
                f"DATABASES[{alias!r}]['OPTIONS']['assume_role'] is set: txcache's pooled "
                "connections would run as the login role, not the assumed one",
                hint="Log in as the role the application runs as.",
                id="txcache.E007",
            )
        )
    return messages


def check_middleware(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E009, E010, W002, W003, W005: the middleware's place, what it conflicts with, and
    the staleness of the views it runs."""
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    if MIDDLEWARE not in middleware:
        return []
    messages: list[CheckMessage] = _exception_handlers(middleware)
    chosen = _settings()
    if chosen is not None:
        messages += _token_outlived_by_views(chosen.token_max_age)
    database_sessions = getattr(settings, "SESSION_ENGINE", DATABASE_SESSIONS[0]) in (
        DATABASE_SESSIONS
    )
    if database_sessions and SESSION_MIDDLEWARE in middleware:
        messages += _sessions(middleware)
    if chosen is not None and settings.DATABASES.get(chosen.database, {}).get("ATOMIC_REQUESTS"):
        messages.append(
            Warning(
                f"DATABASES[{chosen.database!r}]['ATOMIC_REQUESTS'] with the txcache "
                "middleware: each request already runs in one txcache transaction, rolled "
                "back if the view raises; the view's atomic() block only adds a savepoint",
                hint="Set ATOMIC_REQUESTS to False.",
                id="txcache.W003",
            )
        )
    return messages


def _exception_handlers(middleware: list[str]) -> list[CheckMessage]:
    below = middleware[middleware.index(MIDDLEWARE) + 1 :]
    handlers = [path for path in below if _handles_exceptions(path)]
    if not handlers:
        return []
    return [
        Warning(
            f"{', '.join(handlers)} (below the txcache middleware) handle view exceptions "
            "(process_exception): Django asks the innermost first, and when one answers, the "
            "txcache middleware never learns that the view raised — the request's read/write "
            "transaction then rolls back only if the response is a server error (5xx)",
            hint=f"Put them above {MIDDLEWARE!r}, or have them answer a failed view with a "
            "5xx response.",
            id="txcache.W005",
        )
    ]


def _handles_exceptions(path: str) -> bool:
    try:
        found = import_string(path)
    except ImportError:
        return False  # Django reports a middleware it cannot import
    return callable(getattr(found, "process_exception", None))


def _sessions(middleware: list[str]) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    if middleware.index(SESSION_MIDDLEWARE) < middleware.index(MIDDLEWARE):
        messages.append(
            Warning(
                "SessionMiddleware comes before the txcache middleware: it saves sessions "
                "after the request's transaction, so the token given to the client does not "
                "cover them (a user may not see their own login on the next request)",
                hint=f"Put {MIDDLEWARE!r} above SessionMiddleware.",
                id="txcache.W002",
            )
        )
    if getattr(settings, "SESSION_SAVE_EVERY_REQUEST", False):
        messages.append(
            Error(
                "SESSION_SAVE_EVERY_REQUEST with database sessions: every GET would write its "
                "session in a read-only transaction, which refuses writes — each would fail "
                "once (logged) and run again read/write",
                hint="Set SESSION_SAVE_EVERY_REQUEST to False, or use signed-cookie or cache "
                "sessions.",
                id="txcache.E009",
            )
        )
    return messages


CHECKS = (check_settings, check_database, check_middleware)
"""Every check of this module, for the app config to register."""
