"""Cache-node speed: txcached beside Redis and memcached, one machine, one load tool.

One run starts ``txcached`` (this checkout's release build), ``redis-server`` (no
persistence) and ``memcached`` (2 threads) on loopback, and drives each with
``txcache-loadgen`` (crates/loadgen), interleaved so that a burst of other work hits them
alike. The script installs nothing: Redis, memcached, ``perf`` and valgrind are
prerequisites (bench/README.md), and a comparison whose program is missing is skipped with a
message saying how to install it (the report marks it *not measured*). Per server:

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

``--only stores`` runs the stores-alone cell alone (``TXSET`` against ``SET``, pipeline 16,
8 connections, every round's order reversed from the last), ``--rounds`` rounds, and writes
``results/txset_throughput.{md,json}``: each command's ops/s and server CPU per request, and
their ratios round by round. ``--baseline-txcached PATH`` measures a second txcached build
(e.g. the previous commit's) in the same rounds, so that a change to the node is judged
against its baseline on the same host minutes apart.

``--txcached-threads N`` runs txcached with N worker threads instead of its default (one per
CPU but one; here the load tool shares the CPUs; Redis runs one thread); the results go to
``results/node_speed_threads-N.{md,json}``. ``--render results/X.json`` rewrites a run's
report from its raw results without measuring.

The servers and one load run are in :mod:`_node_servers`, the phases in :mod:`_node_phases`,
the goals in :mod:`_node_goals`, the report in :mod:`_node_report` and the instruction counts
in :mod:`_callgrind`; this file runs the phases in order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _callgrind import CACHES, instructions_body
from _node_goals import round_ratios
from _node_phases import (
    PLAIN,
    RATES,
    STORES,
    hit_profile,
    instruction_rows,
    memory,
    sweep,
    syscall_rows,
    throughput,
)
from _node_report import body, header, memory_table, plot, servers_text
from _node_servers import (
    Target,
    installed,
    loadgen_binary,
    measure,
    running,
    skipping,
    txcached_workers,
    versions,
)
from _report import (
    RESULTS_DIR,
    fmt,
    freeze_binaries,
    log,
    machine_lines,
    machine_note,
    num,
    result_name,
    table,
    write_report,
)

TITLE = "Cache-node speed: txcached, Redis and memcached"
PROTOCOLS = {"txcached": "resp", "redis": "resp", "memcached": "memcache"}
NAMES = {"redis": "Redis", "memcached": "memcached"}


def compared() -> tuple[list[str], list[str]]:
    """The servers to measure (txcached and those of Redis and memcached that are
    installed), and why each other one is not."""
    missing = [kind for kind in NAMES if not installed(kind)]
    skipped = [skipping(kind, f"the comparison with {NAMES[kind]}") for kind in missing]
    return [kind for kind in PLAIN if kind not in missing], skipped


def server_note() -> dict[str, Any]:
    """The machine note with the servers' versions and txcached's workers."""
    return {**machine_note(), "servers": versions(), "txcached_workers": txcached_workers()}


def run_all(args: argparse.Namespace) -> None:
    """Every phase; writes results/node_speed{,_quick}.{md,json,png}."""
    started = time.monotonic()
    freeze_binaries()
    loadgen_binary()
    kinds, skipped = compared()
    note = server_note()
    with ExitStack() as stack:
        servers = {kind: stack.enter_context(running(kind)) for kind in kinds}
        plain = [Target(kind, servers[kind], PROTOCOLS[kind]) for kind in kinds]
        versioned = Target("txcached TX", servers["txcached"], "versioned")
        targets = [*plain, versioned]
        rows = throughput(targets, args)
        calls = []
        if installed("perf"):
            calls = syscall_rows(targets, args)
        else:
            skipped.append(skipping("perf", "the system calls per batch"))
        points = sweep(plain, args)
        profile = hit_profile([versioned, *plain], min(args.seconds, 3.0))
        skipped += [profile["skipped"]] if "skipped" in profile else []
    kinds_memory = [(kind, kind, PROTOCOLS[kind]) for kind in kinds]
    mem = memory([*kinds_memory, ("txcached TX", "txcached", "versioned")], args.items)
    note["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    note["max_other_cpu_s"] = max(row["other_cpu_s"] for row in rows + calls)
    note["elapsed_s"] = time.monotonic() - started
    note["skipped"] = skipped
    name = result_name("node_speed", args.quick)
    if args.txcached_threads:
        name += f"_threads-{args.txcached_threads}"
    raw = {"closed": rows, "syscalls": calls, "open": points, "memory": mem, "hit_profile": profile}
    png = RESULTS_DIR / f"{name}.png"
    plotted = plot(points, rows, png)
    report = body(raw, png.name if plotted else None)
    path = write_report(name, TITLE, note, report, raw, header=header(note))
    log(f"wrote {path}")


def render(raw_path: Path) -> None:
    """Rewrites the report of a run from its raw results (``results/<name>.json``), for a
    report whose tables changed after the run."""
    raw = json.loads(raw_path.read_text())
    png = raw_path.with_suffix(".png")
    plotted = plot(raw["open"], raw["closed"], png)
    top = [f"# {TITLE}", "", f"- command: `{raw['command']}`", *header(raw["machine"]), ""]
    path = raw_path.with_suffix(".md")
    path.write_text("\n".join([*top, *body(raw, png.name if plotted else None)]) + "\n")
    log(f"wrote {path}")


def memory_only(items: int) -> None:
    """The memory phase alone: writes results/node_speed_memory.{md,json}."""
    started = time.monotonic()
    freeze_binaries()
    loadgen_binary()
    kinds, _ = compared()
    versioned = ("txcached TX", "txcached", "versioned")
    rows = memory(
        [(kinds[0], kinds[0], "resp"), versioned, *((k, k, PROTOCOLS[k]) for k in kinds[1:])], items
    )
    took = f"The run took {(time.monotonic() - started) / 60:.1f} min."
    title = "Cache-node memory per item"
    path = write_report(
        "node_speed_memory", title, machine_note(), [*memory_table(rows), took], {"memory": rows}
    )
    log(f"wrote {path}")


def instructions_only(quick: bool) -> None:
    """The instruction-count phase alone: writes
    results/node_speed_instructions{,_quick}.{md,json}."""
    if not installed("valgrind"):
        raise SystemExit(skipping("valgrind", "the instruction counts"))
    started = time.monotonic()
    freeze_binaries()
    loadgen_binary()
    budgets = {16: 20_000, 1: 5_000} if quick else {16: 200_000, 1: 50_000}
    with tempfile.TemporaryDirectory(prefix="txcache-callgrind-") as out_dir:
        rows = instruction_rows(budgets, Path(out_dir))
    note = server_note()
    under = f"valgrind --tool=callgrind --instr-atstart=no --cache-sim=yes {' '.join(CACHES)}"
    lines = [*machine_lines(note), f"- servers: {servers_text(note)}; each under `{under}`"]
    took = f"The run took {(time.monotonic() - started) / 60:.1f} min."
    name = result_name("node_speed_instructions", quick)
    title = "Cache-node instructions and cache misses per request"
    raw = {"budgets": budgets, "rows": rows}
    path = write_report(name, title, note, [*instructions_body(rows, budgets), took], raw, lines)
    log(f"wrote {path}")


# The stores-alone cell's two commands on one txcached: (label suffix, loadgen protocol).
STORE_COMMANDS = (("SET", "resp"), ("TXSET", "versioned"))


def stores_only(args: argparse.Namespace) -> None:
    """The stores-alone cell alone, on this build and (``--baseline-txcached``) a baseline
    build, ``--rounds`` rounds: writes results/txset_throughput{,_quick}.{md,json}."""
    started = time.monotonic()
    freeze_binaries()
    loadgen_binary()
    builds = {"txcached": os.environ["TXCACHED_BIN"]}
    if args.baseline_txcached:
        builds = {"baseline": str(args.baseline_txcached.resolve()), **builds}
    cell = STORES[0]
    rows = []
    with ExitStack() as stack:
        servers = {}
        for label, binary in builds.items():
            os.environ["TXCACHED_BIN"] = binary  # read by the server command at start
            servers[label] = stack.enter_context(running("txcached"))
        os.environ["TXCACHED_BIN"] = builds["txcached"]
        pairs = [
            (Target(f"{label} {command}", servers[label], protocol), label)
            for label in builds
            for command, protocol in STORE_COMMANDS
        ]
        for round_ in range(args.rounds):
            for target, build in pairs if round_ % 2 == 0 else pairs[::-1]:
                row = measure(target, cell, args.seconds, args.warmup)
                rows.append({**row, "round": round_, "build": build})
                log(
                    f"{target.label:<16} {row['ops']:>10,.0f} ops/s, "
                    f"{row['cpu_us_per_request']:.2f} µs server CPU per request "
                    f"(steal {row['steal_s']:.2f} s)"
                )
    note = server_note()
    note["baseline"] = baseline_note(builds.get("baseline"))
    note["elapsed_s"] = time.monotonic() - started
    lines = [*machine_lines(note), f"- baseline: {note['baseline']}"]
    name = result_name("txset_throughput", args.quick)
    title = "TXSET against SET, stores alone"
    body = stores_body(rows, list(builds), cell.name, args)
    path = write_report(name, title, note, body, {"rows": rows}, lines)
    log(f"wrote {path}")


def baseline_note(binary: str | None) -> str:
    """Which baseline build ran: its path and hash, or that none did."""
    if binary is None:
        return "none (--baseline-txcached not given)"
    digest = hashlib.sha256(Path(binary).read_bytes()).hexdigest()[:12]
    return f"{binary} (sha256 {digest})"


def stores_body(
    rows: list[dict[str, Any]], builds: list[str], cell: str, args: argparse.Namespace
) -> list[str]:
    """Per round and build: each command's ops/s and server CPU per request, and the ratios;
    then the medians over the rounds (``Ratios``: rounds disturbed by steal left out)."""
    by_key = {(r["round"], r["target"]): r for r in rows}
    per_round = []
    for round_ in sorted({r["round"] for r in rows}):
        for build in builds:
            plain, versioned = (by_key[(round_, f"{build} {c}")] for c, _ in STORE_COMMANDS)
            clean = "" if plain["clean"] and versioned["clean"] else " *"
            per_round.append(
                [
                    f"{round_ + 1}{clean}",
                    build,
                    num(plain["ops"]),
                    num(versioned["ops"]),
                    f"{versioned['ops'] / plain['ops']:.2f}x",
                    fmt(plain["cpu_us_per_request"]),
                    fmt(versioned["cpu_us_per_request"]),
                    f"{plain['cpu_us_per_request'] / versioned['cpu_us_per_request']:.2f}x",
                    fmt(plain["other_cpu_s"] + versioned["other_cpu_s"], 1),
                ]
            )
    summary = []
    for build in builds:
        set_label, txset_label = f"{build} SET", f"{build} TXSET"
        ops = round_ratios(rows, txset_label, set_label, cell)
        cpu = round_ratios(rows, set_label, txset_label, cell, "cpu_us_per_request")
        summary.append([build, str(ops), str(cpu)])
    return [
        f"The stores-alone cell of `node_speed.py` ({cell}: 100,000 keys of 16 B, 100 B values,"
        " no lookups; every `TXSET` a new version `[t, t + 1)` below the preloaded one, so a"
        " key's versions pile up through the run), "
        f"{args.rounds} round{'s' if args.rounds != 1 else ''} of {args.seconds:g} s after "
        f"{args.warmup:g} s of warm-up, each "
        "after a flush and a preload, every round's order reversed from the last; the load tool "
        "shares the CPUs with the node. *Server CPU ratio*: `SET`'s server CPU per request over "
        "`TXSET`'s, the throughput ratio a node that is the bottleneck would show. "
        "*txcached*: this checkout's build; *baseline*: `--baseline-txcached`. *Other work*: "
        "CPU seconds used meanwhile by processes outside the benchmark, both runs of the row.",
        "",
        *table(
            [
                "round",
                "build",
                "SET ops/s",
                "TXSET ops/s",
                "TXSET / SET",
                "SET µs",
                "TXSET µs",
                "server CPU ratio",
                "other work, CPU s",
            ],
            per_round,
            "llrrrrrrr",
        ),
        "",
        "`*`: steal disturbed a run of that round (more than 2 % of the CPUs' time, after "
        "3 repeats).",
        "",
        *table(
            ["build", "TXSET / SET ops/s", "SET / TXSET server CPU per request"],
            summary,
            "lrr",
        ),
        "",
        "Median and range over the rounds clean of steal (`*`: none was).",
    ]


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured s per run (3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up s per run (1)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the main grid (2)")
    parser.add_argument("--items", type=int, default=1_000_000, help="items, memory (1 M)")
    parser.add_argument("--sweep-seconds", type=float, default=2.0, help="s per rate (2)")
    parser.add_argument("--max-rates", type=int, default=len(RATES), help="rates to try")
    parser.add_argument("--quick", action="store_true", help="a smoke run (about 2 min)")
    parser.add_argument(
        "--only", choices=["memory", "instructions", "stores"], help="run one phase alone"
    )
    parser.add_argument(
        "--baseline-txcached",
        type=Path,
        metavar="PATH",
        help="--only stores: also measure this txcached binary, in the same rounds",
    )
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
    if args.quick and args.only in (None, "stores"):
        args.seconds, args.warmup, args.rounds, args.items = 1.0, 0.3, 1, 200_000
        args.sweep_seconds, args.max_rates = 1.0, 4
    if args.baseline_txcached and args.only != "stores":
        parser.error("--baseline-txcached goes with --only stores")
    return args


def main() -> None:
    """Run what the options ask for."""
    args = parse_args()
    if args.render:
        render(args.render)
        return
    if args.txcached_threads:
        # txcached reads TXCACHED_THREADS as its `--threads`: every txcached started below.
        os.environ["TXCACHED_THREADS"] = str(args.txcached_threads)
    if args.only == "memory":
        memory_only(args.items)
    elif args.only == "instructions":
        instructions_only(args.quick)
    elif args.only == "stores":
        stores_only(args)
    else:
        run_all(args)


if __name__ == "__main__":
    main()
