"""Differential soundness test of SQL → tags against the real stack (docs/sql-tags.md).

Random tables (int, smallint, bigint, text, varchar, uuid, boolean, numeric, char(n),
timestamp, citext) with random indexes and data; random queries of every supported shape
(equalities, IN, ANY, ranges, OR, NOT, joins of every kind, subqueries, CTEs, unions, a view,
a partitioned table, an inheritance tree). Each round: analyse and run every query (R1),
register at the node one open *probe* per query carrying exactly its tags, apply one random
write, wait until the node has applied it, re-run every query (R2). Whenever R1 != R2 the
probe must have been truncated — some tag of the write matched a tag of the query —
otherwise the read side derived unsound tags. The over-invalidation rate (probes truncated
though the result did not change) is printed.

``TXCACHE_SOUNDNESS_ROUNDS``, ``…_SEED`` and ``…_SECONDS`` run it longer to hunt bugs.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import redis

from agent_fixtures import Stack
from conftest import running_agent
from txcache._schema import Schema, tag_columns_at
from txcache._sql import UncacheableQuery, analyze

SEED = int(os.environ.get("TXCACHE_SOUNDNESS_SEED", "1729"))
ROUNDS = int(os.environ.get("TXCACHE_SOUNDNESS_ROUNDS", "360"))
SECONDS = float(os.environ.get("TXCACHE_SOUNDNESS_SECONDS", "30"))
QUERIES_PER_ROUND = 24
TABLES = 4

UUIDS = [uuid.UUID(f"0ebd4e4b-aaaa-4bbb-8ccc-dddddddddde{n}") for n in range(3)]
STAMPS = [dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 2), dt.datetime(2025, 6, 1, 8, 30)]
DOMAINS: dict[str, list[Any]] = {
    "int": [0, 1, 2, 3, 4],
    "text": ["a", "b", "A", "a ", "ab"],
    "uuid": UUIDS,
    "bool": [True, False],
    "numeric": [Decimal("1"), Decimal("1.5"), Decimal("2.00")],
    "char": ["ab", "ab  ", "x"],
    "timestamp": STAMPS,
}
# column → (SQL type, value domain)
COLUMNS = {
    "a": ("int", "int"),
    "s": ("smallint", "int"),
    "b": ("bigint", "int"),
    "t": ("text", "text"),
    "v": ("varchar(8)", "text"),
    "u": ("uuid", "uuid"),
    "f": ("boolean", "bool"),
    "n": ("numeric(6, 2)", "numeric"),
    "c": ("char(4)", "char"),
    "ts": ("timestamp", "timestamp"),
    "ci": ("citext", "text"),
}


@dataclass
class World:
    """The random schema: every table's columns (``id`` first), and the other relations."""

    tables: dict[str, list[str]] = field(default_factory=dict)
    indexed: set[tuple[str, str]] = field(default_factory=set)


def domain(column: str) -> str:
    return COLUMNS[column][1] if column in COLUMNS else "int"


def create_schema(db: psycopg.Connection, rng: random.Random) -> World:
    try:
        db.execute("CREATE EXTENSION citext")
        pool = list(COLUMNS)
    except psycopg.errors.FeatureNotSupported:
        pool = [c for c in COLUMNS if c != "ci"]
    world = World()
    chosen = [set(rng.sample(pool, rng.randint(4, 7))) for _ in range(TABLES)]
    for column in pool:  # every type in at least two tables
        while sum(column in columns for columns in chosen) < 2:
            rng.choice(chosen).add(column)
    for n, names in enumerate(chosen):
        columns = ["id", *sorted(names, key=pool.index)]
        world.tables[f"t{n}"] = columns
        body = ", ".join(f"{c} {COLUMNS[c][0]}" for c in columns[1:])
        db.execute(f"CREATE TABLE t{n} (id int PRIMARY KEY, {body})")
    world.tables["p"] = ["id", "k", "a", "t"]
    world.tables["h"] = ["id", "a", "t"]
    world.tables["hc"] = ["id", "a", "t", "x"]
    db.execute(
        "CREATE TABLE p (id int, k int, a int, t text) PARTITION BY LIST (k);"
        "CREATE TABLE p_low PARTITION OF p FOR VALUES IN (0, 1);"
        "CREATE TABLE p_high PARTITION OF p DEFAULT;"
        "CREATE TABLE h (id int PRIMARY KEY, a int, t text);"
        "CREATE TABLE hc (x int) INHERITS (h);"
        "CREATE INDEX ON hc (id);"
    )
    for table, columns in world.tables.items():
        for column in columns[1:]:
            if rng.random() < 0.5:
                add_index(db, world, table, column, rng)
    for column in pool:  # every type a tag column somewhere
        if not any(column == indexed for _, indexed in world.indexed):
            table = rng.choice([t for t, columns in world.tables.items() if column in columns])
            add_index(db, world, table, column, rng)
    for table in world.tables:
        for key in range(12):
            insert(db, world, table, rng, key)
    first = world.tables["t0"][1]
    value = literal_of(first, rng.choice(DOMAINS[domain(first)]))
    db.execute(f"CREATE VIEW v0 AS SELECT * FROM t0 WHERE {first} = {value}")
    db.execute("CREATE VIEW vj AS SELECT t1.id, t2.id AS other FROM t1 JOIN t2 USING (id)")
    return world


