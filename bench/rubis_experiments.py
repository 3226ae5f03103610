"""The paper's RUBiS evaluation, reproduced on this machine: one command per
experiment, or ``all`` (each configuration runs once and serves every experiment it belongs
to).

    python bench/rubis_experiments.py cache-size  # 1, 2: throughput, hit rate vs cache size
    python bench/rubis_experiments.py staleness   # 3: peak throughput vs staleness limit
    python bench/rubis_experiments.py misses      # 4: misses by type, four configurations
    python bench/rubis_experiments.py contents    # 5: what the cache holds after a run
    python bench/rubis_experiments.py latency     # 6: mean lookup vs statement latency
    python bench/rubis_experiments.py all

Every configuration starts from an identical copy of the loaded database (a template), a cold
node of its size, the agent and the application (granian, 2 workers x 8 threads), warms the
cache with ``--warmup`` seconds of peak load, then searches the peak: it raises the emulated
clients through ``--clients`` (no think time), ``--duration`` seconds each, until throughput
stops rising, and reports the best. The node's counters over the measured windows give the
hit rate and the misses by type; its INFO after the run gives the contents; a probe thread
(a few read pages per second through the library, alongside the load) gives the latency of
lookups and statements. Results: ``bench/results/rubis_<experiment>.{md,json,png}``.

Read-your-writes is off by default (``--read-your-writes`` turns it on): the paper's RUBiS
had no such session guarantee, and at peak load it restricts most reads to versions after
the session's last write (docs/rubis.md).
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from _common import (
    STORAGE_HELP,
    bench_stack,
    create_database,
    database_note,
    drop_slot,
    node_counts,
    postgres,
    server_info,
)
from _report import log, machine_note
from _rubis_report import EXPERIMENTS, write_experiment
from psycopg import sql
from rubis_throughput import COMPONENTS, component_cpu

import txcache
from rubis import emulator, generate
from rubis.interactions import PageError, Rubis
from rubis.process import AppServer


@dataclass(frozen=True)
class Config:
    """One configuration of the stack: what a peak search runs against."""

    mode: str  # bypass, consistent, no_consistency
    preset: str
    node_memory: str = "-"
    staleness: float = 30.0

    @property
    def name(self) -> str:
        if self.mode == "bypass":
            return f"no cache ({self.preset})"
        return f"{self.mode}, {self.node_memory}, {self.staleness:g} s ({self.preset})"


# -- the stack of one configuration ----------------------------------------------------------


class LatencyProbe(threading.Thread):
    """A few read pages per second through the library, beside the load: the mean latency
    of a cache lookup and of a database statement as an application sees them."""

    def __init__(self, env: dict[str, str], preset: str, staleness: float) -> None:
        super().__init__(name="latency-probe", daemon=True)
        self.cache = txcache.connect(
            dsn=env["TXCACHE_DSN"], nodes=[env["TXCACHE_NODES"]], agent=env["TXCACHE_AGENT"]
        )
        self.rubis = Rubis(self.cache, staleness=staleness)
        self.sizes = generate.PRESETS[preset]
        self.stopping = threading.Event()

    def run(self) -> None:
        rng = random.Random(7)
        items = self.sizes.active_items + self.sizes.old_items
        while not self.stopping.wait(0.05):
            try:
                choice = rng.randrange(3)
                if choice == 0:
                    self.rubis.view_item(rng.randint(1, items))
                elif choice == 1:
                    self.rubis.view_user_info(rng.randint(1, self.sizes.users))
                else:
                    self.rubis.view_bid_history(rng.randint(1, items))
            except (PageError, txcache.SnapshotUnavailable):
                continue

    def finish(self) -> dict[str, float]:
        self.stopping.set()
        self.join()
        self.cache.close()
        return self.cache.latency.as_dict()


def _drop_database(server: Any, name: str) -> None:
    drop_slot(server.dsn)
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def run_config(
    server: Any, config: Config, args: argparse.Namespace, serial: int
) -> dict[str, Any]:
    """Warm up, then search the peak of ``config`` on a fresh copy of its preset."""
    name = f"run{serial}"
    dsn = create_database(server, name, template=f"template_{config.preset}")
    env = {"TXCACHE_DSN": dsn, "TXCACHE_MODE": config.mode}
    env["RUBIS_STALENESS"] = str(config.staleness)
    env["RUBIS_READ_YOUR_WRITES"] = "1" if args.read_your_writes else "0"
    try:
        if config.mode == "bypass":
            return _search_peak(config, args, env, None)
        with bench_stack(dsn, max_memory=config.node_memory) as stack:
            return _search_peak(config, args, env | stack.settings(), stack.node_addresses[0])
    finally:
        _drop_database(server, name)


def _search_peak(
    config: Config, args: argparse.Namespace, env: dict[str, str], node: str | None
) -> dict[str, Any]:
    """The peak search of ``config`` against the stack of ``env`` (``node``: its node's
    ``host:port``; ``None`` without a cache)."""
    users = generate.PRESETS[config.preset].users
    common: dict[str, Any] = {"users": users, "peak": True}
    points: list[dict[str, Any]] = []
    with AppServer(env, workers=args.workers, threads=args.threads) as server:
        warmup = args.warmup if node is not None else min(args.warmup, 10.0)
        log(f"{config.name}: warming up {warmup:.0f} s")
        clients = max(args.clients)
        emulator.run(server.url, clients=clients, duration=warmup, seed=args.seed + 99, **common)
        probe = LatencyProbe(env, config.preset, config.staleness) if node is not None else None
        if probe is not None:
            probe.start()
        for count in args.clients:
            before = node_counts(node) if node is not None else {}
            cpu = component_cpu()
            report = emulator.run(
                server.url, clients=count, duration=args.duration, seed=args.seed, **common
            )
            cpu_after = component_cpu()
            row = report.as_dict()
            after = node_counts(node) if node is not None else {}
            delta = {key: after[key] - before[key] for key in after}
            lookups = sum(delta.values())
            points.append(
                {
                    "clients": count,
                    "throughput": report.throughput,
                    "latency_ms": row["latency_ms"],
                    "error_pages": row["error_pages"],
                    "errors": row["errors"],
                    "lookups": delta,
                    "hit_rate": delta["hits"] / lookups if lookups else None,
                    "cpu_s": {c: round(cpu_after[c] - cpu[c], 2) for c in COMPONENTS},
                }
            )
            log(f"{config.name}: {count} clients, {report.throughput:.0f} req/s")
            if len(points) > 1 and report.throughput < 1.03 * points[-2]["throughput"]:
                break  # stopped rising
        latency = probe.finish() if probe is not None else None
        contents = server_info(node) if node is not None else None
    peak = max(points, key=lambda point: point["throughput"])
    return {
        "config": config.__dict__,
        "name": config.name,
        "points": points,
        "peak": peak,
        "latency": latency,
        "contents": contents,
    }


# -- the experiments ------------------------------------------------------------------------


def configs_for(experiment: str, args: argparse.Namespace) -> list[Config]:
    """The configurations ``experiment`` needs."""
    preset, largest = args.preset, args.sizes[-1]
    if experiment == "cache-size":
        modes = ("consistent", "no_consistency")
        sized = [Config(mode, preset, size) for size in args.sizes for mode in modes]
        return [Config("bypass", preset), *sized]
    if experiment == "staleness":
        limits = args.staleness_values
        return [
            Config("bypass", preset),
            *(Config("consistent", preset, largest, s) for s in limits),
        ]
    if experiment == "misses":
        return [
            Config("consistent", preset, largest, 30.0),
            Config("consistent", preset, largest, 15.0),
            Config("consistent", preset, args.sizes[0], 30.0),
            Config("consistent", args.large_preset, largest, 30.0),
        ]
    if experiment in ("contents", "latency"):
        return [Config("consistent", preset, largest, 30.0)]
    raise ValueError(experiment)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    parser.add_argument("--preset", choices=sorted(generate.PRESETS), default="small")
    parser.add_argument(
        "--large-preset",
        choices=sorted(generate.PRESETS),
        default="paper",
        help="the fourth miss configuration (the paper's larger database)",
    )
    parser.add_argument("--sizes", default="8mb,32mb,128mb,512mb", help="node sizes, ascending")
    parser.add_argument("--staleness-values", default="1,5,10,30,60,120")
    parser.add_argument("--clients", default="6,12,24", help="the peak search's client counts")
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--read-your-writes", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--storage", choices=("disk", "tmpfs"), default="disk", help=STORAGE_HELP)
    parser.add_argument("--quick", action="store_true", help="tiny, 2 sizes, 5 s windows")
    args = parser.parse_args()
    if args.quick:
        args.preset, args.large_preset, args.sizes = "tiny", "tiny", "2mb,64mb"
        args.staleness_values, args.clients = "1,30", "4,8"
        args.warmup, args.duration = 5.0, 5.0
    args.sizes = args.sizes.split(",")
    args.staleness_values = [float(s) for s in args.staleness_values.split(",")]
    args.clients = [int(c) for c in args.clients.split(",")]
    experiments = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    wanted: list[Config] = []
    for experiment in experiments:
        wanted += [c for c in configs_for(experiment, args) if c not in wanted]
    results: dict[Config, dict[str, Any]] = {}
    with postgres(args.storage) as server:
        for preset in sorted({c.preset for c in wanted}):
            dsn = create_database(server, f"template_{preset}")
            started = time.monotonic()
            with psycopg.connect(dsn, autocommit=True) as conn:
                generate.load(conn, generate.PRESETS[preset], seed=args.seed)
            log(f"loaded {preset} in {time.monotonic() - started:.1f} s")
        note = machine_note(database_note(server.dsn, args.storage))
        for serial, config in enumerate(wanted):
            log(f"[{serial + 1}/{len(wanted)}] {config.name}")
            results[config] = run_config(server, config, args, serial)
    for experiment in experiments:
        own = [results[c] for c in configs_for(experiment, args)]
        path = write_experiment(experiment, own, args, note)
        log(f"wrote {path}")


if __name__ == "__main__":
    main()
