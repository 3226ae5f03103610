"""What cache nodes joining and leaving cost the hit rate: reader threads run read-only
transactions over a hot set (all hits once warm) while a node joins, a node leaves and that
node joins again, each with ``txcache nodes``' table (``txcache.cache_nodes``) changed
under the running agent; then a node dies (``kill -9``) and is restarted, empty, on its
port: while it is down the library places its keys on the next node up on the ring.

For each change: the hit rate before it, the lowest hit rate in a ``--bucket`` after it, how
long the hit rate stayed a point or more below, the reads that missed because of it (beside
the hit rate before), and how long the agent and the library took to follow (from the
table's change until the library's ring named the new nodes). Consistent hashing moves only
the keys of the node that came or went: about a third of the hot set when a third node
joins or one of three leaves.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from _common import bench_stack, create_database, execute, postgres
from _hot_reads import HOT, Read, Readers, items_schema
from _report import fmt, log, machine_note, num, result_name, save_plot, table, write_report

from txcache import Cache
from txcache.stack import Stack, wait_until


@dataclass
class Change:
    """One membership change: what it was, when the table changed (``time.monotonic``),
    and when the library's ring followed."""

    label: str
    at: float
    followed: float = 0.0
    """When the library's ring named the new nodes (NaN: the ring did not change)."""


def ring_of(cache: Cache) -> list[str]:
    """The nodes the library places keys on now."""
    cache.follow_members()
    return [] if cache.ring is None else sorted(node.address for node in cache.ring.nodes)


def change(stack: Stack, cache: Cache, label: str, add: list[str], remove: list[str]) -> Change:
    """Change the table and wait until the library follows."""
    wanted = sorted({*ring_of(cache), *add} - set(remove))
    done = Change(label, time.monotonic())
    stack.add_members(*add)
    stack.remove_members(*remove)
    wait_until(lambda: ring_of(cache) == wanted, f"the library to follow: {label}", timeout=30)
    done.followed = time.monotonic()
    log(f"{label}: the library followed in {done.followed - done.at:.2f} s")
    return done


def run(args: argparse.Namespace) -> None:
    with postgres(args.storage) as server:
        dsn = create_database(server, "membership")
        execute(dsn, *items_schema())
        with bench_stack(dsn, nodes=2, max_memory="64mb", membership="database") as stack:
            note = machine_note()
            stack.caught_up()
            cache = stack.connect()
            first = stack.node_addresses[0]
            with Readers(cache, args.threads, staleness=30) as load:
                time.sleep(args.warm)
                started = time.monotonic()
                changes: list[Change] = []
                time.sleep(args.phase)
                third = stack.start_node().address
                changes.append(change(stack, cache, "a third node joins", [third], []))
                time.sleep(args.phase)
                changes.append(change(stack, cache, "a node leaves", [], [first]))
                time.sleep(args.phase)
                changes.append(change(stack, cache, "it joins again", [first], []))
                time.sleep(args.phase)
                stack.nodes[1].kill()
                changes.append(Change("a node dies", time.monotonic(), float("nan")))
                time.sleep(args.phase)
                stack.restart_node(1)
                changes.append(Change("it restarts, empty", time.monotonic(), float("nan")))
                time.sleep(args.phase)
                ended = time.monotonic()
            cache.close()
    if load.errors:
        raise SystemExit(f"reads failed: {load.errors[:3]}")
    report(args, note, load.between(started, ended), changes, started, ended)


def buckets(
    reads: list[Read], start: float, end: float, width: float
) -> list[tuple[float, float, int]]:
    """Per ``width`` seconds from ``start``: (its start, hit rate, reads)."""
    count = max(1, int((end - start) / width))
    hits, totals = [0] * count, [0] * count
    for read in reads:
        index = int((read.start - start) / width)
        if 0 <= index < count:
            totals[index] += 1
            hits[index] += read.hit
    return [
        (start + i * width, hits[i] / totals[i] if totals[i] else 1.0, totals[i])
        for i in range(count)
    ]


