"""Replica identity never breaks an application's writes, nor is changed behind its back.

txcache wants ``REPLICA IDENTITY FULL`` (the agent then sees every old value), but
PostgreSQL 18 refuses ``UPDATE`` and ``DELETE`` under FULL on a table with a virtual
generated column, or with a stored one its publication does not publish; PostgreSQL 15+
when another publication lists the table's columns. Setup and the DDL trigger publish
stored generated columns, give FULL only where PostgreSQL allows it, fall back to DEFAULT
where a migration makes FULL refused, and say so (a report step, a ``WARNING`` in the
migration's session) wherever a table is left without FULL (docs/setup.md, "Replica
identity"). Where the writes are meant to work, the test updates and deletes rows.
"""

from __future__ import annotations

import psycopg
import pytest

from test_setup import query, warnings_of
from txcache import SetupError, StepStatus, setup_database

GENERATED = """
CREATE TABLE stored (id int PRIMARY KEY, qty int, total int GENERATED ALWAYS AS (qty * 2) STORED);
CREATE TABLE stored_nokey (qty int, total int GENERATED ALWAYS AS (qty * 2) STORED);
CREATE TABLE virtual (id int PRIMARY KEY, qty int, total int GENERATED ALWAYS AS (qty * 2));
INSERT INTO stored (id, qty) VALUES (1, 1), (2, 2);
INSERT INTO stored_nokey (qty) VALUES (1), (2);
INSERT INTO virtual (id, qty) VALUES (1, 1), (2, 2);
"""


def identities(dsn: str) -> dict[str, str]:
    """``relname: relreplident`` of every table of schema public."""
    rows = query(
        dsn,
        "SELECT relname::text, relreplident::text FROM pg_class "
        "WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')",
    )
    return dict(rows)


