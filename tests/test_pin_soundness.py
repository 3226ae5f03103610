"""Differential soundness test of whole read-only transactions at old pins, with schema
changes in the write mix (docs/library.md "Read-only safety", docs/agent.md "Pins" and
"Schema changes", docs/sql-tags.md "Schema changes").

A world of plain tables (indexed and unindexed columns), a view over two of them, a
partitioned table of three partitions and an inheritance tree, and a set of queries of
different shapes over it, each run through one generic cacheable function ``rows_of``.
Every round applies one random operation through a read/write transaction: mostly data
writes (updates of indexed columns and partition keys included), one in four a schema
change — a view redefined, a partition detached or attached again (the one queries name
directly or another), a partition or a table truncated and reloaded in the same
transaction, a partition dropped and created again with its rows, a column's type changed
(a rewrite), an index created or dropped on a queried column, row-level security toggled on
(and off again by the next operation), a safe function redefined.

References: once the nodes applied the operation and the library knows a pin after it,
every pin the agent lists that has no reference yet is imported on a plain connection and
every query is run there. That is the answer at the pin's commit point only while no later
TRUNCATE, rewrite or DDL exists — the hazard under test — so references are taken while the
pin is fresh (the agent lists no pin older than the newest schema change or TRUNCATE; the
test checks that too).

Reads: read-only transactions with the public policy ``txcache.oldest_pin`` (as stale as
``staleness=60`` allows) call ``rows_of`` for one to three queries. Checked, per
transaction: (1) every value equals the reference at the pin it ran at (every pin of its
final pin set, if it only hit the cache); (2) the version the owning node holds for each
value is valid over an interval ``[lo, hi)`` — every referenced pin in it must have the
same answer. At the end every query's key is looked up at every referenced pin, which
checks every version the nodes hold against every reference. ``SnapshotUnavailable`` is
retried once and counted; ``UncacheableQuery`` is expected (and counted) exactly for
queries that read a table with row-level security on.

``TXCACHE_PIN_SOUNDNESS_ROUNDS``, ``…_SEED`` and ``…_SECONDS`` run it longer to hunt bugs.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql

import txcache
from conftest import running_agent
from library_fixtures import LibraryStack

SEED = int(os.environ.get("TXCACHE_PIN_SOUNDNESS_SEED", "2010"))
ROUNDS = int(os.environ.get("TXCACHE_PIN_SOUNDNESS_ROUNDS", "500"))
SECONDS = float(os.environ.get("TXCACHE_PIN_SOUNDNESS_SECONDS", "25"))
SCHEMA_SHARE = 0.25
TRANSACTIONS_PER_ROUND = 3

Rows = list[tuple[Any, ...]]

VIEW_DEFINITIONS = [
    "SELECT o.id, o.item_id, o.qty, i.category FROM orders o JOIN items i ON i.id = o.item_id "
    f"WHERE o.qty >= {least}"
    for least in (2, 3)
]
PARTITIONS = {"events_low": (0, 10), "events_mid": (10, 20), "events_high": (20, 30)}
EVENTS = frozenset({"events", *PARTITIONS})
QUERIED_PARTITION = "events_mid"  # the partition a query names directly
TABLES = frozenset({"items", "users", "orders", "animals", "cats", *EVENTS})
PARTITION_DDL = "".join(
    f"CREATE TABLE {name} PARTITION OF events FOR VALUES FROM ({lo}) TO ({hi});"
    for name, (lo, hi) in PARTITIONS.items()
)
# The world besides the library stack's ``items`` and ``users``: created through DDL the
# agent sees.
WORLD = f"""
CREATE TABLE orders (id integer PRIMARY KEY, item_id integer NOT NULL,
                     user_id integer NOT NULL, qty integer NOT NULL);
