"""Cache-node speed: txcached beside Redis and memcached, one machine, one load tool (issue 7).

One run starts ``txcached`` (this checkout's release build), ``redis-server`` (no
persistence) and ``memcached`` (2 threads) on loopback, and drives each with
``txcache-loadgen`` (crates/loadgen), interleaved so that a burst of other work hits them
alike. Per server:

- **throughput** (closed loop: each connection keeps one batch of ``pipeline`` requests in
  flight): 16 B keys, 100 B values, uniform keys, 90 % GET, pipeline 1 and 16 x 8 and 64
  connections, ``--rounds`` rounds; txcached also with ``TXGET``/``TXSET`` (*txcached TX*:
  each insert a new version with its own interval, so a key's versions pile up);
- **lookups alone**: txcached's ``TXGET`` against its own ``GET``, no stores (one version
  per key), pipeline 16 at 8 and 64 connections, every round: the goal "versioned lookup at
  0.8x plain" in its own terms; **stores alone**: ``TXSET`` against ``SET``, no lookups
  (every ``TXSET`` a new version of its key), pipeline 16 at 8 connections, every round;
- **variations** at 8 connections: Zipf keys (0.99), the 30:1 mix, Facebook ETC key and
  value sizes;
- **server CPU per request**: utime + stime of the server (``/proc/<pid>/stat``) over a load
  run, divided by the requests it answered (warm-up included, preload excluded);
- **syscalls per batch**: ``perf stat`` counting the server's write- and read-family syscall
  tracepoints during a separate run (so that counting cannot slow the throughput runs);
- **memory**: a fresh server per kind, ``--items`` items of 100 B under 16 B keys; RSS
  growth / items, minus the 116 B of key and value, is the per-item overhead;
- **sustained throughput**: open loop (Poisson arrivals, latency from each request's
  intended send time), ETC sizes, 90 % GET, 8 connections; the rate steps up until the mean
  latency reaches 1 ms (a rate fails when two runs of it in a row do), then one bisection
  step.

Every loadgen run first flushes the server and preloads the key space (100,000 keys).

The host is measured beside every throughput run: CPU steal during it, and the memory latency
just before it (``txcache-loadgen --memory-latency``: ns per dependent load through 32 MiB).
A run during which steal took more than 2 % of the CPUs' time is repeated (at most 3 times).
On a shared host the latency of a cache miss moves with the neighbours, and a server whose
request is a longer chain of dependent misses moves more; so txcached / Redis is taken round
by round (the two measured seconds apart) and reported as the median with its range.

``--only memory`` runs the memory phase alone (txcached, plus Redis and memcached where they
are installed) and writes ``results/node_speed_memory.{md,json}``: it starts no throughput
run, so it can be taken while other benchmarks use the machine.

``--only instructions`` counts user-space instructions per request instead of time: each
server runs under callgrind (``_callgrind.py``) and serves a fixed number of requests at
pipeline 16 and 1; it writes ``results/node_speed_instructions.{md,json}``.

``--txcached-threads N`` runs txcached with N worker threads instead of its default (one per
CPU but one; here the load tool shares the CPUs; Redis runs one thread); the results go to
``results/node_speed_threads-N.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _callgrind import CACHES, counted, guest_fd_limit, per_request_table, under_callgrind
from _common import (
    BENCH_DIR,
    RESULTS_DIR,
    ForeignCpu,
    _cpu_model,
    _memory_gib,
    build_note,
    call,
    command_line,
    cpu_seconds,
    freeze_binaries,
    log,
    resp_client,
    steal_seconds,
)

REPO = BENCH_DIR.parent
KEY_BYTES, VALUE_BYTES = 16, 100
MS = 1000.0  # µs
SYSCALLS = {
    "writes": ["write", "writev", "sendmsg", "sendto", "sendmmsg"],
    "reads": ["read", "readv", "recvfrom", "recvmsg"],
    "polls": ["epoll_wait", "epoll_pwait", "epoll_pwait2"],
}


# -- servers ---------------------------------------------------------------------------------


def ensure_packages(*, valgrind: bool = False) -> None:
    """Install redis-server and memcached (and valgrind) with apt-get if they are missing."""
    wanted = {"redis-server": "redis-server", "memcached": "memcached"}
    if valgrind:
        wanted |= {"valgrind": "valgrind", "callgrind_control": "valgrind"}
    missing = sorted({package for binary, package in wanted.items() if not shutil.which(binary)})
    if not missing:
        return
    log(f"installing {', '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
    process = subprocess.Popen(
        [*under, *server_command(kind, port, connections)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = Server(kind, port, process)
    try:
        deadline = time.monotonic() + (60 if under else 10)
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                command = [*under, *server_command(kind, port, connections)]
                raise RuntimeError(f"{kind} did not start: {' '.join(command)}")
            time.sleep(0.05)
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
    foreign, cpu_before, counts = ForeignCpu(), target.server.cpu(), {}
    steal_before = steal_seconds()
    with syscall_counter(target.server, counts) if syscalls else _nothing():
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


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# -- phases ----------------------------------------------------------------------------------

MAIN = [Spec(f"p{p} c{c}", connections=c, pipeline=p) for p in (16, 1) for c in (8, 64)]
VARIATIONS = [
    Spec(f"p{p} c8 {name}", pipeline=p, **change)  # type: ignore[arg-type]
    for p in (16, 1)
    for name, change in (
        ("zipf", {"key_dist": "zipf:0.99"}),
        ("30:1", {"mix": "30:1"}),
        ("etc", {"sizes": "etc"}),
    )
]
# Lookups alone: TXGET against GET with nothing stored during the run.
LOOKUPS = [Spec(f"p16 c{c} lookups", connections=c, pipeline=16, mix="1:0") for c in (8, 64)]
# Stores alone: TXSET against SET with no lookups.
STORES = [Spec("p16 c8 stores", connections=8, pipeline=16, mix="0:1")]
# The pair each of those compares: txcached's plain and versioned commands.
ALONE_LABELS = ("txcached", "txcached TX")
SWEEP = Spec("open c8 etc", sizes="etc")
RATES = [10e3, 20e3, 40e3, 60e3, 80e3, 100e3, 125e3, 150e3, 175e3, 200e3, 250e3, 300e3, 350e3]
RATES += [400e3, 500e3]


def throughput(targets: list[Target], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The main grid, the lookups alone and the stores alone (``--rounds`` rounds, order
    reversed every other round), then the variations on the plain targets."""
    rows = []
    for round_ in range(args.rounds):
        order = targets if round_ % 2 == 0 else targets[::-1]
        cells = [(spec, order) for spec in MAIN]
        pair = [t for t in order if t.label in ALONE_LABELS]
        cells += [(spec, pair) for spec in LOOKUPS + STORES]
        for spec, cell_targets in cells:
            for target in cell_targets:
                row = measure(target, spec, args.seconds, args.warmup)
                rows.append({**row, "round": round_})
                log(
                    f"{spec.name:>8} {target.label:<12} {row['ops']:>10,.0f} ops/s "
                    f"(memory {row['memory_latency_ns']:.0f} ns, steal {row['steal_s']:.2f} s)"
                )
    for spec in VARIATIONS:
        for target in targets[:3]:
            row = measure(target, spec, args.seconds, args.warmup)
            rows.append({**row, "round": 0})
            log(f"{spec.name:>14} {target.label:<12} {row['ops']:>10,.0f} ops/s")
    return rows


