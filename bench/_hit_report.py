"""The report of ``library_hit_latency.py``: the summary across CPU placements, every
series' distribution, the commit phase, the hit path step by step, the pin set's cost as pins
pile up, and the raw results (summaries, quantiles, per-round medians)."""

from __future__ import annotations

import argparse
from typing import Any

from _hit_layers import STEPS, STEPS_CPU
from _hit_measure import GOAL_P50_US, PLACEMENTS, STALENESS, Results, Series, idle_note
from _report import fmt, per_round_p50, quantiles, summarize

MAIN_ROWS = (
    "hit",
    "hit_later",
    "hit_first_in_loop",
    "fresh_hit",
    "empty_tx",
    "fresh_begin",
    "fresh_end",
    "fresh_whole",
    "lean_txget",
    "redis_txget",
    "redis_get",
    "db_in_tx",
    "db_autocommit",
)
SUMMARY_ROWS = ("hit", "fresh_hit", "empty_tx", "lean_txget", "redis_get", "db_autocommit")


def series_row(series: Series) -> str:
    """A markdown row: label, count, p50, p90, p99, max, mean (µs)."""
    s = series.summary_us()
    cells = [fmt(s[key], 1) for key in ("p50", "p90", "p99", "max", "mean")]
    return f"| {series.label} | {int(s['count'])} | {' | '.join(cells)} |"


def verdict(results: Results, placement: str) -> str:
    """Whether the hit p50 meets the goal in ``placement``."""
    hit = results.summary(placement, "hit")
    met = "met" if hit["p50"] <= GOAL_P50_US else "NOT met"
    return f"**{met}** (p50 {hit['p50']:.1f} µs, p99 {hit['p99']:.1f} µs)"


def summary_table(results: Results, placements: list[str]) -> list[str]:
    """p50 / p99 of the main series side by side for every placement."""
    head = " | ".join(f"{p}: p50 | {p}: p99" for p in placements)
    rows = [f"| what | {head} |", "|---|" + "---|---|" * len(placements)]
    for name in SUMMARY_ROWS:
        label = results.series[placements[0]][name].label
        cells = []
        for placement in placements:
            s = results.summary(placement, name)
            cells += [fmt(s["p50"], 1), fmt(s["p99"], 1)]
        rows.append(f"| {label} | {' | '.join(cells)} |")
    return rows


def breakdown_table(results: Results, placements: list[str], detail: str) -> list[str]:
    """The step-by-step hit path: p50 per placement, the tight loops and shares in
    ``detail``."""
    head = " | ".join(f"{p}: p50 µs" for p in placements)
    rows = [
        f"| step | {head} | {detail}: p99 µs | {detail}: tight loop µs "
        f"| {detail}: share of the hit p50 |",
        "|---|" + "---|" * len(placements) + "---|---|---|",
    ]
    hit = results.summary(detail, "hit")
    tight = results.tight.get(detail, {})
    for name, label in (*STEPS, ("total", "sum of the steps (timed back to back)")):
        cells = [fmt(results.summary(p, f"step_{name}")["p50"]) for p in placements]
        s = results.summary(detail, f"step_{name}")
        value = tight.get(name)
        rows.append(
            f"| {label} | {' | '.join(cells)} | {fmt(s['p99'])} | "
            f"{'-' if value is None else fmt(value / 1000)} | "
            f"{100 * s['p50'] / hit['p50']:.0f} % |"
        )
    return rows


def tight_text(results: Results, placement: str) -> list[str]:
    """The TXGET step split and the hit's total from the tight loops of ``placement``."""
    t = {key: value / 1000 for key, value in results.tight[placement].items()}
    cpu_only = sum(t[name] for name in STEPS_CPU)
    wrapper = t["hit"] - cpu_only - t["txget"]
    return [
        f"`TXGET` split ({placement}; medians of single timed calls, µs): bare socket "
        f"`sendall` + `recv` + hiredis parse of a pre-packed command {t['socket']:.1f}; with "
        f"`hiredis.pack_command` ({t['pack']:.2f}, tight loop) that is "
        f"`RespConnection.call` {t['lean_call']:.1f}; `Endpoint.call` (idle-list pop/append, "
        f"`is_up()` → `time.monotonic()`) {t['endpoint_call']:.1f}; `CacheNode.lookup` (reply "
        f"checks, `Interval` and `Hit` objects) {t['txget']:.1f}.",
        "",
        f"A hit (`get_item(417)` again and again in one transaction; {placement}) takes "
        f"{t['hit']:.1f} µs (median): `CacheNode.lookup` {t['txget']:.1f} + the CPU-only "
        f"steps {cpu_only:.1f} (tight loops) + the rest {wrapper:.1f} (`__call__`, "
        "`isinstance` checks, the frames loop, two `time.perf_counter()`, "
        "`ReadOnlyTransaction.lookup`'s own frame).",
    ]