CREATE INDEX orders_item_idx ON orders (item_id);
INSERT INTO orders SELECT i, 1 + i % 20, 1 + i % 5, 1 + i % 4 FROM generate_series(1, 30) i;
CREATE VIEW big_orders AS {VIEW_DEFINITIONS[0]};
CREATE TABLE events (k integer NOT NULL, v integer NOT NULL) PARTITION BY RANGE (k);
{PARTITION_DDL}
CREATE INDEX events_v_idx ON events (v);
INSERT INTO events SELECT i % 30, i FROM generate_series(0, 44) i;
CREATE TABLE animals (id integer PRIMARY KEY, kind integer NOT NULL, weight integer NOT NULL);
CREATE INDEX animals_kind_idx ON animals (kind);
CREATE TABLE cats (lives integer NOT NULL DEFAULT 9) INHERITS (animals);
INSERT INTO animals SELECT i, i % 3, 10 + i FROM generate_series(1, 8) i;
INSERT INTO cats (id, kind, weight) SELECT i, i % 3, i - 100 FROM generate_series(101, 108) i;
CREATE FUNCTION twice(bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS 'SELECT 2 * $1';
"""


@dataclass(frozen=True)
class Query:
    """One query with its parameters, and the tables it reads (row-level security on any of
    them makes it uncacheable)."""

    sql: str
    params: tuple[Any, ...]
    tables: frozenset[str]

    def __str__(self) -> str:
        return f"{self.sql} {list(self.params)}"


def query_set() -> list[Query]:
    """Every query the reads may ask, each with the parameters it is asked with."""
    items, orders, users = frozenset({"items"}), frozenset({"orders"}), frozenset({"users"})
    animals = frozenset({"animals", "cats"})
    shapes: list[tuple[str, list[tuple[Any, ...]], frozenset[str]]] = [
        # equalities: primary key, indexed, unindexed (an index comes and goes on name)
        ("SELECT id, name, price FROM items WHERE id = %s", [(3,), (7,), (12,)], items),
        ("SELECT id, price FROM items WHERE category = %s", [(0,), (1,), (2,)], items),
        ("SELECT id FROM items WHERE name = %s", [("item 5",), ("item 9",)], items),
        ("SELECT name FROM users WHERE id = %s", [(2,), (4,)], users),
        # ranges and aggregates
        ("SELECT id, price FROM items WHERE price BETWEEN %s AND %s", [(20, 60), (90, 200)], items),
        ("SELECT count(*), coalesce(sum(price), 0) FROM items", [()], items),
        ("SELECT item_id, sum(qty) FROM orders GROUP BY item_id", [()], orders),
        # joins (user_id: an index comes and goes on it)
        (
            "SELECT o.id, i.name FROM orders o JOIN items i ON i.id = o.item_id "
            "WHERE o.user_id = %s",
            [(1,), (3,)],
            orders | items,
        ),
        ("SELECT id, qty FROM orders WHERE item_id = %s", [(2,), (5,)], orders),
        (
            "SELECT u.name, count(o.id) FROM users u LEFT JOIN orders o ON o.user_id = u.id "
            "GROUP BY u.name",
            [()],
            users | orders,
        ),
        # through the view
        ("SELECT id, item_id FROM big_orders WHERE category = %s", [(0,), (2,)], orders | items),
        ("SELECT count(*), coalesce(sum(qty), 0) FROM big_orders", [()], orders | items),
        # the partitioned root, and one partition
        ("SELECT k, v FROM events WHERE k = %s", [(4,), (15,), (25,)], EVENTS),
        ("SELECT count(*), coalesce(sum(v), 0) FROM events WHERE v >= %s", [(0,), (20,)], EVENTS),
        (
            f"SELECT k, v FROM {QUERIED_PARTITION} WHERE v < %s",
            [(40,)],
            frozenset({QUERIED_PARTITION}),
        ),
        # the inheritance parent (and its child)
        ("SELECT id, weight FROM animals WHERE kind = %s", [(0,), (1,)], animals),
        (
            "SELECT count(*), coalesce(sum(weight), 0) FROM animals WHERE weight > %s",
            [(5,)],
            animals,
        ),
        # a safe function
        ("SELECT id, twice(price) FROM items WHERE category = %s", [(1,)], items),
    ]
    return [Query(text, params, tables) for text, choices, tables in shapes for params in choices]


@txcache.cacheable
def rows_of(statement: str, *params: object) -> Rows:
    return sorted(tuple(row) for row in txcache.query(statement, params))


# -- the world's state and the operations on it -------------------------------------------


@dataclass
class World:
    """What the schema changes toggle, so each next one knows what to undo."""

    view: int = 0  # which of VIEW_DEFINITIONS is in force
    detached: str | None = None  # a partition detached from events
    price_type: str = "integer"
    indexes: dict[str, bool] = field(
        default_factory=lambda: {"orders_user_idx": False, "items_name_idx": False}
    )
    rls: str | None = None  # the table with row-level security on
    factor: int = 2  # twice() multiplies by this

    def attached(self) -> list[str]:
        return [name for name in PARTITIONS if name != self.detached]


@dataclass(frozen=True)
class Operation:
    round: int
    kind: str  # "write" or the kind of schema change
    text: str
    token: int

    def __str__(self) -> str:
        return f"round {self.round} @{self.token}: [{self.kind}] {self.text}"

    def tables(self) -> frozenset[str]:
        """The tables the operation names; a write through the root may reach every
        partition, and the safe function is read with ``items``."""
        names = set(re.findall(r"\w+", self.text)) & TABLES
        if "events" in names:
            names.update(PARTITIONS)
        if "twice" in self.text:
            names.add("items")
        return frozenset(names)


Tx = txcache.ReadWriteTransaction


def data_write(tx: Tx, world: World, rng: random.Random) -> str:
    """One random insert, update or delete (possibly of nothing: the caller retries)."""
    table = rng.choice(["items", "items", "orders", "orders", "users", "events", "part", "animals"])
    action = rng.random()
    if table == "items":
        key = rng.randint(1, 30)
        if action < 0.25:
            price, category = 10 * rng.randint(1, 25), rng.randint(0, 2)
            return run(
                tx,
                "INSERT INTO items VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                key,
                f"item {key}",
                price,
                category,
            )
        if action < 0.85:
            column, value = rng.choice(
                [
                    ("price", 10 * rng.randint(1, 25)),
                    ("category", rng.randint(0, 2)),  # indexed
                    ("name", f"item {rng.choice([5, 9, 11])}"),
                ]
            )
            return run(tx, f"UPDATE items SET {column} = %s WHERE id = %s", value, key)
        return run(tx, "DELETE FROM items WHERE id = %s", key)
    if table == "orders":
        key = rng.randint(1, 40)
        if action < 0.3:
            values = (key, rng.randint(1, 20), rng.randint(1, 5), rng.randint(1, 4))
            return run(
                tx, "INSERT INTO orders VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", *values
            )
        if action < 0.8:
            column, value = rng.choice(
                [
                    ("qty", rng.randint(1, 4)),
                    ("item_id", rng.randint(1, 20)),
                    ("user_id", rng.randint(1, 5)),
                ]
            )
            return run(tx, f"UPDATE orders SET {column} = %s WHERE id = %s", value, key)
        return run(tx, "DELETE FROM orders WHERE id = %s", key)
    if table == "users":
        key = rng.randint(1, 7)
        if action < 0.3:
            return run(
                tx, "INSERT INTO users VALUES (%s, %s) ON CONFLICT DO NOTHING", key, f"u{key}"
            )
        if action < 0.8:
            return run(
                tx, "UPDATE users SET name = %s WHERE id = %s", f"user {rng.randint(1, 9)}", key
            )
        return run(tx, "DELETE FROM users WHERE id = %s", key)
    if table == "events":
        lo, hi = PARTITIONS[rng.choice(world.attached())]
        k = rng.randrange(lo, hi)
        if action < 0.3:
            return run(tx, "INSERT INTO events VALUES (%s, %s)", k, rng.randint(0, 60))
        if action < 0.55:
            return run(tx, "UPDATE events SET v = %s WHERE k = %s", rng.randint(0, 60), k)
        if action < 0.8:  # the partition key: rows move between partitions
            return run(tx, "UPDATE events SET k = %s WHERE k = %s", k, rng.randrange(30))
        return run(tx, "DELETE FROM events WHERE k = %s", rng.randrange(30))
    if table == "part":  # a partition written directly, attached or not
        name = rng.choice(list(PARTITIONS))
        lo, hi = PARTITIONS[name]
        return run(
            tx, f"INSERT INTO {name} VALUES (%s, %s)", rng.randrange(lo, hi), rng.randint(0, 60)
        )
    target = rng.choice(["animals", "cats"])
    key = rng.randint(1, 10) + (100 if target == "cats" else 0)
    if action < 0.3:
        animal = (key, rng.randint(0, 2), rng.randint(1, 20))
        return run(tx, f"INSERT INTO {target} VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", *animal)
    if action < 0.8:
        column, value = rng.choice([("kind", rng.randint(0, 2)), ("weight", rng.randint(1, 20))])
        return run(tx, f"UPDATE {target} SET {column} = %s WHERE id = %s", value, key)
    return run(tx, f"DELETE FROM {target} WHERE id = %s", key)


def data_change(tx: Tx, world: World, rng: random.Random) -> tuple[str, str]:
    return "write", data_write(tx, world, rng)


def run(tx: Tx, statement: str, *params: object) -> str:
    tx.execute(statement, params)
    return f"{statement} {list(params)}"


def reload(tx: Tx, table: str, rng: random.Random, truncate: str) -> str:
    """Read ``table``'s rows, run ``truncate`` (which empties it), and load them back — one
    fewer half of the time."""
    rows = tx.execute(f"SELECT * FROM {table}").fetchall()
    tx.execute(truncate)
    if rows and rng.random() < 0.5:
        rows.pop(rng.randrange(len(rows)))
    if rows:
        one = f"({', '.join(['%s'] * len(rows[0]))})"
        values = [value for row in rows for value in row]
        tx.execute(f"INSERT INTO {table} VALUES {', '.join([one] * len(rows))}", values)
    return f"{truncate}; reloaded {len(rows)} rows"


def schema_change(tx: Tx, world: World, rng: random.Random) -> tuple[str, str]:
    """One random schema change (``(kind, description)``); the world records it."""
    kind = rng.choice(
        [
            "view redefined",
            "partition detached/attached",
            "partition truncated and reloaded",
            "table truncated and reloaded",
            "partition dropped and re-created",
            "column type changed",
            "index created/dropped",
            "row-level security on",
            "function redefined",
        ]
    )
    if kind == "view redefined":
        world.view = 1 - world.view
        statement = f"CREATE OR REPLACE VIEW big_orders AS {VIEW_DEFINITIONS[world.view]}"
        return kind, run(tx, statement)
    if kind == "partition detached/attached":
        if world.detached is not None:
            name, (lo, hi) = world.detached, PARTITIONS[world.detached]
            world.detached = None
            statement = (
                f"ALTER TABLE events ATTACH PARTITION {name} FOR VALUES FROM ({lo}) TO ({hi})"
            )
            return kind, run(tx, statement)
        world.detached = rng.choice(list(PARTITIONS))
        return kind, run(tx, f"ALTER TABLE events DETACH PARTITION {world.detached}")
    if kind == "partition truncated and reloaded":
        name = rng.choice(list(PARTITIONS))
        return kind, reload(tx, name, rng, f"TRUNCATE {name}")
    if kind == "table truncated and reloaded":
        name = rng.choice(["items", "orders", "users", "cats"])
        return kind, reload(tx, name, rng, f"TRUNCATE {name}")
    if kind == "partition dropped and re-created":
        name = rng.choice(world.attached())
        lo, hi = PARTITIONS[name]
        rows = tx.execute(f"SELECT * FROM {name}").fetchall()
        tx.execute(f"DROP TABLE {name}")
        tx.execute(f"CREATE TABLE {name} PARTITION OF events FOR VALUES FROM ({lo}) TO ({hi})")
        for row in rows:
            tx.execute(f"INSERT INTO {name} VALUES (%s, %s)", row)
        return (
            kind,
            f"DROP TABLE {name}; CREATE TABLE {name} PARTITION OF events …; {len(rows)} rows",
        )
    if kind == "column type changed":
        world.price_type = "bigint" if world.price_type == "integer" else "integer"
        return kind, run(tx, f"ALTER TABLE items ALTER COLUMN price TYPE {world.price_type}")
    if kind == "index created/dropped":
        name = rng.choice(sorted(world.indexes))
        world.indexes[name] = not world.indexes[name]
        if not world.indexes[name]:
            return kind, run(tx, f"DROP INDEX {name}")
        target = "orders (user_id)" if name == "orders_user_idx" else "items (name)"
        return kind, run(tx, f"CREATE INDEX {name} ON {target}")
    if kind == "row-level security on":
        world.rls = rng.choice(["users", "orders", "animals"])
        return kind, run(tx, f"ALTER TABLE {world.rls} ENABLE ROW LEVEL SECURITY")
    world.factor = 5 - world.factor  # 2 <-> 3
    statement = (
        "CREATE OR REPLACE FUNCTION twice(bigint) RETURNS bigint LANGUAGE sql IMMUTABLE "
        f"AS 'SELECT {world.factor} * $1'"
    )
    return kind, run(tx, statement)


def rls_off(tx: Tx, world: World, _rng: random.Random) -> tuple[str, str]:
    table, world.rls = world.rls, None
    return "row-level security off", run(tx, f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")


# -- references ------------------------------------------------------------------------------


class References:
    """The answer of every query at each referenced pin, by the pin's timestamp, computed on
    a plain connection that imports the pin's snapshot."""

    def __init__(self, dsn: str, queries: list[Query]) -> None:
        self.connection = psycopg.connect(dsn, autocommit=True, prepare_threshold=None)
        self.queries = queries
        self.answers: dict[int, dict[Query, Rows]] = {}
        self.timestamps: list[int] = []  # sorted

    def close(self) -> None:
        self.connection.close()

    def take(self, ts: int, snapshot_id: str, snapshot_text: str | None) -> bool:
        """Reference the pin ``ts`` (unless it is already); ``False`` if its snapshot can no
        longer be imported."""
        if ts in self.answers:
            return True
        conn = self.connection
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_id)))
        except psycopg.Error:
            conn.execute("ROLLBACK")
            return False
        try:
            row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
            assert row is not None
            if snapshot_text is not None and row[0] != snapshot_text:
                return False  # the id names another snapshot now
            self._store(ts, self.run_all())
        finally:
            conn.execute("ROLLBACK")
        return True

    def current(self) -> dict[Query, Rows]:
        """Every answer on a snapshot of its own (nothing writes while reads run)."""
        conn = self.connection
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            return self.run_all()
        finally:
            conn.execute("ROLLBACK")

    def run_all(self) -> dict[Query, Rows]:
        cursors = []
        with self.connection.pipeline():
            for query in self.queries:
                cursor = self.connection.cursor()
                cursor.execute(query.sql, query.params)
                cursors.append(cursor)
        return {
            query: sorted(tuple(row) for row in cursor.fetchall())
            for query, cursor in zip(self.queries, cursors, strict=True)
        }

    def _store(self, ts: int, answers: dict[Query, Rows]) -> None:
        self.answers[ts] = answers
        bisect.insort(self.timestamps, ts)

    def within(self, lo: int, hi: int) -> list[int]:
        """The referenced timestamps in ``[lo, hi)``."""
        return self.timestamps[
            bisect.bisect_left(self.timestamps, lo) : bisect.bisect_left(self.timestamps, hi)
        ]


