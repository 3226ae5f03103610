"""The checks of what an application hands txcache — its settings and the arguments of its
calls — in one place, so that every refusal reads the same (docs/settings.md, "What each
accepts")::

    <what> must be <what is allowed>, not <the value's repr>[: <detail>]

A check is a function of the value that returns it converted (``30`` → ``30.0``) or raises
:class:`Refused`; its caller names the parameter and picks the exception:

- a *setting* — an argument of ``connect()``, a ``TXCACHE_*`` variable, a key of
  ``txcache.toml`` or of Django's ``TXCACHE`` — raises
  :class:`~txcache.ConfigurationError` (:mod:`txcache._config`);
- a *call argument* — ``read_only(staleness=)``, ``read_write(isolation=)``,
  ``@cacheable(version=)``, … — raises ``TypeError`` when its type is wrong (``True`` or
  ``"5"`` where a number of seconds is meant) and ``ValueError`` when its value is (NaN, an
  infinity, a negative number, an unknown level): Python's own convention
  (:func:`checked_argument`).

Each value is checked once, where it is given; the checks run per transaction
(:func:`staleness_argument`, :func:`token_argument`) take a fast path for a plain valid value.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, TypeVar, cast

import psycopg

from txcache._resp import parse_address, uses_tls

__all__ = [
    "ISOLATION_LEVELS",
    "MAX_TOKEN",
    "MAX_WAIT",
    "Refused",
    "address",
    "addresses",
    "agents",
    "cacheable_options",
    "checked_argument",
    "choice",
    "code_version",
    "count",
    "dsn",
    "flag",
    "flag_text",
    "fraction",
    "function_names",
    "http_token",
    "isolation",
    "isolation_argument",
    "key_context",
    "lasting_seconds",
    "lease",
    "module_names",
    "number_text",
    "pin_policy",
    "seconds",
    "serializer",
    "staleness_argument",
    "text",
    "token",
    "token_argument",
    "wait",
]

T = TypeVar("T")

ISOLATION_LEVELS = ("READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE")
"""What ``read_write(isolation=)`` takes (any case); ``READ UNCOMMITTED`` is PostgreSQL's
``READ COMMITTED`` under another name, so it is not offered."""

MAX_WAIT = 86_400.0
"""The longest timeout or interval a setting may ask for: one day. Each becomes an
operating-system timeout, which overflows near 1e9 s; anything near a day is a unit
mistake (milliseconds typed as seconds), not a wish."""

MAX_TOKEN = 2**64 - 1
"""A token is a WAL position, an unsigned 64-bit number."""

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 200  # a message, not a dump
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = _SHOWN.maxdict = 12


class Refused(Exception):
    """A value a check refuses: what is allowed, whether its type (rather than its value)
    is what is wrong, and what exactly is wrong inside it (an item of a list, say)."""

    def __init__(self, allowed: str, *, wrong_type: bool = False, detail: str = "") -> None:
        super().__init__(allowed)
        self.allowed = allowed
        self.wrong_type = wrong_type
        self.detail = detail

    def message(self, what: str, value: Any, *, hidden: bool = False) -> str:
        """The refusal of ``value`` given as ``what``; a ``hidden`` value (a password, a
        DSN) is named by its type only."""
        shown = _hidden(value) if hidden and value != "" else _SHOWN.repr(value)
        text = f"{what} must be {self.allowed}, not {shown}"
        return f"{text}: {self.detail}" if self.detail else text


def _hidden(value: Any) -> str:
    return f"the {type(value).__name__} given (hidden: it may hold a password)"


def checked_argument(what: str, value: Any, check: Callable[[Any], T]) -> T:
    """``check(value)`` for the call argument ``what`` (``"read_only(): staleness"``):
    ``TypeError`` or ``ValueError`` (module docstring) when refused."""
    try:
        return check(value)
    except Refused as refused:
        _raise_for_argument(refused, what, value)


def _raise_for_argument(refused: Refused, what: str, value: Any) -> NoReturn:
    kind = TypeError if refused.wrong_type else ValueError
    raise kind(refused.message(what, value)) from None


# -- numbers --------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    # bool is an int to Python, never a number of anything to a person.
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def seconds(value: Any) -> float:
    """A duration: a number of seconds, finite and >= 0 (``staleness``)."""
    allowed = "a number of seconds, finite and >= 0"
    if not _is_number(value):
        raise Refused(allowed, wrong_type=True)
    found = float(value)
    if not 0 <= found < math.inf:  # False for NaN too
        raise Refused(allowed)
    return found


MAX_LEASE = 60.0
"""The longest lease a node grants (``txcached``'s ``TXGET … LEASE`` limit), in seconds."""


def lease(value: Any) -> float:
    """A miss's lease: a number of seconds from 0 (none) to :data:`MAX_LEASE`, in whole
    milliseconds as the node takes it."""
    allowed = f"a number of seconds from 0 to {MAX_LEASE:g}"
    if not _is_number(value):
        raise Refused(allowed, wrong_type=True)
    found = float(value)
    if not 0 <= found <= MAX_LEASE:  # False for NaN too
        raise Refused(allowed)
    return round(found, 3)


def lasting_seconds(value: Any) -> float:
    """A lifetime: a number of seconds, finite and > 0 (Django's ``TOKEN_MAX_AGE``)."""
    allowed = "a number of seconds, finite and > 0"
    if not _is_number(value):
        raise Refused(allowed, wrong_type=True)
    found = float(value)
    if not 0 < found < math.inf:
        raise Refused(allowed)
    return found


def wait(value: Any) -> float:
    """A timeout or an interval: seconds, > 0 and at most :data:`MAX_WAIT`. Zero would
    mean "never wait" (every node down at once) or "refresh without pause"."""
    allowed = f"a number of seconds, > 0 and at most {MAX_WAIT:g} (one day)"
    if not _is_number(value):
        raise Refused(allowed, wrong_type=True)
    found = float(value)
    if not 0 < found <= MAX_WAIT:
        raise Refused(allowed)
    return found


def count(value: Any) -> int:
    """A whole number >= 1 (``2.0`` from a TOML file is 2)."""
    allowed = "a whole number >= 1"
    whole = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise Refused(allowed, wrong_type=not isinstance(value, float))
    if int(value) < 1:
        raise Refused(allowed)
    return int(value)


def fraction(value: Any) -> float:
    """A share of events: a number from 0 to 1 (``audit_rate``)."""
    allowed = "a number from 0 to 1 (0.01: one in a hundred)"
    if not _is_number(value):
        raise Refused(allowed, wrong_type=True)
    found = float(value)
    if not 0 <= found <= 1:  # False for NaN too
        raise Refused(allowed)
    return found


def token(value: Any) -> int:
    """A ``not_before`` token: an integer WAL position."""
    allowed = (
        "a token: an int from 0 to 2**64 - 1 (a commit_timestamp, Cache.timestamp() or "
        "written_token())"
    )
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise Refused(allowed, wrong_type=True)
    if not 0 <= int(value) <= MAX_TOKEN:
        raise Refused(allowed)
    return int(value)


def number_text(text: str) -> Any:
    """The number an environment variable spells (``"20"``, ``"0.5"``, ``"1e-1"``), else the
    text itself, for the setting's check to refuse by name."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


_FLAG_WORDS = {"true": True, "1": True, "yes": True, "on": True}
_FLAG_WORDS |= {"false": False, "0": False, "no": False, "off": False}


def flag_text(text: str) -> Any:
    """The truth value an environment variable spells (``true``/``false``, ``1``/``0``,
    ``yes``/``no``, ``on``/``off``, any case), else the text itself, for the setting's
    check to refuse by name."""
    return _FLAG_WORDS.get(text.strip().lower(), text)


# -- text -----------------------------------------------------------------------------------


def text(value: Any, allowed: str = "a non-empty string") -> str:
    """A non-empty string, as given."""
    if not isinstance(value, str):
        raise Refused(allowed, wrong_type=True)
    if not value:
        raise Refused(allowed)
    return value


def choice(value: Any, options: Iterable[str]) -> str:
    """One of ``options``, exactly."""
    listed = tuple(options)
    allowed = f"one of {', '.join(map(repr, listed))}"
    if not isinstance(value, str):
        raise Refused(allowed, wrong_type=True)
    if value not in listed:
        raise Refused(allowed)
    return value


def code_version(value: Any) -> str:
    """The ``code_version`` setting: surrounding whitespace dropped — ``$(git rev-parse
    HEAD)`` pasted with its newline is one version — and no control characters inside."""
    allowed = "a string without control characters, such as the release's commit"
    if not isinstance(value, str):
        raise Refused(allowed, wrong_type=True)
    found = value.strip()
    if not found.isprintable():
        raise Refused(allowed)
    return found


def dsn(value: Any) -> str:
    """A PostgreSQL connection string libpq can read, checked without connecting: a typo
    is named at ``connect()``, not discovered as a pool timeout 30 s later."""
    allowed = "a PostgreSQL connection string (postgresql://… or key=value …)"
    found = text(value, allowed)
    if not found.strip():
        raise Refused(allowed)
    try:
        psycopg.conninfo.conninfo_to_dict(found)
    except psycopg.Error as error:
        raise Refused(allowed, detail=_without_password(str(error).strip())) from None
    return found


def _without_password(message: str) -> str:
    """libpq's complaint about a URI quotes the URI: leave its password out."""
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1…@", message)


_TOKEN_CHARACTERS = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def http_token(value: Any, allowed: str) -> str:
    """A header or cookie name: an HTTP token (RFC 9110), as browsers and Django take it."""
    found = text(value, allowed)
    if not _TOKEN_CHARACTERS.fullmatch(found):
        raise Refused(allowed)
    return found


# -- addresses and lists of names -----------------------------------------------------------


_ADDRESS = "host:port (port 1 to 65535; [v6]:port for IPv6; rediss://host:port for TLS)"


def address(value: Any) -> str:
    """``host:port`` (``[v6]:port``), port 1…65535, optionally after ``redis://`` or
    ``rediss://`` (TLS); surrounding spaces dropped."""
    allowed = _ADDRESS
    found = text(value, allowed).strip()
    try:
        host, _port = parse_address(found)
    except ValueError:
        raise Refused(allowed) from None
    bare = (found.partition("://")[2] or found).rpartition(":")[0]
    # "a:1,b:2" parses as host "a:1,b": a list where one address is meant.
    if any(c.isspace() or c == "," for c in host) or (":" in host and not bare.startswith("[")):
        raise Refused(allowed)
    return found


def canonical_address(value: Any) -> str:
    """:func:`address`, written the one way the agent names the node (``NODES``): the host in
    lower case, the port as a plain number, ``rediss://`` kept and ``redis://`` dropped."""
    found = address(value)
    host, port = parse_address(found)
    host = f"[{host.lower()}]" if ":" in host else host.lower()
    return f"{'rediss://' if uses_tls(found) else ''}{host}:{port}"


def readable_file(value: Any) -> str:
    """The path of a file that exists and can be read (a CA bundle), as given."""
    allowed = "the path of a readable file"
    found = text(value, allowed)
    try:
        with open(found, "rb"):
            pass
    except OSError as error:
        raise Refused(allowed, detail=error.strerror or str(error)) from None
    return found


def _items(value: Any, allowed: str) -> list[str]:
    """A comma-separated string, or an iterable of strings: the items, stripped, without
    empty ones."""
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif isinstance(value, Iterable) and not isinstance(value, bytes | bytearray | Mapping):
        items = list(value)
    else:
        raise Refused(allowed, wrong_type=True)
    for item in items:
        if not isinstance(item, str):
            raise Refused(allowed, wrong_type=True, detail=f"{_SHOWN.repr(item)} is not a string")
    return [item.strip() for item in items if item.strip()]


def addresses(value: Any) -> tuple[str, ...]:
    """The cache nodes: ``host:port`` each, none twice."""
    allowed = "host:port addresses, a comma-separated string or a list of strings"
    found: list[str] = []
    for item in _items(value, allowed):
        try:
            found.append(address(item))
        except Refused as refused:
            raise Refused(allowed, detail=f"{item!r} is not {refused.allowed}") from None
        if found[-1] in found[:-1]:
            raise Refused(allowed, detail=f"{item!r} is listed twice")
    return tuple(found)


def agents(value: Any) -> str:
    """The ``agent`` setting: one agent's ``host:port``, or several (one active, the others
    standbys) as a comma-separated string or a list of strings, none twice; the addresses
    joined by commas (one address: as given, stripped)."""
    allowed = f"{_ADDRESS}, or several: a comma-separated string or a list of strings"
    try:
        found = addresses(value)
    except Refused as refused:
        raise Refused(allowed, wrong_type=refused.wrong_type, detail=refused.detail) from None
    if not found:
        raise Refused(allowed)
    return ",".join(found)


_REPLICA_NAME = re.compile(r"[A-Za-z0-9_.-]{1,63}")


def replicas(value: Any) -> tuple[tuple[str, str], ...]:
    """The ``replicas`` setting: hot standbys misses may run on, each named as the agent's
    ``--standby NAME=CONNINFO`` names it — a mapping of name to connection string, or
    ``name=conninfo`` entries (a list, or one string with ``;`` between them, since a
    connection string may hold commas); in the order given, no name twice."""
    allowed = (
        "standbys as {name: connection string}, or name=conninfo entries (a list, or a "
        "string with ';' between them); names of 1 to 63 letters, digits, '_', '.', '-'"
    )
    if isinstance(value, Mapping):
        entries = [(str(name), conninfo) for name, conninfo in value.items()]
    elif isinstance(value, str | list | tuple):
        items = value.split(";") if isinstance(value, str) else list(value)
        entries = [_replica_entry(item, allowed) for item in items if str(item).strip()]
    else:
        raise Refused(allowed, wrong_type=True)
    found: dict[str, str] = {}
    for name, conninfo in entries:
        if not _REPLICA_NAME.fullmatch(name):
            raise Refused(allowed, detail=f"{name!r} is not a standby name")
        if name in found:
            raise Refused(allowed, detail=f"{name!r} is named twice")
        try:
            found[name] = dsn(conninfo)
        except Refused as refused:
            raise Refused(allowed, detail=f"{name}: {refused.detail or refused.allowed}") from None
    return tuple(found.items())


@functools.cache
def _conninfo_keywords() -> frozenset[str]:
    """The keywords of a libpq connection string (``host``, ``dbname``, …)."""
    return frozenset(option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults())


def _replica_entry(item: Any, allowed: str) -> tuple[str, str]:
    text = item.strip() if isinstance(item, str) else ""
    name = text.split("=", 1)[0].strip()
    # A URI, or a conninfo's first keyword, where a name should be: never echoed (a password).
    if "://" in name or "@" in name or name in _conninfo_keywords():
        raise Refused(
            allowed,
            detail="an entry is a connection string without a name: name each standby as "
            "the agent's --standby NAME=CONNINFO does, {'NAME': 'connection string'}",
        )
    if "=" not in text:
        raise Refused(allowed, detail="an entry is not name=conninfo")
    conninfo = text.split("=", 1)[1]
    return name, conninfo.strip()


def module_names(value: Any) -> tuple[str, ...]:
    """The ``code_packages`` setting: dotted module names, sorted (one order, one hash)."""
    allowed = "module names, a comma-separated string or a list of strings"
    names = sorted(set(_items(value, allowed)))
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise Refused(allowed, detail=f"{name!r} is not a module name")
    return tuple(names)


def function_names(value: Any) -> tuple[str, ...]:
    """``safe_functions``: SQL function names, ``name`` or ``schema.name``."""
    allowed = "SQL function names (name or schema.name), a comma-separated string or a list"
    names = _items(value, allowed)
    for name in names:
        parts = name.split(".")
        if len(parts) > 2 or not all(part.strip() for part in parts):
            raise Refused(allowed, detail=f"{name!r} is not a function name")
    return tuple(names)


# -- arguments of calls ---------------------------------------------------------------------


def staleness_argument(value: Any, function: str = "read_only()") -> float:
    """``staleness`` of a read-only transaction, checked: :func:`seconds`. Runs at every
    transaction, so a plain valid number costs two comparisons."""
    if (type(value) is float or type(value) is int) and 0 <= value < math.inf:
        return float(value)
    return checked_argument(f"{function}: staleness", value, seconds)


def token_argument(value: Any, function: str) -> int:
    """A ``not_before`` token, checked: :func:`token`. Runs per transaction: a plain
    valid ``int`` costs two comparisons."""
    if type(value) is int and 0 <= value <= MAX_TOKEN:
        return value
    return checked_argument(f"{function}: not_before", value, token)


def isolation(value: Any) -> str:
    """An isolation level for ``BEGIN``, upper case (any case given)."""
    allowed = f"one of {', '.join(map(repr, ISOLATION_LEVELS))} (any case)"
    if not isinstance(value, str):
        raise Refused(allowed, wrong_type=True)
    if value.upper() not in ISOLATION_LEVELS:
        raise Refused(allowed)
    return value.upper()


def isolation_argument(value: Any) -> str | None:
    """``read_write(isolation=)``, checked; ``None`` for the database's default."""
    if value is None:
        return None
    return checked_argument("read_write(): isolation", value, isolation)


def flag(value: Any) -> bool:
    """``True`` or ``False`` (``1`` or ``"no"`` is refused: it is not a truth value)."""
    if not isinstance(value, bool):
        raise Refused("True or False", wrong_type=True)
    return value


def _version(value: Any) -> str:
    allowed = "a string without control characters"
    if not isinstance(value, str):
        raise Refused(allowed, wrong_type=True)
    if not value.isprintable():
        raise Refused(allowed)
    return value


def _context_name(value: Any) -> str:
    allowed = "a non-empty string without control characters"
    found = text(value, allowed)
    if not found.isprintable():
        raise Refused(allowed)
    return found


def _context_names(value: Any) -> frozenset[str]:
    allowed = "a key context's name, or an iterable of them (non-empty strings)"
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Iterable) or isinstance(value, bytes | bytearray):
        raise Refused(allowed, wrong_type=True)
    names = list(value)
    for name in names:
        try:
            _context_name(name)
        except Refused as refused:
            detail = f"{_SHOWN.repr(name)} is not {refused.allowed}"
            raise Refused(allowed, wrong_type=refused.wrong_type, detail=detail) from None
    return frozenset(names)


