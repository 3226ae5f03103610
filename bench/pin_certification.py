"""Pin certification: how often snapshots are unclean, and what a fresh pin costs.

For each cell (writers x synchronous_commit) pgbench runs single-row INSERTs flat out
(``-c writers -j 2``, ``PGOPTIONS='-c synchronous_commit=on|off'``) while this script asks
the agent for a fresh pin (``PIN``) in a loop, reading the agent's ``STATUS`` after every
call. The STATUS delta around one call is that call's work: ``pins_certified`` +1 and
``pins_unclean`` +k means k snapshots were discarded before a clean one. The agent also takes
pins of its own every ``--pin-interval`` (1 s); a call whose delta shows more than one
certified pin overlapped one of those and is left out of the per-call retry distribution
(it still counts in the cell's totals and latencies).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    STORAGE_HELP,
    BacklogMonitor,
    Pgbench,
    PgbenchResult,
    agent_status,
    bench_stack,
    create_database,
    database_note,
    execute,
    postgres,
    resp,
)
from _cpu import ForeignCpu
from _report import fmt, log, machine_note, percentile, result_name, summarize, write_report

from txcache.protocol import ReplyError, RespConnection
from txcache.stack import Stack

SCRIPT = "INSERT INTO ins (writer, v) VALUES (:client_id, 1);\n"
AGENT_FLAGS = ("--pin-interval", "1s", "--max-staleness", "10s", "--pin-lease", "2s")


@dataclass
class Call:
    """One PIN call: its round trip and the STATUS delta around it."""

    latency_ms: float
    certified: int
    unclean: int
    below_floor: int


@dataclass
class Cell:
    """One (writers, synchronous_commit) combination."""

    writers: int
    synchronous_commit: str
    calls: list[Call] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    pgbench: PgbenchResult | None = None
    backlog_kib: dict[str, dict[str, int]] = field(default_factory=dict)
    walsender_states: str = ""
    catch_up_seconds: float = 0.0
    foreign_cpu: float = 0.0

    def clean_calls(self) -> list[Call]:
        """Calls whose STATUS delta is theirs alone (exactly one certified pin)."""
        return [call for call in self.calls if call.certified == 1]

    def summary(self) -> dict[str, Any]:
        """The numbers of the report's table."""
        own = self.clean_calls()
        retries = [call.unclean + call.below_floor for call in own]
        certified = self.totals.get("pins_certified", 0)
        discarded = self.totals.get("pins_unclean", 0) + self.totals.get("pins_below_floor", 0)
        return {
            "writers": self.writers,
            "synchronous_commit": self.synchronous_commit,
            "tps": self.pgbench.tps if self.pgbench else float("nan"),
            "pin_calls": len(self.calls),
            "pins_certified": certified,
            "pins_unclean": self.totals.get("pins_unclean", 0),
            "pins_below_floor": self.totals.get("pins_below_floor", 0),
            "retries_per_pin_mean": discarded / certified if certified else float("nan"),
            "unclean_share": discarded / (certified + discarded) if certified else float("nan"),
            "calls_measured": len(own),
            "retries_p50": percentile(retries, 0.5),
            "retries_p90": percentile(retries, 0.9),
            "retries_max": max(retries) if retries else float("nan"),
            "calls_with_retry": sum(1 for r in retries if r) / len(retries) if retries else 0.0,
            "latency_ms": summarize([call.latency_ms for call in self.calls]),
            "errors": len(self.errors),
            "backlog_kib": self.backlog_kib,
            "walsender_states": self.walsender_states,
            "catch_up_seconds": self.catch_up_seconds,
            "foreign_cpu_seconds": self.foreign_cpu,
        }


def take_pins(agent: RespConnection, cell: Cell, seconds: float, pause: float) -> None:
    """Call PIN for ``seconds``, recording each call's latency and STATUS delta."""
    before = agent_status(agent)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        reply = agent.call("PIN")
        if isinstance(reply, ReplyError):
            cell.errors.append(str(reply))
        latency = (time.perf_counter() - start) * 1000
        after = agent_status(agent)
        cell.calls.append(
            Call(
                latency,
                after["pins_certified"] - before["pins_certified"],
                after["pins_unclean"] - before["pins_unclean"],
                after["pins_below_floor"] - before["pins_below_floor"],
            )
        )
        before = after
        time.sleep(pause)


