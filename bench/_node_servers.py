"""The servers ``node_speed.py`` compares and how one load run is measured: starting
``txcached``, ``redis-server`` and ``memcached`` on loopback (each only if installed: the
benchmark installs nothing), ``txcache-loadgen`` runs, the host beside every run (memory
latency, CPU steal), and the servers' system calls under ``perf stat``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _cpu import ForeignCpu, cpu_seconds, steal_seconds
from _report import REPO, log

from txcache.stack import free_port, wait_until

KEY_BYTES, VALUE_BYTES = 16, 100
SYSCALLS = {
    "writes": ["write", "writev", "sendmsg", "sendto", "sendmmsg"],
    "reads": ["read", "readv", "recvfrom", "recvmsg"],
    "polls": ["epoll_wait", "epoll_pwait", "epoll_pwait2"],
}

# -- what is installed -----------------------------------------------------------------------

PROGRAMS = {
    "redis": ("redis-server", "apt-get install redis-server"),
    "memcached": ("memcached", "apt-get install memcached"),
    "perf": ("perf", "apt-get install linux-perf (Ubuntu: linux-tools-generic)"),
    "valgrind": ("callgrind_control", "apt-get install valgrind"),
}
"""What the comparisons need beside txcached: the program looked up on ``PATH``, and how to
install it on Debian (docs: bench/README.md). The benchmark installs nothing itself."""


def installed(what: str) -> bool:
    """Whether the program ``what`` (a key of :data:`PROGRAMS`) is on ``PATH``."""
    return shutil.which(PROGRAMS[what][0]) is not None


def skipping(what: str, part: str) -> str:
    """Logs and returns why ``part`` is skipped: the program ``what`` is not installed."""
    program, install = PROGRAMS[what]
    message = f"{program} is not installed: skipping {part} (install it: `{install}`)"
    log(message)
    return message


def versions() -> dict[str, str]:
    """The versions of Redis and memcached (``not installed`` when missing)."""
    found = {}
    for kind, command in (
        ("redis", ["redis-server", "--version"]),
        ("memcached", ["memcached", "-V"]),
    ):
        if not installed(kind):
            found[kind] = f"{kind}: not installed"
            continue
        found[kind] = subprocess.run(command, capture_output=True, text=True).stdout.strip()
    return found


# -- servers ---------------------------------------------------------------------------------


@dataclass
class Server:
    """One server process on loopback."""

    kind: str
    port: int
    process: subprocess.Popen[bytes]
    base_fd: int = 0  # the highest file descriptor open once it listens: clients get higher

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def cpu(self) -> float:
        """CPU seconds (user + system) used so far."""
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        """Resident set size in bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"{self.kind}: no VmRSS")


def txcached_workers() -> str:
    """The worker threads txcached runs with (``--txcached-threads``, else its default: one
    per CPU but one, at least one), in words."""
    # txcached counts the CPUs it may run on (Rust's `available_parallelism`), as this does.
    default = max(1, len(os.sched_getaffinity(0)) - 1)
    count = int(os.environ.get("TXCACHED_THREADS") or default)
    return f"{count} worker thread{'s' if count > 1 else ''}"