def cacheable_options(
    version: Any, manual_invalidation: Any, independent_of: Any
) -> tuple[str, bool, frozenset[str]]:
    """The options of ``@cacheable(...)``, checked once, at decoration: ``version`` a
    string (it is hashed into every key), ``manual_invalidation`` a bool (``"no"`` would be
    true), ``independent_of`` a name or names (``"language"`` is one name, not eight)."""
    return (
        checked_argument("@cacheable: version", version, _version),
        checked_argument("@cacheable: manual_invalidation", manual_invalidation, flag),
        checked_argument("@cacheable: independent_of", independent_of, _context_names),
    )


def _reader(value: Any) -> Callable[[], Any]:
    if not callable(value):
        raise Refused("a callable taking no arguments", wrong_type=True)
    return cast("Callable[[], Any]", value)


def key_context(name: Any, read: Any) -> tuple[str, Callable[[], Any]]:
    """``register_key_context(name, read)``, checked: the name goes into every key."""
    return (
        checked_argument("register_key_context(): name", name, _context_name),
        checked_argument("register_key_context(): read", read, _reader),
    )


def serializer(value: Any) -> Any:
    """``connect(serializer=)``: ``None`` or an object with ``dumps`` and ``loads``."""
    methods = (getattr(value, name, None) for name in ("dumps", "loads"))
    if value is not None and not all(callable(method) for method in methods):
        raise Refused("None or an object with dumps() and loads() (txcache.Serializer)")
    return value


def pin_policy(value: Any) -> Any:
    """``connect(pin_policy=)``: ``None`` or a callable ``(pin_set, now) -> Pin | None``."""
    if value is not None and not callable(value):
        raise Refused("None or a callable (pin_set, now) -> Pin | None (txcache.PinPolicy)")
    return value
