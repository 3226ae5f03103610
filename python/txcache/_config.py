"""Settings of a :class:`~txcache.Cache`: arguments > environment > ``txcache.toml`` >
defaults.

Each setting ``name`` is read from the argument, else ``TXCACHE_<NAME>``, else the file
(``txcache.toml`` in the working directory, or the path in ``TXCACHE_CONFIG``). Lists
(``nodes``, ``agent``, ``code_packages``) are comma-separated strings in the environment
and may be either a string or a list elsewhere; numbers and truth values are parsed only
from the environment's text.
Every value is checked here, once, by its check in :mod:`txcache._validate`: a refusal is
a :class:`ConfigurationError` naming the setting, where it came from, the value and what is
allowed. docs/settings.md describes every setting and what it accepts.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from txcache import _validate as validate
from txcache._agent_follow import agent_addresses
from txcache.errors import ConfigurationError

__all__ = ["Mode", "Settings", "load_settings"]

Mode = Literal["consistent", "no_consistency", "bypass"]
"""``consistent``: the guarantee docs/library.md describes. ``no_consistency``: any cached
value valid within the staleness limit is used, whatever else the transaction saw (the
paper's comparison line; for experiments). ``bypass``: no cache at all."""


@dataclass(frozen=True)
class Settings:
    """Everything a :class:`~txcache.Cache` is configured with (docs/settings.md)."""

    dsn: str
    """The PostgreSQL connection string."""
    nodes: tuple[str, ...] = ()
    """The cache nodes, ``host:port`` each (``rediss://host:port``: over TLS), used until
    the agent names the nodes it feeds (``NODES``), which keys are placed on from then on;
    empty: only the agent's."""
    agent: str | None = None
    """The agent's library endpoint, ``host:port`` (``rediss://host:port``: over TLS); with
    several agents (one active, the others standbys), their endpoints joined by commas
    (:attr:`agents`)."""
    password: str | None = None
    """The nodes' and the agent's ``--password``."""
    tls_ca: str | None = None
    """The CA file (PEM) ``rediss://`` nodes' and agent's certificates must chain to
    (``None``: the system's CAs)."""
    secret: str | None = None
    """Keys the integrity tag of cached values."""
    mode: Mode = "consistent"
    """``consistent``, ``no_consistency`` or ``bypass``."""
    staleness: float = 1.0
    """Seconds, for cacheable calls outside a transaction."""
    fresh_pin_age: float = 5.0
    """The default pin policy's "newest pin older than this: take a fresh one"."""
    pool_size: int = 10
    """Database connections kept."""
    pool_timeout: float = 30.0
    """Seconds a transaction waits for a free database connection."""
    node_timeout: float = 1.0
    """Seconds before a silent node counts as down."""
    agent_timeout: float = 2.0
    """Seconds before a silent agent counts as down."""
    replica_timeout: float = 5.0
    """Seconds a hot standby of :attr:`replicas` may take to answer one request (a query,
    a ``BEGIN``) before it counts as down: keep it above the slowest query misses run."""
    refresh_interval: float = 0.25
    """Seconds between pin-list refreshes."""
    lease: float = 1.0
    """Seconds a miss's lease lasts: while one caller computes a missing key, the others
    that miss it wait for its store (or for the lease, expired or released, to come to
    them) at most twice this long, then compute it themselves (0: no leases; at most 60)."""
    snapshot_hold: float = 0.25
    """Seconds a read-only database transaction is kept open, from its start, for the next
    read-only transaction at the same pin (0: never; :mod:`txcache._parking`)."""
    code_version: str = ""
    """Mixed into every cache key: the release's commit."""
    code_packages: tuple[str, ...] | None = None
    """The packages keys hash the code of (``None``: by location)."""
    audit_rate: float = 0.0
    """The share of cache hits re-run against the database at their pin and compared
    (0: no audit; docs/library.md, "Audit")."""
    audit_invalidate: bool = False
    """Whether an audit that finds a mismatch deletes the key's cached versions."""
    replicas: tuple[tuple[str, str], ...] = ()
    """Hot standbys that misses may run on: ``(name, connection string)`` pairs, each
    name as the agent's ``--standby NAME=CONNINFO`` gives it (docs/library.md, "Misses on
    standbys")."""

    @property
    def agents(self) -> tuple[str, ...]:
        """The agents' endpoints, in the order named (none without :attr:`agent`)."""
        return agent_addresses(self.agent) if self.agent is not None else ()


def _mode(value: Any) -> str:
    return validate.choice(value, get_args(Mode))


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "dsn": validate.dsn,
    "nodes": validate.addresses,
    "agent": validate.agents,
    "password": validate.text,
    "tls_ca": validate.readable_file,
    "secret": validate.text,
    "mode": _mode,
    "staleness": validate.seconds,
    "fresh_pin_age": validate.seconds,
    "pool_size": validate.count,
    "pool_timeout": validate.wait,
    "node_timeout": validate.wait,
    "agent_timeout": validate.wait,
    "replica_timeout": validate.wait,
    "refresh_interval": validate.wait,
    "lease": validate.lease,
    "snapshot_hold": validate.seconds,
    "code_version": validate.code_version,
    "code_packages": validate.module_names,
    "audit_rate": validate.fraction,
    "audit_invalidate": validate.flag,
    "replicas": validate.replicas,
}
"""Every setting's check (:mod:`txcache._validate`): what it accepts, converted."""

