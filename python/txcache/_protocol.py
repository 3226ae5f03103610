"""The txcache wire protocol in Python: every command of ``txcached`` and ``txcache-agent``
that Python code sends, its arguments and its typed reply, defined here once
(docs/protocol.md is the contract). The library (:mod:`txcache._nodes`,
:mod:`txcache._agent`), the ``txcache`` command (``txcache status``) and the benches all use
these functions; nothing else in the package encodes a command or parses a reply.

Each function returns a :class:`~txcache._resp.Command`: the request and the decoder of its
reply. A transport runs it:

- :meth:`RespConnection.run <txcache._resp.RespConnection.run>` — one connection; raises the
  server's :class:`~txcache._resp.ReplyError`, :class:`~txcache._resp.BadReply` for a reply
  of the wrong shape, :class:`~txcache._resp.ConnectionLost` (and its
  :class:`~txcache._resp.PasswordRefused`) when the connection fails.
- :meth:`Endpoint.run <txcache._resp.Endpoint.run>` — the library's: ``None`` while the
  server is down, an error reply returned rather than raised.

For a bench or a tool, :func:`connect` and the command functions are the whole interface::

    from txcache import _protocol as protocol

    with protocol.connect("127.0.0.1:6380", password=None, timeout=60) as node:
        node.run(protocol.txstatus()).position             # N
        protocol.integer_fields(node.run(protocol.info("memory")))["used_memory"]
        node.run(protocol.txget(b"key", 100, 200))          # Hit or Miss
    with protocol.connect("127.0.0.1:6390") as agent:
        agent.run(protocol.agent_status())["pins_certified"]
        agent.run(protocol.pin())                            # a fresh Pin
        agent.run(protocol.commit_lsn(xid, timeout_ms=5000))

``connection.call(*arguments)`` sends anything else (``TXHEARTBEAT``, ``FLUSHALL``…) and
returns the reply as hiredis parses it. Nodes: :func:`txget`, :func:`txset`,
:func:`txinterval`, :func:`txstatus`, :func:`delete`, :func:`info`; the agent:
:func:`pins`, :func:`pin`, :func:`commit_lsn`, :func:`tag_columns`, :func:`barrier`,
:func:`database`, :func:`agent_status`, :func:`agent_role`, :func:`agent_standbys`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from txcache._pinset import Pin
from txcache._resp import (
    BadReply,
    Command,
    RespConnection,
    parse_address,
    tls_context,
    uses_tls,
)

__all__ = [
    "MISS_KINDS",
    "Barrier",
    "CatalogVersion",
    "DatabaseIdentity",
    "Hit",
    "Interval",
    "Miss",
    "NodeStatus",
    "Stored",
    "agent_role",
    "agent_standbys",
    "agent_status",
    "barrier",
    "commit_lsn",
    "connect",
    "database",
    "delete",
    "info",
    "integer_fields",
    "max_staleness",
    "nodes",
    "parse_fields",
    "pin",
    "pins",
    "standby_pins",
    "stream_name",
    "tag_columns",
    "txdatabase",
    "txget",
    "txinterval",
    "txset",
    "txstatus",
]

MISS_KINDS = ("compulsory", "capacity", "staleness", "consistency")
"""Why a node's ``TXGET`` missed (a node counts each in INFO ``misses_<kind>``)."""

_MICROS = 1_000_000
_INTEGER = re.compile(r"-?[0-9]+")


def connect(
    address: str,
    *,
    password: str | None = None,
    timeout: float = 5.0,
    tls_ca: str | None = None,
) -> RespConnection:
    """One connection to a node or the agent at ``host:port`` (``rediss://host:port``:
    over TLS, checked against ``tls_ca`` or the system's CAs), authenticated with
    ``password`` if given; ``timeout`` seconds for connecting and for each reply. Raises
    :class:`~txcache._resp.ConnectionLost` (:class:`~txcache._resp.PasswordRefused` when
    ``AUTH`` is refused), ``ValueError`` for a malformed address."""
    tls = tls_context(tls_ca) if uses_tls(address) else None
    return RespConnection(
        parse_address(address),
        password=password,
        connect_timeout=timeout,
        timeout=timeout,
        tls=tls,
    )


# -- cache nodes: versioned commands ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interval:
    """A validity interval ``[lo, hi)`` as a node reports it; ``open``: still valid past
    ``hi - 1``, which is only as far as the node has seen."""

    lo: int
    hi: int
    open: bool


@dataclass(frozen=True, slots=True)
class Hit:
    """A cached version valid somewhere in the requested range."""

    value: bytes
    interval: Interval
    tags: tuple[str, ...]
    """The open version's tags (asked for with ``WITHTAGS``), for enclosing functions."""


