"""Database overhead of txcache: pgbench TPS stock vs with the agent (the paper: < 7 %).

One server, one pgbench database (scale 10), runs interleaved so that drift cancels:
``stock, agent(defaults), stock, agent(1 s), stock, agent(30 s), stock`` and, in the next
round, the agent runs in reverse order. Every run restarts the server first (same start for
all).

- *stock*: no replication slot, no agent; ``wal_level`` as ``--stock-wal-level`` (default
  ``replica``: PostgreSQL as it would run without txcache).
- *agent(defaults)*: ``wal_level=logical``, ``txcache setup`` (slot), a node and
  ``txcache-agent`` with its default settings: it takes a pin per second while pgbench
  commits and, nobody reading through txcache, lets each go ``--pin-lease`` (2 s) after
  it stopped being current.
- *agent(L)*: the same with ``--max-staleness L --pin-lease L``: pins live L seconds after
  they stop being current (as if a reader kept using every one), holding the vacuum horizon
  that long.

- with ``--standby``, every run (stock too) beside a streaming standby of the server, and
  the agent runs with pins living L s on the primary, then *on the standby*: the agent
  with ``--standby`` and ``--primary-pins on-demand``, the standby's
  ``hot_standby_feedback`` on and off in turn (its replay conflicts counted).

- with ``--decode-on-standby``, every run beside a streaming standby (its
  ``hot_standby_feedback`` on), and the agent at its defaults on the primary, then decoding
  the stream *on the standby* (``--decode-from``), then decoding and pinning there
  (``--standby``, ``--primary-pins on-demand``): what leaves the primary when the logical
  decoding does.

- with ``--spare-slot``, every run beside two streaming standbys, and the agent at its
  defaults decoding on the first: ``--decode-from`` naming it alone, then naming the second
  too, which makes the agent keep a *spare slot* there, advanced every second. What the
  spare costs the second standby (its server's CPU per pgbench transaction, against the same
  standby beside the stock runs) and the primary (the catalog rows its horizon keeps: the
  standbys' feedback reports the spare's ``catalog_xmin``).

- with ``--primary-spare``, every run beside a streaming standby (``hot_standby_feedback``
  on), and the agent at its defaults decoding on it: ``--decode-from`` naming it alone,
  then naming the primary after it with ``--decode-primary-slot spare``, which makes the
  agent keep a spare slot on the primary, advanced every second. What that costs the
  primary.

- with ``--consumer pg_recvlogical``, *decoding only*: ``wal_level=logical`` and ``txcache
  setup`` (slot, REPLICA IDENTITY FULL), the slot consumed by PostgreSQL's own
  ``pg_recvlogical`` into /dev/null: no agent, no node, no pins. What the database pays for
  logical decoding alone, for comparison with the agent's runs.

Each agent run's overhead is measured against the mean of the two stock runs beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from typing import Any

from _common import (
    STORAGE_HELP,
    Pgbench,
    PgbenchResult,
    agent_pid,
    agent_status,
    bench_stack,
    create_database,
    database_note,
    drop_slot,
    execute,
    node_pid,
    pgbench_init,
    postgres,
    resp,
    scalar,
    server_settings,
    wal_insert_lsn,
)
from _cpu import (
    PLACEMENT_HELP,
    ForeignCpu,
    cpu_seconds,
    database_cpu_seconds,
    place_database_apart,
    steal_seconds,
)
from _report import fmt, log, machine_note, result_name, write_report
from psycopg.conninfo import make_conninfo

import txcache
from txcache import protocol
from txcache.stack import ReplicatedPostgres, hosts_dsn, wait_until

SMALL_TABLES = "'pgbench_branches'::regclass, 'pgbench_tellers'::regclass"
DEFAULTS = -1
"""The ``lifetime`` of a run with the agent at its default settings."""


@dataclass(frozen=True)
class Config:
    """What a run beside the stock ones has: the agent with pins living ``lifetime`` seconds
    (:data:`DEFAULTS`: its default settings; 0: no agent, ``pg_recvlogical`` decoding only),
    and the replica identity of the tables pgbench updates (``full`` or ``default``)."""

    lifetime: int
    identity: str = "full"
    feedback: bool | None = None
    """With ``--standby``: ``None``, pins on the primary; else pins on the standby, with its
    ``hot_standby_feedback`` on or off."""
    decoding: bool = False
    """The stream decoded on the standby (``--decode-from``) rather than on the primary."""
    spare: bool = False
    """``--decode-from`` names a second standby too, where the agent keeps a spare slot."""
    primary_spare: bool = False
    """``--decode-from`` names the primary too, where the agent keeps a spare slot."""

    @property
    def name(self) -> str:
        """'agent, default settings', 'decoding only, no agent; REPLICA IDENTITY DEFAULT', …"""
        if self.lifetime == DEFAULTS:
            name = "agent, default settings"
        elif self.lifetime:
            name = f"agent, pins live {self.lifetime} s"
        else:
            name = "decoding only, no agent"
        if self.feedback is not None:
            on = "on" if self.feedback else "off"
            name += f", pins on the standby (primary on demand), hot_standby_feedback {on}"
        if self.decoding:
            name += ", decoding on the standby"
        if self.spare:
            name += ", a spare slot on a second standby"
        if self.primary_spare:
            name += ", a spare slot on the primary"
        return name + ("; REPLICA IDENTITY DEFAULT" if self.identity == "default" else "")

    def agent_flags(self, standby: Standby | None) -> tuple[str, ...]:
        """The agent's flags for this configuration, beside ``standby``."""
        standby_dsn = standby.dsn if standby else None
        flags: tuple[str, ...] = ()
        if self.lifetime != DEFAULTS:
            held = f"{self.lifetime}s"
            flags += ("--max-staleness", held, "--pin-lease", held)
        if self.feedback is not None:
            assert standby_dsn is not None
            flags += ("--standby", f"standby={standby_dsn}", "--primary-pins", "on-demand")
        if self.decoding:
            assert standby is not None
            decode_from = standby.decode_from(spare=self.spare, primary=self.primary_spare)
            flags += ("--decode-from", decode_from)
        if self.primary_spare:
            flags += ("--decode-primary-slot", "spare")
        return flags