_HIDDEN = frozenset({"dsn", "password", "secret", "replicas"})
"""Settings whose value a message does not show: they may hold a password."""

_NUMBERS = frozenset(
    {
        "staleness",
        "fresh_pin_age",
        "pool_size",
        "pool_timeout",
        "node_timeout",
        "agent_timeout",
        "replica_timeout",
        "refresh_interval",
        "lease",
        "snapshot_hold",
        "audit_rate",
    }
)
"""Settings an environment variable spells as a number."""

_FLAGS = frozenset({"audit_invalidate"})
"""Settings an environment variable spells as a truth value; the others are read as
text."""


@dataclass(frozen=True)
class _Given:
    """A setting's value as found, and where: for the message that refuses it."""

    value: Any
    where: str
    text: bool = False  # from the environment: a string to parse


def _argument(name: str) -> str:
    return f"given as the argument {name}="


def load_settings(
    given: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    given_as: Callable[[str], str] = _argument,
) -> Settings:
    """Settings from ``given`` (arguments that are not ``None``), then the environment,
    then the file, then the defaults, each checked. Raises :class:`ConfigurationError`
    naming the setting, where it came from (``given_as(name)`` for ``given``: Django's
    ``TXCACHE['NAME']``), the value and what is allowed."""
    environ = os.environ if environ is None else environ
    found = _file_settings(environ)
    found |= _environment_settings(environ)
    found |= {
        name: _Given(value, given_as(name)) for name, value in given.items() if value is not None
    }
    _refuse_unknown(found)
    values = {name: _checked(name, each) for name, each in found.items()}
    if "dsn" not in values:
        raise ConfigurationError(
            "no database: pass dsn=…, set TXCACHE_DSN, or put dsn in txcache.toml "
            "(`txcache up` prints the settings of a local stack)"
        )
    return Settings(**values)


def _environment_settings(environ: Mapping[str, str]) -> dict[str, _Given]:
    """The ``TXCACHE_<NAME>`` variables that are set and not empty."""
    found = {}
    for name in _CHECKS:
        variable = f"TXCACHE_{name.upper()}"
        value = environ.get(variable)
        if value is not None and value != "":
            found[name] = _Given(value, f"from {variable}", text=True)
    return found


def _refuse_unknown(found: Mapping[str, _Given]) -> None:
    unknown = sorted(set(found) - set(_CHECKS))
    if not unknown:
        return
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, _CHECKS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        named.append(f"{name} ({found[name].where}{hint})")
    raise ConfigurationError(
        f"unknown txcache setting(s): {', '.join(named)}; the settings are "
        f"{', '.join(_CHECKS)} (docs/settings.md)"
    )


def _checked(name: str, given: _Given) -> Any:
    """``given``'s value, checked and converted; :class:`ConfigurationError` if refused."""
    value = _from_text(name, given.value) if given.text else given.value
    try:
        return _CHECKS[name](value)
    except validate.Refused as refused:
        what = f"setting {name} ({given.where})"
        message = refused.message(what, given.value, hidden=name in _HIDDEN)
        raise ConfigurationError(message) from None


def _from_text(name: str, text: str) -> Any:
    """What an environment variable's text stands for: a number or a truth value for the
    settings that are one (TOML and arguments have numbers and booleans of their own, so
    only here is text parsed)."""
    if name in _NUMBERS:
        return validate.number_text(text)
    if name in _FLAGS:
        return validate.flag_text(text)
    return text.strip() if name == "mode" else text


def _file_settings(environ: Mapping[str, str]) -> dict[str, _Given]:
    path = Path(environ.get("TXCACHE_CONFIG") or "txcache.toml")
    if not path.is_file():
        if environ.get("TXCACHE_CONFIG"):
            raise ConfigurationError(f"TXCACHE_CONFIG names {path}, which does not exist")
        return {}
    try:
        read = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigurationError(f"{path}: {error}") from None
    return {name: _Given(value, f"from {path}") for name, value in read.items()}
