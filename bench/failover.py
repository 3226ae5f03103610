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

With ``--fail decoding-standby`` the agent decodes the stream on the standby, a second
standby named after it in ``--decode-from`` (where the agent keeps a spare slot, moved
to after ``--decode-spare-after``), and what fails is that standby: it hangs (SIGSTOP) for
the rest of the run. Reported as well: the time until the stream runs on the second standby,
until the hit rate is back to 90 % of before, and the nodes' resets (0: the cache was
kept). With ``--spare-on primary`` there is one standby, and the primary, named after it,
keeps the spare (the agent's ``--decode-primary-slot spare``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import psycopg
from _common import (
    bench_stack,
    create_database,
    execute,
    postgres,
    scalar,
    server_info,
    wal_insert_lsn,
)
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
from txcache.stack import (
    EmbeddedPostgres,
    ReplicatedPostgres,
    hosts_dsn,
    parse_lsn,
    wait_for_stream_on,
    wait_until,
)


def run(args: argparse.Namespace) -> None:
    spare_standby = args.fail == "decoding-standby" and args.spare_on == "standby"
    with postgres(args.storage, standbys=2 if spare_standby else 1) as servers:
        both = create_database(servers, "failover")  # names the primary and the standby
        execute(both, *items_schema())
        measure(args, servers, both)


def agent_failover_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """``--decode-spare-after`` and ``--decode-failover-after`` as the command line sets them
    (none: the agent's defaults)."""
    flags: tuple[str, ...] = ()
    if args.spare_on == "primary":
        flags += ("--decode-primary-slot", "spare")
    if args.spare_after:
        flags += ("--decode-spare-after", args.spare_after)
    if args.failover_after:
        flags += ("--decode-failover-after", args.failover_after)
    return flags


def failover_settings(args: argparse.Namespace) -> str:
    """The agent's failover limits, as the report states them."""
    spare = args.spare_after or "5s, the default"
    failover = args.failover_after or "30s, the default"
    on = "; the spare slot on the primary" if args.spare_on == "primary" else ""
    return f"`--decode-spare-after` {spare}, `--decode-failover-after` {failover}{on}"


def spare_server(args: argparse.Namespace, servers: ReplicatedPostgres) -> EmbeddedPostgres:
    """The server holding the spare slot the stream moves to: the second standby, or with
    ``--spare-on primary`` the primary."""
    return servers.primary if args.spare_on == "primary" else servers.extra_standbys[0]


def measure(args: argparse.Namespace, servers: ReplicatedPostgres, both: str) -> None:
    decoding = args.fail == "decoding-standby"
    standbys = (servers.standby, *servers.extra_standbys)
    flags: tuple[str, ...] = ()
    if decoding:
        hosts = [server for server in standbys if server is not None]
        if args.spare_on == "primary":
            hosts.append(servers.primary)
        decode_from = hosts_dsn(hosts, "failover")
        flags = ("--decode-from", decode_from, *agent_failover_flags(args))
    with bench_stack(both, max_memory="64mb", agent_args=flags) as stack:
        note = machine_note()
        stack.caught_up()
        if decoding:
            spare = spare_server(args, servers)
            target = wal_insert_lsn(both)
            wait_until(
                lambda: slot_position(spare, stack.options.slot) >= target,
                "the spare slot to follow the stream",
                timeout=60,
            )
        else:
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
        counts_before = server_info(stack.node_addresses[0], "txcache")
        with readers as load:
            began = time.monotonic()
            time.sleep(args.before)
            stopped = time.monotonic()
            if decoding:
                promoted, ended = hang_the_decoding_standby(args, servers)
            else:
                log("stopping the primary, promoting the standby")
                servers.fail_over("stop")
                promoted = time.monotonic()
                time.sleep(args.after)
                ended = time.monotonic()
        cache.close()
        counts = server_info(stack.node_addresses[0], "txcache")
    changes = {key: counts[key] - counts_before[key] for key in ("rewinds", "resets")}
    report(args, note, load, (began, stopped, promoted, ended), changes)


def hang_the_decoding_standby(
    args: argparse.Namespace, servers: ReplicatedPostgres
) -> tuple[float, float]:
    """Stop the standby the stream is decoded on (SIGSTOP) for ``--after`` seconds; when the
    stream ran on the spare's server, and when the run ended."""
    standby, spare = servers.standby, spare_server(args, servers)
    assert standby is not None
    log("the standby the stream is decoded on hangs")
    since = time.monotonic()
    with standby.paused():
        wait_for_stream_on(spare.dsn, "the stream to move to the spare slot", timeout=120)
        moved = time.monotonic()
        time.sleep(max(0.0, args.after - (moved - since)))
        return moved, time.monotonic()


def slot_position(server: EmbeddedPostgres, slot: str) -> int:
    """Where ``slot`` on ``server`` is confirmed (0: there is none)."""
    found = scalar(
        server.dsn,
        "SELECT (SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
        f"WHERE slot_name = '{slot}')",
    )
    return parse_lsn(found) if found else 0


def report(
    args: argparse.Namespace,
    note: dict[str, Any],
    load: Readers,
    times: tuple[float, float, float, float],
    changes: dict[str, int],
) -> None:
    """``times``: the run's start, the failure, when it was over (the standby promoted, or
    the stream on the second standby) and the run's end; ``changes``: the node's rewinds
    and resets meanwhile."""
    began, stopped, promoted, ended = times
    decoding = args.fail == "decoding-standby"
    after_stop = load.between(stopped, ended)
    first_read = min((read.start for read in after_stop), default=ended)
    first_hit = min((read.start for read in after_stop if read.hit), default=ended)
    settled = max(first_read, promoted) + args.settle
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
        "hit_rate_back_s": hit_rate_back(load, stopped, ended, raw["before"]) - stopped,
        "failed_reads": len(load.failures),
        "node_rewinds": changes["rewinds"],
        "node_resets": changes["resets"],
    }
    extra = ["decoding"] if decoding else []
    extra += ["primary-spare"] if decoding and args.spare_on == "primary" else []
    name = result_name("failover", args.quick, args.storage, *extra)
    plot = RESULTS_DIR / f"{name}.png"
    failure = "the standby the stream is decoded on hung" if decoding else "primary stopped"
    plotted = draw(load, began, stopped, ended, plot, failure)
    event = (
        f"the standby the stream is decoded on hung (SIGSTOP) {args.before:.0f} s in, for "
        f"the rest of the run ({failover_settings(args)}, `connect_timeout=2`)"
        if decoding
        else f"the primary stopped {args.before:.0f} s in, the standby promoted at once"
    )
    holder = "the primary" if args.spare_on == "primary" else "the second standby"
    over = f"the stream running on {holder}" if decoding else "the promotion done"
    body = [
        f"{args.threads} reader threads over {HOT} hot keys (staleness {args.staleness} s), "
        f"a write every {args.write_every} s; {event}; "
        f"'after' starts {args.settle:.0f} s after the first read served again and "
        f"{over}.",
        "",
        *table(["phase", "reads/s", "hit rate"], rows, "lrr"),
        "",
        f"- failure to {over}: {fmt(raw['promote_s'], 2)} s",
        f"- outage (failure to the first read served again): {fmt(raw['outage_s'], 2)} s",
        f"- failure to the first cache hit: {fmt(raw['first_hit_s'], 2)} s",
        f"- failure to the hit rate back at 90 % of before (per second): "
        f"{fmt(raw['hit_rate_back_s'], 0)} s",
        f"- reads that failed meanwhile: {raw['failed_reads']}",
        f"- node rewinds: {changes['rewinds']}, resets: {changes['resets']} "
        "(0: the node kept its entries)",
        "",
        *([f"![reads and hit rate per second]({plot.name})"] if plotted else []),
    ]
    title = (
        "Failover: the cache across a hang of the decoding standby"
        if decoding
        else "Failover: the cache across a promotion"
    )
    path = write_report(name, title, note, body, raw)
    log(f"report: {path}")