# -- the test --------------------------------------------------------------------------------


@dataclass
class Stats:
    rounds: int = 0
    writes: int = 0
    schema_changes: Counter[str] = field(default_factory=Counter)
    transactions: int = 0
    calls: int = 0
    hits: int = 0
    all_hit_transactions: int = 0
    moves: int = 0
    unpinned: int = 0
    values_checked: int = 0  # against the reference at the pin the transaction ran at
    stored_checked: int = 0  # values whose stored interval was checked
    interval_comparisons: int = 0  # (value, referenced pin in its stored interval) pairs
    not_stored: int = 0
    sweep_comparisons: int = 0
    rls_refusals: int = 0
    snapshot_unavailable: int = 0
    failures: list[str] = field(default_factory=list)


@dataclass
class Run:
    """Everything a round needs."""

    lib: LibraryStack
    world: World
    references: References
    queries: list[Query]
    rng: random.Random
    stats: Stats
    agent: redis.Redis
    nodes: dict[str, redis.Redis]
    history: list[Operation] = field(default_factory=list)
    barrier: int = 0  # the commit of the newest schema change or TRUNCATE
    recent: list[Query] = field(default_factory=list)

    def fail(
        self,
        round_: int,
        what: str,
        span: tuple[int, int] | None = None,
        query: Query | None = None,
    ) -> None:
        """Record a failure with the operations around it: the last ones, or those from the
        last before ``span`` to its end that changed the schema or named ``query``'s tables."""
        operations = self.history[-6:]
        if span is not None:
            tokens = [op.token for op in self.history]
            start = max(bisect.bisect_right(tokens, span[0]) - 1, 0)
            operations = [
                op
                for op in self.history[start : bisect.bisect_right(tokens, span[1])]
                if query is None or op.kind != "write" or op.tables() & query.tables
            ][:12]
        ops = "\n    ".join(str(op) for op in operations)
        self.stats.failures.append(f"seed {SEED}, round {round_}: {what}\n  operations:\n    {ops}")


