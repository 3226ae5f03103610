"""A failover under load: the primary stops and its streaming standby is promoted while the
application reads and writes; the cache's hit rate before and after, and how long reads
fail or go to the database meanwhile.

The standby synchronizes the agent's failover slot (PostgreSQL 17+,
``sync_replication_slots``) and the primary sends the agent nothing the standby lacks
(``synchronized_standby_slots``). The library and the agent are given both hosts with
``target_session_attrs=read-write``. ``--threads`` threads run read-only transactions
(``--staleness``) calling a ``@cacheable`` function over a hot set; one writer renames a
random item every ``--write-every`` seconds (invalidations keep flowing). After ``--before``
seconds the primary gets a fast shutdown and the standby is promoted; the run goes on for
``--after`` seconds. Reported: reads/s and hit rate before and after, the outage (from the
stop to the first read served again), the time from the stop to the first cache hit, reads
that failed, and whether the node was rewound (it should not be: its entries survive). A
plot shows reads/s and the hit rate second by second.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import psycopg
from _common import bench_stack, create_database, execute, postgres, server_info
from _hot_reads import HOT, Readers, items_schema
from _report import (
    RESULTS_DIR,
    fmt,
    log,
    machine_note,
    num,
    result_name,
    save_plot,
    table,
    write_report,
)

import txcache
from txcache.stack import ReplicatedPostgres, wait_until


def run(args: argparse.Namespace) -> None:
    with postgres(args.storage, standbys=1) as servers:
        both = create_database(servers, "failover")  # names the primary and the standby
        execute(both, *items_schema())
        measure(args, servers, both)


def measure(args: argparse.Namespace, servers: ReplicatedPostgres, both: str) -> None:
    with bench_stack(both, max_memory="64mb") as stack:
        note = machine_note()
        stack.caught_up()
        wait_until(
            lambda: servers.slots_synced([stack.options.slot]),
            "the standby's copy of the slot",
            timeout=60,
        )
        cache = stack.connect()
        readers = Readers(
            cache,
            args.threads,
            args.staleness,
            retry_on=(psycopg.Error, txcache.TxcacheError),
            write_every=args.write_every,
        )
        with readers as load:
            began = time.monotonic()
            time.sleep(args.before)
            log("stopping the primary, promoting the standby")
            stopped = time.monotonic()
            servers.fail_over("stop")
            promoted = time.monotonic()
            time.sleep(args.after)
            ended = time.monotonic()
        cache.close()
        rewinds = server_info(stack.node_addresses[0], "txcache")["rewinds"]
    report(args, note, load, (began, stopped, promoted, ended), rewinds)


def report(
    args: argparse.Namespace,
    note: dict[str, Any],
    load: Readers,
    times: tuple[float, float, float, float],
    rewinds: int,
) -> None:
    began, stopped, promoted, ended = times
    after_stop = load.between(stopped, ended)
    first_read = min((read.start for read in after_stop), default=ended)
    first_hit = min((read.start for read in after_stop if read.hit), default=ended)
    settled = first_read + args.settle
    phases = {"before": (began + 2.0, stopped), "after": (settled, ended)}
    rows: list[list[str]] = []
    raw: dict[str, Any] = {}
    for name, (start, end) in phases.items():
        reads = load.between(start, end)
        hits = sum(read.hit for read in reads)
        rate = hits / len(reads) if reads else 0.0
        rows.append([name, num(len(reads) / (end - start)), f"{rate * 100:.1f} %"])
        raw[name] = {"reads": len(reads), "hits": hits, "seconds": end - start}
    raw |= {
        "outage_s": first_read - stopped,
        "first_hit_s": first_hit - stopped,
        "promote_s": promoted - stopped,
        "failed_reads": len(load.failures),
        "node_rewinds": rewinds,
    }
    plot = RESULTS_DIR / f"{result_name('failover', args.quick, args.storage)}.png"
    plotted = draw(load, began, stopped, ended, plot)
    body = [
        f"{args.threads} reader threads over {HOT} hot keys (staleness {args.staleness} s), "
        f"a write every {args.write_every} s; "
        f"the primary stopped {args.before:.0f} s in, the standby promoted at once; "
        f"'after' starts {args.settle:.0f} s after the first read served again.",
        "",
        *table(["phase", "reads/s", "hit rate"], rows, "lrr"),
        "",
        f"- stop to promotion done: {fmt(raw['promote_s'], 2)} s",
        f"- outage (stop to the first read served again): {fmt(raw['outage_s'], 2)} s",
        f"- stop to the first cache hit: {fmt(raw['first_hit_s'], 2)} s",
        f"- reads that failed meanwhile: {raw['failed_reads']}",
        f"- node rewinds: {rewinds} (0: the node kept its entries across the failover)",
        "",
        *([f"![reads and hit rate per second]({plot.name})"] if plotted else []),
    ]
    name = result_name("failover", args.quick, args.storage)
    path = write_report(name, "Failover: the cache across a promotion", note, body, raw)
    log(f"report: {path}")


def draw(load: Readers, began: float, stopped: float, ended: float, path: Path) -> bool:
    """Reads/s and the hit rate, second by second, the stop marked."""
    seconds = range(int(ended - began))
    buckets = [load.between(began + s, began + s + 1) for s in seconds]

    def plot(axes: list[Any]) -> None:
        axes[0].plot(list(seconds), [len(b) for b in buckets], "-")
        rates = [100 * sum(read.hit for read in b) / len(b) if b else 0 for b in buckets]
        axes[1].plot(list(seconds), rates, "-")
        axes[0].set(title="reads served", ylabel="reads/s")
        axes[1].set(title="cache hit rate", ylabel="%", ylim=(0, 100))
        for axis in axes:
            axis.axvline(stopped - began, color="red", linestyle="--", label="primary stopped")
            axis.set(xlabel="s")
            axis.legend()
            axis.grid(alpha=0.3)

    return save_plot(path, plot, panels=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--write-every", type=float, default=0.05)
    parser.add_argument(
        "--staleness", type=float, default=1.0, help="the reads' staleness, seconds"
    )
    parser.add_argument("--before", type=float, default=15.0)
    parser.add_argument("--after", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after recovery")
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="tmpfs")
    args = parser.parse_args()
    if args.quick:
        args.before, args.after, args.settle = 5.0, 8.0, 1.0
    run(args)


if __name__ == "__main__":
    main()
