"""RUBiS peak throughput without the cache, with it, and with ``no_consistency``.

Starts PostgreSQL (``--storage``), loads a RUBiS preset (``--preset``, default ``small``)
with ``python -m rubis.generate``'s loader, runs ``txcache setup``, one ``txcached`` node
(``--node-memory``) and ``txcache-agent`` (default settings), then for each mode
(``bypass`` = no cache, ``consistent``, ``no_consistency``) starts the web application
(``python -m rubis.serve``: granian, ``--workers`` x ``--threads``, staleness 30 s, page
and function caching) and runs the emulator at peak load (no think time) with ``--clients``
clients: ``--warmup`` seconds unmeasured, then ``--duration`` seconds measured. With
``--think-time`` each client waits TPC-W's think time between requests (mean 7 s), as the
paper's clients did: the load then comes from many clients (thousands, to keep a database
limited by ``--database-cpu`` busy), each writing seldom — which decides what
read-your-writes costs (a session's reads are held to its last write for ``staleness``
seconds; at peak load every client writes about once a second).

For each mode the report gives throughput, latency percentiles, error pages, the node's hit
rate and miss breakdown over the measured window (INFO deltas), and the CPU seconds each
component used meanwhile (PostgreSQL, the application, the node, the agent, the emulator —
all on the same machine), which says where the bottleneck is. The modes run in order on one
database; the cache keeps its contents between the two cached modes, but ``no_consistency``
values live in their own key space, so each cached mode starts cold.

With ``--database-cpu CORES`` every PostgreSQL process runs in a cgroup limited to that
many CPUs (after the load), so that the database is the bottleneck as in the paper's
topology; the report then says how often the quota held it back in each mode. With
``--statements [COUNT]`` the server tracks ``pg_stat_statements`` and the report lists, per
mode, the COUNT (12) statements that took the most database time in the measured window,
per request.

With ``--rounds N`` every mode's application starts at once and is warmed up, then each of
N rounds measures every mode in turn, the order rotating from round to round: the
database's growth and the cache's warming fall on every mode alike, and the report gives
each mode's throughput, the speedup and the ``no_consistency`` gap round by round, with
their spread (one-after-the-other runs differ by more than the gap).

With ``--warm-until-flat`` the warm-up runs in windows of ``--window`` seconds until a
window's hit rate is less than a point above the one two windows back (throughput within
3 % for ``bypass``), ``--warmup`` seconds at most: a cache still filling is measured otherwise, and
its compulsory misses say more about the warm-up than about the cache. The report gives
each mode's warm-up time and last window.

With ``--standbys N`` the primary has N streaming standbys (each with its own quota under
``--database-cpu``, as each would have its own machine), the agent pins every one, and the
modes ``consistent+1`` … ``consistent+N`` (the defaults then) run the consistent
application with its misses served by the first 1 … N standbys (``replicas``). The report
gives each server's CPU and transactions per request: the primary's decides the speedup
where it is the bottleneck.

This is one client count, not a peak search (raising the clients until throughput stops
rising is the experiments' job).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from typing import Any

import psycopg
from _common import (
    STORAGE_HELP,
    agent_status,
    bench_stack,
    create_database,
    database_note,
    execute,
    node_counts,
    postgres,
    resp,
)
from _cpu import ForeignCpu, cpu_by_child
from _database_cpu import KINDS, DatabaseCpuSplit
from _database_servers import DatabaseServers, differences
from _report import fmt, log, machine_note, result_name, write_report

from rubis import emulator, generate
from rubis.process import AppServer
from txcache.protocol import MISS_KINDS

MODES = ("bypass", "consistent", "no_consistency")
COMPONENTS = ("database", "application", "node", "agent", "emulator")
_ROLES = {"postgres": "database", "txcached": "node", "txcache-agent": "agent"}


def component_cpu() -> dict[str, float]:
    """CPU seconds so far of each component this process started (each child's process
    tree, reaped descendants included), and of this process (the emulator's threads)."""
    by_role = cpu_by_child(lambda name: _ROLES.get(name, "application"))
    by_role["emulator"] = by_role.pop("this process")
    return {component: by_role.get(component, 0.0) for component in COMPONENTS}


def app_server(mode: str, args: argparse.Namespace, env: dict[str, str]) -> AppServer:
    """The application in ``mode`` on the stack of ``env``: ``consistent+K`` is
    ``consistent`` with its misses served by the first K standbys."""
    library_mode, _, standbys = mode.partition("+")
    env = {**env, "TXCACHE_MODE": library_mode, "RUBIS_STALENESS": str(args.staleness)}
    env["RUBIS_READ_YOUR_WRITES"] = "0" if args.no_read_your_writes else "1"
    if standbys:
        env["TXCACHE_REPLICAS"] = args.servers.replicas(int(standbys))
    # Every client keeps a connection open: granian serves at most the backlog at once.
    backlog = max(1024, 2 * args.clients)
    return AppServer(env, workers=args.workers, threads=args.threads, backlog=backlog)


def default_modes(standbys: int) -> str:
    """The modes measured unless ``--modes`` says: with standbys, the consistent
    application on 0 to ``standbys`` of them."""
    if not standbys:
        return ",".join(MODES)
    return ",".join(["bypass", "consistent", *(f"consistent+{k}" for k in range(1, standbys + 1))])


def emulate(
    server: AppServer,
    args: argparse.Namespace,
    duration: float,
    window_ended: Callable[[], None] | None = None,
) -> emulator.Report:
    """The emulator on ``server`` for ``duration`` seconds, at peak load unless
    ``--think-time``; its report. ``window_ended`` is called as the time is up, before the
    requests still waiting are answered. The clients' sessions go on from one call to the
    next on the same server (:class:`rubis.emulator.Emulation`)."""
    emulations: dict[str, emulator.Emulation] = args.emulations
    emulation = emulations.get(server.url)
    if emulation is None:
        users = generate.PRESETS[args.preset].users
        emulation = emulator.Emulation(
            server.url, clients=args.clients, users=users, peak=not args.think_time, seed=args.seed
        )
        emulations[server.url] = emulation
    return emulation.run(duration, window_ended=window_ended)


#: Less hit rate than this (points) gained over two windows ends ``--warm-until-flat``.
FLAT_HIT_POINTS = 1.0
#: Without a cache (``bypass``), less throughput than this share gained over two windows.
FLAT_THROUGHPUT = 0.03


def warm_up(mode: str, server: AppServer, args: argparse.Namespace, node: str) -> None:
    """Unmeasured load: ``--warmup`` seconds, or with ``--warm-until-flat`` windows of
    ``--window`` seconds until one is flat (at most ``--warmup`` seconds); what it took is
    kept in ``args.warmed`` for the report."""
    if not args.warm_until_flat:
        log(f"{mode}: warming up {args.warmup} s")
        emulate(server, args, args.warmup)
        args.warmed[mode] = {"seconds": args.warmup}
        return
    started, levels, window = time.monotonic(), [], 0
    while True:
        counts = node_counts(node)
        report = emulate(server, args, args.window)
        after = node_counts(node)
        lookups = sum(after.values()) - sum(counts.values())
        hits = 100 * (after["hits"] - counts["hits"]) / lookups if lookups else 0.0
        level = report.throughput if mode == "bypass" else hits
        window += 1
        throughput = fmt(report.throughput, 1)
        log(f"{mode}: warm-up window {window}: {throughput} req/s, hit rate {hits:.1f} %")
        elapsed = time.monotonic() - started
        args.warmed[mode] = {"seconds": round(elapsed), "req_s": report.throughput}
        args.warmed[mode] |= {"hit_rate": None if mode == "bypass" else round(hits, 1)}
        levels.append(level)
        # Against two windows back: one window's noise (about a point) is not a plateau.
        if len(levels) > 2 and _flat(mode, levels[-3], level):
            return
        if elapsed + args.window > args.warmup:
            log(f"{mode}: still warming after {elapsed:.0f} s, measuring anyway (--warmup)")
            return


def _flat(mode: str, previous: float, level: float) -> bool:
    """Whether the level (throughput for ``bypass``, else hit rate) barely rose since
    ``previous``."""
    if mode == "bypass":
        return level < previous * (1 + FLAT_THROUGHPUT)
    return level - previous < FLAT_HIT_POINTS


def run_mode(mode: str, args: argparse.Namespace, env: dict[str, str], node: str) -> dict[str, Any]:
    """Start the application in ``mode`` on the stack of ``env`` whose node is at ``node``
    (``host:port``), warm up, measure; the row of the report."""
    with app_server(mode, args, env) as server:
        warm_up(mode, server, args, node)
        return measure(mode, server, args, node)


def run_rounds(args: argparse.Namespace, env: dict[str, str], node: str) -> list[dict[str, Any]]:
    """``--rounds``: every mode's application started at once and warmed up, then each
    round measures every mode in turn, the order rotating from round to round, so that the
    database's growth and the cache's warming fall on every mode alike."""
    modes = args.modes.split(",")
    with ExitStack() as started:
        servers = {mode: started.enter_context(app_server(mode, args, env)) for mode in modes}
        for mode, server in servers.items():
            warm_up(mode, server, args, node)
        rows = []
        for index in range(args.rounds):
            shift = index % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                row = measure(mode, servers[mode], args, node)
                rows.append(row | {"round": index + 1})
    return rows


def measure(mode: str, server: AppServer, args: argparse.Namespace, node: str) -> dict[str, Any]:
    """``--duration`` seconds of load on ``server``, measured; the row of the report. Every
    counter is read as the window ends, before the requests still waiting are answered
    (with think times and thousands of clients, many are)."""
    if args.statements:
        execute(args.dsn, "SELECT pg_stat_statements_reset()")
    counts, cpu, foreign = node_counts(node), component_cpu(), ForeignCpu()
    database_split = DatabaseCpuSplit(args.dsn)
    servers: DatabaseServers = args.servers
    throttled, server_cpu = servers.throttling(), servers.cpu_seconds()
    transactions_before = servers.transactions()
    pins_before = certified_pins(args.agent_address)
    ended: dict[str, Any] = {}

    def window_ended() -> None:
        ended["pins"] = certified_pins(args.agent_address) - pins_before
        ended["node"], ended["cpu"] = node_counts(node), component_cpu()
        ended["database_cpu"] = database_split.seconds()
        ended["server_cpu"] = differences(servers.cpu_seconds(), server_cpu)
        ended["transactions"] = differences(servers.transactions(), transactions_before)
        ended["other"] = foreign.seconds()
        ended["throttled"] = {n: t - throttled[n] for n, t in servers.throttling().items()}
        ended["statements"] = top_statements(args.dsn, args.statements) if args.statements else None

    log(f"{mode}: measuring {args.duration} s")
    report = emulate(server, args, args.duration, window_ended)
    delta = {key: ended["node"][key] - counts[key] for key in ended["node"]}
    lookups = sum(delta.values())
    row = report.as_dict()
    row |= {
        "mode": mode,
        "node": delta,
        "hit_rate": delta["hits"] / lookups if lookups else float("nan"),
        "cpu_s": {k: round(ended["cpu"][k] - cpu[k], 2) for k in COMPONENTS},
        "database_cpu_s": ended["database_cpu"],
        "other_work_cpu_s": round(ended["other"], 2),
        "server_cpu_s": {name: round(sec, 3) for name, sec in ended["server_cpu"].items()},
        "server_transactions": ended["transactions"],
        "pins_certified": ended["pins"],
        "database_throttled": {name: t.as_dict() for name, t in ended["throttled"].items()},
        "statements": per_request(ended["statements"], report.requests),
    }
    log(f"{mode}: {row['throughput']} req/s, hit rate {fmt(row['hit_rate'] * 100, 1)} %")
    return row


def certified_pins(agent: str) -> int:
    """How many pins the agent has certified (the primary exports a snapshot for each;
    standbys' apart): regular ones every ``--pin-interval`` and fresh ones (★) alike."""
    with closing(resp(agent)) as connection:
        return agent_status(connection)["pins_certified"]


def load_words(args: argparse.Namespace) -> str:
    """How the emulator's clients pace their requests, for the report."""
    if args.think_time:
        return "think time as TPC-W's (mean 7 s)"
    return "peak load (no think time)"


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, load_s: float) -> list[str]:
    """The report's body."""
    by_mode = {row["mode"]: row for row in rows}
    lines = [
        f"RUBiS `{args.preset}` (loaded in {load_s:.1f} s), bidding mix, {load_words(args)}, "
        f"{args.clients} clients, {warm_up_words(args)} then {args.duration} s "
        f"measured per mode; application: granian {args.workers} workers x {args.threads} "
        f"threads, staleness {args.staleness} s, page + function caching, read-your-writes "
        f"{'off' if args.no_read_your_writes else 'on'}; one node ({args.node_memory}).",
        "",
        "| mode | req/s | p50 ms | p90 ms | p99 ms | hit rate | compulsory | capacity | "
        "staleness | consistency | error pages | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        latency, node = row["latency_ms"], row["node"]
        hit = "-" if row["mode"] == "bypass" else f"{fmt(row['hit_rate'] * 100, 1)} %"
        misses = " | ".join(str(node[m]) for m in MISS_KINDS)
        lines.append(
            f"| {label(row)} | {fmt(row['throughput'], 1)} | {latency['p50']} | "
            f"{latency['p90']} | {latency['p99']} | {hit} | {misses} | {row['error_pages']} | "
            f"{row['errors']} |"
        )
    lines += [
        "",
        "CPU seconds used during the measured window (the machine has "
        f"{os.cpu_count()} CPUs: {args.duration * (os.cpu_count() or 1):.0f} CPU-seconds in all):",
        "",
        "| mode | " + " | ".join(COMPONENTS) + " | other work |",
        "|---|" + "---:|" * (len(COMPONENTS) + 1),
    ]
    for row in rows:
        cpu = " | ".join(fmt(row["cpu_s"][c], 1) for c in COMPONENTS)
        lines.append(f"| {label(row)} | {cpu} | {fmt(row['other_work_cpu_s'], 1)} |")
    lines += server_lines(rows, args)
    lines += database_split_lines(rows)
    lines += statement_lines(rows)
    if args.rounds:
        lines += round_lines(rows)
    elif {"bypass", "consistent", "no_consistency"} <= set(by_mode):
        base = by_mode["bypass"]["throughput"]
        cached = by_mode["consistent"]["throughput"]
        loose = by_mode["no_consistency"]["throughput"]
        lines += [
            "",
            f"- speedup of the cache: {fmt(cached / base)}x (the paper: 2.2x-5.2x by cache "
            "size, 928 req/s without cache on its hardware)",
            f"- no_consistency vs consistent: {fmt((loose / cached - 1) * 100, 1)} % (the "
            "paper: only slightly faster; our goal: under 5 %)",
        ]
    return lines


STATEMENTS_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_planning": "on",
}
TOP_STATEMENTS = """
SELECT query, calls, total_exec_time + total_plan_time FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY 3 DESC LIMIT %s
"""