@pytest.fixture
def lib(database: str) -> Iterator[LibraryStack]:
    """The library stack, with ``twice`` declared safe for cacheable queries, and the world
    created through DDL the agent sees."""
    with LibraryStack(database, safe_functions=["twice"]) as stack:
        stack.admin.execute(WORLD)
        stack.caught_up()
        stack.fresh_pins()
        yield stack


def test_reads_at_old_pins_match_the_database_at_those_pins(lib: LibraryStack) -> None:
    lib.cache.policy = txcache.oldest_pin
    queries = query_set()
    references = References(lib.dsn, queries)
    process = running_agent(lib)
    agent = redis.Redis(host=process.host, port=process.port, protocol=2)
    nodes = {n.address: redis.Redis(host=n.host, port=n.port, protocol=2) for n in lib.nodes}
    state = Run(lib, World(), references, queries, random.Random(SEED), Stats(), agent, nodes)
    deadline = time.monotonic() + SECONDS  # the test's time budget: rounds until then
    try:
        reference_listed_pins(state, 0)
        for round_ in range(ROUNDS):
            if time.monotonic() > deadline:
                break
            play_round(state, round_)
            if len(state.stats.failures) >= 5:
                break
        sweep(state)
    finally:
        references.close()
        agent.close()
        for client in nodes.values():
            client.close()
    report(state.stats, references)
    assert not state.stats.failures, "\n\n".join(state.stats.failures[:5])
    assert state.stats.stored_checked > 0
    assert state.stats.hits > 0