@dataclass
class Run:
    """One pgbench run, stock (``config`` None) or beside the agent."""

    index: int
    config: Config | None
    pgbench: PgbenchResult | None = None
    wal_bytes: int = 0
    xmin_age: int = 0
    small_tables_growth_kib: int = 0
    standby_conflicts: int | None = None
    """Queries the standby cancelled for replay conflicts during the run (``--standby``)."""
    standby_lag_bytes: int | None = None
    """How far the standby's replay was behind the primary at 90 % of the run."""
    standby_pins: int | None = None
    """Pins the agent listed on the standby at 90 % of the run."""
    spare_standby_cpu: float | None = None
    """With ``--spare-slot``: CPU seconds the second standby's server used during the run."""
    catalog_xmin_age: int | None = None
    """With ``--spare-slot``: age in transactions of the oldest ``catalog_xmin`` of the
    primary's slots at 90 % of the run (a standby's feedback reports its slots' there)."""
    cpu: dict[str, float] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    foreign_cpu: float = 0.0
    steal: float = 0.0
    wal_records: int = 0
    database_cpu: float = 0.0
    full_page_images: int = 0

    @property
    def label(self) -> str:
        """'stock', or its configuration's name."""
        return "stock" if self.config is None else self.config.name

    @property
    def tps(self) -> float:
        """pgbench's TPS (NaN before the run)."""
        return self.pgbench.tps if self.pgbench else float("nan")

    @property
    def database_cpu_per_tx(self) -> float:
        """CPU microseconds the database server used per pgbench transaction."""
        return self.per_tx(self.database_cpu)

    @property
    def spare_standby_cpu_per_tx(self) -> float:
        """CPU microseconds the second standby's server used per pgbench transaction."""
        return self.per_tx(self.spare_standby_cpu or 0.0)

    def per_tx(self, seconds: float) -> float:
        """``seconds`` in microseconds per pgbench transaction (NaN before the run)."""
        transactions = self.pgbench.transactions if self.pgbench else 0
        return seconds / transactions * 1e6 if transactions else float("nan")


def schedule(configs: list[Config], rounds: int) -> list[Run]:
    """stock, agent, stock, agent …, agent order reversed every other round."""
    runs = [Run(0, None)]
    for number in range(rounds):
        order = configs if number % 2 == 0 else list(reversed(configs))
        for config in order:
            runs.append(Run(len(runs), config))
            runs.append(Run(len(runs), None))
    return runs


KEY_IDENTITY = tuple(
    f"ALTER TABLE {table} REPLICA IDENTITY DEFAULT"
    for table in ("pgbench_accounts", "pgbench_branches", "pgbench_tellers")
)
"""``--replica-identity default``: the tables pgbench updates publish their old key only (their
one index is the primary key, so the agent's tags lose nothing); pgbench_history, with no
key, is only inserted into and keeps FULL. What ``txcache setup --key-identity`` sets."""