def top_statements(dsn: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` statements that took the most database time since the last reset:
    their calls and microseconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(TOP_STATEMENTS, (count,)).fetchall()
    return [
        {"statement": " ".join(query.split()), "calls": calls, "us": ms * 1000}
        for query, calls, ms in rows
    ]


def per_request(
    statements: list[dict[str, Any]] | None, requests: int
) -> list[dict[str, Any]] | None:
    """:func:`top_statements`' counts per request."""
    if statements is None:
        return None
    per = max(1, requests)
    return [s | {"calls": s["calls"] / per, "us": s["us"] / per} for s in statements]


def statement_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per mode, its top statements (nothing without ``--statements``)."""
    lines = []
    for row in rows:
        if not row.get("statements"):
            continue
        lines += [
            "",
            f"**{label(row)}**: the statements that took the most database time "
            "(pg_stat_statements, execution + planning), per request:",
            "",
            "| statement | calls | µs |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| `{s['statement'][:100]}` | {s['calls']:.2f} | {s['us']:.1f} |"
            for s in row["statements"]
        ]
    return lines


def label(row: dict[str, Any]) -> str:
    """A row's name in the tables: its mode, and its round with ``--rounds``."""
    return f"{row['mode']} (round {row['round']})" if "round" in row else str(row["mode"])


def _times(ratio: float) -> str:
    return f"{fmt(ratio, 2)}x"


def _percent_more(ratio: float) -> str:
    return f"{fmt((ratio - 1) * 100, 2)} %"


def round_lines(rows: list[dict[str, Any]]) -> list[str]:
    """With ``--rounds``: each mode's throughput over the rounds, and the speedup and the
    ``no_consistency`` gap round by round (each against the same round's runs)."""
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["mode"]] = row["throughput"]
    modes = list(dict.fromkeys(row["mode"] for row in rows))
    lines = ["", "| mode | req/s, mean | min | max | each round |", "|---|---:|---:|---:|---|"]
    for mode in modes:
        values = [rates[mode] for rates in by_round.values() if mode in rates]
        each = ", ".join(fmt(value, 1) for value in values)
        lines.append(
            f"| {mode} | {fmt(statistics.mean(values), 1)} | {fmt(min(values), 1)} | "
            f"{fmt(max(values), 1)} | {each} |"
        )
    ratios: list[tuple[str, str, str, Callable[[float], str]]] = [
        (f"speedup of {mode} (over bypass)", mode, "bypass", _times)
        for mode in modes
        if mode.startswith("consistent")
    ]
    ratios.append(("no_consistency vs consistent", "no_consistency", "consistent", _percent_more))
    lines.append("")
    for name, top, bottom, show in ratios:
        values = [
            rates[top] / rates[bottom] for rates in by_round.values() if {top, bottom} <= set(rates)
        ]
        if not values:
            continue
        each = ", ".join(show(value) for value in values)
        lines.append(
            f"- {name}: mean {show(statistics.mean(values))}, from {show(min(values))} to "
            f"{show(max(values))} (rounds: {each})"
        )
    lines.append("- the paper: 2.2x-5.2x by cache size; no_consistency only slightly faster")
    return lines


def warm_up_words(args: argparse.Namespace) -> str:
    """How each mode was warmed up, in words."""
    if not args.warm_until_flat:
        return f"{args.warmup} s warm-up"
    done = ", ".join(
        f"{mode} {warmed['seconds']} s"
        + (f" (last window {warmed['hit_rate']} % hits)" if warmed["hit_rate"] is not None else "")
        for mode, warmed in args.warmed.items()
    )
    return (
        f"warmed up in {args.window} s windows until flat (under a point of hit rate gained "
        f"over two windows, 3 % throughput without cache; at most {args.warmup} s): {done},"
    )


def database_split_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The database's CPU per request by who used it: how much of it the application's
    queries take, and how much txcache's own sessions and the stream's decoding add."""
    lines = [
        "",
        "Database CPU per request (µs) by who used it (sessions named by `pg_stat_activity`):",
        "",
        "| mode | " + " | ".join(KINDS) + " |",
        "|---|" + "---:|" * len(KINDS),
    ]
    for row in rows:
        requests = max(1, row["requests"])
        split = row["database_cpu_s"]
        cells = " | ".join(fmt(split[kind] / requests * 1e6, 1) for kind in KINDS)
        lines.append(f"| {label(row)} | {cells} |")
    return lines


def server_lines(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Each database server's CPU and transactions per request, and with
    ``--database-cpu`` how often its quota held it back in the measured window."""
    names = list(args.servers.by_name)
    lines = [
        "",
        "Per database server and request: CPU (ms) and transactions run, and the pins the "
        "agent certified on the primary (every mode shares the agent: a mode's count "
        "includes the pins taken while it ran, for whoever asked)",
    ]
    if args.database_cpu is not None:
        lines[-1] += (
            f"; each server was limited to {args.database_cpu} CPUs (its own cgroup, every "
            "postgres process), and the last columns say in how many periods the quota held "
            "it back"
        )
    lines[-1] += ":"
    header = [f"{name} CPU | {name} transactions" for name in names]
    if args.database_cpu is not None:
        header += [f"{name} throttled" for name in names]
    columns = len(names) * 2 + (len(names) if args.database_cpu is not None else 0)
    header += ["pins certified"]
    columns += 1
    lines += ["", "| mode | " + " | ".join(header) + " |", "|---|" + "---:|" * columns]
    for row in rows:
        requests = max(1, row["requests"])
        cells = [
            f"{fmt(row['server_cpu_s'][name] / requests * 1e3, 3)} | "
            f"{fmt(row['server_transactions'][name] / requests, 2)}"
            for name in names
        ]
        throttled = row["database_throttled"]
        cells += [f"{throttled[n]['throttled']} of {throttled[n]['periods']}" for n in throttled]
        cells.append(fmt(row["pins_certified"] / requests, 3))
        lines.append(f"| {label(row)} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    """Load RUBiS, run every mode on one stack, write the report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", choices=sorted(generate.PRESETS), default="small")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--staleness", type=float, default=30.0)
    parser.add_argument("--node-memory", default="1gb")
    parser.add_argument(
        "--modes", help=f"default {','.join(MODES)}; with --standbys, see the description"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-read-your-writes", action="store_true", help="RUBIS_READ_YOUR_WRITES=0"
    )
    parser.add_argument(
        "--think-time",
        action="store_true",
        help="clients wait TPC-W's think time (mean 7 s) between requests, as the paper's "
        "did, instead of none (peak load): raise --clients into the thousands",
    )
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    parser.add_argument(
        "--database-cpu",
        type=float,
        metavar="CORES",
        help="limit PostgreSQL (each server, with --standbys) to this many CPUs (a cgroup "
        "CPU quota; needs root)",
    )
    parser.add_argument(
        "--standbys",
        type=int,
        default=0,
        metavar="N",
        help="give the primary N streaming standbys, pinned by the agent, and measure the "
        "consistent application with its misses on 0 to N of them",
    )
    parser.add_argument(
        "--statements",
        nargs="?",
        type=int,
        const=12,
        default=0,
        metavar="COUNT",
        help="track pg_stat_statements and report each mode's COUNT (default 12) costliest "
        "statements",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        metavar="N",
        help="start every mode's application at once, warm each up, then measure every "
        "mode N times, alternating (the order rotates each round), and report the spread",
    )
    parser.add_argument(
        "--warm-until-flat",
        action="store_true",
        help="warm up in --window second windows until the hit rate gains under a point over "
        "two windows (3 %% throughput without cache), at most --warmup seconds",
    )
    parser.add_argument("--window", type=float, default=30.0, help="with --warm-until-flat")
    parser.add_argument("--quick", action="store_true", help="tiny, 3 s warm-up, 8 s measured")
    args = parser.parse_args()
    args.warmed = {}
    args.emulations = {}
    args.modes = args.modes or default_modes(args.standbys)
    if args.quick:
        args.preset, args.warmup, args.duration = "tiny", 3.0, 8.0
    extra = STATEMENTS_SETTINGS if args.statements else None
    with (
        postgres(args.storage, extra, standbys=args.standbys) as server,
        DatabaseServers(server, "rubis") as servers,
    ):
        args.servers = servers
        dsn = args.dsn = create_database(server, "rubis")
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            generate.load(conn, generate.PRESETS[args.preset], seed=args.seed)
            if args.statements:
                conn.execute("CREATE EXTENSION pg_stat_statements")
        load_s = time.monotonic() - started
        log(f"loaded {args.preset} in {load_s:.1f} s")
        note = machine_note(database_note(dsn, args.storage))
        flags = servers.agent_flags()
        with bench_stack(dsn, max_memory=args.node_memory, agent_args=flags) as stack:
            if args.database_cpu is not None:
                moved = servers.limit_cpu(args.database_cpu)
                log(f"each server limited to {args.database_cpu} CPUs (processes moved: {moved})")
            env = stack.settings()
            args.agent_address = stack.agent_address
            node = stack.node_addresses[0]
            try:
                if args.rounds:
                    rows = run_rounds(args, env, node)
                else:
                    rows = [run_mode(mode, args, env, node) for mode in args.modes.split(",")]
            finally:
                for emulation in args.emulations.values():
                    emulation.close()
    names = ["no-ryw"] if args.no_read_your_writes else []
    if args.database_cpu is not None:
        names.append(f"db-cpu-{args.database_cpu:g}")
    names += [f"standbys-{args.standbys}"] if args.standbys else []
    names += ["statements"] if args.statements else []
    names += [f"rounds-{args.rounds}"] if args.rounds else []
    names += ["warm"] if args.warm_until_flat else []
    names += [f"think-{args.clients}"] if args.think_time else []
    name = result_name("rubis_throughput", args.quick, args.storage, *names)
    title = "RUBiS throughput: no cache, txcache, no_consistency"
    if args.standbys:
        title = f"RUBiS throughput: no cache, txcache with misses on 0 to {args.standbys} standbys"
    unsaved = ("servers", "emulations")
    settings = {key: value for key, value in vars(args).items() if key not in unsaved}
    raw = {"settings": settings, "load_s": load_s, "rows": rows}
    path = write_report(name, title, note, markdown(rows, args, load_s), raw)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