def hit_rate_back(load: Readers, stopped: float, ended: float, before: dict[str, Any]) -> float:
    """The start of the first whole second after ``stopped`` from which every second's hit
    rate is at least 90 % of ``before``'s (``ended`` if none)."""
    goal = 0.9 * before["hits"] / max(1, before["reads"])
    back = ended
    second = ended - 1.0
    while second >= stopped:
        reads = load.between(second, second + 1.0)
        if not reads or sum(read.hit for read in reads) / len(reads) < goal:
            break
        back = second
        second -= 1.0
    return back


def draw(
    load: Readers, began: float, stopped: float, ended: float, path: Path, failure: str
) -> bool:
    """Reads/s and the hit rate, second by second, the ``failure`` marked."""
    seconds = range(int(ended - began))
    buckets = [load.between(began + s, began + s + 1) for s in seconds]

    def plot(axes: list[Any]) -> None:
        axes[0].plot(list(seconds), [len(b) for b in buckets], "-")
        rates = [100 * sum(read.hit for read in b) / len(b) if b else 0 for b in buckets]
        axes[1].plot(list(seconds), rates, "-")
        axes[0].set(title="reads served", ylabel="reads/s")
        axes[1].set(title="cache hit rate", ylabel="%", ylim=(0, 100))
        for axis in axes:
            axis.axvline(stopped - began, color="red", linestyle="--", label=failure)
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
    parser.add_argument(
        "--fail",
        choices=("primary", "decoding-standby"),
        default="primary",
        help="what fails: the primary (promoted away), or the standby the stream is decoded "
        "on (it hangs; the stream moves to a second standby's spare slot)",
    )
    parser.add_argument(
        "--spare-after",
        help="with --fail decoding-standby: the agent's --decode-spare-after (default: its own)",
    )
    parser.add_argument(
        "--failover-after",
        help="with --fail decoding-standby: the agent's --decode-failover-after (default: its own)",
    )
    parser.add_argument(
        "--spare-on",
        choices=("standby", "primary"),
        default="standby",
        help="with --fail decoding-standby: where the spare slot the stream moves to is kept, "
        "a second standby or the primary (--decode-primary-slot spare)",
    )
    args = parser.parse_args()
    if args.quick:
        args.before, args.after, args.settle = 5.0, 8.0, 1.0
    run(args)


if __name__ == "__main__":
    main()
