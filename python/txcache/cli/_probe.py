"""Ask cache nodes and the agent how they are (``txcache status``).

One short RESP2 connection per endpoint, no retries: a node that does not answer within the
timeout is reported as unreachable, with the reason, never raised. What a node answers:
``TXSTATUS`` (its stream position N) and ``INFO`` (memory, keys, hits and misses,
invalidations: ``docs/protocol.md``); the agent: ``STATUS`` and ``PINS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = [
    "MISS_KINDS",
    "AgentReport",
    "NodeReport",
    "Pin",
    "Report",
    "parse_address",
    "probe_agent",
    "probe_node",
]

MISS_KINDS = ("compulsory", "capacity", "staleness", "consistency")
"""The kinds of versioned misses a node counts (INFO ``misses_<kind>``)."""

_AUTH_HINT = " (give --password or set TXCACHE_PASSWORD)"
_SHAPE_ERRORS = (ValueError, TypeError, AttributeError, UnicodeDecodeError)


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as ``(host, port)``; ``ValueError`` if malformed."""
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {text!r}")
    return host.strip("[]"), int(port)


@dataclass
class Report:
    """What one endpoint said: ``state`` is ``up``, ``unreachable`` (no connection or no
    answer in time), ``refused`` (an error reply: authentication, an unknown command) or
    ``bad reply``; ``error`` says why when it is not ``up``."""

    address: str
    state: str = "up"
    error: str | None = None

    @property
    def reachable(self) -> bool:
        """Whether the endpoint answered every question."""
        return self.state == "up"

    def failed(self, error: Exception, what: str) -> None:
        """Record why asking failed (``what`` names the kind of endpoint expected)."""
        if isinstance(error, redis.ResponseError | redis.AuthenticationError):
            self.state, self.error = "refused", _describe(error)
        elif isinstance(error, redis.RedisError | OSError):
            self.state, self.error = "unreachable", _describe(error)
        else:
            self.state = "bad reply"
            self.error = f"unexpected reply ({error}): is this {what}?"


@dataclass
class NodeReport(Report):
    """What one cache node said, or why it could not be asked (``error``)."""

    position: int = 0
    history_horizon: int | None = None
    last_message_time: int = 0
    info: dict[str, int] = field(default_factory=dict)

    @property
    def misses(self) -> dict[str, int]:
        """Versioned misses by kind."""
        return {kind: self.info.get(f"misses_{kind}", 0) for kind in MISS_KINDS}

    @property
    def hit_rate(self) -> float | None:
        """Versioned hits / lookups, or ``None`` before the first lookup."""
        return _rate(self.info.get("hits", 0), sum(self.misses.values()))

    @property
    def plain_hit_rate(self) -> float | None:
        """Plain ``GET`` hits / ``GET`` lookups, or ``None`` before the first."""
        return _rate(self.info.get("plain_hits", 0), self.info.get("plain_misses", 0))


@dataclass(frozen=True)
class Pin:
    """One pin of the agent's ``PINS``."""

    ts: int
    snapshot_id: str
    current_as_of: int


@dataclass
class AgentReport(Report):
    """What the agent said, or why it could not be asked (``error``)."""

    status: dict[str, int] = field(default_factory=dict)
    pins: list[Pin] = field(default_factory=list)

    @property
    def newest_pin(self) -> Pin | None:
        """The newest live pin (``PINS`` lists them oldest first)."""
        return self.pins[-1] if self.pins else None

    @property
    def commit_position(self) -> int | None:
        """The LSN of the newest commit the agent decoded (``None`` if unreachable)."""
        return self.status.get("commit_position") if self.reachable else None


def _rate(hits: int, misses: int) -> float | None:
    total = hits + misses
    return hits / total if total else None


def _client(address: str, password: str | None, timeout: float) -> redis.Redis:
    host, port = parse_address(address)
    return redis.Redis(
        host=host,
        port=port,
        password=password,
        protocol=2,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        lib_name=None,
        lib_version=None,
    )


def _call(client: redis.Redis, *command: str) -> Any:
    return client.execute_command(*command)  # type: ignore[no-untyped-call]


def _describe(error: Exception) -> str:
    """One line saying why an endpoint could not be asked, and what to do about auth."""
    text = str(error).strip() or type(error).__name__
    auth = isinstance(error, redis.AuthenticationError) or "AUTH" in text.upper()
    return text + (_AUTH_HINT if auth else "")


def probe_node(address: str, *, password: str | None = None, timeout: float = 2.0) -> NodeReport:
    """Ask the node at ``address`` for ``TXSTATUS`` and ``INFO``; never raises."""
    report = NodeReport(address)
    try:
        client = _client(address, password, timeout)
        with client:
            position, horizon, last_time = _call(client, "TXSTATUS")
            info = _call(client, "INFO")
            report.position, report.last_message_time = int(position), int(last_time)
            report.history_horizon = None if horizon is None else int(horizon)
            report.info = {name: value for name, value in info.items() if isinstance(value, int)}
    except (redis.RedisError, OSError, *_SHAPE_ERRORS) as error:
        report.failed(error, "a txcached node")
    return report


def _parse_status(text: bytes | str) -> dict[str, int]:
    """The agent's ``STATUS`` reply: ``field:value`` lines."""
    if isinstance(text, bytes):
        text = text.decode()
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and value.strip().lstrip("-").isdigit():
            fields[name.strip()] = int(value)
    return fields


def probe_agent(address: str, *, password: str | None = None, timeout: float = 2.0) -> AgentReport:
    """Ask the agent at ``address`` for ``STATUS`` and ``PINS``; never raises."""
    report = AgentReport(address)
    try:
        client = _client(address, password, timeout)
        with client:
            status = _call(client, "STATUS")
            pins = _call(client, "PINS")
            report.status = _parse_status(status)
            report.pins = [Pin(int(ts), snap.decode(), int(as_of)) for ts, snap, as_of, *_ in pins]
    except (redis.RedisError, OSError, *_SHAPE_ERRORS) as error:
        report.failed(error, "a txcache-agent")
    return report