def run_cell(
    server: Any, stack: Stack, agent: RespConnection, cell: Cell, args: argparse.Namespace
) -> None:
    """One cell: pgbench inserts beside a PIN loop; fills ``cell``."""
    dsn = stack.dsn
    stack.caught_up(timeout=120)
    start = agent_status(agent)
    foreign = ForeignCpu()
    command = ["-n", "-c", str(cell.writers), "-j", "2", "-T", str(args.seconds)]
    command += ["-f", str(args.script)]
    env = {"PGOPTIONS": f"-c synchronous_commit={cell.synchronous_commit}"}
    load = Pgbench(server, dsn, command, env)
    monitor = BacklogMonitor(stack, load)
    monitor.start()
    time.sleep(1.0)
    take_pins(agent, cell, args.seconds - 1.5, args.pause_ms / 1000)
    cell.pgbench = load.wait()
    monitor.join()
    cell.backlog_kib = {"peak": monitor.peak, "at_end": monitor.at_end}
    cell.walsender_states = monitor.states_text()
    cell.catch_up_seconds = monitor.catch_up_seconds
    cell.foreign_cpu = foreign.seconds()
    end = agent_status(agent)
    cell.totals = {key: end[key] - start[key] for key in end if key.startswith("pins_")}
    s = cell.summary()
    log(
        f"  writers={cell.writers} sync={cell.synchronous_commit}: tps {s['tps']:.0f}, "
        f"{s['pins_certified']} pins, {s['pins_unclean']} unclean, "
        f"PIN p50 {s['latency_ms']['p50']:.1f} ms p99 {s['latency_ms']['p99']:.1f} ms"
    )


