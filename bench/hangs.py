"""What a hung part costs the application: read latency while a cache node or the agent is
stopped (SIGSTOP: the kernel still accepts connections, nothing answers), beside the same
load with every part running.

``--threads`` threads each run read-only transactions calling a ``@cacheable`` function
over a small hot set (mostly hits), for ``--phase`` seconds per phase: normal, one node
stopped, normal, the agent stopped, normal; ``--rounds`` times. Each stop begins while the
load runs. The library's ``node_timeout`` and ``agent_timeout`` are the defaults (1 s, 2 s)
unless given. Reported per phase: reads per second, latency p50/p99/max, and how many reads
waited longer than half the part's timeout (the goal: at most one per thread per stop, the
read in flight when it hung).
"""

from __future__ import annotations

import argparse
import time

from _common import bench_stack, create_database, execute, postgres
from _hot_reads import HOT, Readers, items_schema
from _report import fmt, log, machine_note, num, result_name, summarize, table, write_report


def run(args: argparse.Namespace) -> None:
    with postgres(args.storage) as server:
        dsn = create_database(server, "hangs")
        execute(dsn, *items_schema())
        with bench_stack(dsn, nodes=2, max_memory="64mb") as stack:
            note = machine_note()
            stack.caught_up()
            cache = stack.connect(node_timeout=args.node_timeout, agent_timeout=args.agent_timeout)
            timeouts = {"node": args.node_timeout, "agent": args.agent_timeout, "none": 0.0}
            assert stack.agent is not None
            parts = {"node": stack.nodes[0], "agent": stack.agent}
            phases: list[tuple[str, float, float]] = []
            with Readers(cache, args.threads, staleness=30) as load:
                time.sleep(2.0)  # warm: the hot set cached
                for round_ in range(args.rounds):
                    for part in ("none", "node", "none", "agent"):
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
    report(args, note, phases, load, timeouts)


def report(
    args: argparse.Namespace,
    note: dict[str, object],
    phases: list[tuple[str, float, float]],
    load: Readers,
    timeouts: dict[str, float],
) -> None:
    rows, raw = [], {}
    for part in ("none", "node", "agent"):
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
        label = {"none": "every part running", "node": "one node stopped", "agent": "agent stopped"}
        rows.append(
            [
                label[part],
                num(len(samples) / seconds),
                fmt(latency["p50"] * 1e3, 2),
                fmt(latency["p99"] * 1e3, 2),
                fmt(latency["max"] * 1e3, 1),
                f"{sum(slow.values())} (> {slow_limit * 1e3:.0f} ms)",
                fmt(per_stop, 2),
            ]
        )
        raw[part] = {"latency": latency, "reads": len(samples), "seconds": seconds, "slow": slow}
    body = [
        f"{args.threads} threads of read-only transactions over {HOT} hot keys; each phase "
        f"{args.phase:.0f} s, {args.rounds} round(s); node_timeout {args.node_timeout} s, "
        f"agent_timeout {args.agent_timeout} s.",
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
            ],
            rows,
            "lrrrrrr",
        ),
        "",
        "A read is slow when it took more than half the stopped part's timeout (500 ms when "
        "nothing is stopped). The goal: at most one per thread per stop, the read in flight "
        "when the part stopped; every later read goes around the part without waiting.",
    ]
    name = result_name("hangs", args.quick, args.storage)
    path = write_report(
        name, "Hung parts: latency with a node or the agent stopped", note, body, raw
    )
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
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="tmpfs")
    args = parser.parse_args()
    if args.quick:
        args.phase, args.rounds, args.recover = 3.0, 1, 3.0
    run(args)


if __name__ == "__main__":
    main()