@dataclass(frozen=True, slots=True)
class Miss:
    """No usable version: ``kind`` is the node's miss type (:data:`MISS_KINDS`) or the
    library's (``unavailable``: the node is down; ``error``: it refused the request).
    ``lease`` (asked for with ``LEASE``): ``0`` when the caller now holds the key's lease,
    else how many milliseconds another caller still holds it; ``None`` when not asked."""

    kind: str
    lease: int | None = None


def txget(
    key: bytes | str, lo: int, hi: int, *, with_tags: bool = False, lease_ms: int | None = None
) -> Command[Hit | Miss]:
    """``TXGET key lo hi [WITHTAGS] [LEASE ms]``: the newest version valid somewhere in
    ``[lo, hi]``; on a miss with ``lease_ms``, the key's lease or how long another holds it."""
    command: tuple[str | bytes | int, ...] = ("TXGET", key, lo, hi)
    if with_tags:
        command += ("WITHTAGS",)
    if lease_ms is not None:
        command += ("LEASE", lease_ms)
    return Command(command, _hit_or_miss)


def txrelease(key: bytes | str) -> Command[int]:
    """``TXRELEASE key``: ends the key's lease without a store (``1`` if it had one)."""
    return Command(("TXRELEASE", key), int)


def _hit_or_miss(reply: Sequence[Any]) -> Hit | Miss:
    if reply[0] is None:
        kind = reply[1].decode()
        if kind not in MISS_KINDS:  # it names a counter: only the protocol's kinds
            raise BadReply(f"unknown miss type {kind[:40]!r}")
        # The third element is there exactly when LEASE was sent.
        return Miss(kind, int(reply[2]) if len(reply) > 2 else None)
    value, lo, hi, is_open = reply[:4]
    if not isinstance(value, bytes):
        raise BadReply(f"a hit's value is {type(value).__name__}, not a bulk string")
    # The fifth element is there exactly when WITHTAGS was sent.
    tags = tuple(tag.decode() for tag in reply[4]) if len(reply) > 4 else ()
    return Hit(value, Interval(int(lo), int(hi), bool(is_open)), tags)


@dataclass(frozen=True, slots=True)
class Stored:
    """``TXSET``'s reply: ``outcome`` is ``inserted``, ``extended``, ``nondeterministic``
    or ``empty``; ``lo``/``hi`` the stored interval (``hi`` ``None`` when open; both
    ``None`` when nothing was stored)."""

    outcome: str
    lo: int | None
    hi: int | None


def txset(
    key: bytes | str,
    value: bytes,
    lo: int,
    hi: int | None,
    *,
    snapshot: int | None = None,
    tags: Iterable[str] = (),
) -> Command[Stored]:
    """``TXSET key value lo hi|OPEN [SNAPSHOT s TAGS tag ...]`` (``hi`` ``None``: open).
    ``tags`` are sent only with a ``snapshot``: without one the value came from no query,
    and the node has no snapshot to measure tags from."""
    command: tuple[str | bytes | int, ...] = ("TXSET", key, value, lo, "OPEN" if hi is None else hi)
    if snapshot is not None:
        command += ("SNAPSHOT", snapshot, "TAGS", *tags)
    return Command(command, _stored)


def _stored(reply: Sequence[Any]) -> Stored:
    outcome, lo, hi = reply
    return Stored(outcome.decode(), _optional_int(lo), _optional_int(hi))


def _optional_int(value: int | None) -> int | None:
    return None if value is None else int(value)


def txinterval(snapshot: int, tags: Iterable[str]) -> Command[Interval]:
    """``TXINTERVAL s TAGS tag ...``: where results read at ``snapshot`` from the rows
    ``tags`` name are known valid."""
    return Command(("TXINTERVAL", snapshot, "TAGS", *tags), _interval)


def _interval(reply: Sequence[Any]) -> Interval:
    lo, hi, is_open = reply
    return Interval(int(lo), int(hi), bool(is_open))


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """``TXSTATUS``: the node's place in the invalidation stream."""

    position: int
    """``N``: the last invalidation, heartbeat or reset applied."""
    history_horizon: int | None
    """``H``: every commit after it is known; ``None`` before any stream message."""
    last_message_time: int
    """Commit time (µs since the epoch) of the newest stream message; 0 before any."""


def txstatus() -> Command[NodeStatus]:
    """``TXSTATUS``."""
    return Command(("TXSTATUS",), _node_status)


def _node_status(reply: Sequence[Any]) -> NodeStatus:
    position, horizon, last_time = reply
    return NodeStatus(int(position), _optional_int(horizon), int(last_time))


def txdatabase() -> Command[str | None]:
    """``TXDATABASE``: the database (``system_identifier/oid``) whose stream the node
    follows; ``None`` until an agent named one."""
    return Command(("TXDATABASE",), _optional_text)


def _optional_text(reply: bytes | None) -> str | None:
    return None if reply is None else reply.decode()