def small_tables_kib(dsn: str) -> int:
    """Size of pgbench_branches and pgbench_tellers (the hot, bloat-prone ones), KiB."""
    size = scalar(
        dsn, f"SELECT sum(pg_total_relation_size(t)) FROM unnest(ARRAY[{SMALL_TABLES}]) t"
    )
    return int(size) // 1024


def wal_counts(dsn: str) -> tuple[int, int]:
    """WAL records and full-page images written since ``pg_stat_wal`` was last reset."""
    records, images = scalar(dsn, "SELECT ARRAY[wal_records, wal_fpi] FROM pg_stat_wal")
    return int(records), int(images)


def oldest_catalog_xmin_age(dsn: str) -> int:
    """Age in transactions of the oldest ``catalog_xmin`` of any slot: how far back the
    catalog rows are kept (a standby's feedback reports its logical slots' there)."""
    return int(scalar(dsn, "SELECT coalesce(max(age(catalog_xmin)), 0) FROM pg_replication_slots"))


def oldest_xmin_age(dsn: str) -> int:
    """Age in transactions of the oldest snapshot any session holds, or a standby's
    feedback holds through its slot (the vacuum horizon)."""
    age = scalar(
        dsn,
        "SELECT greatest((SELECT max(age(backend_xmin)) FROM pg_stat_activity), "
        "(SELECT max(age(xmin)) FROM pg_replication_slots), 0)",
    )
    return int(age)


def start_agent(
    stack: ExitStack, dsn: str, run: Run, standby: Standby | None = None
) -> dict[str, Any]:
    """Slot (``txcache setup``), node and agent for an agent run; returns what the run
    measures them by."""
    assert run.config is not None
    flags = run.config.agent_flags(standby)
    txcache_stack = stack.enter_context(bench_stack(dsn, agent_args=flags))
    # The slot's walsender (on the standby when decoding there): not the physical one.
    decoder = standby.dsn if run.config.decoding and standby else dsn
    walsender = int(
        wait_until(
            lambda: scalar(
                decoder,
                "SELECT active_pid FROM pg_replication_slots "
                "WHERE slot_type = 'logical' AND active",
            ),
            "the agent's walsender",
        )
    )
    pids = {"agent": agent_pid(txcache_stack), "node": node_pid(txcache_stack)}
    if run.config.primary_spare:
        pids["spare slot"] = spare_session(dsn)
    return {
        "pids": {**pids, "walsender": walsender},
        "client": stack.enter_context(closing(resp(txcache_stack.agent_address))),
    }


def spare_session(dsn: str) -> int:
    """The backend of the agent's session that advances the primary's spare slot, once the
    slot is there (its creation is not the run's)."""
    query = (
        "SELECT a.pid FROM pg_stat_activity a, pg_replication_slots s "
        "WHERE a.application_name LIKE 'txcache-agent spare slot%' "
        "AND s.slot_name = 'txcache' AND NOT s.failover AND s.confirmed_flush_lsn IS NOT NULL"
    )
    return int(wait_until(lambda: scalar(dsn, query), "the primary's spare slot"))


def primary_spare_note(runs: list[Run]) -> list[str]:
    """With ``--primary-spare``: what advancing the primary's spare cost the primary."""
    spared = [r for r in runs if r.config and r.config.primary_spare and "spare slot" in r.cpu]
    seconds = ", ".join(fmt(r.cpu["spare slot"], 2) for r in spared)
    per_tx = [
        r.cpu["spare slot"] / max(1, r.pgbench.transactions) * 1e6 for r in spared if r.pgbench
    ]
    mean = sum(per_tx) / max(1, len(per_tx))
    return [
        "The primary's session advancing the spare slot (`pg_replication_slot_advance` every "
        f"second) used {seconds} s of CPU in the runs with it: {mean:.1f} µs per pgbench "
        "transaction (mean), a part of the database CPU above.",
        "",
    ]


def start_decoder(stack: ExitStack, server: Any, dsn: str) -> dict[str, Any]:
    """Slot consumed by ``pg_recvlogical`` into /dev/null; returns the walsender to measure."""
    txcache.setup_database(dsn)
    command = [str(server.binary("pg_recvlogical")), "--dbname", dsn, "--slot", "txcache"]
    command += ["--start", "--file", "/dev/null", "--no-loop"]
    command += ["--option", "proto_version=1", "--option", "publication_names=txcache"]
    command += ["--option", "messages=true"]
    decoder = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    stack.callback(decoder.wait, 10)
    stack.callback(decoder.terminate)

    def walsender() -> int | None:
        if decoder.poll() is not None:
            raise RuntimeError(f"pg_recvlogical exited: {decoder.communicate()[1]}")
        pid = scalar(dsn, "SELECT max(pid) FROM pg_stat_replication")
        return int(pid) if pid else None

    return {"pids": {"walsender": wait_until(walsender, "pg_recvlogical's walsender")}}


