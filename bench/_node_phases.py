"""The phases of ``node_speed.py``: the workload cells, the closed-loop grid with the
lookups and stores alone, system calls per batch, the open-loop sweep, memory per item, one
hit at a time (with txcached's CPU by symbol), and the instruction counts under callgrind.
Each returns its rows; :mod:`_node_report` renders them.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _callgrind import counted, guest_fd_limit, under_callgrind
from _common import server_info
from _cpu import context_switches
from _node_servers import (
    KEY_BYTES,
    VALUE_BYTES,
    Server,
    Spec,
    Target,
    installed,
    loadgen,
    measure,
    memcached_stat,
    running,
    skipping,
)
from _report import log

MS = 1000.0  # µs
PLAIN = ("txcached", "redis", "memcached")
"""The servers compared with their plain commands (``txcached TX``: txcached's versioned)."""

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
        for target in (t for t in targets if t.label in PLAIN):
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
        return bool(ok)

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
                info = server_info(f"127.0.0.1:{server.port}", "memory")
                row["used_memory_per_item"] = info["used_memory"] / items
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
    if not installed("perf"):
        return {"servers": rows, "shares": {}, "skipped": skipping("perf", "the symbol split")}
    return {"servers": rows, "shares": symbol_shares(targets[0].server, seconds)}


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
        if kind != "txcached" and not installed(kind):
            skipping(kind, f"{label}'s instruction counts")
            continue
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
