"""What a hung part costs the application: read latency while a cache node, the agent or (with
``--standby``) the hot standby misses run on is stopped (SIGSTOP, every process: the kernel
still accepts connections, nothing answers), beside the same load with every part running.

``--threads`` threads each run read-only transactions calling a ``@cacheable`` function
over a small hot set (mostly hits), for ``--phase`` seconds per phase: normal, one node
stopped, normal, the agent stopped (and with ``--standby``: normal, the standby stopped);
``--rounds`` times. Each stop begins while the load runs. With ``--standby`` the database
is a primary and its streaming standby, the agent pins both, the library runs its misses
on the standby (``replicas``), each transaction also reads its item's row directly (so
that every one reaches the server of its pin), and a writer renames ``--writes`` hot items
a second through the library. The library's ``node_timeout``, ``agent_timeout`` and
``replica_timeout`` are the defaults (1 s, 2 s, 5 s) unless given. Reported per phase:
reads per second, latency p50/p99/max, and how many reads waited longer than half the
part's timeout (the goal: at most one per thread per stop, the read in flight when it
hung). With ``--decode-on-standby`` the agent also decodes the stream on that standby
(``--decode-from``): stopping it stops the invalidations and the pins' certification too.
"""

from __future__ import annotations

import argparse
import time

from _common import bench_stack, create_database, execute, postgres
from _database_servers import DatabaseServers
from _hot_reads import HOT, Readers, items_schema
from _report import fmt, log, machine_note, num, result_name, summarize, table, write_report

import txcache

LABELS = {
    "none": "every part running",
    "node": "one node stopped",
    "agent": "agent stopped",
    "standby": "standby stopped",
}


def run(args: argparse.Namespace) -> None:
    with (
        postgres(args.storage, standbys=1 if args.standby else 0) as server,
        DatabaseServers(server, "hangs") as servers,
    ):
        dsn = create_database(server, "hangs")
        execute(dsn, *items_schema())
        flags = servers.agent_flags()
        if args.decode_on_standby:
            flags += ("--decode-from", servers.dsn(servers.standby_names[0]))
        with bench_stack(dsn, nodes=2, max_memory="64mb", agent_args=flags) as stack:
            note = machine_note()
            stack.caught_up()
            replicas = {name: servers.dsn(name) for name in servers.standby_names}
            cache = stack.connect(
                node_timeout=args.node_timeout,
                agent_timeout=args.agent_timeout,
                replica_timeout=args.replica_timeout,
                replicas=replicas,
            )
            timeouts = {
                "node": args.node_timeout,
                "agent": args.agent_timeout,
                "standby": args.replica_timeout,
                "none": 0.0,
            }
            assert stack.agent is not None
            parts = {"node": stack.nodes[0], "agent": stack.agent}
            order = ["none", "node", "none", "agent"]
            if args.standby:
                parts["standby"] = servers.by_name[servers.standby_names[0]]
                order += ["none", "standby"]
            phases: list[tuple[str, float, float]] = []
            # A transaction that read the cache at the hung standby's pin and finds no
            # primary pin where those reads hold fails with the error to retry: retried.
            retry = (txcache.SnapshotUnavailable,) if args.standby else ()
            readers = Readers(
                cache,
                args.threads,
                staleness=30,
                retry_on=retry,
                direct=args.standby,
                write_every=1 / args.writes if args.standby else None,
            )
            with readers as load:
                time.sleep(2.0)  # warm: the hot set cached
                for round_ in range(args.rounds):
                    for part in order:
                        log(f"round {round_ + 1}/{args.rounds}: {part} stopped")
                        began = time.monotonic()
                        if part == "none":
                            time.sleep(args.phase)
                        else:
                            with parts[part].paused():
                                time.sleep(args.phase)
                        phases.append((part, began, time.monotonic()))
                    time.sleep(args.recover)  # probes find the part back
            cache.close()
    if load.errors:
        raise SystemExit(f"reads failed: {load.errors[:3]}")
    report(args, note, phases, load, timeouts, cache.latency.standby_counts())