class Standby:
    """The streaming standby of ``--standby``: its feedback set per run, its conflicts and
    lag measured."""

    def __init__(self, servers: ReplicatedPostgres, dbname: str) -> None:
        assert servers.standby is not None
        self.servers = servers
        self.dbname = dbname
        self.dsn = make_conninfo(servers.standby.dsn, dbname=dbname)
        self.spare = servers.extra_standbys[0] if servers.extra_standbys else None
        """With ``--spare-slot``: the second standby, where the agent may keep a spare slot."""
        self.spare_dsn = make_conninfo(self.spare.dsn, dbname=dbname) if self.spare else None

    def decode_from(self, *, spare: bool, primary: bool) -> str:
        """``--decode-from``: the standby, and after it with ``spare`` the second standby,
        with ``primary`` the primary."""
        assert self.servers.standby is not None
        hosts = [self.servers.standby]
        if spare:
            assert self.spare is not None
            hosts.append(self.spare)
        if primary:
            hosts.append(self.servers.primary)
        return hosts_dsn(hosts, self.dbname) if len(hosts) > 1 else self.dsn

    def feedback(self, on: bool) -> None:
        """Restart the standby with ``hot_standby_feedback`` ``on`` or off, unless it has
        that already (the command line's settings win over ``ALTER SYSTEM``)."""
        value = "on" if on else "off"
        if scalar(self.dsn, "SHOW hot_standby_feedback") != value:
            self.servers.restart_standby({"hot_standby_feedback": value})

    def streaming(self, primary_dsn: str) -> None:
        """Wait until every standby streams from the (restarted) primary (the extra ones'
        names extend the first's: ``…_2``)."""
        standbys = 1 + len(self.servers.extra_standbys)
        query = (
            "SELECT count(*) FROM pg_stat_replication "
            f"WHERE application_name LIKE '{self.servers.standby_application_name}%' "
            "AND state = 'streaming'"
        )
        wait_until(
            lambda: scalar(primary_dsn, query) == standbys, "the standbys to stream", timeout=60
        )

    def conflicts(self) -> int:
        """Queries cancelled on the standby for replay conflicts so far (this database)."""
        query = (
            "SELECT confl_snapshot + confl_lock + confl_bufferpin + confl_deadlock "
            "FROM pg_stat_database_conflicts WHERE datname = current_database()"
        )
        return int(scalar(self.dsn, query))

    def lag_bytes(self, primary_dsn: str) -> int:
        """How far replay is behind the primary's WAL insert position."""
        replayed = scalar(self.dsn, "SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn")
        return max(0, wal_insert_lsn(primary_dsn) - int(replayed))


def measure(
    server: Any, dsn: str, run: Run, args: argparse.Namespace, standby: Standby | None = None
) -> None:
    """Restart the server for ``run``, run pgbench, record the numbers."""
    wal_level = args.stock_wal_level if run.config is None else "logical"
    server.restart(server_settings(args.storage, {"wal_level": wal_level}))
    if args.placement == "split":
        place_database_apart(server)
    if standby is not None:
        standby.feedback(run.config is None or run.config.feedback is not False)
        standby.streaming(dsn)
    with ExitStack() as stack:
        agent = None
        if run.config is not None and run.config.lifetime == 0:
            agent = start_decoder(stack, server, dsn)
        elif run.config is not None:
            agent = start_agent(stack, dsn, run, standby)

        if run.config is not None and run.config.identity == "default":
            execute(dsn, *KEY_IDENTITY)
        execute(dsn, "CHECKPOINT", "SELECT pg_stat_reset_shared('wal')")
        wal, size = wal_insert_lsn(dsn), small_tables_kib(dsn)
        pids = agent["pids"] if agent else {}
        cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        command = ["-c", str(args.clients), "-j", "2", "-T", str(args.seconds)]
        foreign, steal = ForeignCpu(), steal_seconds()
        database_cpu = database_cpu_seconds(server)
        spare = standby.spare if standby else None
        spare_cpu = database_cpu_seconds(spare) if spare else 0.0
        conflicts = standby.conflicts() if standby else 0
        load = Pgbench(server, dsn, command)
        time.sleep(args.seconds * 0.9)
        run.xmin_age = oldest_xmin_age(dsn)
        if standby is not None:
            run.standby_lag_bytes = standby.lag_bytes(dsn)
        if spare is not None:
            run.catalog_xmin_age = oldest_catalog_xmin_age(dsn)
        if agent and "client" in agent and standby is not None:
            run.standby_pins = len(agent["client"].run(protocol.standby_pins()))
        run.pgbench = load.wait()
        if standby is not None:
            run.standby_conflicts = standby.conflicts() - conflicts
        time.sleep(0.2)  # pgbench's backends exit and are reaped: their time is counted
        run.database_cpu = database_cpu_seconds(server) - database_cpu
        if spare is not None:
            run.spare_standby_cpu = database_cpu_seconds(spare) - spare_cpu
        run.foreign_cpu = foreign.seconds()
        run.steal = steal_seconds() - steal
        run.wal_bytes = wal_insert_lsn(dsn) - wal
        run.wal_records, run.full_page_images = wal_counts(dsn)
        run.small_tables_growth_kib = small_tables_kib(dsn) - size
        run.cpu = {name: cpu_seconds(pid) - cpu[name] for name, pid in pids.items()}
        if agent and "client" in agent:
            run.status = agent_status(agent["client"])
    if run.config is not None:
        drop_slot(standby.dsn if run.config.decoding and standby else dsn)
    if run.config is not None and run.config.spare and standby and standby.spare_dsn:
        drop_slot(standby.spare_dsn)
    if run.config is not None and run.config.primary_spare:
        drop_slot(dsn)


