"""The ``TXCACHE`` Django setting, and the process's :class:`txcache.Cache` made from it.

``TXCACHE`` is a dict of upper-case keys: the library's settings (docs/settings.md: ``NODES``,
``AGENT``, ``PASSWORD``, ``STALENESS``, …, and ``SAFE_FUNCTIONS``) and the Django
integration's own (``DATABASE``, ``TOKEN_COOKIE``, ``TOKEN_HEADER``, ``TOKEN_MAX_AGE``).
The library's settings not given here come from the ``TXCACHE_*`` environment and
``txcache.toml``, as for :func:`txcache.connect`; the DSN comes from ``DATABASES``. Every
value is checked as the library's settings are (docs/settings.md, "What each accepts"): a
refusal names the key (``TXCACHE['STALENESS']``), the value and what is allowed, and the
system checks report that message at start-up (``txcache.E001``, ``txcache.E008``).

The cache is made at its first use (:func:`get_cache`), not at start-up: ``manage.py
migrate`` and the checks never connect to the nodes or the agent. It is a
:class:`DjangoCache`: its transactions know about Django's own connection. A write
committed on that connection is recorded for the context's read-your-writes
(:func:`wrote_on_own_connection`) without connecting it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

import txcache
from txcache import ReadOnlyTransaction, ReadWriteTransaction, Settings
from txcache import _validate as validate  # the one home of the checks and their messages
from txcache.errors import ConfigurationError, TransactionError
from txcache.integration import load_settings, tokens

if TYPE_CHECKING:
    pass

__all__ = [
    "DJANGO_KEYS",
    "LIBRARY_KEYS",
    "DjangoCache",
    "TxcacheSettingError",
    "TxcacheSettings",
    "cache_settings",
    "close",
    "database_alias",
    "database_dsn",
    "get_cache",
    "isolation_level",
    "library_settings",
    "move_alias",
    "replace_inherited",
    "txcache_settings",
    "wrote_on_own_connection",
]

LIBRARY_KEYS = {f.name.upper(): f.name for f in dataclasses.fields(Settings)}
"""``TXCACHE`` keys that are library settings, with their :func:`txcache.connect` name."""

DJANGO_KEYS = frozenset(
    ("DATABASE", "SAFE_FUNCTIONS", "TOKEN_COOKIE", "TOKEN_HEADER", "TOKEN_MAX_AGE")
)
"""``TXCACHE`` keys of the Django integration (and ``connect``'s ``safe_functions``)."""

T = TypeVar("T")

# Keys of Django's connection parameters that are psycopg's, not libpq's: they are not part
# of a connection string (txcache's pool makes its own connections).
_PSYCOPG_ONLY = ("autocommit", "context", "cursor_factory", "prepare_threshold", "row_factory")


@dataclass(frozen=True)
class TxcacheSettings:
    """The ``TXCACHE`` setting, read and checked."""

    database: str = "default"
    """The ``DATABASES`` alias whose ORM queries run in txcache transactions (its ENGINE
    is ``txcache.django.db``); the cache's DSN is derived from it."""
    library: Mapping[str, Any] = field(default_factory=dict)
    """The library settings given, as :func:`txcache.connect` takes them (lower-case)."""
    safe_functions: tuple[str, ...] = ()
    """SQL functions cacheable queries may call (``connect(safe_functions=...)``)."""
    token_cookie: str = "txcache_token"
    """The cookie that carries a client's read-your-writes token."""
    token_header: str = "X-Txcache-Token"
    """The request and response header that carries it."""
    token_max_age: float = 300.0
    """Seconds a token is honoured (the cookie's ``max_age`` and the signature's age)."""


# Django ships no type information: to mypy its exception is Any.
class TxcacheSettingError(ConfigurationError, ImproperlyConfigured):  # type: ignore[misc]
    """A ``TXCACHE`` key refused: Django's :class:`ImproperlyConfigured` (what Django code
    expects of a bad setting) and :class:`txcache.ConfigurationError` (what txcache raises
    for every setting), with the message the checks report (``txcache.E001``)."""


def txcache_settings() -> TxcacheSettings:
    """``settings.TXCACHE``, checked; :class:`TxcacheSettingError` names the key, the value
    and what is allowed (the system checks report the same). The library's keys are
    checked by :func:`library_settings`."""
    given = getattr(settings, "TXCACHE", None)
    if not isinstance(given, Mapping):
        raise TxcacheSettingError(
            "the TXCACHE setting is missing or not a dict: TXCACHE = {'NODES': ..., "
            "'AGENT': ...} (docs/django.md)"
        )
    unknown = sorted(set(given) - set(LIBRARY_KEYS) - DJANGO_KEYS)
    if unknown:
        raise TxcacheSettingError(
            f"unknown TXCACHE key(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted({*LIBRARY_KEYS, *DJANGO_KEYS}))}"
        )
    library = {LIBRARY_KEYS[key]: value for key, value in given.items() if key in LIBRARY_KEYS}
    return TxcacheSettings(
        database=_key(given, "DATABASE", "default", validate.text),
        library=library,
        safe_functions=_key(given, "SAFE_FUNCTIONS", (), validate.function_names),
        token_cookie=_key(given, "TOKEN_COOKIE", "txcache_token", _cookie_name),
        token_header=_key(given, "TOKEN_HEADER", "X-Txcache-Token", _header_name),
        token_max_age=_key(given, "TOKEN_MAX_AGE", 300.0, validate.lasting_seconds),
    )


def _key(given: Mapping[str, Any], key: str, default: Any, check: Callable[[Any], T]) -> T:
    """``TXCACHE[key]`` (else ``default``), checked: the message format of every setting
    (:mod:`txcache._validate`)."""
    value = given.get(key, default)
    try:
        return check(value)
    except validate.Refused as refused:
        raise TxcacheSettingError(refused.message(f"TXCACHE[{key!r}]", value)) from None


def _cookie_name(value: Any) -> str:
    return validate.http_token(value, "a cookie name (letters, digits and !#$%&'*+-.^_`|~)")


def _header_name(value: Any) -> str:
    return validate.http_token(value, "a header name (letters, digits and !#$%&'*+-.^_`|~)")


def database_dsn(alias: str) -> str:
    """The connection string of the ``DATABASES`` alias, as Django connects: its NAME,
    USER, PASSWORD, HOST, PORT and libpq OPTIONS, with Django's client encoding and time
    zone (``TimeZone``, in the connection's startup options). Django reads timestamps in
    that zone; the pooled connections of txcache transactions must run in it too."""
    wrapper = connections[alias]
    params = dict(wrapper.get_connection_params())
    for key in _PSYCOPG_ONLY:
        params.pop(key, None)
    options = _startup_options(str(params.pop("options", "")), wrapper.timezone_name)
    return psycopg.conninfo.make_conninfo(options=options, **params)


def _startup_options(options: str, timezone: str) -> str:
    """libpq ``options`` plus ``-c TimeZone=<timezone>`` (escaped as libpq reads them)."""
    zone = timezone.replace("\\", "\\\\").replace(" ", "\\ ")
    return f"{options} -c TimeZone={zone}".strip()


def isolation_level(alias: str) -> str | None:
    """The isolation level of the alias's ``OPTIONS`` as SQL (``"REPEATABLE READ"``), for
    the read/write transactions of its requests; ``None``: the database's default."""
    level = connections[alias].settings_dict.get("OPTIONS", {}).get("isolation_level")
    if level is None:
        return None
    return str(psycopg.IsolationLevel(level).name).replace("_", " ")


def library_settings(chosen: TxcacheSettings) -> Settings:
    """The library settings a cache of ``chosen`` gets (arguments, environment,
    ``txcache.toml``), checked, without connecting: raises
    :class:`txcache.ConfigurationError` naming the ``TXCACHE`` key. A ``DSN`` given is
    completed with Django's client encoding and time zone, as the one derived from
    ``DATABASES`` is."""
    library = dict(chosen.library)
    given = library.get("dsn") is not None
    if not given:
        library["dsn"] = database_dsn(chosen.database)

    def given_as(name: str) -> str:
        if name == "dsn" and not given:
            return f"from DATABASES[{chosen.database!r}]"
        return f"from TXCACHE[{name.upper()!r}]"

    loaded = load_settings(library, given_as=given_as)
    if not given:
        return loaded
    return dataclasses.replace(loaded, dsn=_given_dsn(loaded.dsn, chosen.database))


def _given_dsn(dsn: str, alias: str) -> str:
    """A ``DSN`` given in ``TXCACHE``, with Django's client encoding and time zone. While
    Django's test runner has the alias on a test database, the DSN's database is that one:
    what was given names the original database, which the tests must not read or write
    (:mod:`txcache.django.db.creation`)."""
    wrapper = connections[alias]
    parsed = psycopg.conninfo.conninfo_to_dict(dsn)
    options = _startup_options(str(parsed.get("options", "")), wrapper.timezone_name)
    given: dict[str, Any] = {"options": options, "client_encoding": "UTF8"}
    if alias in _on_test_database:
        given["dbname"] = wrapper.settings_dict["NAME"]
    return psycopg.conninfo.make_conninfo(dsn, **given)


class DjangoCache(txcache.Cache):
    """The process's cache: a :class:`txcache.Cache` that knows Django's own connection of
    ``TXCACHE["DATABASE"]``.

    Its transactions do not begin while that connection has a transaction open in the
    thread (an ``atomic()`` block, or autocommit turned off): the ORM's statements belong
    to that transaction, whose uncommitted writes — and locks — another database
    transaction does not share. Cacheable calls and cached querysets made there without a
    txcache transaction run on that connection, uncached. What that connection committed
    before in the same context, its read-only transactions see as they see the library's
    own writes (:func:`wrote_on_own_connection`, :mod:`txcache._tokens`).
    """

    def __init__(self, settings: Settings, *, database: str, **options: Any) -> None:
        """:class:`txcache.Cache` of ``settings`` (and ``options``) for the ``DATABASES``
        alias ``database``, whose statements its transactions hold."""
        super().__init__(settings, **options)
        self.database = database
        """``TXCACHE["DATABASE"]`` when the cache was made."""
        self.pid = os.getpid()
        """The process that made it: a process forked after it (a parallel test worker)
        inherits it, with connections that are the parent's."""

    def read_only(
        self, staleness: float | None = None, *, not_before: int | None = None
    ) -> ReadOnlyTransaction:
        """:meth:`txcache.Cache.read_only`, refused inside a Django transaction and after
        Django's own connection changed its session."""
        _refuse_in_django_transaction("read-only")
        self._refuse_changed_session()
        return super().read_only(staleness, not_before=not_before)

    def read_write(self, *, isolation: str | None = None) -> ReadWriteTransaction:
        """:meth:`txcache.Cache.read_write`, refused inside a Django transaction and after
        Django's own connection changed its session."""
        _refuse_in_django_transaction("read/write")
        self._refuse_changed_session()
        return super().read_write(isolation=isolation)

    def _refuse_changed_session(self) -> None:
        """Before any value is read: a hit would be served in the cache's session context
        as surely as a miss computed (:meth:`DatabaseWrapper.refuse_changed_session`)."""
        from txcache.django.db.base import DatabaseWrapper  # the backend imports this

        wrapper = connections[self.database]
        if isinstance(wrapper, DatabaseWrapper):
            wrapper.refuse_changed_session(beginning=True)


def _refuse_in_django_transaction(kind: str) -> None:
    from txcache.django.db.base import in_django_transaction  # the backend imports this

    if in_django_transaction():
        raise TransactionError(
            f"a {kind} txcache transaction cannot begin inside a Django transaction (an "
            "atomic() block, or autocommit turned off) on Django's own connection: the ORM's "
            "statements belong to that transaction, whose uncommitted writes and locks "
            "another database transaction does not share. Begin it outside the atomic() "
            "block; inside, cacheable calls and cached querysets run uncached on Django's "
            "connection"
        )


_lock = threading.Lock()
_cache: DjangoCache | None = None
_settings: Settings | None = None  # what the cache is (or will be) made with, read once
# The aliases Django's test runner has on a test database: the process's, as the cache is
# (Django's connections are the thread's, a live server's thread has its own).
_on_test_database: set[str] = set()


def get_cache() -> DjangoCache:
    """The process's cache (a :class:`DjangoCache`), for the ``TXCACHE`` setting and the
    DSN of ``TXCACHE["DATABASE"]``; connected at the first call (it is also the library's default
    cache: cacheable calls outside any transaction use it)."""
    connected = _cache
    if connected is not None and not connected.inherited():
        return connected
    return _connect()


def _connect() -> DjangoCache:
    global _cache
    with _lock:
        if _cache is not None and _cache.inherited():
            # A pre-forking server's worker (gunicorn --preload) whose parent had connected:
            # the parent's connections stay the parent's; the worker connects its own.
            _cache.close()
            _cache = None
        if _cache is None:
            chosen = txcache_settings()
            _cache = DjangoCache(
                _read_settings(chosen),
                database=chosen.database,
                safe_functions=chosen.safe_functions,
            )
        return _cache


def cache_settings() -> Settings:
    """The library settings of the process's cache: the connected cache's, else those
    :func:`get_cache` will connect it with (read once, until :func:`close`), without
    connecting it."""
    connected = _cache
    if connected is not None:
        return connected.settings
    with _lock:
        return _read_settings(txcache_settings())


def _read_settings(chosen: TxcacheSettings) -> Settings:
    """:func:`library_settings` of ``chosen``, remembered until the cache is closed (the
    caller holds the lock)."""
    global _settings
    if _settings is None:
        _settings = library_settings(chosen)
    return _settings


def wrote_on_own_connection() -> None:
    """Django's own connection of ``TXCACHE["DATABASE"]`` committed a write in this
    context: its later read-only transactions — and the token the middleware hands the
    client — see it, as they see the library's own commits. One ``cache.timestamp()``
    per run of such writes, asked when first needed."""
    try:
        chosen = cache_settings()
    except (ImproperlyConfigured, ConfigurationError):
        return  # no cache can be made from these settings: no read of it will follow
    # The cache connects only when a read of the context needs the token (migrate never).
    tokens.wrote_elsewhere(chosen.dsn, lambda: get_cache().timestamp())


def database_alias() -> str:
    """``TXCACHE["DATABASE"]``: the connected cache's (no settings to read), else the
    setting's."""
    connected = _cache
    return connected.database if connected is not None else txcache_settings().database


def close() -> None:
    """Close the process's cache (the next :func:`get_cache` connects again, with the
    settings of that moment): for tests that change the settings, and for shutdown."""
    _close(_take(alias=None))


def on_test_database(alias: str) -> bool:
    """Whether Django's test runner has the ``DATABASES`` alias on a test database now."""
    return alias in _on_test_database


def move_alias(alias: str, *, test_database: bool) -> None:
    """Django's test runner moves the ``DATABASES`` alias ``alias`` to another database —
    a test database (``test_database``) or the original again — or clones or drops the
    one it names (:mod:`txcache.django.db.creation`): close the process's cache if it was
    made for that alias. While the alias is on a test database, a ``DSN`` given takes the
    alias's ``NAME``."""
    with _lock:
        if test_database:
            _on_test_database.add(alias)
        else:
            _on_test_database.discard(alias)
    _close(_take(alias=alias))


def replace_inherited() -> None:
    """Connect this process's own cache now if the library's default cache is one made
    in another process (this one was forked from it): cacheable calls outside any
    transaction would run in the default cache, on its parent's connections."""
    default = txcache.default_cache()
    if isinstance(default, DjangoCache) and default.pid != os.getpid():
        get_cache()


def _take(*, alias: str | None) -> DjangoCache | None:
    """The process's cache (made for ``alias``, unless ``None``), no longer the process's;
    the settings are read again for the next one."""
    global _cache, _settings
    with _lock:
        _settings = None
        taken = _cache
        if taken is None or (alias is not None and taken.database != alias):
            return None
        _cache = None
        return taken


def _close(cache: DjangoCache | None) -> None:
    """Close ``cache`` — unless another process made it: its connections are that
    process's (a fork shares their sockets), which closing them here would end."""
    if cache is not None and cache.pid == os.getpid():
        cache.close()