def report(stats: Stats, references: References) -> None:
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(stats.schema_changes.items()))
    print(
        f"\npin soundness (seed {SEED}): {stats.rounds} rounds, {stats.writes} data writes, "
        f"{stats.schema_changes.total()} schema changes ({kinds}); "
        f"{stats.transactions} transactions ({stats.all_hit_transactions} all hits, "
        f"{stats.moves} moves, {stats.unpinned} unpinned), {stats.calls} calls, "
        f"{stats.hits} hits; {stats.values_checked} values checked at their pin, "
        f"{stats.stored_checked} against their stored interval "
        f"({stats.interval_comparisons} pin comparisons, {stats.not_stored} not stored); "
        f"final sweep {stats.sweep_comparisons} comparisons; {len(references.timestamps)} "
        f"pins referenced; {stats.rls_refusals} refused for row-level security, "
        f"{stats.snapshot_unavailable} SnapshotUnavailable"
    )


def play_round(state: Run, round_: int) -> None:
    """One operation, the references it makes possible, then the reads and their checks."""
    state.stats.rounds += 1
    operation = apply_operation(state, round_)
    state.history.append(operation)
    if operation.kind != "write":
        state.barrier = operation.token
    state.lib.caught_up()
    state.lib.fresh_pins(after=operation.token - 1)
    reference_listed_pins(state, round_)
    for _ in range(TRANSACTIONS_PER_ROUND):
        picks = pick_queries(state)
        read_and_check(state, round_, picks)
    reference_listed_pins(state, round_)  # pins taken meanwhile, before the next operation