def against_neighbours(runs: list[Run], value: Callable[[Run], float]) -> dict[Config, list[float]]:
    """Per configuration: by how much each agent run's ``value`` exceeds the mean of its two stock
    neighbours', %."""
    result: dict[Config, list[float]] = {}
    for i, run in enumerate(runs):
        if run.config is None:
            continue
        stock = statistics.fmean([value(runs[i - 1]), value(runs[i + 1])])
        result.setdefault(run.config, []).append((value(run) / stock - 1) * 100)
    return result


def overheads(runs: list[Run]) -> dict[Config, list[float]]:
    """Per configuration: each agent run's TPS loss against the mean of its stock neighbours, %."""
    gains = against_neighbours(runs, lambda run: run.tps)
    return {config: [-gain for gain in each] for config, each in gains.items()}


def cpu_overheads(runs: list[Run]) -> dict[Config, list[float]]:
    """Per configuration: each agent run's extra database CPU per transaction against the mean of
    its stock neighbours, %."""
    return against_neighbours(runs, lambda run: run.database_cpu_per_tx)


def mean_and_each(values: list[float]) -> str:
    """``**mean** (each, …)`` as a table cell."""
    each = ", ".join(f"{value:+.1f} %" for value in values)
    return f"**{statistics.fmean(values):+.1f} %** ({each})"


def summary_rows(runs: list[Run], configs: list[Config]) -> list[str]:
    """One row for stock and one per configuration."""
    loss, cpu = overheads(runs), cpu_overheads(runs)
    stock = [run for run in runs if run.config is None]
    rows = [
        "| configuration | runs | TPS mean | TPS min-max | TPS lost vs neighbouring stock runs "
        "(mean; each run) | database CPU µs/tx | database CPU per tx above neighbouring "
        "stock runs (mean; each run) |",
        "|---|---|---|---|---|---|---|",
        f"| stock | {len(stock)} | {statistics.fmean(r.tps for r in stock):.0f} "
        f"| {min(r.tps for r in stock):.0f}-{max(r.tps for r in stock):.0f} | - "
        f"| {statistics.fmean(r.database_cpu_per_tx for r in stock):.0f} | - |",
    ]
    for config in configs:
        agent = [run for run in runs if run.config == config]
        tps = [run.tps for run in agent]
        name = config.name
        rows.append(
            f"| {name} | {len(tps)} | {statistics.fmean(tps):.0f} "
            f"| {min(tps):.0f}-{max(tps):.0f} | {mean_and_each(loss[config])} "
            f"| {statistics.fmean(r.database_cpu_per_tx for r in agent):.0f} "
            f"| {mean_and_each(cpu[config])} |"
        )
    return rows