def add_index(
    db: psycopg.Connection, world: World, table: str, column: str, rng: random.Random
) -> None:
    others = [c for c in world.tables[table] if c != column]
    second = f", {rng.choice(others)}" if rng.random() < 0.3 else ""
    db.execute(f"CREATE INDEX ON {table} ({column}{second})")
    world.indexed.add((table, column))


def literal_of(column: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    return f"'{value}'"


def random_value(column: str, rng: random.Random) -> Any:
    if rng.random() < 0.1 and column not in ("id", "k"):
        return None
    if column == "k":
        return rng.randint(0, 3)
    if column == "id":
        return rng.randint(0, 20)
    return rng.choice(DOMAINS[domain(column)])


def insert(
    db: psycopg.Connection, world: World, table: str, rng: random.Random, key: int | None = None
) -> str:
    columns = world.tables[table]
    values = [random_value("id", rng) if key is None else key]
    values += [random_value(c, rng) for c in columns[1:]]
    statement = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(values))})"
    )
    db.execute(statement, values)
    return f"{statement} {values}"


# -- queries -------------------------------------------------------------------------------


class Queries:
    """Random queries over a world; each is (sql, params)."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        self.focus = ""

    def operand(self, column: str, params: list[Any]) -> str:
        """One value for ``column``, as a literal or a placeholder in one of several forms."""
        rng = self.rng
        kind = domain(column)
        value = random_value(column, rng)
        if value is None and rng.random() < 0.5:
            return "NULL"
        form = rng.random()
        if form < 0.4 or value is None:
            params.append(value)
            return "%s"
        if form < 0.55 and kind in ("int", "uuid", "bool", "numeric"):
            params.append(str(value).upper() if kind == "uuid" else str(value).lower())
            return "%s"
        if form < 0.65 and kind == "int":
            params.append(value)
            return f"%s::{rng.choice(['int', 'bigint', 'smallint'])}"
        if kind == "int" and form < 0.75:
            return f"'0{value}'"
        if kind == "uuid" and form < 0.8:
            return f"'{str(value).upper()}'"
        return literal_of(column, value)

    def predicate(self, alias: str, table: str, params: list[Any], qualify: bool = True) -> str:
        rng = self.rng
        column = rng.choice(self.world.tables[table])
        ref = f"{alias}.{column}" if qualify else column
        shape = rng.random()
        if domain(column) == "bool" and shape < 0.3:
            return rng.choice([ref, f"NOT {ref}", f"{ref} IS TRUE", f"{ref} IS FALSE"])
        if shape < 0.45:
            value = self.operand(column, params)
            return f"{ref} = {value}" if rng.random() < 0.8 else f"{value} = {ref}"
        if shape < 0.6:
            values = [self.operand(column, params) for _ in range(rng.randint(1, 3))]
            return f"{ref} IN ({', '.join(values)})"
        if shape < 0.68 and domain(column) in ("int", "text", "uuid", "bool"):
            params.append([random_value(column, rng) for _ in range(rng.randint(1, 3))])
            return f"{ref} = ANY(%s)"
        if shape < 0.76 and domain(column) not in ("bool", "uuid"):
            return f"{ref} {rng.choice(['<', '>=', '<>'])} {self.operand(column, params)}"
        if shape < 0.82:
            return f"{ref} IS {rng.choice(['', 'NOT '])}NULL"
        if shape < 0.92:
            left = self.predicate(alias, table, params, qualify)
            return f"({left} OR {self.predicate(alias, table, params, qualify)})"
        return f"NOT ({self.predicate(alias, table, params, qualify)})"

    def where(self, alias: str, table: str, params: list[Any], qualify: bool = True) -> str:
        count = self.rng.choice([0, 1, 1, 2, 2, 3])
        parts = [self.predicate(alias, table, params, qualify) for _ in range(count)]
        return " AND ".join(parts) or "true"

    def table(self) -> str:
        """A table to read: half the time the one this round writes, so that results change."""
        if self.focus and self.rng.random() < 0.5:
            return self.focus
        return self.rng.choice([*(f"t{n}" for n in range(TABLES)), "p", "h"])

    def common(self, left: str, right: str) -> str:
        shared = [c for c in self.world.tables[left] if c in self.world.tables[right]]
        return self.rng.choice(shared)

    def query(self) -> tuple[str, list[Any]]:
        shape = self.rng.choice(
            [
                *(self.single, self.single, self.aggregate, self.join, self.join, self.exists),
                *(self.in_subquery, self.scalar, self.derived, self.cte, self.union, self.view),
                *(self.partition, self.inheritance, self.grouped, self.lateral, self.using),
                *(self.renamed, self.comma, self.nested),
            ]
        )
        params: list[Any] = []
        return shape(params), params

    def single(self, params: list[Any]) -> str:
        table = self.table()
        return f"SELECT * FROM {table} WHERE {self.where(table, table, params, qualify=False)}"

    def aggregate(self, params: list[Any]) -> str:
        table = self.table()
        return f"SELECT count(*), max(x.id) FROM {table} x WHERE {self.where('x', table, params)}"

    def join(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        kind = self.rng.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"])
        j = self.common(left, right)
        on = f"x.{j} = y.{j}"
        extra = ""
        for alias, table in (("x", left), ("y", right)):
            if self.rng.random() < 0.5:
                extra += f" AND {self.where(alias, table, params)}"
        where = self.where("x", left, params)
        return f"SELECT x.id, y.id FROM {left} x {kind} {right} y ON {on}{extra} WHERE {where}"

    def exists(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        j = self.common(left, right)
        outer = self.where("x", left, params)
        inner = self.where("y", right, params)
        if self.rng.random() < 0.3:  # a condition on the outer table inside the subquery
            inner += f" AND {self.predicate('x', left, params)}"
        negate = self.rng.choice(["", "NOT "])
        return (
            f"SELECT x.id FROM {left} x WHERE {outer} AND {negate}EXISTS "
            f"(SELECT 1 FROM {right} y WHERE y.{j} = x.{j} AND {inner})"
        )

    def comma(self, params: list[Any]) -> str:
        """Two tables, unqualified names (PostgreSQL rejects the ambiguous ones)."""
        left, right = self.table(), self.table()
        j = self.common(left, right)
        where = [self.where("x", left, params, qualify=False)]
        where.append(self.where("y", right, params, qualify=False))
        joined = " AND ".join(where)
        return f"SELECT x.id, y.id FROM {left} x, {right} y WHERE x.{j} = y.{j} AND {joined}"

    def nested(self, params: list[Any]) -> str:
        """``x KIND (y KIND z ON …) ON …``: join conditions at two depths."""
        tables = {alias: self.table() for alias in "xyz"}

        def condition(*aliases: str) -> str:
            alias = self.rng.choice(aliases)
            return self.where(alias, tables[alias], params)

        inner, outer = self.common(tables["y"], tables["z"]), self.common(tables["x"], tables["y"])
        inner_on = f"y.{inner} = z.{inner} AND {condition('y', 'z')}"
        outer_on = f"x.{outer} = y.{outer} AND {condition('x', 'y', 'z')}"
        kinds = ["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]
        return (
            f"SELECT x.id, y.id, z.id FROM {tables['x']} x {self.rng.choice(kinds)} "
            f"({tables['y']} y {self.rng.choice(kinds)} {tables['z']} z ON {inner_on}) "
            f"ON {outer_on} WHERE {condition('x', 'y', 'z')}"
        )

    def in_subquery(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        j = self.common(left, right)
        outer = self.where("x", left, params)
        inner = self.where("y", right, params)
        subquery = f"SELECT y.{j} FROM {right} y WHERE {inner}"
        return f"SELECT x.id FROM {left} x WHERE {outer} AND x.{j} IN ({subquery})"

    def scalar(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        j = self.common(left, right)
        inner = self.where("y", right, params)
        outer = self.where("x", left, params)
        return (
            f"SELECT x.id, (SELECT count(*) FROM {right} y WHERE y.{j} = x.{j} AND {inner}) "
            f"FROM {left} x WHERE {outer}"
        )

    def derived(self, params: list[Any]) -> str:
        table = self.table()
        inner = self.where("x", table, params)
        outer = self.where("d", table, params)
        return f"SELECT * FROM (SELECT * FROM {table} x WHERE {inner}) d WHERE {outer}"

    def cte(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        inner = self.where("x", left, params)
        outer = self.where("y", right, params)
        return (
            f"WITH d AS (SELECT * FROM {left} x WHERE {inner}) "
            f"SELECT d.id, y.id FROM d JOIN {right} y ON y.id = d.id WHERE {outer}"
        )

    def union(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        all_ = self.rng.choice(["", " ALL"])
        return (
            f"SELECT x.id FROM {left} x WHERE {self.where('x', left, params)} UNION{all_} "
            f"SELECT y.id FROM {right} y WHERE {self.where('y', right, params)}"
        )

    def view(self, params: list[Any]) -> str:
        if self.rng.random() < 0.3:
            return f"SELECT * FROM vj WHERE id = {self.operand('id', params)}"
        return f"SELECT * FROM v0 x WHERE {self.where('x', 't0', params)}"

    def partition(self, params: list[Any]) -> str:
        name = self.rng.choice(["p", "p", "p_low", "p_high"])
        return f"SELECT * FROM {name} x WHERE {self.where('x', 'p', params)}"

    def inheritance(self, params: list[Any]) -> str:
        name = self.rng.choice(["h", "ONLY h", "hc"])
        table = "hc" if name == "hc" else "h"
        return f"SELECT * FROM {name} x WHERE {self.where('x', table, params)}"

    def grouped(self, params: list[Any]) -> str:
        table = self.table()
        column = self.rng.choice(self.world.tables[table])
        where = self.where("x", table, params)
        return f"SELECT x.{column}, count(*) FROM {table} x WHERE {where} GROUP BY x.{column}"

    def lateral(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        j = self.common(left, right)
        inner = self.where("y", right, params)
        outer = self.where("x", left, params)
        return (
            f"SELECT x.id, z.m FROM {left} x LEFT JOIN LATERAL (SELECT max(y.id) AS m FROM "
            f"{right} y WHERE y.{j} = x.{j} AND {inner}) z ON true WHERE {outer}"
        )

    def renamed(self, params: list[Any]) -> str:
        """Columns renamed by the alias to a permutation of their own names:
        ``FROM t AS x(b, id, a)``, referred to by the new names."""
        table = self.table()
        columns = self.world.tables[table]
        names = self.rng.sample(columns, len(columns))
        conditions = []
        for name, column in zip(names, columns, strict=True):
            if self.rng.random() < 0.4:
                ref = self.rng.choice([name, f"x.{name}"])
                conditions.append(f"{ref} = {self.operand(column, params)}")
        where = " AND ".join(conditions) or "true"
        return f"SELECT * FROM {table} AS x({', '.join(names)}) WHERE {where}"

    def using(self, params: list[Any]) -> str:
        left, right = self.table(), self.table()
        j = self.common(left, right)
        return (
            f"SELECT * FROM {left} JOIN {right} USING ({j}) WHERE {j} = {self.operand(j, params)}"
        )


# -- writes --------------------------------------------------------------------------------


def write(db: psycopg.Connection, world: World, rng: random.Random, table: str) -> str:
    """One random committed write to ``table``; returns its description."""
    while True:
        columns = world.tables[table]
        kind = rng.random()
        try:
            if kind < 0.25:
                return insert(db, world, table, rng)
            if kind < 0.65:
                changed = rng.sample(columns, rng.randint(1, 2))
                sets = ", ".join(f"{c} = %s" for c in changed)
                values = [random_value(c, rng) for c in changed]
                key = rng.choice(columns)
                statement = f"UPDATE {table} SET {sets} WHERE {key} = %s"
                values.append(random_value(key, rng))
            elif kind < 0.9:
                key = rng.choice(columns)
                statement, values = (
                    f"DELETE FROM {table} WHERE {key} = %s",
                    [random_value(key, rng)],
                )
            else:
                column = rng.choice(columns)
                add_index(db, world, table, column, rng)
                return f"CREATE INDEX ON {table} ({column})"
            cursor = db.execute(statement, values)
        except psycopg.Error:
            continue
        if cursor.rowcount > 0:
            return f"{statement} {values}"


# -- the test ------------------------------------------------------------------------------


@dataclass
class Stats:
    runs: int = 0
    changed: int = 0
    truncated_unchanged: int = 0
    unchanged: int = 0
    refused: int = 0
    errors: int = 0
    wildcard_only: int = 0
    fine_unchanged: int = 0  # unchanged results of queries tagged by fine tags only
    fine_truncated_unchanged: int = 0
    failures: list[str] = field(default_factory=list)


@pytest.fixture
def stack(database: str) -> Iterator[tuple[Stack, World]]:
    """The random world's tables (created before setup), one node and the agent."""
    rng = random.Random(SEED)
    with psycopg.connect(database, autocommit=True) as db:
        world = create_schema(db, rng)
    with Stack(database, schema_sql=None, max_memory="256mb") as running:
        yield running, world