def syscall_rows(targets: list[Target], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Syscalls per batch at 8 connections, pipeline 16 and 1, counted by perf."""
    rows = []
    for spec in (MAIN[0], MAIN[2]):
        for target in targets:
            rows.append(measure(target, spec, min(args.seconds, 2.0), 0.5, syscalls=True))
            log(f"syscalls {spec.name} {target.label}: {rows[-1]['syscalls']}")
    return rows


# Runs of one open-loop rate before it counts as failed.
SWEEP_ATTEMPTS = 2


def sweep(targets: list[Target], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Open-loop rates, stepping up per target until the mean latency reaches 1 ms."""
    points: list[dict[str, Any]] = []
    for target in targets:
        loadgen(target, "--flush", "--duration", "0", *SWEEP.args())

    def run(target: Target, rate: float) -> bool:
        # A rate fails only when two runs of it in a row fail: on a shared host one burst of
        # steal (or the load tool falling behind) must not end a server's sweep at 10 K/s.
        for attempt in range(1, SWEEP_ATTEMPTS + 1):
            timing = ["--duration", f"{args.sweep_seconds}s", "--warmup", "0.5s"]
            report = loadgen(target, "--no-preload", "--rate", str(rate), *timing, *SWEEP.args())
            results = report["results"]
            ok = (
                results["latency_us"]["mean"] < MS
                and results["unanswered"] == 0
                and results["ops_per_sec"] >= 0.95 * rate
            )
            mean = results["latency_us"]["mean"]
            log(f"open {target.label:<12} {rate:>9,.0f}/s mean {mean:.0f} µs (try {attempt})")
            if ok:
                break
        point = {"target": target.label, "rate": rate, "ok": ok, "attempts": attempt}
        points.append({**point, "loadgen": report})
        return ok

    alive = list(targets)
    for rate in RATES[: args.max_rates]:
        alive = [target for target in alive if run(target, rate)]
        if not alive:
            break
    for target in targets:  # one bisection step between the last rate met and the first not
        mine = [p for p in points if p["target"] == target.label]
        good = [p["rate"] for p in mine if p["ok"]]
        bad = [p["rate"] for p in mine if not p["ok"]]
        if good and bad:
            run(target, (max(good) + min(bad)) / 2)
    return points


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


def memory(kinds: list[tuple[str, str, str]], items: int) -> list[dict[str, Any]]:
    """Bytes per stored item: a fresh server per row, ``items`` items, RSS growth / items."""
    rows = []
    for label, kind, protocol in kinds:
        with running(kind) as server:
            target = Target(label, server, protocol)
            loadgen(target, "--keys", "1", "--duration", "0")
            before = server.rss()
            fill = ["--keys", str(items), "--duration", "0", "--connections", "8"]
            loadgen(target, "--key-size", str(KEY_BYTES), "--value-size", str(VALUE_BYTES), *fill)
            time.sleep(0.5)
            per_item = (server.rss() - before) / items
            row = {"target": label, "items": items, "rss_bytes_per_item": per_item}
            row["overhead_bytes"] = per_item - KEY_BYTES - VALUE_BYTES
            if protocol != "memcache":
                info = call(resp_client("127.0.0.1", server.port), "INFO", "memory")
                row["used_memory_per_item"] = int(info["used_memory"]) / items
            else:
                row["used_memory_per_item"] = memcached_stat(server.port, "bytes") / items
            rows.append(row)
            log(f"memory {label}: {per_item:.1f} B per item")
    return rows


# Where a hit's server time goes: perf symbols → parts of the request path. First match wins.
KERNEL_PARTS = [
    *((n, "kernel: scheduling, wake-ups") for n in ("sched", "switch", "wake", "futex", "idle")),
    *((n, "kernel: epoll") for n in ("epoll", "ep_")),
    ("", "kernel: syscalls, TCP loopback, copies"),
]
USER_PARTS = [
    ("txcache_resp", "RESP: parsing requests, encoding replies"),
    ("txcached::cmd", "command dispatch and reply building"),
    *((n, "store: lookup") for n in ("txcache_store", "hashbrown", "memcmp", "foldhash")),
    *((n, "shard choice (SipHash) and lock") for n in ("for_key", "parking_lot", "sip")),
    *((n, "tokio: task polling, I/O readiness") for n in ("tokio", "mio")),
    ("connection", "connection loop (read, answer, write)"),
    *((n, "allocation and copies") for n in ("malloc", "free", "memmove", "memcpy", "bytes")),
    ("", "other user code"),
]


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of ``pid`` so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            lines = (task / "status").read_text().splitlines()
        except OSError:  # a thread that ended meanwhile
            continue
        total += sum(int(line.split()[1]) for line in lines if "ctxt_switches" in line)
    return total


HIT = ["--connections", "1", "--pipeline", "1", "--mix", "1:0", "--keys", "1000"]


def one_by_one(target: Target, seconds: float) -> dict[str, Any]:
    """Lookups that hit, one connection, no pipelining: latency, server CPU and context
    switches per request."""
    loadgen(target, "--flush", "--duration", "0", *HIT)
    server = target.server
    cpu, switches = server.cpu(), context_switches(server.pid)
    timing = ["--no-preload", "--duration", f"{seconds}s", "--warmup", "0.5s"]
    report = loadgen(target, *timing, *HIT)
    requests = max(1, report["results"]["requests"])
    return {
        "target": target.label,
        "cpu_us_per_request": (server.cpu() - cpu) * 1e6 / requests,
        "switches_per_request": (context_switches(server.pid) - switches) / requests,
        "loadgen": report,
    }


def symbol_shares(txc: Server, seconds: float) -> dict[str, float]:
    """``perf record`` of txcached answering ``TXGET`` hits one by one: the share of samples
    per part of the request path (symbols, no call graphs)."""
    target = Target("txcached TX", txc, "versioned")
    loadgen(target, "--flush", "--duration", "0", *HIT)
    data = Path(tempfile.mkdtemp(prefix="txcache-perf-")) / "perf.data"
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-F", "4999", "-o", str(data), "-p", str(txc.pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    loadgen(target, "--no-preload", "--duration", f"{seconds}s", "--warmup", "0s", *HIT)
    perf.send_signal(signal.SIGINT)
    perf.wait(60)
    flat = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", "sym", "--stdio"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    shutil.rmtree(data.parent, ignore_errors=True)
    shares: dict[str, float] = {}
    for line in flat.splitlines():
        fields = line.split(None, 1)
        if len(fields) < 2 or not fields[0].endswith("%"):
            continue
        parts = KERNEL_PARTS if fields[1].startswith("[k]") else USER_PARTS
        part = next(p for needle, p in parts if needle in fields[1])
        shares[part] = shares.get(part, 0.0) + float(fields[0].rstrip("%"))
    return shares


def hit_profile(targets: list[Target], seconds: float) -> dict[str, Any]:
    """Where a hit's time goes on each server, and txcached's CPU split by symbol."""
    rows = [one_by_one(target, seconds) for target in targets]
    for row in rows:
        latency = row["loadgen"]["results"]["latency_us"]
        log(f"one by one {row['target']}: {row['cpu_us_per_request']:.2f} µs CPU, {latency}")
    return {"servers": rows, "shares": symbol_shares(targets[0].server, seconds)}


# -- report ----------------------------------------------------------------------------------

LABELS = ["txcached", "redis", "memcached", "txcached TX"]
# The ratio columns: (numerator, denominator).
PAIRS = [("txcached", "redis"), ("txcached", "memcached"), ("txcached TX", "txcached")]


def mean_of(rows: list[dict[str, Any]], label: str, cell: str, key: str) -> float:
    """The mean of ``key`` over the rounds of one target and cell (NaN when absent)."""
    values = [row[key] for row in rows if row["target"] == label and row["cell"] == cell]
    return sum(values) / len(values) if values else float("nan")


@dataclass(frozen=True)
class Ratios:
    """Per-round ratios of one cell, and whether they come from clean runs only."""

    values: list[float]
    clean: bool

    @property
    def median(self) -> float:
        """The median (NaN when there is no round)."""
        return statistics.median(self.values) if self.values else float("nan")

    def __str__(self) -> str:
        """``1.23x`` (one round) or ``1.23x (1.10-1.40)``: median and range; ``*`` marks
        ratios of runs that steal disturbed (no round was clean in both)."""
        if not self.values:
            return "-"
        text = f"{self.median:.2f}x"
        if len(self.values) > 1:
            text += f" ({min(self.values):.2f}-{max(self.values):.2f})"
        return text if self.clean else text + " *"


def round_ratios(rows: list[dict[str, Any]], a: str, b: str, cell: str, key: str = "ops") -> Ratios:
    """``a / b`` for one cell, each round apart: the two were measured seconds apart, so a
    change of the host between rounds cancels out. Rounds in which either run stayed
    disturbed by steal (``clean`` false) are left out, unless no round is clean in both."""
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        if row["cell"] == cell and row["target"] in (a, b):
            by_round.setdefault(row["round"], {})[row["target"]] = row
    pairs = [
        (v[a][key] / v[b][key], v[a].get("clean", True) and v[b].get("clean", True))
        for _, v in sorted(by_round.items())
        if a in v and b in v and v[b][key]
    ]
    clean = [value for value, ok in pairs if ok]
    return Ratios(clean, True) if clean else Ratios([value for value, _ in pairs], not pairs)


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``1.23x``."""
    return "-" if not b or a != a or b != b else f"{a / b:.2f}x"


def num(value: float, digits: int = 0) -> str:
    """A table number with thousands separators."""
    return "-" if value != value else f"{value:,.{digits}f}"


def throughput_tables(rows: list[dict[str, Any]], rounds: int) -> list[str]:
    """Ops/s, latency and CPU per request of the main grid and the variations."""
    ops = {(t, s.name): mean_of(rows, t, s.name, "ops") for t in LABELS for s in MAIN + VARIATIONS}
    cpu = {
        (t, s.name): mean_of(rows, t, s.name, "cpu_us_per_request")
        for t in LABELS
        for s in MAIN + VARIATIONS
    }
    lines = [
        f"## Throughput, closed loop (ops/s, mean of {rounds} round{'s' if rounds > 1 else ''})",
        "",
        "16 B keys, 100 B values, uniform keys, 90 % GET. `p16 c64`: pipeline 16, 64 "
        "connections. *txcached TX*: `TXGET`/`TXSET` on the same node.",
        "",
        "Ratios: the median of the rounds' ratios, with their range, over the rounds where "
        "both runs were clean of CPU steal (`*`: none was, all rounds).",
        "",
        "| cell | txcached | Redis | memcached | txcached TX | txcached / Redis "
        "| txcached / memcached | TX / plain |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for spec in MAIN:
        t, r, m, x = (ops[(label, spec.name)] for label in LABELS)
        by = {b: round_ratios(rows, a, b, spec.name) for a, b in PAIRS}
        lines.append(
            f"| {spec.name} | {num(t)} | {num(r)} | {num(m)} | {num(x)} | {by['redis']} "
            f"| {by['memcached']} | {by['txcached']} |"
        )
    lines += [
        "",
        "## Lookups alone and stores alone (ops/s, mean of the rounds)",
        "",
        "txcached's `TXGET` against its own `GET`, pipeline 16, nothing stored during the run "
        "(one version per key); its `TXSET` against `SET`, no lookups (every `TXSET` a new "
        "version of its key, so versions pile up through the run). Ratio as above; server CPU "
        "in µs per request.",
        "",
        "| cell | plain | versioned | TX / plain | CPU plain | CPU versioned |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for spec in LOOKUPS + STORES:
        plain, versioned = (mean_of(rows, label, spec.name, "ops") for label in ALONE_LABELS)
        per_request = [mean_of(rows, t, spec.name, "cpu_us_per_request") for t in ALONE_LABELS]
        alone = round_ratios(rows, "txcached TX", "txcached", spec.name)
        cpu_text = " | ".join(f"{c:.2f}" for c in per_request)
        lines.append(f"| {spec.name} | {num(plain)} | {num(versioned)} | {alone} | {cpu_text} |")
    lines += [
        "",
        "## Latency, closed loop (µs, p50 / p99, first round)",
        "",
        "Per request, from its batch's write to the read that completed its reply.",
        "",
        "| cell | txcached | Redis | memcached | txcached TX |",
        "|---|---:|---:|---:|---:|",
    ]
    for spec in MAIN:
        cells = []
        for label in LABELS:
            row = next(r for r in rows if r["target"] == label and r["cell"] == spec.name)
            latency = row["latency_us"]
            cells.append(f"{latency['p50']:.0f} / {latency['p99']:.0f}")
        lines.append(f"| {spec.name} | {' | '.join(cells)} |")
    lines += [
        "",
        "## Server CPU per request (µs; utime + stime / requests answered)",
        "",
        "| cell | txcached | Redis | memcached | txcached TX | txcached / Redis |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for spec in MAIN:
        t, r, m, x = (cpu[(label, spec.name)] for label in LABELS)
        per_round = round_ratios(rows, "txcached", "redis", spec.name, "cpu_us_per_request")
        lines.append(f"| {spec.name} | {t:.2f} | {r:.2f} | {m:.2f} | {x:.2f} | {per_round} |")
    lines += [
        "",
        "## Variations at 8 connections (ops/s; server CPU µs per request)",
        "",
        "| cell | txcached | Redis | memcached | txcached / Redis | txcached / memcached "
        "| CPU txcached | CPU Redis | CPU memcached |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for spec in VARIATIONS:
        t, r, m = (ops[(label, spec.name)] for label in LABELS[:3])
        ct, cr, cm = (cpu[(label, spec.name)] for label in LABELS[:3])
        lines.append(
            f"| {spec.name} | {num(t)} | {num(r)} | {num(m)} | {ratio(t, r)} | {ratio(t, m)} "
            f"| {ct:.2f} | {cr:.2f} | {cm:.2f} |"
        )
    return [*lines, ""]


def syscall_table(rows: list[dict[str, Any]]) -> list[str]:
    """Syscalls per batch of requests (a batch: one loadgen write of ``pipeline`` requests)."""
    lines = [
        "## System calls per batch (perf stat on the server's syscall tracepoints)",
        "",
        "A batch is one client write of `pipeline` requests. *writes*: write, writev, sendmsg, "
        "sendto on client sockets; *reads*: read, readv, recvfrom, recvmsg on client sockets "
        "(a read that finds nothing counts too); *polls*: epoll_wait/epoll_pwait, all. "
        "Separate 2 s runs at 8 connections.",
        "",
        "| cell | server | writes / batch | reads / batch | polls / batch | writes / request |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        calls, pipeline = row["syscalls"], row["loadgen"]["pipeline"]
        lines.append(
            f"| {row['cell']} | {row['target']} | {calls['writes']:.3f} | {calls['reads']:.3f} "
            f"| {calls['polls']:.3f} | {calls['writes'] / pipeline:.4f} |"
        )
    return [*lines, ""]


def memory_table(rows: list[dict[str, Any]]) -> list[str]:
    """Bytes per stored item."""
    items = rows[0]["items"] if rows else 0
    lines = [
        f"## Memory per item ({items:,} items, 16 B keys, 100 B values, a fresh server each)",
        "",
        "RSS growth / items; *overhead* subtracts the 116 B of key and value. *accounted*: "
        "the server's own `used_memory` / items (for txcached, what its memory limit counts).",
        "",
        "| server | RSS bytes / item | overhead (B) | accounted bytes / item |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        accounted = row.get("used_memory_per_item", float("nan"))
        lines.append(
            f"| {row['target']} | {row['rss_bytes_per_item']:.1f} | {row['overhead_bytes']:.1f} "
            f"| {num(accounted, 1)} |"
        )
    return [*lines, ""]


def sustained(points: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per target, the highest open-loop rate whose mean latency stayed under 1 ms."""
    best: dict[str, dict[str, Any]] = {}
    for point in points:
        if point["ok"] and point["rate"] > best.get(point["target"], {}).get("rate", 0):
            best[point["target"]] = point
    return best


def sweep_tables(points: list[dict[str, Any]]) -> list[str]:
    """Sustained throughput and every sweep point."""
    best = sustained(points)
    redis = best.get("redis", {}).get("rate", float("nan"))
    lines = [
        "## Sustained throughput: the highest rate with mean latency < 1 ms (open loop)",
        "",
        "Poisson arrivals over 8 connections, no pipelining, ETC key and value sizes, 90 % "
        "GET, uniform keys; latency from each request's intended send time. A rate counts "
        "when the mean stays under 1 ms, every request is answered and >= 95 % of the rate "
        "is achieved; a rate fails when two runs of it in a row do. The rates step up (10 K, "
        "20 K, 40 K, …) until one fails, then one bisection step.",
        "",
        "| server | sustained rate (req/s) | achieved ops/s | mean µs | p99 µs | vs Redis |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label in LABELS[:3]:
        point = best.get(label)
        if point is None:
            lines.append(f"| {label} | none | - | - | - | - |")
            continue
        results = point["loadgen"]["results"]
        failed = any(p["target"] == label and not p["ok"] for p in points)
        lines.append(
            f"| {label} | {'' if failed else '≥ '}{num(point['rate'])} "
            f"| {num(results['ops_per_sec'])} "
            f"| {results['latency_us']['mean']:.0f} | {results['latency_us']['p99']:.0f} "
            f"| {ratio(point['rate'], redis)} |"
        )
    lines += [
        "",
        "≥: no rate tried failed. Every point (mean / p99 µs, then the load tool's mean send "
        "lag behind the intended times in µs; ✗: the rate was not sustained). A large send "
        "lag means the load tool itself could not keep the rate (it shares the 2 CPUs):",
        "",
    ]
    lines += ["| rate | " + " | ".join(LABELS[:3]) + " |", "|---:|---:|---:|---:|"]
    for rate in sorted({p["rate"] for p in points}):
        cells = []
        for label in LABELS[:3]:
            point = next((p for p in points if p["target"] == label and p["rate"] == rate), None)
            if point is None:
                cells.append("")
                continue
            latency = point["loadgen"]["results"]["latency_us"]
            mark = "" if point["ok"] else " ✗"
            lag = point["loadgen"]["results"]["send_lag_us_mean"]
            cells.append(f"{latency['mean']:.0f} / {latency['p99']:.0f} ({lag:.0f}){mark}")
        lines.append(f"| {num(rate)} | {' | '.join(cells)} |")
    return [*lines, ""]


def goals(
    rows: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    mem: list[dict[str, Any]],
) -> list[str]:
    """The issue's goals, each marked met or not met."""

    def cells(pipeline: int) -> list[str]:
        return [s.name for s in MAIN if s.pipeline == pipeline]

    def ratios(a: str, b: str, names: list[str], key: str = "ops") -> list[Ratios]:
        return [round_ratios(rows, a, b, n, key) for n in names]

    def text(names: list[str], values: list[Ratios]) -> str:
        return ", ".join(f"{n}: {v}" for n, v in zip(names, values, strict=True))

    def medians(values: list[Ratios]) -> list[float]:
        return [v.median for v in values]

    pipelined = ratios("txcached", "redis", cells(16))
    plain = ratios("txcached", "redis", cells(1))
    every = [s.name for s in MAIN]
    cpu = ratios("txcached", "redis", every, "cpu_us_per_request")
    versioned = ratios("txcached TX", "txcached", every)
    lookups = [s.name for s in LOOKUPS]
    lookups_alone = ratios("txcached TX", "txcached", lookups)
    overhead = {row["target"]: row["overhead_bytes"] for row in mem}
    writes = [
        f"{r['cell']}: {r['syscalls']['writes']:.2f}" for r in calls if r["target"] == "txcached"
    ]
    batch_writes = [r["syscalls"]["writes"] for r in calls if r["target"] == "txcached"]
    checks = [
        (
            "throughput pipelined ≥ 1.5x Redis",
            text(cells(16), pipelined),
            min(medians(pipelined)) >= 1.5,
        ),
        (
            "throughput unpipelined ≥ 1.0x Redis",
            text(cells(1), plain),
            min(medians(plain)) >= 1.0,
        ),
        ("server CPU per request < Redis's", text(every, cpu), max(medians(cpu)) < 1.0),
        (
            "versioned lookup ≥ 0.8x plain GET (lookups alone)",
            text(lookups, lookups_alone),
            min(medians(lookups_alone)) >= 0.8,
        ),
        (
            "versioned ≥ 0.8x plain, 90:10 TXGET/TXSET against GET/SET",
            text(every, versioned),
            min(medians(versioned)) >= 0.8,
        ),
        (
            "per-item overhead ≤ 40 B (plain)",
            f"{overhead.get('txcached', float('nan')):.0f} B plain, "
            f"{overhead.get('txcached TX', float('nan')):.0f} B versioned",
            overhead.get("txcached", 1e9) <= 40,
        ),
        (
            "one write per read batch",
            "writes per batch " + ", ".join(writes),
            bool(batch_writes) and max(batch_writes) <= 1.05,
        ),
    ]
    lines = [
        "## Goals (issue 7)",
        "",
        "Ratios: the median of the rounds' ratios, with their range, over the rounds where both "
        "runs were clean of CPU steal (`*`: none was, all rounds); a goal is met when every "
        "cell's median meets it.",
        "",
        "| goal | measured (txcached) | |",
        "|---|---|---|",
    ]
    for goal, measured, met in checks:
        lines.append(f"| {goal} | {measured} | {'met' if met else '**not met**'} |")
    return [*lines, ""]


def host_table(rows: list[dict[str, Any]]) -> list[str]:
    """The host during each round of the main grid and the lookups and stores alone: memory
    latency and CPU steal."""
    lines = [
        "## The host during the rounds",
        "",
        "Memory latency: ns per dependent load through 32 MiB, measured just before each run "
        "(`txcache-loadgen --memory-latency`); steal: CPU time the hypervisor gave to other "
        "guests during the runs.",
        "",
        "| round | memory latency, ns (min / median / max) | steal, s (total) "
        "| runs repeated for steal | runs never clean |",
        "|---|---:|---:|---:|---:|",
    ]
    cells = {s.name for s in MAIN + LOOKUPS + STORES}
    for round_ in sorted({row["round"] for row in rows if row["cell"] in cells}):
        these = [r for r in rows if r["round"] == round_ and r["cell"] in cells]
        latency = [r["memory_latency_ns"] for r in these]
        steal = sum(r["steal_s"] for r in these)
        repeats = sum(r.get("steal_repeats", 0) for r in these)
        unclean = sum(not r.get("clean", True) for r in these)
        lines.append(
            f"| {round_ + 1} | {min(latency):.0f} / {statistics.median(latency):.0f} / "
            f"{max(latency):.0f} | {steal:.1f} | {repeats} | {unclean} |"
        )
    return [*lines, ""]


def hit_table(profile: dict[str, Any]) -> list[str]:
    """One lookup at a time: each server's CPU and context switches per hit, and txcached's
    CPU per TXGET hit by part of the request path."""
    lines = [
        "## One hit at a time (1 connection, no pipelining, 1,000 keys, only lookups)",
        "",
        "Round trip as the load tool sees it, and the server's CPU (utime + stime) and context "
        "switches (all its threads, voluntary + involuntary) per request.",
        "",
        "| server | p50 µs | mean µs | p99 µs | server CPU µs / hit | context switches / hit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in profile["servers"]:
        latency = row["loadgen"]["results"]["latency_us"]
        lines.append(
            f"| {row['target']} | {latency['p50']:.1f} | {latency['mean']:.1f} "
            f"| {latency['p99']:.1f} | {row['cpu_us_per_request']:.2f} "
            f"| {row['switches_per_request']:.2f} |"
        )
    txget = next(r for r in profile["servers"] if r["target"] == "txcached TX")
    per_hit = txget["cpu_us_per_request"]
    lines += [
        "",
        f"txcached's CPU per `TXGET` hit ({per_hit:.2f} µs) by part, from the symbols "
        "`perf record` sampled in a second, identical run (no call graphs: memcpy counts as "
        "a copy wherever it is called from; this guest has no PMU, so samples come from a "
        "timer and land where interrupts are re-enabled: `finish_task_switch`, i.e. "
        "*scheduling*, absorbs the time the CPU spent with interrupts off around a switch):",
        "",
        "| part | share of samples | µs per hit |",
        "|---|---:|---:|",
    ]
    total = sum(profile["shares"].values()) or 1.0
    for part, share in sorted(profile["shares"].items(), key=lambda item: -item[1]):
        lines.append(f"| {part} | {share / total:.1%} | {per_hit * share / total:.2f} |")
    return [*lines, ""]


def plot(points: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path) -> bool:
    """Throughput against latency: the open-loop sweep (mean and p99) and the closed-loop
    cells at 8 connections. False when matplotlib is unavailable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, color in zip(LABELS[:3], ("C0", "C3", "C2"), strict=True):
        mine = sorted(
            (p["loadgen"]["results"] for p in points if p["target"] == label),
            key=lambda r: r["ops_per_sec"],
        )
        x = [r["ops_per_sec"] / 1e3 for r in mine]
        left.plot(x, [r["latency_us"]["mean"] for r in mine], "o-", color=color, label=label)
        left.plot(x, [r["latency_us"]["p99"] for r in mine], "x--", color=color, alpha=0.5)
    left.axhline(MS, color="grey", linewidth=0.8)
    left.set(xlabel="achieved K ops/s", ylabel="latency µs (— mean, -- p99)", yscale="log")
    left.set_title("open loop, ETC sizes, 8 connections")
    left.legend()
    for label, color in zip(LABELS, ("C0", "C3", "C2", "C1"), strict=True):
        mine = [r for r in rows if r["target"] == label and r["cell"] in ("p1 c8", "p16 c8")]
        right.scatter(
            [r["ops"] / 1e3 for r in mine],
            [r["latency_us"]["mean"] for r in mine],
            color=color,
            label=label,
        )
    right.set(xlabel="K ops/s", ylabel="mean latency µs", yscale="log")
    right.set_title("closed loop, 100 B, 8 connections (pipeline 1 left, 16 right)")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def versions() -> dict[str, str]:
    """The servers' versions."""
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    memcached = subprocess.run(["memcached", "-V"], capture_output=True, text=True)
    return {"redis": redis.stdout.strip(), "memcached": memcached.stdout.strip()}


def machine() -> dict[str, Any]:
    """What the numbers were measured on (the other benchmarks' note, without PostgreSQL)."""
    return {
        "build": build_note(),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": round(_memory_gib(), 1),
        "kernel": os.uname().release,
        "servers": versions(),
        "txcached_workers": txcached_workers(),
        "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def header(note: dict[str, Any], command: str) -> list[str]:
    """The report's first lines: command, machine, code, load."""
    servers = note["servers"]
    took = f"{note['elapsed_s'] / 60:.1f} min" if "elapsed_s" in note else "(not recorded)"
    return [
        "# Cache-node speed: txcached, Redis and memcached",
        "",
        f"- command: `{command}`",
        f"- machine: {note['nproc']} CPUs ({note['cpu']}), {note['memory_gib']} GiB RAM, "
        f"Linux {note['kernel']}; the load tool shares the CPUs with the server",
        f"- servers: txcached ({note.get('txcached_workers') or txcached_workers()}), "
        f"{servers['redis']} "
        "(single-threaded, "
        f"`--save '' --appendonly no`), {servers['memcached']} (`-t 2`)",
        f"- code: {note['build']}",
        f"- date: {note['date']}; load average (1, 5, 15 min) at start "
        f"{', '.join(map(str, note['load_average_at_start']))}, at end "
        f"{', '.join(map(str, note['load_average_at_end']))}; other work during the runs: "
        f"at most {note['max_other_cpu_s']:.2f} CPU s per run; the whole run took {took}",
        "",
    ]


def memory_only(items: int) -> None:
    """The memory phase alone: write results/node_speed_memory.{md,json}."""
    started = time.monotonic()
    freeze_binaries()
    loadgen_binary()
    kinds = [("txcached", "txcached", "resp"), ("txcached TX", "txcached", "versioned")]
    for kind, binary, protocol in (
        ("redis", "redis-server", "resp"),
        ("memcached", "memcached", "memcache"),
    ):
        if shutil.which(binary):
            kinds.append((kind, kind, protocol))
    mem = memory(kinds, items)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    body = [
        "# Cache-node memory per item",
        "",
        f"- command: `{command_line()}`",
        f"- machine: {os.cpu_count()} CPUs ({_cpu_model()}), {_memory_gib():.1f} GiB RAM, "
        f"Linux {os.uname().release}",
        f"- code: {build_note()}",
        f"- date: {date}; the run took {(time.monotonic() - started) / 60:.1f} min",
        "",
        *memory_table(mem),
    ]
    (RESULTS_DIR / "node_speed_memory.md").write_text("\n".join(body).rstrip() + "\n")
    raw = {"command": command_line(), "date": date, "memory": mem}
    (RESULTS_DIR / "node_speed_memory.json").write_text(json.dumps(raw, indent=2) + "\n")
    log(f"wrote {RESULTS_DIR / 'node_speed_memory'}.md")


INSTRUCTION_SERVERS = [
    ("txcached", "txcached", "resp", "GET/SET"),
    ("txcached TX", "txcached", "versioned", "TXGET/TXSET"),
    ("redis", "redis", "resp", "GET/SET"),
    ("memcached", "memcached", "memcache", "get/set"),
]


def instruction_rows(budgets: dict[int, int], out_dir: Path) -> list[dict[str, Any]]:
    """Each server under callgrind, a fresh one per row of ``INSTRUCTION_SERVERS``: per
    pipeline depth, flush and preload uncounted, then ``budgets[pipeline]`` requests
    counted (8 connections, 90:10, uniform keys, 16 B keys, 100 B values)."""
    rows = []
    for label, kind, protocol, commands in INSTRUCTION_SERVERS:
        # memcached sets its descriptor limit to -c, and valgrind only lets it keep its own.
        with running(kind, under_callgrind(out_dir), guest_fd_limit()) as server:
            target = Target(label, server, protocol)
            for pipeline, budget in budgets.items():
                spec = Spec(f"p{pipeline} c8", pipeline=pipeline)
                loadgen(target, "--flush", "--duration", "0", *spec.args())
                row: dict[str, Any] = {"target": label, "commands": commands}
                run = ["--no-preload", "--warmup", "0s", "--duration", "10m"]
                with counted(server.pid, out_dir, row):
                    report = loadgen(target, *run, "--max-requests", str(budget), *spec.args())
                requests = report["results"]["requests"]
                row |= {"pipeline": pipeline, "requests": requests, "loadgen": report}
                for count in ("instructions", "misses"):
                    row[f"{count}_per_request"] = row[count] / max(1, requests)
                rows.append(row)
                log(
                    f"instructions {label} p{pipeline}: {row['instructions_per_request']:,.0f} "
                    f"per request, {row['misses_per_request']:.2f} simulated misses"
                )
    return rows


def instructions_only(quick: bool) -> None:
    """The instruction-count phase alone: write results/node_speed_instructions{,_quick}
    .{md,json}."""
    started = time.monotonic()
    ensure_packages(valgrind=True)
    freeze_binaries()
    loadgen_binary()
    budgets = {16: 20_000, 1: 5_000} if quick else {16: 200_000, 1: 50_000}
    with tempfile.TemporaryDirectory(prefix="txcache-callgrind-") as out_dir:
        rows = instruction_rows(budgets, Path(out_dir))
    servers = versions()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    budget_text = ", ".join(f"{n:,} at pipeline {p}" for p, n in budgets.items())
    body = [
        "# Cache-node instructions and cache misses per request",
        "",
        f"- command: `{command_line()}`",
        f"- machine: {os.cpu_count()} CPUs ({_cpu_model()}), Linux {os.uname().release}",
        f"- servers: txcached ({txcached_workers()}), {servers['redis']}, "
        f"{servers['memcached']} (`-t 2`); each under "
        f"`valgrind --tool=callgrind --instr-atstart=no --cache-sim=yes {' '.join(CACHES)}`",
        f"- code: {build_note()}",
        f"- date: {date}; the run took {(time.monotonic() - started) / 60:.1f} min",
        "",
        "## User-space instructions per request (callgrind `Ir`)",
        "",
        "What this counts: the instructions each server process executes in user space "
        "(its own code and its libraries: libc, malloc, jemalloc in Redis), all threads, "
        "background timers included, divided by the requests answered. It does *not* count "
        "kernel work (system calls, TCP loopback, scheduling) or stalls, so it is not time. "
        "It is reported because it repeats to within about 1 % from run to run on this "
        "shared host, where CPU steal makes timings noisy.",
        "",
        f"Per server a fresh process; per row it is flushed and preloaded (100,000 keys, not "
        f"counted), then instrumentation is switched on (`callgrind_control -i on`) for "
        f"a fixed budget of requests ({budget_text}) by `txcache-loadgen`: 8 connections, "
        "90 % GET, uniform keys, 16 B keys, 100 B values; then off, and `callgrind_control "
        "-d` dumps the count.",
        "",
        *per_request_table(rows, "instructions_per_request"),
        "## Simulated last-level cache misses per request (callgrind `DLmr`)",
        "",
        "What this counts: the data reads of the same runs that miss the last level of a "
        "simulated cache of a fixed shape (48 KiB L1 data, 2 MiB last level: one core's L2 "
        "on current server CPUs), the loads that on a real machine wait for the shared L3 or "
        "memory. A dependent chain of them is where a pipelined lookup's time goes "
        "(docs/node-speed.md). The simulation has no prefetcher and does not know which "
        "misses overlap, so this counts misses, not their cost. It moves by about 5 % from "
        "run to run (each process seeds its hash tables at random, which places the items "
        "differently), where timings move by 25 to 40 %.",
        "",
        *per_request_table(rows, "misses_per_request", digits=2),
    ]
    name = "node_speed_instructions_quick" if quick else "node_speed_instructions"
    (RESULTS_DIR / f"{name}.md").write_text("\n".join(body).rstrip() + "\n")
    raw = {"command": command_line(), "date": date, "budgets": budgets, "rows": rows}
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(raw, indent=2) + "\n")
    log(f"wrote {RESULTS_DIR / name}.md")


def main() -> None:
    """Run every phase and write results/node_speed{,_quick}.{md,json,png}."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured s per run (3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up s per run (1)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the main grid (2)")
    parser.add_argument("--items", type=int, default=1_000_000, help="items, memory (1 M)")
    parser.add_argument("--sweep-seconds", type=float, default=2.0, help="s per rate (2)")
    parser.add_argument("--max-rates", type=int, default=len(RATES), help="rates to try")
    parser.add_argument("--quick", action="store_true", help="a smoke run (about 2 min)")
    parser.add_argument("--only", choices=["memory", "instructions"], help="run one phase alone")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="measure nothing: rewrite the report of a run from its raw results",
    )
    parser.add_argument(
        "--txcached-threads",
        type=int,
        help="txcached's worker threads (default: txcached's own, one per CPU but one)",
    )
    args = parser.parse_args()
    if args.render:
        render(args.render)
        return
    if args.txcached_threads:
        # txcached reads TXCACHED_THREADS as its `--threads`: every txcached started below.
        os.environ["TXCACHED_THREADS"] = str(args.txcached_threads)
    if args.only == "memory":
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        memory_only(args.items)
        return
    if args.only == "instructions":
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        instructions_only(args.quick)
        return
    if args.quick:
        args.seconds, args.warmup, args.rounds, args.items = 1.0, 0.3, 1, 200_000
        args.sweep_seconds, args.max_rates = 1.0, 4
    started = time.monotonic()
    ensure_packages()
    freeze_binaries()
    loadgen_binary()
    note = machine()
    with running("txcached") as txc, running("redis") as rds, running("memcached") as mc:
        targets = [
            Target("txcached", txc, "resp"),
            Target("redis", rds, "resp"),
            Target("memcached", mc, "memcache"),
            Target("txcached TX", txc, "versioned"),
        ]
        rows = throughput(targets, args)
        calls = syscall_rows(targets, args)
        points = sweep(targets[:3], args)
        profile = hit_profile([targets[3], *targets[:3]], min(args.seconds, 3.0))
    kinds = [(label, label.split()[0], "resp") for label in ("txcached", "redis")]
    kinds += [("memcached", "memcached", "memcache"), ("txcached TX", "txcached", "versioned")]
    mem = memory(kinds, args.items)
    note["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    note["max_other_cpu_s"] = max(row["other_cpu_s"] for row in rows + calls)
    note["elapsed_s"] = time.monotonic() - started
    name = "node_speed_quick" if args.quick else "node_speed"
    if args.txcached_threads:
        name += f"_threads-{args.txcached_threads}"
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    raw = {"command": command_line(), "machine": note, "closed": rows, "syscalls": calls}
    raw |= {"open": points, "memory": mem, "hit_profile": profile}
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(raw, indent=2) + "\n")
    write_report(RESULTS_DIR / f"{name}.md", raw)


def write_report(path: Path, raw: dict[str, Any]) -> None:
    """The report (``path``) and its plot (beside it, ``.png``) of one run's raw results."""
    rows, calls, points = raw["closed"], raw["syscalls"], raw["open"]
    plot_path = path.with_suffix(".png")
    plotted = plot(points, rows, plot_path)
    rounds = 1 + max((row["round"] for row in rows), default=0)
    body = [
        *header(raw["machine"], raw["command"]),
        *goals(rows, calls, raw["memory"]),
        *throughput_tables(rows, rounds),
        *host_table(rows),
        *sweep_tables(points),
        *memory_table(raw["memory"]),
        *syscall_table(calls),
        *hit_table(raw["hit_profile"]),
        f"Plot: [{plot_path.name}]({plot_path.name})" if plotted else "No plot: no matplotlib.",
    ]
    path.write_text("\n".join(body).rstrip() + "\n")
    log(f"wrote {path}")


def render(raw_path: Path) -> None:
    """Rewrites the report of a run from its raw results (``results/<name>.json``), for a
    report whose tables changed after the run."""
    raw = json.loads(raw_path.read_text())
    write_report(raw_path.with_suffix(".md"), raw)


if __name__ == "__main__":
    sys.exit(main())