def apply_operation(state: Run, round_: int) -> Operation:
    """Commit one random operation — a schema change with probability ``SCHEMA_SHARE``,
    else a data write; row-level security is switched off right after it was switched on —
    retried with another choice of the same category when it wrote nothing or failed."""
    world, rng = state.world, state.rng
    change: Callable[[Tx, World, random.Random], tuple[str, str]] = data_change
    if world.rls is not None:
        change = rls_off
    elif rng.random() < SCHEMA_SHARE:
        change = schema_change
    for _ in range(50):
        saved = dataclasses.replace(world, indexes=dict(world.indexes))
        try:
            with state.lib.cache.read_write() as tx:
                kind, text = change(tx, world, rng)
        except psycopg.Error:  # e.g. a key not unique: the block was rolled back
            vars(world).update(vars(saved))
            continue
        token = tx.commit_timestamp
        if token is None:  # it matched no row
            continue
        if kind == "write":
            state.stats.writes += 1
        else:
            state.stats.schema_changes[kind] += 1
        return Operation(round_, kind, text, token)
    raise AssertionError("no operation could be applied in 50 attempts")


def reference_listed_pins(state: Run, round_: int) -> None:
    """Reference every pin the agent lists that has none yet; none may be older than the
    newest barrier."""
    for ts, snapshot_id, _current_as_of, *rest in state.agent.execute_command("PINS"):
        if ts in state.references.answers:
            continue
        if ts < state.barrier:
            state.fail(
                round_, f"the agent lists pin {ts}, older than the barrier at {state.barrier}"
            )
            continue
        text = rest[0].decode() if rest else None
        state.references.take(ts, snapshot_id.decode(), text)