COMMIT_ROWS = ("hit", "hit_first_in_loop", "fresh_hit", "empty_tx", "fresh_begin", "fresh_end")


def commit_section(results: Results, args: argparse.Namespace) -> list[str]:
    """The commit phase's table, if it ran."""
    if "commits" not in results.series:
        return []
    pins = summarize([float(n) for n in results.pins_at_begin["commits"]])
    return [
        f"## While the database commits ({results.commits['placement']} placement)",
        "",
        f"`{results.commits['command']}` (`{results.commits['script']}`) commits a "
        "one-row `UPDATE` of another table "
        f"{args.commit_rate} times a second (the cached items stay valid); measured after "
        f"{args.commit_warmup:g} s of it, when the library listed "
        f"{results.commits['pins_listed']} pins and a transaction began with a median "
        f"{pins['p50']:.0f} of them (those current within `staleness=30`). PostgreSQL, "
        "pgbench and the agent are not pinned: they share both CPUs with this process "
        f"(other work on the machine meanwhile: {results.foreign_cpu['commits'][0]:.1f} CPU "
        f"s). {args.rounds} rounds of hits and one-hit transactions, interleaved.",
        "",
        "| what | samples | p50 | p90 | p99 | max | mean |",
        "|---|---|---|---|---|---|---|",
        *(series_row(results.series["commits"][name]) for name in COMMIT_ROWS),
        "",
    ]


def reading(results: Results, placements: list[str]) -> list[str]:
    """What the placements say: the bare round trip against the library's share."""

    def p50(placement: str, name: str) -> float:
        return results.summary(placement, name)["p50"]

    pinned = [p for p in placements if p != "free"] or placements
    added = ", ".join(f"{p} {p50(p, 'hit') - p50(p, 'lean_txget'):.1f} µs" for p in pinned)
    bare = ", ".join(f"{p} {p50(p, 'lean_txget'):.1f} µs" for p in placements)
    return [
        f"A bare `TXGET` round trip (the library's own connection) takes p50 {bare}; the "
        f"library adds (hit p50 minus that) {added} (*free* mixes both over time). Where "
        "the node's thread waits on another vCPU than the caller's, every round trip pays a "
        "wake-up of that vCPU by the "
        "hypervisor (this guest polls for no time before halting, see *CPU idle*): that "
        "wake-up, not the library, is what misses the goal in *split*; *free* gets *same* or "
        "*split* depending on where the scheduler put the threads at the time.",
        "",
    ]


def report_body(results: Results, args: argparse.Namespace, library: str) -> list[str]:
    """The markdown report."""
    placements = [p for p in PLACEMENTS if p in results.series]
    detail = "same" if "same" in placements else placements[0]
    return [
        *run_notes(results, args, library, placements, detail),
        "",
        f"Goal: hit p50 <= {GOAL_P50_US:g} µs — "
        + "; ".join(f"{p}: {verdict(results, p)}" for p in placements)
        + ".",
        "",
        *reading(results, placements),
        *summary_section(results, args, placements),
        *(line for p in placements for line in latency_section(results, p)),
        "",
        *commit_section(results, args),
        *hit_path_section(results, placements, detail),
        "",
        *pin_set_section(results),
        "",
        f"## cProfile of the hit loop ({detail}; 50 transactions x {args.per_transaction} "
        "hits; sorted by own time; the profiler inflates every Python call)",
        "",
        "```",
        results.profile,
        "```",
    ]


def run_notes(
    results: Results, args: argparse.Namespace, library: str, placements: list[str], detail: str
) -> list[str]:
    """The report's opening list: the code, the settings, the placements, what else ran,
    how the CPUs idle, the pins a transaction began with and the timer's cost."""
    pins = summarize([float(n) for n in results.pins_at_begin[placements[0]]])
    timer = results.tight[detail]["timer_pair"] / 2
    foreign = "; ".join(
        f"{p}: {', '.join(f'{v:.1f}' for v in results.foreign_cpu[p])}" for p in placements
    )
    return [
        f"- library: {library}",
        f"- settings: {args.items} items, {args.per_transaction} calls per transaction, "
        f"{args.rounds} interleaved rounds, `staleness={STALENESS:g}`, agent "
        "`--pin-interval 50ms --heartbeat-interval 50ms`, library "
        f"`refresh_interval={args.refresh_interval:g}` s, 2 nodes, everything on loopback "
        "(PostgreSQL over TCP too); the cached value is "
        f"{results.value_bytes} bytes (`(id, 'item N', price)`, SafeSerializer)",
        "- CPU placements, every series measured in each, interleaved round by round: "
        + "; ".join(f"*{p}*: {PLACEMENTS[p]}" for p in placements),
        f"- other work on the machine (CPU s, per round): {foreign}",
        f"- CPU idle: {idle_note()}",
        f"- pins in a transaction's set at begin: median {pins['p50']:.0f}, "
        f"max {pins['max']:.0f}; `perf_counter_ns()` costs {timer:.0f} ns (in every sample "
        "once)",
    ]


