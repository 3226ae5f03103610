"""Reports and plots of the RUBiS experiments (``rubis_experiments.py``): one markdown table
with the paper's numbers beside ours, and one PNG, per experiment."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _report import RESULTS_DIR, fmt, result_name, save_plot, write_report

from txcache.protocol import MISS_KINDS

Result = dict[str, Any]

#: The experiments, in the paper's order, and what the paper reported for each.
EXPERIMENTS = {
    "cache-size": "Figures 5(a) and 6(a): 928 req/s without cache; 2.2x-5.2x by cache size; "
    "hit rates 27 %-90 %; no consistency only slightly faster",
    "staleness": "Figure 7: even 5-10 s of staleness gives a large part of the benefit; "
    "little gain past 30 s",
    "misses": "Figure 8: consistency misses the smallest class by a large margin",
    "contents": "Thesis table: values 95 % of memory, keys 2 %, intervals 0.6 % (9 B each), "
    "tags 2 % (2.4 per entry, 16 B each); half the objects under 400 B",
    "latency": "Thesis: mean lookup 0.7 ms against a mean database query 5.5 ms",
}


def _setting_line(args: argparse.Namespace) -> str:
    return (
        f"RUBiS bidding mix at peak load (no think time), read-your-writes "
        f"{'on' if args.read_your_writes else 'off'}; each configuration on a fresh copy of "
        f"the database and a cold node, {args.warmup:g} s warm-up, then the clients raised "
        f"through {', '.join(map(str, args.clients))} ({args.duration:g} s each) until "
        f"throughput stops rising; application: granian {args.workers} workers x "
        f"{args.threads} threads; everything on this {os.cpu_count()}-CPU machine."
    )


def _peak(result: Result) -> str:
    peak = result["peak"]
    return f"{fmt(peak['throughput'], 0)} ({peak['clients']})"


def _hit_rate(result: Result) -> float | None:
    """The hit rate over every measured window of the search."""
    totals = {kind: 0 for kind in ("hits", *MISS_KINDS)}
    for point in result["points"]:
        for kind, count in point["lookups"].items():
            totals[kind] += count
    lookups = sum(totals.values())
    return totals["hits"] / lookups if lookups else None


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _bottleneck(result: Result) -> str:
    cpu = result["peak"]["cpu_s"]
    top = max(cpu, key=cpu.get)
    return f"{top} {cpu[top]:.0f} s"


def _cache_size(results: Sequence[Result]) -> tuple[list[str], Callable[[Any], None]]:
    base = results[0]["peak"]["throughput"]
    lines = [
        "| configuration | peak req/s (clients) | speedup | hit rate | busiest at peak (CPU s) |",
        "|---|---:|---:|---:|---|",
    ]
    for result in results:
        speedup = result["peak"]["throughput"] / base
        lines.append(
            f"| {result['name']} | {_peak(result)} | {fmt(speedup)}x | "
            f"{_percent(_hit_rate(result))} | {_bottleneck(result)} |"
        )
    by_mode: dict[str, list[Result]] = {}
    for result in results[1:]:
        by_mode.setdefault(result["config"]["mode"], []).append(result)
    consistent, loose = by_mode.get("consistent", []), by_mode.get("no_consistency", [])
    for ours, theirs in zip(consistent, loose, strict=False):
        gap = theirs["peak"]["throughput"] / ours["peak"]["throughput"] - 1
        lines.append(f"- {ours['config']['node_memory']}: no_consistency {gap * 100:+.1f} %")

    def plot(axes: Any) -> None:
        left, right = axes
        for mode, series in by_mode.items():
            sizes = [r["config"]["node_memory"] for r in series]
            left.plot(sizes, [r["peak"]["throughput"] for r in series], marker="o", label=mode)
            right.plot(sizes, [100 * (_hit_rate(r) or 0) for r in series], marker="o", label=mode)
        left.axhline(base, color="grey", linestyle="--", label="no cache")
        left.set(xlabel="cache size", ylabel="peak requests/s", title="Peak throughput (5a)")
        right.set(xlabel="cache size", ylabel="hit rate %", title="Hit rate (6a)", ylim=(0, 100))
        left.legend()
        right.legend()

    return lines, plot


def _staleness(results: Sequence[Result]) -> tuple[list[str], Callable[[Any], None]]:
    base = results[0]["peak"]["throughput"]
    lines = [
        "| staleness limit | peak req/s (clients) | speedup | hit rate | staleness misses |",
        "|---:|---:|---:|---:|---:|",
    ]
    cached = results[1:]
    for result in cached:
        stale = sum(p["lookups"]["staleness"] for p in result["points"])
        lines.append(
            f"| {result['config']['staleness']:g} s | {_peak(result)} | "
            f"{fmt(result['peak']['throughput'] / base)}x | {_percent(_hit_rate(result))} | "
            f"{stale} |"
        )
    lines.append(f"- no cache: {_peak(results[0])}")

    def plot(axes: Any) -> None:
        (left,) = axes
        limits = [r["config"]["staleness"] for r in cached]
        left.plot(limits, [r["peak"]["throughput"] for r in cached], marker="o", label="txcache")
        left.axhline(base, color="grey", linestyle="--", label="no cache")
        left.set(
            xscale="log",
            xlabel="staleness limit (s)",
            ylabel="peak requests/s",
            title="Peak throughput vs staleness (7)",
        )
        left.legend()

    return lines, plot


def _miss_shares(result: Result) -> dict[str, float]:
    totals = {kind: sum(p["lookups"][kind] for p in result["points"]) for kind in MISS_KINDS}
    misses = sum(totals.values())
    return {kind: (count / misses if misses else 0.0) for kind, count in totals.items()}


def _misses(results: Sequence[Result]) -> tuple[list[str], Callable[[Any], None]]:
    lines = [
        "| configuration | " + " | ".join(MISS_KINDS) + " | misses | hit rate |",
        "|---|" + "---:|" * (len(MISS_KINDS) + 2),
    ]
    for result in results:
        shares = _miss_shares(result)
        count = sum(sum(p["lookups"][k] for p in result["points"]) for k in MISS_KINDS)
        cells = " | ".join(_percent(shares[k]) for k in MISS_KINDS)
        lines.append(f"| {result['name']} | {cells} | {count} | {_percent(_hit_rate(result))} |")

    def plot(axes: Any) -> None:
        (left,) = axes
        names = [r["name"] for r in results]
        bottom = [0.0] * len(results)
        for kind in MISS_KINDS:
            heights = [100 * _miss_shares(r)[kind] for r in results]
            left.bar(names, heights, bottom=bottom, label=kind)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        left.set(ylabel="% of misses", title="Misses by type (8)")
        left.tick_params(axis="x", labelrotation=15, labelsize=7)
        left.legend()

    return lines, plot


def _contents(results: Sequence[Result]) -> tuple[list[str], Callable[[Any], None]]:
    info = results[0]["contents"]
    parts = {
        "cached values": info["used_memory_values"],
        "cache keys": info["used_memory_keys"],
        "validity intervals": info["used_memory_intervals"],
        "invalidation tags": info["used_memory_tags"],
        "invalidation history and miss records": info["used_memory_history"]
        + info["used_memory_ghosts"],
    }
    total = sum(parts.values())
    versions = info["versions"] or 1
    lines = [
        f"After the run of {results[0]['name']}: {info['keys']} keys, {info['versions']} "
        f"versions ({info['open_versions']} open), {total / 2**20:.1f} MiB charged.",
        "",
        "| part | MiB | share | per version |",
        "|---|---:|---:|---:|",
    ]
    for name, size in parts.items():
        share, each = 100 * size / total, size / versions
        lines.append(f"| {name} | {size / 2**20:.2f} | {share:.1f} % | {each:.0f} B |")
    open_versions = info["open_versions"] or 1
    lines.append("")
    lines.append(
        f"- tags per open version: {info.get('open_version_tags', 0) / open_versions:.2f} "
        "(closed versions drop their tags)"
    )
    buckets = sorted(
        (int(name.removeprefix("objects_by_size_")), count)
        for name, count in info.items()
        if name.startswith("objects_by_size_")
    )
    below = sum(count for size, count in buckets if size < 512)
    lines.append(f"- objects under 512 B: {100 * below / versions:.0f} %")

    def plot(axes: Any) -> None:
        (left,) = axes
        left.bar([str(size + 1) for size, _ in buckets], [count for _, count in buckets])
        left.set(xlabel="object size up to (bytes)", ylabel="objects", title="Object sizes")
        left.tick_params(axis="x", labelrotation=45, labelsize=7)

    return lines, plot


def _latency(results: Sequence[Result]) -> tuple[list[str], Callable[[Any], None]]:
    latency = results[0]["latency"]
    lines = [
        f"Probe beside the load of {results[0]['name']} (a few read pages a second):",
        "",
        "| operation | count | mean ms |",
        "|---|---:|---:|",
        f"| cache lookup (TXGET round trip) | {latency['lookups']} | "
        f"{latency['lookup_mean_ms']:.3f} |",
        f"| database statement | {latency['queries']} | {latency['query_mean_ms']:.3f} |",
    ]

    def plot(axes: Any) -> None:
        (left,) = axes
        left.bar(
            ["cache lookup", "database statement"],
            [latency["lookup_mean_ms"], latency["query_mean_ms"]],
        )
        left.set(ylabel="mean ms", title="Lookup vs statement latency")

    return lines, plot


_BUILDERS = {
    "cache-size": (_cache_size, 2),
    "staleness": (_staleness, 1),
    "misses": (_misses, 1),
    "contents": (_contents, 1),
    "latency": (_latency, 1),
}


def write_experiment(
    experiment: str, results: Sequence[Result], args: argparse.Namespace, note: dict[str, Any]
) -> Path:
    """Write ``results/rubis_<experiment>.{md,json,png}``; returns the markdown's path."""
    build, panels = _BUILDERS[experiment]
    lines, plot = build(results)
    name = result_name(f"rubis_{experiment.replace('-', '_')}", args.quick, args.storage)
    plotted = save_plot(RESULTS_DIR / f"{name}.png", plot, panels)
    body = [
        _setting_line(args),
        "",
        *lines,
        "",
        f"- the paper: {EXPERIMENTS[experiment]}",
        f"Plot: [{name}.png]({name}.png)" if plotted else "No plot: matplotlib is missing.",
    ]
    raw = {"settings": vars(args), "results": list(results)}
    return write_report(name, f"RUBiS experiment: {experiment}", note, body, raw)