def pick_queries(state: Run) -> list[Query]:
    """One to three queries, each drawn from those that read a table the last operation
    named (a third of the time), those read lately (so that hits happen), or all."""
    touched = state.history[-1].tables() if state.history else frozenset()
    focus = [query for query in state.queries if query.tables & touched]
    picks = []
    for _ in range(state.rng.randint(1, 3)):
        draw = state.rng.random()
        if draw < 1 / 3 and focus:
            picks.append(state.rng.choice(focus))
        elif draw < 2 / 3 and state.recent:
            picks.append(state.rng.choice(state.recent))
        else:
            picks.append(state.rng.choice(state.queries))
    state.recent = (state.recent + picks)[-8:]
    return picks


@dataclass
class Outcome:
    """What one read-only transaction returned and where it ran."""

    values: list[tuple[Query, Rows]]
    snapshot: txcache.Pin | None
    pins: list[txcache.Pin]
    uncached: bool
    moves: int


def read_and_check(state: Run, round_: int, picks: list[Query]) -> None:
    for attempt in range(2):
        try:
            outcome = read(state, round_, picks)
        except txcache.SnapshotUnavailable:
            state.stats.snapshot_unavailable += 1
            if attempt == 0:
                continue
            return
        check(state, round_, outcome)
        return


def read(state: Run, round_: int, picks: list[Query]) -> Outcome:
    """One read-only transaction at the oldest pin it may use, calling ``rows_of`` for
    ``picks``; a refusal is expected exactly for queries reading the table with row-level
    security on."""
    stats = state.stats
    values = []
    with state.lib.cache.read_only(staleness=60) as tx:
        for query in picks:
            hits = rows_of.stats.hits
            try:
                value = rows_of(query.sql, *query.params)
            except txcache.UncacheableQuery:
                if state.world.rls in query.tables:
                    stats.rls_refusals += 1
                    continue
                raise
            if state.world.rls in query.tables:
                state.fail(round_, f"{query} was served with row-level security on")
            stats.calls += 1
            stats.hits += rows_of.stats.hits - hits
            values.append((query, value))
    stats.transactions += 1
    return Outcome(values, tx.snapshot, tx.pin_set.pins, tx.uncached, tx.moves)


def check(state: Run, round_: int, outcome: Outcome) -> None:
    """(1) every value equals the reference where the transaction ran; (2) the version the
    owning node holds agrees with every reference in its interval."""
    stats, references = state.stats, state.references
    stats.moves += outcome.moves
    if not outcome.values:
        return
    if outcome.snapshot is None and outcome.uncached:  # on a snapshot of its own, now
        stats.unpinned += 1
        now = references.current()
        for query, value in outcome.values:
            stats.values_checked += 1
            if now[query] != value:
                state.fail(round_, f"unpinned read of {query}: {value}, the database {now[query]}")
        return
    if outcome.snapshot is not None:
        points = [outcome.snapshot]
    else:
        stats.all_hit_transactions += 1
        points = outcome.pins
    for pin in points:
        if not referenced(state, round_, pin):
            continue
        answers = references.answers[pin.ts]
        for query, value in outcome.values:
            stats.values_checked += 1
            if answers[query] != value:
                state.fail(
                    round_,
                    f"a transaction at pin {pin.ts} read {query}:\n  got       {value}\n"
                    f"  reference {answers[query]}",
                )
    for query, value in outcome.values:
        check_stored(state, round_, query, value, points[0].ts)


