"""Settings of a :class:`~txcache.Cache`: arguments > environment > ``txcache.toml`` >
defaults.

Each setting ``name`` is read from the argument, else ``TXCACHE_<NAME>``, else the file
(``txcache.toml`` in the working directory, or the path in ``TXCACHE_CONFIG``). Lists
(``nodes``, ``code_packages``) are comma-separated strings in the environment and may be
either a string or a list elsewhere. docs/settings.md describes every setting.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args

from txcache._resp import parse_address
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
    """The cache nodes, ``host:port`` each."""
    agent: str | None = None
    """The agent's library endpoint, ``host:port``."""
    password: str | None = None
    """The nodes' and the agent's ``--password``."""
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
    refresh_interval: float = 0.25
    """Seconds between pin-list refreshes."""
    code_version: str = ""
    """Mixed into every cache key: the release's commit."""
    code_packages: tuple[str, ...] | None = None
    """The packages keys hash the code of (``None``: by location)."""


def _nodes(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    if not all(isinstance(item, str) for item in items):
        raise TypeError("nodes must be strings")
    return tuple(_address(item.strip()) for item in items if item.strip())


def _address(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("an address is host:port")
    parse_address(value)  # ValueError names the value
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("a number of seconds, not a boolean")
    seconds = float(value)
    if not 0 <= seconds < float("inf"):
        raise ValueError("seconds must be finite and not negative")
    return seconds


def _count(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise TypeError("a whole number")
    count = int(value)
    if count < 1:
        raise ValueError("at least 1")
    return count


def _code_version(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a string, such as the release's commit (quoted in txcache.toml)")
    version = value.strip()  # `$(git rev-parse HEAD)` pasted with its newline is one version
    if not version.isprintable():
        raise ValueError("control characters in a version are a mistake, not a version")
    return version


def _packages(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    if not all(isinstance(item, str) for item in items):
        raise TypeError("package names must be strings")
    names = sorted({item.strip() for item in items if item.strip()})  # one order: one hash
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"{name!r} is not a module name")
    return tuple(names)


_CONVERTERS: dict[str, Any] = {
    "nodes": _nodes,
    "agent": _address,
    "staleness": _seconds,
    "fresh_pin_age": _seconds,
    "pool_size": _count,
    "pool_timeout": _seconds,
    "node_timeout": _seconds,
    "refresh_interval": _seconds,
    "code_version": _code_version,
    "code_packages": _packages,
}


def load_settings(given: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``given`` (arguments that are not ``None``), then the environment,
    then the file, then the defaults. Raises :class:`ConfigurationError`."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = dict(_file_settings(environ))
    names = {field.name for field in fields(Settings)}
    for name in names:
        env_value = environ.get(f"TXCACHE_{name.upper()}")
        if env_value is not None and env_value != "":
            values[name] = env_value
    values.update({name: value for name, value in given.items() if value is not None})
    unknown = set(values) - names
    if unknown:
        raise ConfigurationError(f"unknown txcache setting(s): {', '.join(sorted(unknown))}")
    for name, convert in _CONVERTERS.items():
        if name in values:
            try:
                values[name] = convert(values[name])
            except (TypeError, ValueError) as error:
                raise ConfigurationError(
                    f"setting {name}: {values[name]!r} is malformed ({error})"
                ) from None
    if "dsn" not in values:
        raise ConfigurationError(
            "no database: pass dsn=…, set TXCACHE_DSN, or put dsn in txcache.toml "
            "(`txcache up` prints the settings of a local stack)"
        )
    if values.get("mode", "consistent") not in get_args(Mode):
        raise ConfigurationError(f"setting mode: {values['mode']!r} is not one of {get_args(Mode)}")
    return Settings(**values)


def _file_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    path = Path(environ.get("TXCACHE_CONFIG") or "txcache.toml")
    if not path.is_file():
        if environ.get("TXCACHE_CONFIG"):
            raise ConfigurationError(f"TXCACHE_CONFIG names {path}, which does not exist")
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigurationError(f"{path}: {error}") from None