def result(conn: psycopg.Connection, sql: str, params: list[Any]) -> list[str]:
    return sorted(map(repr, conn.execute(sql, params).fetchall()))


def test_every_changed_result_is_invalidated(stack: tuple[Stack, World]) -> None:
    stack_, world = stack
    rng = random.Random(SEED + 1)
    queries = Queries(world, rng)
    process = running_agent(stack_)
    agent = redis.Redis(host=process.host, port=process.port, protocol=2)
    stats = Stats()
    deadline = time.monotonic() + SECONDS  # the test's time budget: rounds until then
    with psycopg.connect(stack_.dsn, autocommit=True) as reader:
        schema = Schema.load(reader)
        position = stack_.caught_up()
        for round_ in range(ROUNDS):
            if time.monotonic() > deadline:
                break
            context = (stack_, world, schema, agent, reader, queries, rng)
            position = run_round(context, position, round_, stats)
    agent.close()
    over = stats.truncated_unchanged / max(stats.unchanged, 1)
    fine_over = stats.fine_truncated_unchanged / max(stats.fine_unchanged, 1)
    print(
        f"\nsoundness: {stats.runs} query runs, {stats.changed} changed results (each must be "
        f"invalidated), {stats.truncated_unchanged}/{stats.unchanged} unchanged results "
        f"invalidated anyway (over-invalidation {over:.0%}; {fine_over:.0%} for queries "
        f"with fine tags only), {stats.wildcard_only} wildcard-only, {stats.refused} refused, "
        f"{stats.errors} errors"
    )
    assert not stats.failures, "\n\n".join(stats.failures[:5])
    assert stats.changed > 0
    assert stats.runs > 100