def writes_work(dsn: str, *tables: str) -> None:
    """Update then delete every row of each table (raises if PostgreSQL refuses)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"UPDATE {table} SET qty = qty + 10")
            conn.execute(f"DELETE FROM {table}")


@pytest.fixture
def generated(database: str) -> str:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(GENERATED)
    return database


def test_setup_publishes_stored_generated_columns_and_keeps_writes_working(generated: str) -> None:
    report = setup_database(generated)

    assert query(generated, "SELECT pubgencols FROM pg_publication") == [("s",)]
    assert identities(generated) == {"stored": "f", "stored_nokey": "f", "virtual": "d"}
    coarse = report.step("coarse tables")
    assert coarse.status is StepStatus.WARNING
    assert coarse.detail.startswith(
        "no REPLICA IDENTITY FULL on public.virtual (virtual generated column total): "
        "PostgreSQL would refuse their UPDATE and DELETE under it; their updates and deletes "
        "invalidate every cached read of the table"
    )
    writes_work(generated, "stored", "stored_nokey", "virtual")
    again = setup_database(generated)
    assert not again.changed
    assert again.step("replica identity").detail == "FULL on 2 of 3 tracked table(s)"


def test_a_table_full_identity_breaks_is_set_to_default_by_setup(generated: str) -> None:
    query(generated, "ALTER TABLE virtual REPLICA IDENTITY FULL")  # its writes fail now
    report = setup_database(generated)
    assert report.step("replica identity").detail == (
        "set REPLICA IDENTITY FULL on public.stored, public.stored_nokey; DEFAULT on public.virtual"
    )
    assert identities(generated)["virtual"] == "d"
    writes_work(generated, "virtual")


def test_a_keyless_table_with_a_virtual_generated_column_is_refused(generated: str) -> None:
    query(generated, "CREATE TABLE virtual_nokey (qty int, total int GENERATED ALWAYS AS (qty))")
    with pytest.raises(SetupError) as caught:
        setup_database(generated)
    assert caught.value.problems == (
        "table public.virtual_nokey has no replica identity under which PostgreSQL publishes "
        "its UPDATE and DELETE (it refuses them instead): REPLICA IDENTITY FULL is refused "
        "(virtual generated column total) and it has no primary key: add a primary key, or a "
        "unique index on NOT NULL columns and ALTER TABLE public.virtual_nokey REPLICA "
        "IDENTITY USING INDEX <index>",
    )
    assert query(generated, "SELECT count(*) FROM pg_publication") == [(0,)]


def test_a_column_list_of_another_publication_keeps_the_table_off_full(database: str) -> None:
    query(database, "CREATE TABLE items (id int PRIMARY KEY, qty int, note text)")
    query(database, "INSERT INTO items VALUES (1, 1, 'a')")
    query(database, "CREATE PUBLICATION theirs FOR TABLE items (id, qty)")
    report = setup_database(database)
    assert identities(database) == {"items": "d"}
    assert (
        "public.items (publication theirs lists its columns)" in report.step("coarse tables").detail
    )
    writes_work(database, "items")


def test_new_tables_get_full_where_postgresql_allows_it_and_a_warning_elsewhere(
    generated: str,
) -> None:
    setup_database(generated)
    warned = warnings_of(
        generated,
        "CREATE TABLE later_stored (id int PRIMARY KEY, qty int, "
        "total int GENERATED ALWAYS AS (qty + 1) STORED)",
        "CREATE TABLE later_virtual (id int PRIMARY KEY, qty int, "
        "total int GENERATED ALWAYS AS (qty + 1) VIRTUAL)",
        "CREATE TABLE later_nokey (qty int, total int GENERATED ALWAYS AS (qty + 1))",
    )
    found = identities(generated)
    assert (found["later_stored"], found["later_virtual"], found["later_nokey"]) == ("f", "d", "d")
    assert warned == [
        "txcache: table public.later_virtual has REPLICA IDENTITY DEFAULT, not FULL: FULL "
        "would make PostgreSQL refuse its UPDATE and DELETE: virtual generated column total. "
        "Updates and deletes of its rows invalidate every cached result that read the table "
        "wherever the stream does not carry the old values of its indexed columns.",
        "txcache: UPDATE and DELETE on table public.later_nokey fail: It has REPLICA IDENTITY "
        "DEFAULT and no primary key, and PostgreSQL refuses REPLICA IDENTITY FULL: virtual "
        "generated column total.",
    ]
    query(generated, "INSERT INTO later_stored (id, qty) VALUES (1, 1)")
    query(generated, "INSERT INTO later_virtual (id, qty) VALUES (1, 1)")
    writes_work(generated, "later_stored", "later_virtual")


def test_a_virtual_column_added_to_a_full_table_moves_it_to_default(generated: str) -> None:
    setup_database(generated)
    warned = warnings_of(
        generated, "ALTER TABLE stored ADD COLUMN doubled int GENERATED ALWAYS AS (qty * 4)"
    )
    assert identities(generated)["stored"] == "d"
    assert warned == [
        "txcache: set REPLICA IDENTITY DEFAULT on table public.stored: Under REPLICA "
        "IDENTITY FULL PostgreSQL would refuse its UPDATE and DELETE: virtual generated column "
        "doubled. Updates and deletes of its rows invalidate every cached result that read the "
        "table wherever the stream does not carry the old values of its indexed columns."
    ]
    writes_work(generated, "stored")


def test_full_asked_for_by_a_migration_is_kept_and_said_to_break_writes(generated: str) -> None:
    setup_database(generated)
    warned = warnings_of(generated, "ALTER TABLE virtual REPLICA IDENTITY FULL")
    assert identities(generated)["virtual"] == "f"  # the migration's choice stands
    assert warned == [
        "txcache: UPDATE and DELETE on table public.virtual fail under REPLICA IDENTITY FULL: "
        "PostgreSQL refuses them: virtual generated column total."
    ]


def test_a_partition_attached_from_an_untracked_schema_follows_the_same_rule(
    generated: str,
) -> None:
    query(
        generated,
        "CREATE TABLE parts (id int PRIMARY KEY, qty int, total int GENERATED ALWAYS AS "
        "(qty + 1) STORED) PARTITION BY RANGE (id)",
    )
    setup_database(generated)
    query(
        generated,
        "CREATE SCHEMA staging;"
        "CREATE TABLE staging.plain (id int PRIMARY KEY, qty int, total int GENERATED ALWAYS "
        "AS (qty + 1) STORED);"
        "INSERT INTO staging.plain (id, qty) VALUES (1, 1)",
    )
    query(generated, "ALTER TABLE parts ATTACH PARTITION staging.plain FOR VALUES FROM (0) TO (9)")
    relreplident = "SELECT relreplident FROM pg_class WHERE oid = 'staging.plain'::regclass"
    assert query(generated, relreplident) == [("f",)]
    writes_work(generated, "parts")


def test_postgresql_15_has_no_generated_column_option_and_full_works(icu_database: str) -> None:
    """Before 18, generated columns are never published and never stop FULL; setup leaves
    the publication's options as 15 knows them."""
    with psycopg.connect(icu_database, autocommit=True) as conn:
        conn.execute(GENERATED.replace(", total int GENERATED ALWAYS AS (qty * 2));", ");"))
    report = setup_database(icu_database)
    assert "coarse tables" not in [step.name for step in report.steps]
    assert identities(icu_database) == {"stored": "f", "stored_nokey": "f", "virtual": "f"}
    writes_work(icu_database, "stored", "stored_nokey", "virtual")
    execute_warnings = warnings_of(
        icu_database,
        "CREATE TABLE later (id int PRIMARY KEY, qty int, "
        "total int GENERATED ALWAYS AS (qty + 1) STORED)",
    )
    assert execute_warnings == []
    assert identities(icu_database)["later"] == "f"
    assert not setup_database(icu_database).changed