def delete(key: bytes | str) -> Command[int]:
    """``DEL key``: every version of ``key`` removed; how many keys were (0 or 1)."""
    return Command(("DEL", key), int)


# -- field:value replies (a node's INFO, the agent's STATUS) ----------------------------------


def max_staleness() -> Command[float]:
    """``CONFIG GET max-staleness``: the node's ``--max-staleness``, in seconds."""
    return Command(("CONFIG", "GET", "max-staleness"), _config_seconds)


def _config_seconds(reply: Sequence[Any]) -> float:
    _name, value = reply
    return float(value)


def info(section: str | None = None) -> Command[dict[str, str]]:
    """``INFO [section]``: every field of the reply, by name, as text (docs/node.md lists
    them; :func:`integer_fields` keeps the numbers)."""
    return Command(("INFO",) if section is None else ("INFO", section), parse_fields)


def parse_fields(text: bytes | str) -> dict[str, str]:
    """A reply of ``field:value`` lines (``INFO``, ``STATUS``) as a dict; blank lines and
    ``# Section`` headers are skipped, a value may contain ``:``."""
    if isinstance(text, bytes):
        text = text.decode()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, colon, value = line.partition(":")
        if colon:
            fields[name.strip()] = value.strip()
    return fields


def integer_fields(fields: Mapping[str, str]) -> dict[str, int]:
    """The fields whose value is an integer, as integers (ratios and names left out)."""
    return {name: int(value) for name, value in fields.items() if _INTEGER.fullmatch(value)}


def agent_status() -> Command[dict[str, int]]:
    """The agent's ``STATUS``: ``commit_position``, ``heartbeat_position``,
    ``nodes_connected``, ``delivered_everywhere``, ``pins``, ``pins_certified``,
    ``pins_unclean``, ``pins_below_floor`` (every integer field it sends)."""
    return Command(("STATUS",), _status_fields)


def _status_fields(reply: bytes) -> dict[str, int]:
    return integer_fields(parse_fields(reply))


def agent_standbys() -> Command[dict[str, int]]:
    """The agent's ``STATUS`` ``standby_pins``: each hot standby it pins on (``--standby``,
    by name, in its flags' order) with its pin count; empty without standbys."""
    return Command(("STATUS",), lambda reply: standby_pin_counts(parse_fields(reply)))


def standby_pin_counts(fields: Mapping[str, str]) -> dict[str, int]:
    """The ``standby_pins`` of ``STATUS`` fields already read (:func:`parse_fields`)."""
    pairs = (item.partition("=") for item in fields.get("standby_pins", "").split(",") if item)
    return {name: int(count) for name, _, count in pairs if count.isdigit()}


def agent_role() -> Command[str]:
    """The agent's ``STATUS`` ``role``: ``active``, or ``standby`` (another agent holds the
    lease, or this one's was not renewed in time; docs/agent.md, "High availability")."""
    return Command(("STATUS",), _role)


def _role(reply: bytes) -> str:
    return parse_fields(reply).get("role", "active")


# -- the agent --------------------------------------------------------------------------------


USED_PINS_BYTES = 4000
"""Most bytes of ``PINS``'s list of used pins (a request word may not exceed 4096)."""


def pins(used: Collection[int] = ()) -> Command[list[Pin]]:
    """``PINS``: the live pins as the agent lists them (oldest first), renewing the lease of
    the pins at the commit points ``used`` (the newest first, as many as fit in
    :data:`USED_PINS_BYTES`)."""
    return Command(("PINS", *_used_argument(used)), _pin_list)


def _used_argument(used: Collection[int]) -> tuple[str, ...]:
    """The ``used`` argument of ``PINS`` and ``STANDBYPINS``: the commit points, newest
    first, as many as fit in :data:`USED_PINS_BYTES`; none when empty."""
    if not used:
        return ()
    listed, size = [], 0
    for ts in sorted(used, reverse=True):
        size += len(str(ts)) + 1
        if size > USED_PINS_BYTES:
            break
        listed.append(str(ts))
    return (",".join(listed),)


def pin(timeout_ms: int | None = None) -> Command[Pin]:
    """``PIN [timeout_ms]``: a snapshot taken and certified now (★); with ``timeout_ms``
    the agent answers within it, an error when certification takes longer (its stream is
    behind), so that the caller does not take a held-back stream for an agent down."""
    return Command(("PIN",) if timeout_ms is None else ("PIN", timeout_ms), _pin)


def _pin_list(reply: Sequence[Sequence[Any]]) -> list[Pin]:
    return [_pin(entry) for entry in reply]