def certification_table(cells: list[Cell]) -> list[str]:
    """Retries and PIN latency of every cell."""
    rows = [
        "| writers | synchronous_commit | insert TPS | pins certified | unclean | below floor "
        "| retries/pin mean | unclean share | retries/call p50 | p90 | max | calls with a retry "
        "| PIN p50 ms | PIN p99 ms | PIN max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        s = cell.summary()
        latency = s["latency_ms"]
        rows.append(
            f"| {s['writers']} | {s['synchronous_commit']} | {fmt(s['tps'], 0)} "
            f"| {s['pins_certified']} | {s['pins_unclean']} | {s['pins_below_floor']} "
            f"| {fmt(s['retries_per_pin_mean'])} | {fmt(s['unclean_share'] * 100, 1)} % "
            f"| {fmt(s['retries_p50'], 0)} | {fmt(s['retries_p90'], 0)} "
            f"| {fmt(s['retries_max'], 0)} | {fmt(s['calls_with_retry'] * 100, 1)} % "
            f"| {fmt(latency['p50'])} | {fmt(latency['p99'])} | {fmt(latency['max'])} |"
        )
    return rows


def stream_table(cells: list[Cell]) -> list[str]:
    """How far the invalidation stream fell behind in every cell."""
    rows = [
        "| writers | synchronous_commit | backlog peak: walsender KiB | node KiB "
        "| at end: walsender KiB | node KiB | catch-up s | walsender state (samples) "
        "| other work CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        peak, end = cell.backlog_kib["peak"], cell.backlog_kib["at_end"]
        rows.append(
            f"| {cell.writers} | {cell.synchronous_commit} "
            f"| {peak['walsender']} | {peak['node']} | {end['walsender']} | {end['node']} "
            f"| {cell.catch_up_seconds:.1f} | {cell.walsender_states} | {cell.foreign_cpu:.1f} |"
        )
    return rows


def report_body(cells: list[Cell], args: argparse.Namespace) -> list[str]:
    """The markdown report."""
    measured = sum(len(cell.clean_calls()) for cell in cells)
    calls = sum(len(cell.calls) for cell in cells)
    errors = [error for cell in cells for error in cell.errors]
    return [
        f"Each cell: pgbench `-n -c <writers> -j 2 -T {args.seconds}` with the script "
        f"`{SCRIPT.strip()}`; `PIN` called in a loop ({args.pause_ms} ms pause) from 1 s "
        "after pgbench started. Agent flags: `" + " ".join(AGENT_FLAGS) + "`.",
        "",
        "- *pins certified / unclean / below floor*: deltas of the agent's STATUS over the "
        "cell (our PIN calls and the agent's own 1 s pins).",
        "- *retries/pin mean* = (unclean + below floor) / certified; *unclean share* = "
        "discarded / all snapshots taken.",
        "- *retries/call p50, p90, max*, *calls with a retry*: per PIN call, from the "
        f"STATUS delta around it ({measured} of {calls} calls had no agent pin in between).",
        "- *PIN ms*: round trip of `PIN` (snapshot + fence + waiting until the stream decodes "
        "the fence + retries).",
        "- *backlog*: how far the walsender's `sent_lsn` (what logical decoding has read) "
        "and the node's applied position were behind the WAL insert position: the largest "
        "of the samples taken every 0.25 s while pgbench ran, and when it exited; "
        "*catch-up s*: how long the node then took to apply everything; *walsender state*: "
        "its wait event at those samples (CPU = decoding; WalSenderWaitForWal = caught up; "
        "WalSenderWriteData = waiting for the agent to read).",
        "- *other work CPU s*: CPU time used during the cell by processes that are not this "
        "benchmark's (the machine is shared; large values make the cell noisy).",
        "",
        *certification_table(cells),
        "",
        *stream_table(cells),
        "",
        f"PIN errors: {len(errors)}" + (f" (first: `{errors[0]}`)" if errors else ""),
    ]


def run(args: argparse.Namespace) -> None:
    """Every cell, then the report."""
    cells = [Cell(writers, sync) for sync in args.synchronous_commit for writers in args.writers]
    with tempfile.TemporaryDirectory() as scratch, postgres(args.storage) as server:
        args.script = Path(scratch) / "insert.sql"
        args.script.write_text(SCRIPT)
        dsn = create_database(server, "bench")
        execute(dsn, "CREATE TABLE ins (id bigserial PRIMARY KEY, writer integer, v integer)")
        note = machine_note(database_note(dsn, args.storage))
        with (
            bench_stack(dsn, agent_args=AGENT_FLAGS) as stack,
            closing(resp(stack.agent_address)) as agent,
        ):
            for cell in cells:
                log(f"cell: {cell.writers} writers, synchronous_commit={cell.synchronous_commit}")
                run_cell(server, stack, agent, cell, args)
    args.script = str(args.script)
    body = report_body(cells, args)
    raw = {
        "args": vars(args),
        "agent_flags": AGENT_FLAGS,
        "cells": [
            {
                **cell.summary(),
                "pgbench": cell.pgbench.as_dict() if cell.pgbench else None,
                "calls": [
                    [c.latency_ms, c.certified, c.unclean, c.below_floor] for c in cell.calls
                ],
                "errors": cell.errors[:20],
            }
            for cell in cells
        ],
    }
    name = result_name("pin_certification", args.quick, args.storage)
    path = write_report(name, "Pin certification: retries and PIN latency", note, body, raw)
    print("\n".join(body))
    log(f"report: {path}")


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of well under a minute")
    parser.add_argument("--seconds", type=int, default=20, help="pgbench -T of each cell")
    parser.add_argument(
        "--writers", type=lambda text: [int(n) for n in text.split(",")], default=[1, 16, 64]
    )
    parser.add_argument(
        "--synchronous-commit", type=lambda text: text.split(","), default=["on", "off"]
    )
    parser.add_argument("--pause-ms", type=float, default=5.0, help="pause between PIN calls")
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    args = parser.parse_args()
    if args.quick:
        args.seconds = 4
    return args


if __name__ == "__main__":
    run(parse_args())