def server_command(kind: str, port: int, connections: int = 4096) -> list[str]:
    """How each server is started: loopback only, room for every item, no persistence;
    ``connections`` is memcached's ``-c`` (it sets its descriptor limit to that)."""
    if kind == "txcached":
        binary = os.environ["TXCACHED_BIN"]  # set by freeze_binaries()
        return [binary, "--port", str(port), "--max-memory", "4gb", "--log", "warn"]
    if kind == "redis":
        return [
            *("redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""),
            *("--appendonly", "no", "--daemonize", "no", "--logfile", ""),
        ]
    user = ["-u", "root"] if os.geteuid() == 0 else []
    return [
        *("memcached", "-p", str(port), "-l", "127.0.0.1", "-t", "2", "-m", "4096"),
        *("-c", str(connections), "-U", "0", *user),
    ]


@contextmanager
def running(kind: str, under: Sequence[str] = (), connections: int = 4096) -> Iterator[Server]:
    """A fresh server of ``kind`` (run by the command prefix ``under``, e.g. valgrind),
    stopped on exit."""
    port = free_port()
    command = [*under, *server_command(kind, port, connections)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Server(kind, port, process)

    def listening() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} exited at start: {' '.join(command)}")
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, f"{kind} to listen on port {port}", timeout=60 if under else 10)
        server.base_fd = max(int(fd) for fd in os.listdir(f"/proc/{process.pid}/fd"))
        yield server
    finally:
        process.terminate()
        try:
            process.wait(30 if under else 10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the load tool ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A server and the command pair used on it."""

    label: str
    server: Server
    protocol: str


@dataclass(frozen=True)
class Spec:
    """One workload cell."""

    name: str
    connections: int = 8
    pipeline: int = 1
    mix: str = "90:10"
    key_dist: str = "uniform"
    sizes: str = "fixed"  # or "etc" (keys and values)

    def args(self) -> list[str]:
        """The loadgen flags of this cell."""
        size = ["etc", "etc"] if self.sizes == "etc" else [str(KEY_BYTES), str(VALUE_BYTES)]
        return [
            *("--connections", str(self.connections), "--pipeline", str(self.pipeline)),
            *("--mix", self.mix, "--key-dist", self.key_dist),
            *("--key-size", size[0], "--value-size", size[1]),
        ]


_LOADGEN: list[Path] = []


def loadgen_binary() -> Path:
    """A copy of the release loadgen (a rebuild mid-run cannot swap it)."""
    if not _LOADGEN:
        built = REPO / "target" / "release" / "txcache-loadgen"
        if not built.is_file():
            raise RuntimeError(f"{built} is missing: cargo build --release -p txcache-loadgen")
        copy = Path(tempfile.mkdtemp(prefix="txcache-loadgen-")) / built.name
        atexit.register(shutil.rmtree, copy.parent, ignore_errors=True)
        shutil.copy2(built, copy)
        _LOADGEN.append(copy)
    return _LOADGEN[0]


def loadgen(target: Target, *args: str) -> dict[str, Any]:
    """One loadgen run against ``target``; its JSON."""
    address = f"127.0.0.1:{target.server.port}"
    command = [str(loadgen_binary()), "--target", address, "--protocol", target.protocol, *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(result.stdout)
    errors = report.get("results", {}).get("errors", 0)
    if errors:
        raise RuntimeError(f"{target.label}: {errors} error replies: {' '.join(command)}")
    return report


def memory_latency_ns() -> float:
    """This machine's memory latency now: ns per dependent load through 32 MiB (the load
    tool's probe, about the servers' working set here)."""
    command = [str(loadgen_binary()), "--memory-latency"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(result.stdout)["memory_latency_ns"])


@contextmanager
def syscall_counter(server: Server, counts: dict[str, int]) -> Iterator[None]:
    """Counts the server's syscalls (``perf stat`` on tracepoints) into ``counts``. Socket
    calls count only on descriptors opened after start-up (the clients' sockets), so that
    wake-ups between a server's own threads (eventfd, pipe writes) are not taken for replies.
    """
    events = []
    for group, names in SYSCALLS.items():
        for name in names:
            events += ["-e", f"syscalls:sys_enter_{name}"]
            if group != "polls":
                events.append(f"--filter=fd > {server.base_fd}")
    perf = subprocess.Popen(
        ["perf", "stat", "-x,", *events, "-p", str(server.pid)],
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)  # perf attaches
    try:
        yield
    finally:
        perf.send_signal(signal.SIGINT)
        _, stderr = perf.communicate(timeout=30)
    by_name = {}
    for line in stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("syscalls:sys_enter_"):
            count = int(fields[0]) if fields[0].isdigit() else 0
            by_name[fields[2].removeprefix("syscalls:sys_enter_")] = count
    for group, names in SYSCALLS.items():
        counts[group] = sum(by_name.get(name, 0) for name in names)


# A run during which the hypervisor took more than this share of the CPUs' time is repeated.
STEAL_LIMIT = 0.02
# Repeats at most, per run; the last one counts, clean or not (the report says which).
STEAL_REPEATS = 3


def measure(
    target: Target, spec: Spec, seconds: float, warmup: float, syscalls: bool = False
) -> dict[str, Any]:
    """:func:`measure_once`, repeated while CPU steal took more than ``STEAL_LIMIT`` of the
    run (at most ``STEAL_REPEATS`` times): on a shared host a burst of steal can halve one
    server's rate and not the next one's, and a ratio of such runs says nothing."""
    allowed = STEAL_LIMIT * (seconds + warmup) * (os.cpu_count() or 1)
    for repeat in range(STEAL_REPEATS + 1):
        row = measure_once(target, spec, seconds, warmup, syscalls)
        row["steal_repeats"] = repeat
        row["clean"] = row["steal_s"] <= allowed
        if row["clean"]:
            break
        log(f"  {spec.name} {target.label}: {row['steal_s']:.2f} s of CPU steal, repeating")
    return row


def measure_once(
    target: Target, spec: Spec, seconds: float, warmup: float, syscalls: bool = False
) -> dict[str, Any]:
    """Flush and preload, then one closed-loop run with the server's CPU (and syscalls),
    the memory latency just before it and the CPU steal during it."""
    loadgen(target, "--flush", "--duration", "0", *spec.args())
    latency = memory_latency_ns()
    foreign, cpu_before = ForeignCpu(), target.server.cpu()
    counts: dict[str, int] = {}
    steal_before = steal_seconds()
    with syscall_counter(target.server, counts) if syscalls else nullcontext():
        timing = ["--duration", f"{seconds}s", "--warmup", f"{warmup}s"]
        report = loadgen(target, "--no-preload", *timing, *spec.args())
    cpu = target.server.cpu() - cpu_before
    steal = steal_seconds() - steal_before
    results = report["results"]
    row = {
        "target": target.label,
        "cell": spec.name,
        "ops": results["ops_per_sec"],
        "latency_us": results["latency_us"],
        "hit_ratio": results["hits"] / max(1, results["gets"]),
        "server_cpu_s": cpu,
        "cpu_us_per_request": cpu * 1e6 / max(1, results["requests"]),
        "other_cpu_s": foreign.seconds(),
        "memory_latency_ns": latency,
        "steal_s": steal,
        "loadgen": report,
    }
    if syscalls:
        batches = results["requests"] / spec.pipeline
        row["syscalls"] = {key: value / batches for key, value in counts.items()}
    return row


def memcached_stat(port: int, name: str) -> int:
    """One number of memcached's ``stats``."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(b"stats\r\n")
        reply = b""
        while not reply.endswith(b"END\r\n"):
            reply += connection.recv(65536)
    for line in reply.decode().splitlines():
        if line.startswith(f"STAT {name} "):
            return int(line.split()[2])
    raise RuntimeError(f"memcached stats without {name}")
