"""The report of ``node_speed.py``: the goals, the closed-loop tables with their
per-round ratios, the host during the rounds, the open-loop sweep, memory, system calls, one
hit at a time, the instruction counts, and the plot. A server that was not installed shows
as ``-`` (a goal that needs it: *not measured*).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from _node_goals import goals, mean_of, round_ratios
from _node_phases import ALONE_LABELS, LOOKUPS, MAIN, MS, PLAIN, STORES, VARIATIONS
from _node_servers import txcached_workers
from _report import fmt, num, ratio, save_plot

LABELS = ["txcached", "redis", "memcached", "txcached TX"]
# The ratio columns: (numerator, denominator).
PAIRS = [("txcached", "redis"), ("txcached", "memcached"), ("txcached TX", "txcached")]


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
        cpu_text = " | ".join(fmt(c) for c in per_request)
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
            row = next((r for r in rows if r["target"] == label and r["cell"] == spec.name), None)
            latency = row["latency_us"] if row else None
            cells.append(f"{latency['p50']:.0f} / {latency['p99']:.0f}" if latency else "-")
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
        cpu_cells = " | ".join(fmt(value) for value in (t, r, m, x))
        lines.append(f"| {spec.name} | {cpu_cells} | {per_round} |")
    lines += [
        "",
        "## Variations at 8 connections (ops/s; server CPU µs per request)",
        "",
        "| cell | txcached | Redis | memcached | txcached / Redis | txcached / memcached "
        "| CPU txcached | CPU Redis | CPU memcached |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for spec in VARIATIONS:
        t, r, m = (ops[(label, spec.name)] for label in PLAIN)
        cpu_cells = " | ".join(fmt(cpu[(label, spec.name)]) for label in PLAIN)
        lines.append(
            f"| {spec.name} | {num(t)} | {num(r)} | {num(m)} | {ratio(t, r)} | {ratio(t, m)} "
            f"| {cpu_cells} |"
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
    if not rows:
        lines.append("| (not measured: perf is not installed) | | | | | |")
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
    labels = [label for label in PLAIN if any(p["target"] == label for p in points)]
    for label in labels:
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
    lines += ["| rate | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    for rate in sorted({p["rate"] for p in points}):
        cells = []
        for label in labels:
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
    if not profile["shares"]:
        lines.append(f"| ({profile.get('skipped', 'not measured')}) | | |")
    total = sum(profile["shares"].values()) or 1.0
    for part, share in sorted(profile["shares"].items(), key=lambda item: -item[1]):
        lines.append(f"| {part} | {share / total:.1%} | {per_hit * share / total:.2f} |")
    return [*lines, ""]


def plot(points: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path) -> bool:
    """Throughput against latency: the open-loop sweep (mean and p99) and the closed-loop
    cells at 8 connections. False when matplotlib is unavailable."""

    def draw(axes: list[Any]) -> None:
        left, right = axes
        for label, color in zip(PLAIN, ("C0", "C3", "C2"), strict=True):
            mine = sorted(
                (p["loadgen"]["results"] for p in points if p["target"] == label),
                key=lambda r: r["ops_per_sec"],
            )
            if not mine:
                continue
            x = [r["ops_per_sec"] / 1e3 for r in mine]
            left.plot(x, [r["latency_us"]["mean"] for r in mine], "o-", color=color, label=label)
            left.plot(x, [r["latency_us"]["p99"] for r in mine], "x--", color=color, alpha=0.5)
        left.axhline(MS, color="grey", linewidth=0.8)
        left.set(xlabel="achieved K ops/s", ylabel="latency µs (— mean, -- p99)", yscale="log")
        left.set_title("open loop, ETC sizes, 8 connections")
        left.legend()
        for label, color in zip(LABELS, ("C0", "C3", "C2", "C1"), strict=True):
            mine = [r for r in rows if r["target"] == label and r["cell"] in ("p1 c8", "p16 c8")]
            if not mine:
                continue
            right.scatter(
                [r["ops"] / 1e3 for r in mine],
                [r["latency_us"]["mean"] for r in mine],
                color=color,
                label=label,
            )
        right.set(xlabel="K ops/s", ylabel="mean latency µs", yscale="log")
        right.set_title("closed loop, 100 B, 8 connections (pipeline 1 left, 16 right)")
        right.legend()

    return save_plot(path, draw, panels=2, height=4.5)


def servers_text(note: dict[str, Any]) -> str:
    """The servers measured, with their versions and options (or *not installed*)."""
    servers = note["servers"]
    options = {"redis": "single-threaded, `--save '' --appendonly no`", "memcached": "`-t 2`"}
    described = [
        servers[kind] if "not installed" in servers[kind] else f"{servers[kind]} ({options[kind]})"
        for kind in options
    ]
    workers = note.get("txcached_workers") or txcached_workers()
    return ", ".join([f"txcached ({workers})", *described])


def header(note: dict[str, Any]) -> list[str]:
    """The report's lines under its title and command: machine, servers, code, load, and
    what was not measured."""
    took = f"{note['elapsed_s'] / 60:.1f} min" if "elapsed_s" in note else "(not recorded)"
    return [
        f"- machine: {note['nproc']} CPUs ({note['cpu']}), {note['memory_gib']} GiB RAM, "
        f"Linux {note['kernel']}; the load tool shares the CPUs with the server",
        f"- servers: {servers_text(note)}",
        f"- code: {note['build']}",
        f"- date: {note['date']}; load average (1, 5, 15 min) at start "
        f"{', '.join(map(str, note['load_average_at_start']))}, at end "
        f"{', '.join(map(str, note['load_average_at_end']))}; other work during the runs: "
        f"at most {note['max_other_cpu_s']:.2f} CPU s per run; the whole run took {took}",
        *(f"- not measured: {reason}" for reason in note.get("skipped", [])),
    ]


def body(raw: dict[str, Any], plot_name: str | None) -> list[str]:
    """The report's sections, from a run's raw results (``plot_name``: the plot beside it,
    ``None`` when there is none)."""
    rows, calls, points = raw["closed"], raw["syscalls"], raw["open"]
    rounds = 1 + max((row["round"] for row in rows), default=0)
    return [
        *goals(rows, calls, raw["memory"]),
        *throughput_tables(rows, rounds),
        *host_table(rows),
        *sweep_tables(points),
        *memory_table(raw["memory"]),
        *syscall_table(calls),
        *hit_table(raw["hit_profile"]),
        f"Plot: [{plot_name}]({plot_name})" if plot_name else "No plot: no matplotlib.",
    ]