def _pin(reply: Sequence[Any]) -> Pin:
    """One element of ``PINS`` (or the ``PIN`` reply): ``[ts, snapshot_id, current_as_of
    (µs), snapshot]``, and ``fingerprint, after`` from an agent without DDL triggers
    (``--ddl-tracking fingerprint``); an agent that does not send the snapshot's contents
    leaves them unknown (``None``)."""
    ts, snapshot_id, current_as_of, *rest = reply
    snapshot_text = rest[0].decode() if rest else None
    pin = Pin(int(ts), snapshot_id.decode(), int(current_as_of) / _MICROS, snapshot_text)
    if len(rest) < 3:
        return pin
    return dataclasses.replace(pin, fingerprint=rest[1].decode(), after=int(rest[2]))


def standby_pins(used: Collection[int] = (), *, wanted: bool = False) -> Command[list[Pin]]:
    """``STANDBYPINS``: the pins the agent holds on hot standbys (``--standby``), each
    ``[name, ts, snapshot_id, current_as_of (µs), snapshot]`` (a pin's :attr:`Pin.server`
    is its standby's name), renewing the lease of the standby pins at the commit points
    ``used``; ``wanted`` (``WANTED``): the library ran transactions since its last refresh,
    so a standby that let its pins go for want of use pins again."""
    flag = ("WANTED",) if wanted else ()
    return Command(("STANDBYPINS", *_used_argument(used), *flag), _standby_pin_list)


def _standby_pin_list(reply: Sequence[Sequence[Any]]) -> list[Pin]:
    return [
        dataclasses.replace(_pin(entry[1:]), server=bytes(entry[0]).decode()) for entry in reply
    ]


def commit_lsn(xid: int, *, timeout_ms: int = 5000, upto: int | None = None) -> Command[int]:
    """``COMMITLSN xid timeout_ms [upto]``: the commit LSN of transaction ``xid``, once
    decoded (the agent answers ``-TIMEOUT`` if not within ``timeout_ms``, and
    ``-NOTDECODED`` once its stream passed ``upto`` without it)."""
    arguments = (
        ("COMMITLSN", xid, timeout_ms) if upto is None else ("COMMITLSN", xid, timeout_ms, upto)
    )
    return Command(arguments, int)


class CatalogVersion(NamedTuple):
    """One version of ``TAGCOLUMNS``: from snapshot ``since`` on, each table
    (``schema.table`` as in tags) and the columns that lead one of its indexes."""

    since: int
    tables: tuple[tuple[str, tuple[str, ...]], ...]


def tag_columns() -> Command[list[CatalogVersion]]:
    """``TAGCOLUMNS``: the tag-column catalog's versions, oldest first."""
    return Command(("TAGCOLUMNS",), _catalog)


def _catalog(reply: Sequence[Any]) -> list[CatalogVersion]:
    return [CatalogVersion(int(since), _tables(tables)) for since, tables in reply]


def _tables(reply: Sequence[Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((table.decode(), tuple(c.decode() for c in columns)) for table, columns in reply)


class Barrier(NamedTuple):
    """``BARRIER``: the newest schema change (or ``TRUNCATE``) decoded, and how far the
    stream has decoded, read together."""

    barrier: int
    decoded: int


def barrier() -> Command[Barrier]:
    """``BARRIER``."""
    return Command(("BARRIER",), _barrier)


def _barrier(reply: Sequence[Any]) -> Barrier:
    position, decoded = reply
    return Barrier(int(position), int(decoded))


class DatabaseIdentity(NamedTuple):
    """``DATABASE``: the database the agent's stream decodes."""

    system_identifier: str
    """The cluster's ``pg_control_system().system_identifier``."""
    oid: int
    """The database's oid."""
    name: str


def database() -> Command[DatabaseIdentity]:
    """``DATABASE``."""
    return Command(("DATABASE",), _database)


def _database(reply: Sequence[Any]) -> DatabaseIdentity:
    system_identifier, oid, name = reply
    return DatabaseIdentity(system_identifier.decode(), int(oid), name.decode())


def stream_name(database: DatabaseIdentity) -> str:
    """How the nodes name ``database`` (``TXDATABASE``): ``system_identifier/oid``."""
    return f"{database.system_identifier}/{database.oid}"


def nodes() -> Command[tuple[str, ...]]:
    """``NODES``: the cache nodes the agent feeds now, each as its ``--node`` list or the
    table ``txcache.cache_nodes`` names it (``host:port``, ``rediss://host:port``): the
    ring libraries place keys on."""
    return Command(("NODES",), _nodes)


def _nodes(reply: Sequence[Any]) -> tuple[str, ...]:
    """Each address checked as the ``nodes`` setting's are: one that is not ``host:port``
    makes the whole reply a :class:`BadReply` (the ring stays as it was)."""
    addresses = tuple(address.decode() for address in reply)
    for address in addresses:
        try:
            parse_address(address)
        except ValueError as error:
            raise BadReply(f"NODES listed {error}") from None
    return addresses