def summary_section(results: Results, args: argparse.Namespace, placements: list[str]) -> list[str]:
    """The main series side by side for every placement, and the warm-up."""
    warm = summarize(results.warm_ms)
    return [
        "## Summary (µs)",
        "",
        *summary_table(results, placements),
        "",
        f"Warm-up (one transaction, {args.items} misses: query + `TXSET`; the first one also "
        f"imports the pin's snapshot; free placement): p50 {warm['p50'] * 1000:.0f} µs, "
        f"p99 {warm['p99'] * 1000:.0f} µs, mean {warm['mean'] * 1000:.0f} µs.",
    ]


def latency_section(results: Results, placement: str) -> list[str]:
    """Every main series' distribution in ``placement``."""
    return [
        "",
        f"## Latency, {placement} (µs)",
        "",
        "| what | samples | p50 | p90 | p99 | max | mean |",
        "|---|---|---|---|---|---|---|",
        *(series_row(results.series[placement][name]) for name in MAIN_ROWS),
    ]


def hit_path_section(results: Results, placements: list[str], detail: str) -> list[str]:
    """The hit path step by step, and the ``TXGET`` step split in ``detail``."""
    return [
        "## Where a hit's time goes",
        "",
        "The steps a cacheable call takes on a hit, replayed with the same objects (the "
        "transaction's pin set, the cache's ring and serializer, the function's keys), each "
        "step timed (one timer call per sample); the tight-loop column runs each CPU-only "
        "step alone in a loop (mean) and the round trip timed call by call (median).",
        "",
        *breakdown_table(results, placements, detail),
        "",
        *tight_text(results, detail),
    ]


def pin_set_section(results: Results) -> list[str]:
    """What a transaction's begin, its hits and the refresher cost as the pins pile up."""
    return [
        "## The pin set as pins pile up",
        "",
        "This benchmark commits nothing, so a transaction starts with one pin. With commits, "
        "the agent takes a pin every 50 ms and a transaction starts with every pin current "
        "within its staleness limit. A cache whose agent is a canned one on loopback, "
        "listing synthetic pins 50 ms apart; tight loops (begin: `AgentClient.pin_set`, "
        "what `read_only` begins with; first hit: `PinSet.bounds` + `PinSet.narrow` to the "
        "newer half; the refresher: `AgentClient.refresh`, three round trips to the canned "
        "agent and the parse of the list):",
        "",
        "| pins listed | within `staleness=30` | begin µs | first hit's pin-set work µs "
        "| every hit valid at all pins (narrowing keeps them all) µs "
        "| refresher's `refresh()` µs (every `refresh_interval`) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {count} | {cost['live']:.0f} | {fmt(cost['begin_ns'] / 1000)} | "
            f"{fmt(cost['first_hit_ns'] / 1000)} | {fmt(cost['later_hit_ns'] / 1000)} | "
            f"{fmt(cost['refresh_ns'] / 1000, 0)} |"
            for count, cost in results.pin_scaling.items()
        ),
    ]


def raw_results(results: Results, args: argparse.Namespace, library: str) -> dict[str, Any]:
    """Everything as JSON, per placement: summaries, quantiles and per-round medians (µs)."""
    return {
        "args": vars(args),
        "library": library,
        "goal_p50_us": GOAL_P50_US,
        "value_bytes": results.value_bytes,
        "placements": {p: PLACEMENTS[p] for p in results.series if p in PLACEMENTS},
        "commit_phase": results.commits,
        "foreign_cpu_seconds_per_round": results.foreign_cpu,
        "summaries_us": {
            placement: {name: {"label": s.label, **s.summary_us()} for name, s in named.items()}
            for placement, named in results.series.items()
        },
        "tight_loop_ns": results.tight,
        "warm_up_ms": results.warm_ms,
        "warm_up_stats": results.warm_stats,
        "stats_after": results.hit_stats,
        "pins_at_begin": results.pins_at_begin,
        "pin_set_scaling_ns": results.pin_scaling,
        "cpu_idle": idle_note(),
        "profile": results.profile,
        "quantiles_us": {
            placement: {name: quantiles(s.samples, 1000) for name, s in named.items()}
            for placement, named in results.series.items()
        },
        "p50_per_round_us": {
            placement: {
                name: per_round_p50(s.samples, args.rounds, 1000) for name, s in named.items()
            }
            for placement, named in results.series.items()
        },
    }
