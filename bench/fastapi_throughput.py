"""The FastAPI example's GET throughput with txcache and without, and the database CPU per
request of each.

One stack (embedded PostgreSQL, one node, the agent) on a seeded catalogue, and the example
app (``examples/fastapi_shop``) under uvicorn twice, side by side: once as it ships
(``TXCACHE_MODE=consistent``) and once with ``TXCACHE_MODE=bypass``, the library's mode in
which every call runs against PostgreSQL (no cache at all) — the same code, the same
sessions, the same read-only transaction per GET. Each server is one uvicorn worker (one
process, one event loop), as the example's README starts it.

A closed loop of ``--concurrency`` clients (keep-alive connections of a minimal HTTP/1.1
client in this process, :mod:`_http_load`) sends a fixed mix of the example's read
endpoints with Zipf-distributed keys (:data:`MIX`). After an unmeasured
warm-up of each server, rounds alternate between them (the order flips every round, so
drift falls on both alike); each round gives requests/s, latency, and the CPU time of the
database server (all its processes, and the app's own backends alone), the app's process,
the node, the agent, the load generator and the machine's other work. Ratios are taken
round by round (the two runs seconds apart) and over all rounds (:mod:`_app_throughput`,
which ``django_throughput.py`` shares).

    .venv/bin/python bench/fastapi_throughput.py [--quick] [--storage disk|tmpfs]
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy
from _app_throughput import (
    FULL,
    QUICK,
    App,
    Bench,
    Catalogue,
    application,
    measure,
    method_lines,
    options,
    render,
    results,
    servers,
    write,
)
from _common import bench_stack, create_database, database_note, execute, postgres
from _http_load import RequestMix
from _report import REPO, log, machine_note, num, result_name
from psycopg.conninfo import make_conninfo

from txcache.stack import Stack

EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))  # the example's package: its server and its models
from fastapi_shop.server import ShopServer  # noqa: E402

MIX = {"product": 60, "category": 15, "customer orders": 15, "order": 10}
"""Percent of requests per read endpoint: ``GET /products/{id}``,
``/categories/{c}/products``, ``/customers/{c}/orders`` (the three cached functions) and
``/orders/{id}`` (a query of the request's session, never cached: the app's one uncached
read, so even a perfect cache leaves a tenth of the GETs to PostgreSQL)."""


# -- the database --------------------------------------------------------------------------


def seed_catalogue(dsn: str, catalogue: Catalogue, seed: int) -> None:
    """Create the example's tables from its own models and fill them (ids from 1, in
    insertion order), on a running stack as the example's README has it (``txcache up``,
    then the app creates its tables): the app then finds a catalogue and does not seed its
    five products."""
    from fastapi_shop.models import Base

    engine = sqlalchemy.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    Base.metadata.create_all(engine)
    engine.dispose()
    products, orders = catalogue.rows(seed, "product")
    with psycopg.connect(dsn) as db, db.cursor() as cursor:
        columns = "products (name, category, price_cents, stock)"
        with cursor.copy(f"COPY {columns} FROM STDIN") as copy:
            for product in products:
                copy.write_row(product)
        columns = "orders (customer, product_id, quantity, total_cents)"
        with cursor.copy(f"COPY {columns} FROM STDIN") as copy:
            for order in orders:
                copy.write_row(order)
    execute(dsn, "ANALYZE")


# -- the app and its load ------------------------------------------------------------------


def shop_server(stack: Stack, mode: str, output: Path, staleness: float) -> ShopServer:
    """The ``mode`` server, writing its log to ``output`` (it runs the app's ``prepare`` at
    start), its database connections named by :func:`application`."""
    dsn = make_conninfo(stack.dsn, application_name=application(mode))
    environment = {"TXCACHE_DSN": dsn, "TXCACHE_MODE": mode}
    return ShopServer(stack, output, staleness=staleness, environment=environment)


def request_mix(catalogue: Catalogue, exponent: float, seed: int) -> RequestMix:
    """The GETs of :data:`MIX`: products, categories and customers by Zipf popularity
    (:meth:`Catalogue.popularity`), orders uniformly (a customer opening one of theirs)."""
    product, category, customer = catalogue.popularity(exponent, seed)
    paths = {
        "product": lambda rng: f"/products/{product(rng)}",
        "category": lambda rng: f"/categories/{category(rng)}/products",
        "customer orders": lambda rng: f"/customers/{customer(rng)}/orders",
        "order": lambda rng: f"/orders/{rng.randrange(catalogue.orders) + 1}",
    }
    return RequestMix({kind: (share, paths[kind]) for kind, share in MIX.items()})


# -- the report ----------------------------------------------------------------------------


def server_note() -> str:
    """What uvicorn serves with: its event loop and HTTP parser are the fastest installed
    (``--loop auto --http auto``)."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    parser = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"uvicorn, 1 worker ({loop} event loop, {parser} HTTP parser)"