def report(
    args: argparse.Namespace,
    note: dict[str, object],
    phases: list[tuple[str, float, float]],
    load: Readers,
    timeouts: dict[str, float],
    on_standby: dict[str, int],
) -> None:
    rows, raw = [], {}
    for part in [name for name in LABELS if any(p == name for p, _, _ in phases)]:
        samples = [s for name, b, e in phases if name == part for s in load.between(b, e)]
        seconds = sum(e - b for name, b, e in phases if name == part)
        stops = sum(1 for name, _, _ in phases if name == part)
        latency = summarize([read.seconds for read in samples])
        slow_limit = timeouts[part] / 2 if part != "none" else 0.5
        slow: dict[int, int] = {}
        for read in samples:
            if read.seconds > slow_limit:
                slow[read.thread] = slow.get(read.thread, 0) + 1
        per_stop = max(slow.values(), default=0) / max(1, stops)
        retried = sum(
            1 for name, b, e in phases if name == part for f in load.failures if b <= f < e
        )
        rows.append(
            [
                LABELS[part],
                num(len(samples) / seconds),
                fmt(latency["p50"] * 1e3, 2),
                fmt(latency["p99"] * 1e3, 2),
                fmt(latency["max"] * 1e3, 1),
                f"{sum(slow.values())} (> {slow_limit * 1e3:.0f} ms)",
                fmt(per_stop, 2),
                num(retried),
            ]
        )
        raw[part] = {
            "latency": latency,
            "reads": len(samples),
            "seconds": seconds,
            "slow": slow,
            "retried": retried,
        }
    standby = (
        f" The database is a primary and its streaming standby; each transaction also reads "
        "its item's row directly, and misses and direct reads run on the standby "
        f"(replica_timeout {args.replica_timeout} s) while a writer renames {args.writes:g} "
        f"hot items a second: {sum(on_standby.values()):,} queries ran on the "
        "standby."
        if args.standby
        else ""
    )
    if args.decode_on_standby:
        standby += " The agent decodes the stream on the standby (`--decode-from`)."
    body = [
        f"{args.threads} threads of read-only transactions over {HOT} hot keys; each phase "
        f"{args.phase:.0f} s, {args.rounds} round(s); node_timeout {args.node_timeout} s, "
        f"agent_timeout {args.agent_timeout} s.{standby}",
        "",
        *table(
            [
                "phase",
                "reads/s",
                "p50 ms",
                "p99 ms",
                "max ms",
                "slow reads",
                "slow per thread per stop",
                "retried",
            ],
            rows,
            "lrrrrrrr",
        ),
        "",
        "A read is slow when it took more than half the stopped part's timeout (500 ms when "
        "nothing is stopped). The goal: at most one per thread per stop, the read in flight "
        "when the part stopped; every later read goes around the part without waiting. "
        "Retried: transactions that failed with `SnapshotUnavailable`, the error to retry "
        "(with `--standby` only: one that read the cache at the stopped standby's pin and "
        "found no primary pin where those reads hold).",
    ]
    extra = ["decode-on-standby"] if args.decode_on_standby else ["standby"] if args.standby else []
    name = result_name("hangs", args.quick, args.storage, *extra)
    title = "Hung parts: latency with a node, the agent or a standby stopped"
    path = write_report(name, title, note, body, raw)
    log(f"report: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--phase", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--recover", type=float, default=12.0, help="seconds after each round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--node-timeout", type=float, default=1.0)
    parser.add_argument("--agent-timeout", type=float, default=2.0)
    parser.add_argument("--replica-timeout", type=float, default=5.0)
    parser.add_argument(
        "--standby", action="store_true", help="misses on a streaming standby, stopped too"
    )
    parser.add_argument(
        "--writes", type=float, default=20.0, help="updates a second with --standby (misses)"
    )
    parser.add_argument(
        "--decode-on-standby",
        action="store_true",
        help="with --standby implied: the agent decodes the stream on the standby as well",
    )
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="tmpfs")
    args = parser.parse_args()
    args.standby = args.standby or args.decode_on_standby
    if args.quick:
        args.phase, args.rounds, args.recover = 3.0, 1, 3.0
    run(args)


if __name__ == "__main__":
    main()