def referenced(state: Run, round_: int, pin: txcache.Pin) -> bool:
    """Whether ``pin`` has a reference, taking it now if needed (a ★ pin, or one listed
    since): nothing was written since the operation, so it is still fresh."""
    if pin.ts in state.references.answers:
        return True
    if pin.ts < state.barrier:
        state.fail(
            round_, f"a transaction ran at pin {pin.ts}, older than the barrier at {state.barrier}"
        )
        return False
    return state.references.take(pin.ts, pin.snapshot_id, pin.snapshot_text)


def node_of(state: Run, query: Query) -> tuple[bytes, redis.Redis]:
    key = rows_of.key(query.sql, *query.params)
    assert state.lib.cache.ring is not None
    return key, state.nodes[state.lib.cache.ring.node_for(key).address]


def check_stored(state: Run, round_: int, query: Query, value: Rows, ts: int) -> None:
    """The version of ``query`` the node holds at ``ts`` must be ``value``, and every
    referenced pin in its interval must have the same answer."""
    key, node = node_of(state, query)
    reply = node.execute_command("TXGET", key, ts, ts)
    if reply[0] is None:
        state.stats.not_stored += 1
        return
    stored = state.lib.cache.serializer.loads(reply[0], key=key)
    lo, hi, is_open = reply[1], reply[2], reply[3]
    state.stats.stored_checked += 1
    if stored != value:
        state.fail(round_, f"{query} at {ts}: read {value}, the node holds {stored} [{lo}, {hi})")
    for point in state.references.within(lo, hi):
        state.stats.interval_comparisons += 1
        reference = state.references.answers[point][query]
        if reference != stored:
            state.fail(
                round_,
                f"{query}: the node holds {stored} as valid over [{lo}, {hi}) "
                f"({'open' if is_open else 'closed'}), read at {ts}; at pin {point} the "
                f"database answered {reference}",
                (min(lo, point), max(ts, point)),
                query,
            )
            return


def sweep(state: Run) -> None:
    """Every query's version at every referenced pin, as the nodes hold them now, against
    the reference at that pin."""
    for query in state.queries:
        key, node = node_of(state, query)
        pipe = node.pipeline(transaction=False)
        for ts in state.references.timestamps:
            pipe.execute_command("TXGET", key, ts, ts)
        for ts, reply in zip(state.references.timestamps, pipe.execute(), strict=True):
            if reply[0] is None:
                continue
            state.stats.sweep_comparisons += 1
            stored = state.lib.cache.serializer.loads(reply[0], key=key)
            reference = state.references.answers[ts][query]
            if stored != reference:
                state.fail(
                    -1,
                    f"sweep: {query}: the node holds {stored} over [{reply[1]}, {reply[2]}); "
                    f"at pin {ts} the database answered {reference}",
                    (reply[1], reply[2]),
                    query,
                )
                break


def test_a_reattached_partition_invalidates_what_was_read_through_its_own_name(
    lib: LibraryStack,
) -> None:
    query = f"SELECT k, v FROM {QUERIED_PARTITION} WHERE v < %s"
    lo, hi = PARTITIONS[QUERIED_PARTITION]
    token = lib.commit(f"ALTER TABLE events DETACH PARTITION {QUERIED_PARTITION}")
    with lib.cache.read_only(staleness=60, not_before=token):
        rows_of(query, 40)  # cached, tagged with the detached table's own name
    lib.commit(
        f"ALTER TABLE events ATTACH PARTITION {QUERIED_PARTITION} FOR VALUES FROM ({lo}) TO ({hi})",
    )
    token = lib.commit("UPDATE events SET v = 99 WHERE k = 15")  # through the root
    with lib.cache.read_only(staleness=60, not_before=token):
        got = rows_of(query, 40)
    assert got == sorted(lib.admin.execute("SELECT k, v FROM events_mid WHERE v < 40").fetchall())