def spare_rows(runs: list[Run], configs: list[Config]) -> list[str]:
    """With ``--spare-slot``: the second standby's CPU and the primary's catalog horizon, per
    configuration, against the stock runs."""
    rows = [
        "| configuration | second standby's CPU µs/tx (each run) | above stock's | "
        "primary's oldest catalog_xmin age, xids (each run) |",
        "|---|---|---|---|",
    ]
    stock_cpu = statistics.fmean(r.spare_standby_cpu_per_tx for r in runs if r.config is None)
    for config in [None, *configs]:
        each = [run for run in runs if run.config == config]
        cpu = [run.spare_standby_cpu_per_tx for run in each]
        ages = ", ".join(str(run.catalog_xmin_age) for run in each)
        above = "-" if config is None else f"{(statistics.fmean(cpu) / stock_cpu - 1) * 100:+.1f} %"
        rows.append(
            f"| {'stock' if config is None else config.name} | {statistics.fmean(cpu):.1f} "
            f"({', '.join(f'{c:.1f}' for c in cpu)}) | {above} | {ages} |"
        )
    return rows


def spare_note(runs: list[Run], args: argparse.Namespace) -> list[str]:
    """With ``--spare-slot``: what the spare slot cost, as a paragraph and a table."""
    return [
        "The second standby (the spare slot's, when `--decode-from` names it) and the "
        "primary's catalog horizon (*catalog_xmin*: a standby's `hot_standby_feedback` "
        "reports its slots' to the primary, which keeps catalog rows that recent; sampled "
        "at 90 % of the run). Beside the stock runs and the first configuration, the second "
        f"standby only replays the WAL (pgbench `-T {args.seconds}`):",
        "",
        *spare_rows(runs, configs(args)),
        "",
    ]


