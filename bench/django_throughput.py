"""The Django example's page throughput with txcache and without, and the database CPU per
request of each.

One stack (embedded PostgreSQL, one node, the agent) on a seeded catalogue, and the example
project (``examples/django_shop``) under granian twice, side by side: once as it ships
(``TXCACHE_MODE=consistent``) and once with ``TXCACHE_MODE=bypass``, the library's mode in
which every call runs against PostgreSQL (no cache at all) — the same views, the same
middleware, the same read-only transaction per GET. Each server is one granian worker
process with ``--threads`` blocking threads (WSGI), as the example's tests start it.

The database is the example's own: ``manage.py migrate`` creates its tables (every migration,
0002 included), then a catalogue replaces the six items of migration 0001
(:func:`seed_catalogue`).
A closed loop of ``--concurrency`` clients (keep-alive connections of a minimal HTTP/1.1
client in this process, :mod:`_http_load`) sends a fixed mix of the example's list and
detail pages with Zipf-distributed keys (:data:`MIX`). After an unmeasured warm-up of each
server, rounds alternate between them (the order flips every round, so drift falls on both
alike); each round gives requests/s, latency, and the CPU time of the database server (all
its processes, and the app's own backends alone), the app's processes, the node, the agent,
the load generator and the machine's other work. Ratios are taken round by round (the two
runs seconds apart) and over all rounds (:mod:`_app_throughput`, which
``fastapi_throughput.py`` shares).

    .venv/bin/python bench/django_throughput.py [--quick] [--storage disk|tmpfs]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg
from _app_throughput import (
    FULL,
    MODES,
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

sys.path.insert(0, str(REPO / "examples"))  # the example's launcher
from django_shop.server import DjangoShopServer

MIX = {"item": 70, "category": 15, "customer orders": 15}
"""Percent of requests per page: ``GET /items/{id}/`` (an item: a cached queryset and a
cacheable aggregate of its orders), ``/categories/{c}/`` (a category's items: a cacheable
``values()`` query) and ``/customers/{c}/orders`` (a customer's orders: a cacheable join).
Every GET page of the example but ``/items/``, which lists the whole catalogue unpaginated
— thousands of items a page, a page no shop serves on every visit."""


# -- the database --------------------------------------------------------------------------


def seed_catalogue(dsn: str, catalogue: Catalogue, seed: int) -> None:
    """Replace the migrated tables' rows by ``catalogue`` (ids from 1, in insertion order),
    and analyse them."""
    items, orders = catalogue.rows(seed, "Item")
    with psycopg.connect(dsn) as db, db.cursor() as cursor:
        cursor.execute("TRUNCATE shop_order, shop_item RESTART IDENTITY")
        columns = "shop_item (name, category, price_cents, stock)"
        with cursor.copy(f"COPY {columns} FROM STDIN") as copy:
            for item in items:
                copy.write_row(item)
        columns = "shop_order (customer, item_id, quantity, total_cents, created)"
        with cursor.copy(f"COPY {columns} FROM STDIN") as copy:
            for order in orders:
                copy.write_row((*order, "now"))  # created: as PostgreSQL reads the word
    execute(dsn, "ANALYZE shop_item, shop_order")


# -- the app and its load ------------------------------------------------------------------


def shop_server(
    stack: Stack, mode: str, output: Path, args: argparse.Namespace
) -> DjangoShopServer:
    """The ``mode`` server with ``--staleness`` and ``--threads``, writing its log to
    ``output``, its database connections (Django's own and txcache's pool: the example's
    settings pass ``TXCACHE_DSN``'s ``application_name`` on) named by :func:`application`."""
    dsn = make_conninfo(stack.dsn, application_name=application(mode))
    environment = {"TXCACHE_DSN": dsn, "TXCACHE_MODE": mode}
    return DjangoShopServer(
        stack, output, staleness=args.staleness, threads=args.threads, environment=environment
    )


def request_mix(catalogue: Catalogue, exponent: float, seed: int) -> RequestMix:
    """The GETs of :data:`MIX`: items, categories and customers by Zipf popularity
    (:meth:`Catalogue.popularity`)."""
    item, category, customer = catalogue.popularity(exponent, seed)
    paths = {
        "item": lambda rng: f"/items/{item(rng)}/",
        "category": lambda rng: f"/categories/{category(rng)}/",
        "customer orders": lambda rng: f"/customers/{customer(rng)}/orders",
    }
    return RequestMix({kind: (share, paths[kind]) for kind, share in MIX.items()})


# -- the report ----------------------------------------------------------------------------


def markdown(raw: Mapping[str, Any], name: str, plotted: bool) -> list[str]:
    """The report's body."""
    args, catalogue = raw["settings"], Catalogue.of(raw)
    mix = ", ".join(f"{share} % {kind}" for kind, share in raw["mix"].items())
    server = f"granian (WSGI), 1 worker process of {args['threads']} threads"
    return [
        f"The example project (`examples/django_shop`) under {server}, twice side by side on "
        "one stack (one node, the agent with its default settings): `TXCACHE_MODE="
        "consistent` (as it ships) and `TXCACHE_MODE=bypass` (the same site, no cache: every "
        f"page reads PostgreSQL). `SHOP_STALENESS={args['staleness']:g}`, the library's "
        "default pool (10 connections), `DEBUG` off.",
        "",
        f"- catalogue: the example's migrations, then {num(catalogue.items)} items in "
        f"{catalogue.categories} categories ({catalogue.items // catalogue.categories} "
        f"each), {num(catalogue.orders)} orders of {num(catalogue.customers)} customers",
        *method_lines(
            args,
            f"{mix} (`/items/{{id}}/`, `/categories/{{c}}/`, `/customers/{{c}}/orders`; every "
            "read is a cached queryset or a cacheable function: the item page makes two, the "
            "others one; `/items/`, the whole catalogue on one page, is left out); items, "
            f"categories and customers by Zipf({args['zipf']:g}) popularity",
        ),
        "",
        *results(
            raw["rounds"],
            name,
            plotted,
            "one granian worker process: its Python threads share one GIL, about one CPU",
        ),
    ]


# -- main ----------------------------------------------------------------------------------


TITLE = "Django example: page throughput with and without txcache"


def main() -> None:
    """Start the stack and both servers, migrate and seed, measure, write the report."""
    parser = options(__doc__.split("\n\n")[0], "a smaller catalogue, 3 s warm-up, 2 rounds of 5 s")
    parser.add_argument(
        "--threads", type=int, default=8, help="granian's blocking threads per server (8)"
    )
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
        with (
            bench_stack(dsn) as stack,
            servers(lambda mode, path: shop_server(stack, mode, path, args)) as shops,
            psycopg.connect(dsn, autocommit=True) as admin,
        ):
            # As the example's README: the stack up, then `manage.py migrate` (before any
            # page: the servers answer without a database until then).
            shops[MODES[0]].manage("migrate")
            seed_catalogue(dsn, catalogue, args.seed)
            stack.caught_up(timeout=120)  # the seed's commits decoded before any request
            log(f"seeded {num(catalogue.items)} items, {num(catalogue.orders)} orders")
            apps = {
                mode: App(shop.url, (shop.pid, *shop.worker_pids)) for mode, shop in shops.items()
            }
            mix = request_mix(catalogue, args.zipf, args.seed)
            raw = measure(Bench(server, stack, admin, apps, mix, args.concurrency), args)
    raw = {"settings": vars(args), "catalogue": asdict(catalogue), "mix": MIX, **raw}
    extra = [f"c{args.concurrency}"] if args.concurrency != 16 else []
    extra += [f"t{args.threads}"] if args.threads != 8 else []
    name = result_name("django_throughput", args.quick, args.storage, *extra)
    log(f"report: {write(raw, name, TITLE, note, markdown)}")


if __name__ == "__main__":
    main()