def markdown(raw: Mapping[str, Any], name: str, plotted: bool) -> list[str]:
    """The report's body."""
    args, catalogue = raw["settings"], Catalogue.of(raw)
    mix = ", ".join(f"{share} % {kind}" for kind, share in raw["mix"].items())
    return [
        f"The example app (`examples/fastapi_shop`) under {server_note()}, twice side by side "
        "on one stack (one node, the agent with its default settings): `TXCACHE_MODE="
        "consistent` (as it ships) and `TXCACHE_MODE=bypass` (the same app, no cache: every "
        f"GET reads PostgreSQL). `SHOP_STALENESS={args['staleness']:g}`, the library's "
        "default pool (10 connections).",
        "",
        f"- catalogue: {num(catalogue.items)} products in {catalogue.categories} categories "
        f"({catalogue.items // catalogue.categories} each), {num(catalogue.orders)} orders "
        f"of {num(catalogue.customers)} customers",
        *method_lines(
            args,
            f"{mix} (`/orders/{{id}}` is the app's one uncached read); products, categories "
            f"and customers by Zipf({args['zipf']:g}) popularity, orders uniformly",
        ),
        "",
        *results(raw["rounds"], name, plotted, "one worker, one event loop: at most one CPU"),
    ]


# -- main ----------------------------------------------------------------------------------


TITLE = "FastAPI example: GET throughput with and without txcache"


def main() -> None:
    """Seed, start the stack and both servers, measure, write the report."""
    parser = options(__doc__.split("\n\n")[0], "a smaller catalogue, 3 s warm-up, 2 rounds of 5 s")
    args = parser.parse_args()
    if args.render:
        render(args.render, TITLE, markdown)
        return
    catalogue = FULL
    if args.quick:
        catalogue, args.warmup, args.rounds, args.seconds = QUICK, 3.0, 2, 5.0
    with postgres(args.storage) as server:
        dsn = create_database(server, "shop")
        note = machine_note(database_note(dsn, args.storage))
        with bench_stack(dsn) as stack:
            seed_catalogue(dsn, catalogue, args.seed)
            stack.caught_up(timeout=120)  # the seed's commits decoded before any request
            log(f"seeded {num(catalogue.items)} products, {num(catalogue.orders)} orders")
            with (
                servers(lambda mode, path: shop_server(stack, mode, path, args.staleness)) as shops,
                psycopg.connect(dsn, autocommit=True) as admin,
            ):
                apps = {mode: App(shop.url, (shop.pid,)) for mode, shop in shops.items()}
                mix = request_mix(catalogue, args.zipf, args.seed)
                bench = Bench(server, stack, admin, apps, mix, args.concurrency)
                raw = measure(bench, args)
    raw = {"settings": vars(args), "catalogue": asdict(catalogue), "mix": MIX, **raw}
    extra = [f"c{args.concurrency}"] if args.concurrency != 16 else []
    name = result_name("fastapi_throughput", args.quick, args.storage, *extra)
    log(f"report: {write(raw, name, TITLE, note, markdown)}")


if __name__ == "__main__":
    main()