def effect(reads: list[Read], done: Change, until: float, width: float) -> dict[str, float]:
    """A change's effect on the hit rate, from the reads around it."""
    before = [read for read in reads if done.at - 5.0 <= read.start < done.at]
    baseline = sum(read.hit for read in before) / max(1, len(before))
    after = buckets(reads, done.at, until, width)
    lowest = min((rate for _, rate, total in after if total), default=baseline)
    below = [at for at, rate, total in after if total and rate < baseline - 0.01]
    # From the first bucket a point below the hit rate before to the end of the last one.
    dip = below[-1] + width - below[0] if below else 0.0
    later = [read for read in reads if done.at <= read.start < until]
    extra_misses = sum(1 - read.hit for read in later) - (1 - baseline) * len(later)
    return {
        "baseline": baseline,
        "lowest": lowest,
        "dip_seconds": dip,
        "extra_misses": extra_misses,
        "followed_after": done.followed - done.at,
    }


def report(
    args: argparse.Namespace,
    note: dict[str, object],
    reads: list[Read],
    changes: list[Change],
    started: float,
    ended: float,
) -> None:
    ends = [later.at for later in changes[1:]] + [ended]
    effects = [
        effect(reads, done, until, args.bucket) for done, until in zip(changes, ends, strict=True)
    ]
    rows = [
        [
            done.label,
            f"{e['baseline']:.1%}",
            f"{e['lowest']:.1%}",
            fmt(e["dip_seconds"], 2),
            num(e["extra_misses"]),
            fmt(e["followed_after"], 2),
        ]
        for done, e in zip(changes, effects, strict=True)
    ]
    seconds = ended - started
    body = [
        f"{args.threads} reader threads, one read-only transaction per read over {HOT} hot keys "
        f"(no writes: every miss is the membership's); {args.phase:.0f} s between changes; "
        f"{len(reads)} reads in {seconds:.0f} s ({len(reads) / seconds:.0f}/s); buckets of "
        f"{args.bucket * 1e3:.0f} ms.",
        "",
        *table(
            [
                "change",
                "hit rate before",
                "lowest after",
                "below it by a point or more, s",
                "reads that missed for it",
                "library followed after, s",
            ],
            rows,
            "lrrrrr",
        ),
        "",
        "*Library followed*: from the change of `txcache.cache_nodes` until the library's ring "
        "named the new nodes (the agent reads the table every `--membership-interval`, 1 s; "
        "libraries refresh every 0.25 s); the dip begins then. `-`: the ring did not change "
        "(a node that dies keeps its place; its keys go to the next node up until a probe "
        "finds it back). *Below it*: from the first bucket whose hit rate was a point or "
        "more below the hit rate before to the end of the last. The keys that moved miss "
        f"once each: about a third of the {HOT} when a third node joins or one of three "
        "leaves or dies; a node that joins again still holds its values, valid as long as no "
        "write changed them; one restarted empty misses its keys once more.",
        "",
        f"![hit rate over time]({result_name('membership', args.quick, args.storage)}.png)",
    ]
    name = result_name("membership", args.quick, args.storage)
    timeline = buckets(reads, started, ended, args.bucket)
    raw = {
        "changes": [{"label": d.label, **e} for d, e in zip(changes, effects, strict=True)],
        "timeline": [(at - started, rate, total) for at, rate, total in timeline],
    }
    path = write_report(name, "Cache nodes joining and leaving: the hit rate", note, body, raw)

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        ax.plot([at - started for at, _, _ in timeline], [rate * 100 for _, rate, _ in timeline])
        for done in changes:
            ax.axvline(done.at - started, color="grey", linestyle="--")
            ax.text(done.at - started, 2, " " + done.label, rotation=90, va="bottom", fontsize=8)
        ax.set_xlabel("seconds")
        ax.set_ylabel(f"hit rate per {args.bucket * 1e3:.0f} ms, %")
        ax.set_ylim(0, 102)

    save_plot(path.with_suffix(".png"), draw)
    log(f"report: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--phase", type=float, default=10.0, help="seconds between changes")
    parser.add_argument("--warm", type=float, default=5.0, help="seconds before the first")
    parser.add_argument("--bucket", type=float, default=0.25, help="seconds per hit-rate bucket")
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="tmpfs")
    args = parser.parse_args()
    if args.quick:
        args.phase, args.warm = 4.0, 3.0
    run(args)


if __name__ == "__main__":
    main()
