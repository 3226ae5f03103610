"""Ask cache nodes and the agent how they are (``txcache status``).

One short connection per endpoint (:func:`txcache._protocol.connect`), no retries: a node
that does not answer within the timeout is reported as unreachable, with the reason, never
raised; a ``rediss://`` endpoint is spoken to over TLS, its certificate checked against
``tls_ca`` (else the system's CAs). What a node answers: ``TXSTATUS`` (its stream position
N) and ``INFO`` (memory, keys, hits and misses, invalidations: ``docs/protocol.md``); an
agent: ``STATUS`` and ``PINS`` (which a standby agent refuses: it is reported as one, not as
failing). The commands and their replies are :mod:`txcache._protocol`'s.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from dataclasses import dataclass, field

from txcache import _protocol as protocol
from txcache._agent_follow import is_standby
from txcache._pinset import Pin
from txcache._protocol import MISS_KINDS
from txcache._resp import BadReply, Command, ConnectionLost, PasswordRefused, ReplyError

__all__ = ["AgentReport", "NodeReport", "Report", "probe_agent", "probe_node"]

_AUTH_HINT = " (give --password or set TXCACHE_PASSWORD)"
_TLS_HINT = "; give txcache status --tls-ca the CA file, or set TXCACHE_TLS_CA"
_NAME_HINT = (
    "; the certificate does not name this host: address it by a name the certificate holds "
    "(its subjectAltName), or give it a certificate for this one"
)
# An error reply starts with its code (ERR, NOAUTH, WRONGPASS…): a word for programs, left
# out of what people read, as redis-py leaves it out of its exceptions' messages.
_AUTH_CODES = ("NOAUTH", "WRONGPASS")


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
        if isinstance(error, PasswordRefused):
            self.state, self.error = "refused", _describe_refusal(error.reply, auth=True)
        elif isinstance(error, ReplyError):
            self.state, self.error = "refused", _describe_refusal(error, auth=False)
        elif isinstance(error, BadReply):
            self.state = "bad reply"
            self.error = f"{error}: is this {what}?"  # BadReply names the command
        else:  # the connection failed, or the address is not host:port
            self.state, self.error = "unreachable", str(error).strip() or type(error).__name__
            # The message names the library's tls_ca setting; say where status takes it.
            cause = error.__cause__
            if isinstance(cause, ssl.SSLCertVerificationError):
                # A certificate for another host is no matter of which CA: say so.
                hostname = "Hostname mismatch" in str(cause) or "IP address mismatch" in str(cause)
                self.error += _NAME_HINT if hostname else _TLS_HINT


@dataclass
class NodeReport(Report):
    """What one cache node said, or why it could not be asked (``error``)."""

    position: int = 0
    history_horizon: int | None = None
    last_message_time: int = 0
    info: dict[str, int] = field(default_factory=dict)
    database: str | None = None
    """The database whose stream the node follows (``TXDATABASE``); ``None`` before any."""

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


@dataclass
class AgentReport(Report):
    """What the agent said, or why it could not be asked (``error``)."""

    status: dict[str, int] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    """Every ``STATUS`` field as the agent wrote it (``role``, ``membership`` … too)."""
    standbys: dict[str, int] = field(default_factory=dict)
    """The hot standbys the agent pins on (``--standby``), each with its pin count."""
    pins: list[Pin] = field(default_factory=list)
    pin_error: str | None = None
    """Why the agent, listing no pin, could not take one either (``PIN``'s error)."""
    standby: str | None = None
    """What a standby agent answered ``PINS`` (``None`` from the active one): it serves
    nothing but ``STATUS`` until it takes over."""
    nodes: list[str] | None = None
    """The cache nodes the agent feeds (``NODES``); ``None`` from a standby or an agent too
    old to say."""
    database: str | None = None
    """The database its stream follows, as the nodes name it (``DATABASE``); ``None`` from
    a standby."""

    @property
    def active(self) -> bool:
        """Whether the agent answered as the active one (reachable, not a standby)."""
        return self.reachable and self.standby is None

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


def _describe_refusal(reply: ReplyError, *, auth: bool) -> str:
    """One line saying what the endpoint refused, and what to do about authentication
    (``auth``: it refused the password)."""
    text = str(reply).strip()
    code, _, message = text.partition(" ")
    if code.isupper() and message:
        text = message.strip()
    auth = auth or code in _AUTH_CODES or "AUTH" in text.upper()
    return (text or type(reply).__name__) + (_AUTH_HINT if auth else "")


def probe_node(
    address: str,
    *,
    password: str | None = None,
    timeout: float = 2.0,
    tls_ca: str | None = None,
) -> NodeReport:
    """Ask the node at ``address`` for ``TXSTATUS`` and ``INFO``; never raises."""
    report = NodeReport(address)
    try:
        with protocol.connect(address, password=password, timeout=timeout, tls_ca=tls_ca) as node:
            status = node.run(protocol.txstatus())
            info = node.run(protocol.info())
            report.database = node.run(protocol.txdatabase())
    except (ConnectionLost, ReplyError, ValueError) as error:  # ValueError: BadReply too
        report.failed(error, "a txcached node")
        return report
    report.position, report.last_message_time = status.position, status.last_message_time
    report.history_horizon = status.history_horizon
    report.info = protocol.integer_fields(info)
    return report


def probe_agent(
    address: str,
    *,
    password: str | None = None,
    timeout: float = 2.0,
    tls_ca: str | None = None,
) -> AgentReport:
    """Ask the agent at ``address`` for ``STATUS`` and ``PINS`` — and, when it lists none
    (it holds none while nobody uses one), for a fresh ``PIN``, which proves it can take
    one; a standby's refusal of ``PINS`` ends the questions (:attr:`AgentReport.standby`).
    Never raises."""
    report = AgentReport(address)
    try:
        with protocol.connect(address, password=password, timeout=timeout, tls_ca=tls_ca) as agent:
            report.fields = agent.run(Command(("STATUS",), protocol.parse_fields))
            report.status = protocol.integer_fields(report.fields)
            report.standbys = protocol.standby_pin_counts(report.fields)
            try:
                report.pins = agent.run(protocol.pins())
            except ReplyError as error:
                if not is_standby(error):
                    raise
                report.standby = _describe_refusal(error, auth=False)
                return report
            if not report.pins:
                try:
                    # Answered within half the wait: a stream held back (a standby in
                    # synchronized_standby_slots down) is an error to report, not a silence.
                    report.pins = [agent.run(protocol.pin(timeout_ms=max(1, int(timeout * 500))))]
                except ReplyError as error:
                    report.pin_error = str(error).strip()
            report.database = protocol.stream_name(agent.run(protocol.database()))
            try:
                fed: tuple[str, ...] = agent.run(protocol.nodes())
                report.nodes = list(fed)
            except ReplyError:
                report.nodes = None  # an agent from before NODES
    except (ConnectionLost, ReplyError, ValueError) as error:  # ValueError: BadReply too
        report.status, report.pins = {}, []
        report.failed(error, "a txcache-agent")
    return report


_SAMPLE = re.compile(
    r'^txcache_(function|view)_(\w+)_total\{(?:function|view)="((?:[^"\\]|\\.)*)"[^}]*\} (\S+)$'
)


@dataclass
class ProcessReport(Report):
    """What an application process's ``/metrics`` (:mod:`txcache.metrics`) said: per
    function, each counter summed over its other labels (``hits``, ``misses``, …), and per
    view (``requests``, ``hits``, ``misses``)."""

    functions: dict[str, dict[str, float]] = field(default_factory=dict)
    views: dict[str, dict[str, float]] = field(default_factory=dict)


def probe_metrics(url: str, *, timeout: float = 2.0) -> ProcessReport:
    """Read the function and view statistics a process serves at ``url``; never raises."""
    report = ProcessReport(url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
    except (OSError, ValueError) as error:  # URLError is an OSError
        report.state, report.error = "unreachable", str(error)
        return report
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        kind, name, label, value = match.groups()
        table = report.functions if kind == "function" else report.views
        counters = table.setdefault(label.replace('\\"', '"'), {})
        counters[name] = counters.get(name, 0.0) + float(value)
    if not report.functions and "txcache_" not in text:
        report.state, report.error = "bad reply", "no txcache metrics there"
    return report