def run_rows(runs: list[Run]) -> list[str]:
    """Every run, in order."""
    rows = [
        "| # | run | TPS | latency ms | database CPU µs/tx | WAL bytes/tx | WAL records/tx "
        "| full-page images/tx | oldest xmin age (xids) "
        "| branches+tellers growth KiB | CPU s: agent | node | walsender "
        "| pins certified / unclean | standby: pins, conflicts, lag KiB | other work CPU s "
        "| stolen CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        assert run.pgbench is not None
        transactions = max(1, run.pgbench.transactions)
        per_tx = run.wal_bytes / transactions
        records, images = run.wal_records / transactions, run.full_page_images / transactions
        pins = (
            f"{run.status['pins_certified']} / {run.status['pins_unclean']}" if run.status else "-"
        )
        standby = (
            f"{run.standby_pins if run.standby_pins is not None else '-'}, "
            f"{run.standby_conflicts}, {(run.standby_lag_bytes or 0) // 1024}"
            if run.standby_conflicts is not None
            else "-"
        )
        parts = ("agent", "node", "walsender")
        cpu = [fmt(run.cpu[name], 1) if name in run.cpu else "-" for name in parts]
        rows.append(
            f"| {run.index} | {run.label} | {run.tps:.0f} | {run.pgbench.latency_ms:.2f} "
            f"| {run.database_cpu_per_tx:.0f} | {per_tx:.0f} | {records:.2f} | {images:.2f} "
            f"| {run.xmin_age} | {run.small_tables_growth_kib} "
            f"| {cpu[0]} | {cpu[1]} | {cpu[2]} | {pins} | {standby} | {run.foreign_cpu:.1f} "
            f"| {run.steal:.1f} |"
        )
    return rows


def consumer_note(args: argparse.Namespace) -> str:
    """What the runs beside the stock ones had running."""
    return running_note(args) + (
        " (*REPLICA IDENTITY DEFAULT*: pgbench_accounts, _branches and _tellers set back to "
        "their primary key after setup; pgbench_history, only inserted into, stays FULL)"
        if "default" in args.replica_identity.split(",")
        else ""
    )


def running_note(args: argparse.Namespace) -> str:
    """The consumer of the slot beside the stock runs."""
    if args.consumer == "pg_recvlogical":
        return (
            "Decoding only: wal_level=logical, `txcache setup` (slot, REPLICA IDENTITY FULL), "
            "the slot consumed by `pg_recvlogical` into /dev/null; no agent, node or pins"
        )
    standby = (
        "; every run beside a streaming standby (asynchronous, `hot_standby_feedback` on unless "
        "said), the agent's pins on the primary or, with `--standby` and `--primary-pins "
        "on-demand`, on the standby"
        if args.standby
        else ""
    )
    if args.spare_slot:
        standby += (
            "; with a second streaming standby beside every run; *decoding on the standby*: "
            "the agent's slot on the first standby (`--decode-from`), and with both named, a "
            "spare slot on the second, advanced every second to what the stream's slot "
            "acknowledged"
        )
    if args.primary_spare:
        standby += (
            "; *decoding on the standby*: the agent's slot on the standby (`--decode-from`), "
            "and with the primary named after it (`--decode-primary-slot spare`), a spare "
            "slot on the primary, advanced every second to what the stream's slot acknowledged"
        )
    if args.decode_on_standby:
        standby += (
            "; *decoding on the standby*: the agent's slot on the standby (`--decode-from`), "
            "its walsender decoding there (its CPU is not the database's: the database is the "
            "primary)"
        )
    return (
        "Agent: wal_level=logical, slot, node + agent (default settings, or `--max-staleness "
        "L --pin-lease L` for pins living L s; a pin every 1 s)" + standby
    )


def placement_note(args: argparse.Namespace) -> str:
    """Where the processes ran."""
    if args.placement == "split":
        return (
            f"Placement split: the database server's processes (walsender included) on CPU 0, "
            f"pgbench and txcache's processes on the other {(os.cpu_count() or 2) - 1} CPU(s)"
        )
    return f"All processes shared the same {os.cpu_count()} CPUs"


def report_body(runs: list[Run], args: argparse.Namespace) -> list[str]:
    """The markdown report."""
    return [
        f"pgbench TPC-B-like (default script) `-c {args.clients} -j 2 -T {args.seconds}`, "
        f"scale {args.scale}; {len(runs)} runs interleaved, the server restarted before each. "
        f"Stock: wal_level={args.stock_wal_level}, no slot, no agent. {consumer_note(args)}, "
        f"{placement_note(args)}.",
        "",
        *summary_rows(runs, configs(args)),
        "",
        *(spare_note(runs, args) if args.spare_slot else []),
        *(primary_spare_note(runs) if args.primary_spare else []),
        "Every run (*database CPU*: CPU time of the server's processes — postmaster, "
        "backends, walsender, checkpointer — per transaction; time the host takes away is "
        "not in it, unlike in TPS; *full-page images*: the first change of a page after the "
        "run's opening checkpoint logs the whole page, so fewer transactions over the same "
        "pages mean more WAL per transaction; *WAL records/tx* is the count that does not "
        "depend on it; "
        "*oldest xmin age*: sampled at 90 % of the run, the vacuum horizon the "
        "pinner sessions hold (or a standby's feedback, through its slot's xmin); "
        "*standby*: with `--standby`, the pins the agent listed on it at 90 % of the run, "
        "the queries it cancelled for replay conflicts and how far its replay was behind; "
        "*growth*: size of pgbench_branches + pgbench_tellers during "
        "the run, the tables whose dead rows a held horizon keeps; *other work*: CPU time of "
        "processes that are not this benchmark's, the machine being shared; *stolen*: CPU "
        "time the hypervisor gave to other guests while ours wanted to run):",
        "",
        *run_rows(runs),
    ]


def run(args: argparse.Namespace) -> None:
    """Every run, then the report."""
    runs = schedule(configs(args), args.rounds)
    standbys = 2 if args.spare_slot else int(args.standby)
    with postgres(args.storage, standbys=standbys) as servers:
        server = servers.primary if args.standby else servers
        dsn = create_database(server, "bench")
        standby = Standby(servers, "bench") if args.standby else None
        log(f"pgbench -i -s {args.scale}")
        pgbench_init(server, dsn, args.scale)
        note = machine_note(database_note(dsn, args.storage))
        for run_ in runs:
            log(f"run {run_.index + 1}/{len(runs)}: {run_.label}")
            measure(server, dsn, run_, args, standby)
            log(f"  {run_.tps:.0f} TPS")
    body = report_body(runs, args)
    raw = {
        "args": vars(args),
        "overhead_percent": {c.name: v for c, v in overheads(runs).items()},
        "database_cpu_overhead_percent": {c.name: v for c, v in cpu_overheads(runs).items()},
        "runs": [
            {
                "label": r.label,
                "lifetime": r.config.lifetime if r.config else None,
                "replica_identity": r.config.identity if r.config else None,
                "pgbench": r.pgbench.as_dict() if r.pgbench else None,
                "wal_bytes": r.wal_bytes,
                "wal_records": r.wal_records,
                "database_cpu_seconds": r.database_cpu,
                "full_page_images": r.full_page_images,
                "xmin_age": r.xmin_age,
                "small_tables_growth_kib": r.small_tables_growth_kib,
                "standby_conflicts": r.standby_conflicts,
                "standby_lag_bytes": r.standby_lag_bytes,
                "standby_pins": r.standby_pins,
                "spare_standby_cpu_seconds": r.spare_standby_cpu,
                "catalog_xmin_age": r.catalog_xmin_age,
                "cpu_seconds": r.cpu,
                "agent_status": r.status,
                "foreign_cpu_seconds": r.foreign_cpu,
                "steal_seconds": r.steal,
            }
            for r in runs
        ],
    }
    extra = ["stock-logical"] if args.stock_wal_level == "logical" else []
    extra += ["decoding-only"] if args.consumer == "pg_recvlogical" else []
    extra += ["split"] if args.placement == "split" else []
    extra += (
        ["standby"]
        if args.standby and not (args.decode_on_standby or args.spare_slot or args.primary_spare)
        else []
    )
    extra += ["decode-on-standby"] if args.decode_on_standby else []
    extra += ["spare-slot"] if args.spare_slot else []
    extra += ["primary-spare"] if args.primary_spare else []
    extra += {"full": [], "default": ["key-identity"]}.get(args.replica_identity, ["identities"])
    name = result_name("database_overhead", args.quick, args.storage, *extra)
    path = write_report(
        name, "Database overhead: pgbench with and without txcache", note, body, raw
    )
    print("\n".join(body))
    log(f"report: {path}")


def configs(args: argparse.Namespace) -> list[Config]:
    """Every configuration the runs beside the stock ones have, in schedule order."""
    identities = args.replica_identity.split(",")
    if args.spare_slot:
        return [Config(DEFAULTS, decoding=True), Config(DEFAULTS, decoding=True, spare=True)]
    if args.primary_spare:
        return [
            Config(DEFAULTS, decoding=True),
            Config(DEFAULTS, decoding=True, primary_spare=True),
        ]
    if args.decode_on_standby:
        return [
            Config(DEFAULTS),
            Config(DEFAULTS, decoding=True),
            Config(DEFAULTS, feedback=True, decoding=True),
        ]
    if args.standby:
        lifetime = max(args.lifetimes)
        return [Config(lifetime), Config(lifetime, feedback=True), Config(lifetime, feedback=False)]
    return [Config(lifetime, identity) for lifetime in args.lifetimes for identity in identities]


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--seconds", type=int, default=15, help="pgbench -T of each run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--lifetimes",
        type=lambda text: [DEFAULTS if n == "defaults" else int(n) for n in text.split(",")],
        default=[DEFAULTS, 1, 30],
        help="how long the agent's pins live, seconds ('defaults': its default settings)",
    )
    parser.add_argument("--clients", type=int, default=8, help="pgbench -c")
    parser.add_argument("--scale", type=int, default=10, help="pgbench -i -s")
    parser.add_argument("--stock-wal-level", choices=("replica", "logical"), default="replica")
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    parser.add_argument(
        "--consumer",
        choices=("agent", "pg_recvlogical"),
        default="agent",
        help="who consumes the slot: the agent (with a node and pins) or, for comparison, "
        "pg_recvlogical alone (decoding only; --lifetimes is ignored)",
    )
    parser.add_argument(
        "--replica-identity",
        choices=("full", "default", "full,default"),
        default="full",
        help="the identity of the tables pgbench updates beside the stock runs: FULL, as "
        "`txcache setup` sets it, DEFAULT (the primary key: their only index, so the "
        "agent's tags stay fine), or each in turn",
    )
    parser.add_argument(
        "--placement", choices=("shared", "split"), default="shared", help=PLACEMENT_HELP
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="every run beside a streaming standby; the agent's pins (living the longest of "
        "--lifetimes) on the primary, then on the standby with the primary pinned on demand, "
        "its hot_standby_feedback on and off",
    )
    parser.add_argument(
        "--decode-on-standby",
        action="store_true",
        help="every run beside a streaming standby (hot_standby_feedback on); the agent at "
        "its defaults decoding on the primary, then on the standby, then decoding and "
        "pinning there (--lifetimes is ignored)",
    )
    parser.add_argument(
        "--spare-slot",
        action="store_true",
        help="every run beside two streaming standbys (hot_standby_feedback on); the agent "
        "at its defaults decoding on the first, with --decode-from naming it alone, then "
        "both: what the spare slot the agent keeps on the second costs it and the primary "
        "(--lifetimes is ignored)",
    )
    parser.add_argument(
        "--primary-spare",
        action="store_true",
        help="every run beside a streaming standby (hot_standby_feedback on); the agent at "
        "its defaults decoding on it, with --decode-from naming it alone, then the primary "
        "after it with --decode-primary-slot spare: what the spare slot the agent keeps on "
        "the primary costs it (--lifetimes is ignored)",
    )
    args = parser.parse_args()
    if args.decode_on_standby or args.spare_slot or args.primary_spare:
        args.standby = True
    if args.consumer == "pg_recvlogical":
        args.lifetimes = [0]
    if args.quick:
        args.seconds, args.rounds = 4, 1
    return args


if __name__ == "__main__":
    run(parse_args())