def run_round(context: tuple[Any, ...], position: int, round_: int, stats: Stats) -> int:
    """Queries, probes at ``position`` (the node has applied every commit), one write,
    re-runs; returns the node's position after the write."""
    stack, world, schema, agent, reader, queries, rng = context
    columns = tag_columns_at(agent.execute_command("TAGCOLUMNS"), position)
    at = schema.with_tag_columns(columns)
    probes = []
    queries.focus = focus = rng.choice(list(world.tables))
    for index in range(QUERIES_PER_ROUND):
        sql, params = queries.query()
        try:
            tags = analyze(sql, params, at).tags
        except UncacheableQuery:
            stats.refused += 1
            continue
        try:
            before = result(reader, sql, params)
        except psycopg.Error:
            stats.errors += 1
            continue
        if not tags:
            continue
        stats.wildcard_only += all(":" not in tag for tag in tags)
        key = f"q:{round_}:{index}"
        reply = stack.cache.execute_command(
            "TXSET", key, b"v", 0, "OPEN", "SNAPSHOT", position, "TAGS", *sorted(tags)
        )
        assert reply[2] is None, reply
        probes.append((key, sql, params, tags, before))
    change = write(stack.db, world, rng, focus)
    position = stack.caught_up()
    for key, sql, params, tags, before in probes:
        after = result(reader, sql, params)
        _value, _lo, _hi, is_open = stack.cache.execute_command("TXGET", key, 0, 2**62)
        stats.runs += 1
        if before != after:
            stats.changed += 1
            if is_open:
                stats.failures.append(
                    f"UNSOUND: {sql}\n  params {params}\n  tags {sorted(tags)}\n"
                    f"  write {change}\n  before {before}\n  after {after}"
                )
        else:
            stats.unchanged += 1
            stats.truncated_unchanged += not is_open
            if all(":" in tag for tag in tags):
                stats.fine_unchanged += 1
                stats.fine_truncated_unchanged += not is_open
    return position
