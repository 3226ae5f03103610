"""``txcache setup`` against real PostgreSQL: prerequisites, idempotence, the DDL trigger."""

from __future__ import annotations

import itertools
import re
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

import psycopg
import pytest

from postgres_fixtures import PostgresFactory
from txcache import SetupError, SetupReport, StepStatus, _ddl_notice, _setup, setup_database
from txcache._ddl_notice import functions, read_sql
from txcache._postgres import EmbeddedPostgres

_role_numbers = itertools.count(1)


def query(dsn: str, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def oid(dsn: str, relation: str) -> int:
    return int(query(dsn, "SELECT %s::regclass::oid", (relation,))[0][0])


def decode_message(data: bytes) -> tuple[bool, str, str]:
    """A pgoutput 'M' message: (transactional, prefix, content)."""
    assert data[:1] == b"M"
    flags = data[1]
    (_lsn,) = struct.unpack_from(">Q", data, 2)
    end = data.index(b"\0", 10)
    prefix = data[10:end].decode()
    (length,) = struct.unpack_from(">i", data, end + 1)
    content = data[end + 5 :]
    assert len(content) == length
    return bool(flags & 1), prefix, content.decode()


def take_ddl_messages(dsn: str, slot: str = "txcache", publication: str = "txcache") -> list[str]:
    """Consume the slot's changes; the contents of the 'txcache-ddl' messages among them."""
    rows = query(
        dsn,
        "SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
        "'proto_version', '1', 'publication_names', %s, 'messages', 'true')",
        (slot, publication),
    )
    messages = [decode_message(bytes(data)) for (data,) in rows if bytes(data)[:1] == b"M"]
    assert all(transactional for transactional, _, _ in messages)
    return [content for _, prefix, content in messages if prefix == "txcache-ddl"]


def statuses(report: SetupReport) -> dict[str, StepStatus]:
    return {step.name: step.status for step in report.steps}


@pytest.fixture
def shop(database: str) -> str:
    """A database with a plain table, a partitioned one and a table already FULL."""
    execute(
        database,
        "CREATE TABLE items (id int PRIMARY KEY, name text)",
        "CREATE TABLE bids (item int, amount int) PARTITION BY RANGE (item)",
        "CREATE TABLE bids_low PARTITION OF bids FOR VALUES FROM (0) TO (1000)",
        "CREATE TABLE users (id int PRIMARY KEY)",
        "ALTER TABLE users REPLICA IDENTITY FULL",
    )
    return database


MakeRole = Callable[..., tuple[str, str]]
"""``make_role(attributes="")``: a new login role's name and DSN."""


@pytest.fixture
def make_role(database: str) -> Iterator[MakeRole]:
    """Create a login role in the cluster; yields a function returning the role's DSN."""
    created: list[str] = []

    def make(attributes: str = "") -> tuple[str, str]:
        name = f"app_{next(_role_numbers)}"
        execute(database, f"CREATE ROLE {name} LOGIN {attributes}")
        created.append(name)
        return name, database.replace("user=postgres", f"user={name}")

    yield make
    for name in created:
        execute(database, f"DROP OWNED BY {name}", f"DROP ROLE {name}")


def test_wal_level_replica_is_refused_naming_alter_system(
    postgres_factory: PostgresFactory,
) -> None:
    server = postgres_factory({"wal_level": "replica"})
    with pytest.raises(SetupError, match=r"ALTER SYSTEM SET wal_level = logical") as caught:
        setup_database(server.dsn)
    assert "restart PostgreSQL" in str(caught.value)
    assert query(server.dsn, "SELECT count(*) FROM pg_publication") == [(0,)]
    assert query(server.dsn, "SELECT count(*) FROM pg_replication_slots") == [(0,)]


def test_setup_creates_publication_replica_identity_trigger_and_slot(shop: str) -> None:
    report = setup_database(shop)

    assert report.step("ddl trigger").detail == (
        "installed txcache.ddl_notice() on ddl_command_start, ddl_command_end, sql_drop, "
        "tracking public"
    )
    assert statuses(report) == {
        "wal_level": StepStatus.OK,
        "max_replication_slots": StepStatus.OK,
        "max_wal_senders": StepStatus.OK,
        "max_slot_wal_keep_size": StepStatus.WARNING,  # the server's default: unlimited
        "role": StepStatus.OK,
        "publication": StepStatus.CHANGED,
        "replica identity": StepStatus.CHANGED,
        "ddl trigger": StepStatus.CHANGED,
        "slot": StepStatus.CHANGED,
    }
    assert report.step("replica identity").detail == (
        "set REPLICA IDENTITY FULL on public.bids, public.bids_low, public.items"
    )
    assert query(
        shop,
        "SELECT p.pubviaroot, n.nspname FROM pg_publication p JOIN pg_publication_namespace pn "
        "ON pn.pnpubid = p.oid JOIN pg_namespace n ON n.oid = pn.pnnspid "
        "WHERE p.pubname = 'txcache'",
    ) == [(True, "public")]
    assert query(shop, "SELECT relname, relreplident FROM pg_class WHERE relkind IN ('r', 'p') "
                 "AND relnamespace = 'public'::regnamespace ORDER BY 1") == [
        ("bids", "f"), ("bids_low", "f"), ("items", "f"), ("users", "f")]  # fmt: skip
    assert query(
        shop,
        "SELECT evtname, evtevent, evtenabled, evtfoid::regproc::text FROM pg_event_trigger "
        "ORDER BY 1",
    ) == [
        ("txcache_ddl_command_end", "ddl_command_end", "A", "txcache.ddl_notice"),
        ("txcache_ddl_command_start", "ddl_command_start", "A", "txcache.ddl_notice"),
        ("txcache_sql_drop", "sql_drop", "A", "txcache.ddl_notice"),
    ]
    assert query(shop, "SELECT schema_name::text FROM txcache.tracked_schemas") == [("public",)]
    assert query(
        shop,
        "SELECT slot_type, plugin, database = current_database() FROM pg_replication_slots "
        "WHERE slot_name = 'txcache'",
    ) == [("logical", "pgoutput", True)]


def test_second_run_changes_nothing(shop: str) -> None:
    setup_database(shop)
    fingerprint = (
        "SELECT (SELECT array_agg(oid ORDER BY oid) FROM pg_proc "
        "        WHERE pronamespace = 'txcache'::regnamespace), "
        "(SELECT array_agg(oid ORDER BY oid) FROM pg_event_trigger), "
        "(SELECT oid FROM pg_publication), "
        "(SELECT restart_lsn FROM pg_replication_slots)"
    )
    before = query(shop, fingerprint)

    report = setup_database(shop)

    assert not report.changed
    assert not report.missing
    assert {step.status for step in report.steps} == {StepStatus.OK, StepStatus.WARNING}
    assert [step.name for step in report.warnings] == ["max_slot_wal_keep_size"]
    assert query(shop, fingerprint) == before
    assert report.format().endswith("everything was already in place (1 warning(s))")


def test_installed_bodies_are_the_sql_files(shop: str) -> None:
    setup_database(shop)

    installed = dict(
        query(
            shop,
            "SELECT proname::text, prosrc FROM pg_proc "
            "WHERE pronamespace = 'txcache'::regnamespace",
        )
    )
    assert installed == {name: body for name, body, _ in functions()}


def test_an_outdated_function_is_replaced_by_the_next_run(shop: str) -> None:
    setup_database(shop)
    execute(
        shop,
        "CREATE OR REPLACE FUNCTION txcache.ddl_kind(text, text) RETURNS text LANGUAGE sql "
        "AS $$ SELECT 'all' $$",
    )

    report = setup_database(shop)

    assert report.step("ddl trigger").detail == (
        "installed the DDL trigger: function txcache.ddl_kind()"
    )
    (body,) = [body for name, body, _ in functions() if name == "ddl_kind"]
    assert query(shop, "SELECT prosrc FROM pg_proc WHERE oid = 'txcache.ddl_kind'::regproc") == [
        (body,)
    ]
    assert not setup_database(shop).changed


def test_sql_files_are_documented_and_their_placeholders_are_the_python_constants() -> None:
    files = {f.name for f in (resources.files("txcache") / "sql").iterdir()}
    names = [name for name, _, _ in functions()]
    assert files == {f"{name}.sql" for name in [*names, "setup_facts", "setup_tables"]}
    for file in files:
        text = (resources.files("txcache") / "sql" / file).read_text(encoding="utf-8")
        assert text.startswith("-- ")  # a header saying what it is, not installed
    bodies = {name: body for name, body, _ in functions()}
    assert all(body.startswith("\n") and not body.startswith("\n--") for body in bodies.values())
    assert not [name for name, body in bodies.items() if re.search(r"\{\w+\}", body)]
    notice = bodies["ddl_notice"]
    assert "pg_advisory_xact_lock_shared(1954046817, 1684302848)" in notice  # docs/setup.md
    assert "txcache.ddl_count()" in notice
    counted = "SELECT setval('txcache.ddl_counter', nextval('txcache.ddl_counter'))"
    assert bodies["ddl_count"].strip() == counted
    assert notice.count("'txcache.inherits_before'") == 4
    assert notice.count("'txcache.identities_before'") == 3
    assert "pg_logical_emit_message(true, 'txcache-ddl', " in notice
    assert "pg_logical_emit_message(true, 'txcache-ddl', " in bodies["truncate_notice"]
    assert bodies["prepare_partitions"].count("txcache_truncate_notice") == 3
    assert "REPLICA IDENTITY" not in bodies["prepare_partitions"]  # ddl_identity's alone


def test_an_unknown_placeholder_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(_ddl_notice._PLACEHOLDERS, "lock")
    with pytest.raises(ValueError, match=r"ddl_notice\.sql: unknown placeholder \{lock\}"):
        read_sql("ddl_notice")


def test_check_reports_missing_steps_and_changes_nothing(shop: str) -> None:
    report = setup_database(shop, check=True)

    assert [step.name for step in report.missing] == [
        "publication",
        "replica identity",
        "ddl trigger",
        "slot",
    ]
    assert report.step("slot").detail == (
        "would create logical replication slot txcache (pgoutput, failover)"
    )
    assert not report.changed
    assert query(shop, "SELECT count(*) FROM pg_publication") == [(0,)]
    assert query(shop, "SELECT count(*) FROM pg_replication_slots") == [(0,)]
    assert query(shop, "SELECT count(*) FROM pg_event_trigger") == [(0,)]
    assert query(shop, "SELECT relreplident FROM pg_class WHERE relname = 'items'") == [("d",)]

    setup_database(shop)
    assert not setup_database(shop, check=True).missing


def test_another_schema_is_added_to_publication_and_trigger(shop: str) -> None:
    setup_database(shop)
    execute(shop, "CREATE SCHEMA sales", "CREATE TABLE sales.orders (id int PRIMARY KEY)")
    take_ddl_messages(shop)  # sales is not tracked yet: nothing

    report = setup_database(shop, schemas=["sales"])

    assert report.step("publication").detail == (
        "added TABLES IN SCHEMA sales (publication txcache)"
    )
    assert report.step("replica identity").detail == "set REPLICA IDENTITY FULL on sales.orders"
    assert report.step("ddl trigger").detail == (
        "installed the DDL trigger: tracking of schema(s) sales"
    )
    # Publishing another schema may change what cached reads may be served: everything.
    assert "all\t\tsales in publication txcache\t" in "\n".join(take_ddl_messages(shop))
    execute(shop, "CREATE TABLE sales.refunds (id int)")
    refunds = oid(shop, "sales.refunds")
    assert take_ddl_messages(shop) == [f"table\tsales\trefunds\t{refunds}"]
    assert query(shop, "SELECT count(*) FROM pg_publication_tables WHERE schemaname = 'sales'") == [
        (2,)
    ]


def test_new_table_gets_full_replica_identity_and_is_published(shop: str) -> None:
    setup_database(shop)
    execute(
        shop,
        "CREATE TABLE later (id int PRIMARY KEY, note text)",
        "CREATE TABLE bids_high PARTITION OF bids FOR VALUES FROM (1000) TO (2000)",
    )
    assert query(
        shop,
        "SELECT relname, relreplident FROM pg_class WHERE relname IN ('later', 'bids_high') "
        "ORDER BY 1",
    ) == [("bids_high", "f"), ("later", "f")]
    published = query(
        shop,
        "SELECT tablename::text FROM pg_publication_tables WHERE pubname = 'txcache' ORDER BY 1",
    )
    assert published == [("bids",), ("items",), ("later",), ("users",)]  # partitions via root


def warnings_of(dsn: str, *statements: str) -> list[str]:
    """Run ``statements`` in one session; the WARNINGs it received, as ``message: detail``."""
    received: list[str] = []

    def keep(notice: psycopg.errors.Diagnostic) -> None:
        if notice.severity_nonlocalized == "WARNING":
            received.append(f"{notice.message_primary}: {notice.message_detail}")

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(keep)
        for statement in statements:
            conn.execute(statement)
    return received


def identity(dsn: str, table: str) -> str:
    rows = query(dsn, "SELECT relreplident FROM pg_class WHERE oid = %s::regclass", (table,))
    return str(rows[0][0])


def test_replica_identity_set_by_a_migration_is_kept_with_a_warning(shop: str) -> None:
    setup_database(shop)
    warned = warnings_of(shop, "ALTER TABLE items REPLICA IDENTITY DEFAULT")
    assert identity(shop, "items") == "d"
    assert warned == [
        "txcache: table public.items has REPLICA IDENTITY DEFAULT, not FULL: Updates and "
        "deletes of its rows invalidate every cached result that read the table wherever the "
        "stream does not carry the old values of its indexed columns."
    ]
    # Said once, when it changed; later DDL on the table leaves it as it is, silently.
    assert warnings_of(shop, "ALTER TABLE items ADD COLUMN note text") == []
    assert identity(shop, "items") == "d"
    execute(shop, "UPDATE items SET name = 'x'", "DELETE FROM items")


def test_a_partition_s_replica_identity_set_by_a_migration_is_kept(shop: str) -> None:
    setup_database(shop)
    warned = warnings_of(shop, "ALTER TABLE bids_low REPLICA IDENTITY NOTHING")
    assert identity(shop, "bids_low") == "n"
    assert warned[0].startswith("txcache: table public.bids_low has REPLICA IDENTITY NOTHING")
    execute(shop, "CREATE TABLE bids_high PARTITION OF bids FOR VALUES FROM (1000) TO (2000)")
    assert (identity(shop, "bids_low"), identity(shop, "bids_high")) == ("n", "f")


def test_key_identity_keeps_the_key_until_a_run_that_does_not_name_it(shop: str) -> None:
    report = setup_database(shop, key_identity=["public.items"])
    assert (identity(shop, "items"), identity(shop, "users")) == ("d", "f")
    assert report.step("replica identity").detail == (
        "set REPLICA IDENTITY FULL on public.bids, public.bids_low; "
        "the key on public.items (--key-identity)"
    )
    # Named unqualified, it is the same table: nothing to change.
    again = setup_database(shop, key_identity=["items"])
    assert again.step("replica identity").status is StepStatus.OK
    assert again.step("replica identity").detail == (
        "FULL on 3 of 4 tracked table(s); the key on public.items (--key-identity)"
    )
    # Set FULL beforehand, the key is set back.
    execute(shop, "ALTER TABLE items REPLICA IDENTITY FULL")
    setup_database(shop, key_identity=["public.items"])
    assert identity(shop, "items") == "d"
    # Setup is run on purpose: without the option, FULL again.
    assert setup_database(shop).step("replica identity").status is StepStatus.CHANGED
    assert identity(shop, "items") == "f"


def test_key_identity_is_refused_for_a_table_without_a_key_or_not_tracked(shop: str) -> None:
    with pytest.raises(SetupError) as caught:
        setup_database(shop, key_identity=["bids_low", "public.nosuch"])
    message = str(caught.value)
    assert "--key-identity bids_low: table public.bids_low has neither a primary key" in message
    assert "--key-identity public.nosuch names no table of the tracked schemas (public)" in message
    # Refused before anything changed.
    assert query(shop, "SELECT count(*) FROM pg_publication") == [(0,)]


def test_cli_key_identity_prints_the_alter_table(shop: str) -> None:
    execute(shop, "ALTER TABLE items REPLICA IDENTITY FULL")
    printed = run_cli("--dsn", shop, "--print-sql", "--key-identity", "public.items")
    assert printed.returncode == 3, printed.stderr
    assert 'ALTER TABLE "public"."items" REPLICA IDENTITY DEFAULT;' in printed.stdout
    assert 'ALTER TABLE "public"."users" REPLICA IDENTITY' not in printed.stdout
    assert "the key on public.items (--key-identity)" in printed.stderr


def test_ddl_by_an_ordinary_role_is_seen(shop: str, make_role: MakeRole) -> None:

    setup_database(shop)
    role, dsn = make_role()
    execute(shop, f"GRANT CREATE ON SCHEMA public TO {role}")
    # A privilege decides what a role may read, and the trigger is not told which objects.
    assert take_ddl_messages(shop)[-1] == "all\t\t\t0"
    execute(dsn, "CREATE TABLE notes (id int PRIMARY KEY)")  # the trigger runs as the role
    notes = oid(shop, "notes")
    assert query(shop, "SELECT relreplident FROM pg_class WHERE relname = 'notes'") == [("f",)]
    assert take_ddl_messages(shop) == [f"table\tpublic\tnotes\t{notes}"]


def test_ddl_emits_documented_messages(shop: str) -> None:
    setup_database(shop)
    take_ddl_messages(shop)  # nothing before this point matters

    execute(shop, "CREATE TABLE lots (id int PRIMARY KEY, seller int)")
    lots = oid(shop, "lots")
    assert take_ddl_messages(shop) == [f"table\tpublic\tlots\t{lots}"]

    execute(shop, "CREATE INDEX lots_seller ON lots (seller)")
    index = oid(shop, "lots_seller")
    assert take_ddl_messages(shop) == [f"table\tpublic\tlots\t{lots}"]

    execute(shop, "ALTER TABLE lots ADD COLUMN price int")
    assert take_ddl_messages(shop) == [f"table\tpublic\tlots\t{lots}"]

    execute(shop, "DROP INDEX lots_seller")
    assert take_ddl_messages(shop) == [f"index\tpublic\tlots_seller\t{index}"]

    primary_key = oid(shop, "lots_pkey")
    execute(shop, "DROP TABLE lots")
    assert take_ddl_messages(shop) == [
        f"index\tpublic\tlots_pkey\t{primary_key}\ntable\tpublic\tlots\t{lots}"
    ]


def test_dropping_a_constraint_emits_a_drop_and_an_alter_message(shop: str) -> None:
    setup_database(shop)
    take_ddl_messages(shop)
    items, primary_key = oid(shop, "items"), oid(shop, "items_pkey")
    constraint = query(shop, "SELECT oid FROM pg_constraint WHERE conname = 'items_pkey'")[0][0]
    execute(shop, "ALTER TABLE items DROP CONSTRAINT items_pkey")
    assert take_ddl_messages(shop) == [
        f"index\tpublic\titems_pkey\t{primary_key}\n"
        f"none\tpublic\titems_pkey on public.items\t{constraint}",
        f"table\tpublic\titems\t{items}",
    ]


def test_ddl_messages_for_other_objects_and_odd_names(shop: str) -> None:
    setup_database(shop)
    take_ddl_messages(shop)

    execute(shop, "CREATE VIEW cheap AS SELECT * FROM items WHERE id < 10")
    view = oid(shop, "cheap")
    assert take_ddl_messages(shop) == [f"table\tpublic\tcheap\t{view}"]

    execute(shop, 'CREATE TABLE "odd\tname\\" (id int)')
    odd = oid(shop, '"odd\tname\\"')
    assert take_ddl_messages(shop) == [f"table\tpublic\todd\\tname\\\\\t{odd}"]

    execute(shop, "DROP VIEW cheap")
    assert take_ddl_messages(shop) == [f"table\tpublic\tcheap\t{view}"]

    execute(shop, "CREATE FUNCTION f(int) RETURNS int LANGUAGE sql AS 'SELECT $1'")
    function = query(shop, "SELECT 'f(int)'::regprocedure::oid")[0][0]
    assert take_ddl_messages(shop) == [f"all\tpublic\tpublic.f(integer)\t{function}"]


def test_relations_outside_tracked_schemas_are_named_and_temporary_ones_are_silent(
    shop: str,
) -> None:
    setup_database(shop)
    take_ddl_messages(shop)
    execute(shop, "CREATE SCHEMA elsewhere")
    schema = query(shop, "SELECT oid FROM pg_namespace WHERE nspname = 'elsewhere'")[0][0]
    assert take_ddl_messages(shop) == [f"all\t\telsewhere\t{schema}"]
    execute(shop, "CREATE VIEW elsewhere.v AS SELECT id FROM items")
    view = oid(shop, "elsewhere.v")
    assert take_ddl_messages(shop) == [f"table\telsewhere\tv\t{view}"]
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TEMPORARY TABLE scratch (id int)")
        conn.execute("CREATE TEMPORARY VIEW scratch_view AS SELECT 1")
        conn.execute("DROP TABLE scratch")
    assert take_ddl_messages(shop) == []


def test_a_relation_named_like_one_in_another_schema_invalidates_everything(shop: str) -> None:
    setup_database(shop)
    take_ddl_messages(shop)
    execute(shop, "CREATE SCHEMA shadow", "CREATE TABLE shadow.items (id int)")
    shadow = oid(shop, "shadow.items")
    messages = take_ddl_messages(shop)[1:]  # after CREATE SCHEMA's
    assert messages == [f"all\tshadow\titems\t{shadow}\ntable\tshadow\titems\t{shadow}"]


def test_a_partition_detached_or_dropped_and_a_child_disinherited_are_named(shop: str) -> None:
    """At the end of these commands the catalog no longer links the two tables; the notice
    names both all the same (reads of each changed meaning)."""
    setup_database(shop)
    execute(
        shop,
        "CREATE TABLE bids_high PARTITION OF bids FOR VALUES FROM (1000) TO (2000)",
        "CREATE TABLE animals (id int)",
        "CREATE TABLE cats () INHERITS (animals)",
    )
    bids, low, high = oid(shop, "bids"), oid(shop, "bids_low"), oid(shop, "bids_high")
    animals, cats = oid(shop, "animals"), oid(shop, "cats")
    take_ddl_messages(shop)

    def lines(*named: tuple[str, int]) -> str:
        return "\n".join(sorted(f"table\tpublic\t{name}\t{oid}" for name, oid in named))

    whole_tree = lines(("bids", bids), ("bids_low", low), ("bids_high", high))
    execute(shop, "ALTER TABLE bids DETACH PARTITION bids_high")
    assert take_ddl_messages(shop) == [whole_tree]
    execute(shop, "ALTER TABLE bids ATTACH PARTITION bids_high FOR VALUES FROM (1000) TO (2000)")
    assert take_ddl_messages(shop) == [whole_tree]
    execute(shop, "ALTER TABLE bids DETACH PARTITION bids_high CONCURRENTLY")
    assert lines(("bids_high", high)) in "\n".join(take_ddl_messages(shop))

    execute(shop, "ALTER TABLE cats NO INHERIT animals")
    assert take_ddl_messages(shop) == [lines(("animals", animals), ("cats", cats))]

    execute(shop, "DROP TABLE bids_low")
    messages = take_ddl_messages(shop)
    assert lines(("bids_low", low)) in messages[0]  # sql_drop: the partition
    assert messages[1] == lines(("bids", bids))  # ddl_command_end: the root it left


def test_role_without_replication_is_refused(database: str, make_role: MakeRole) -> None:
    role, dsn = make_role()
    with pytest.raises(SetupError, match=rf"role {role} lacks the REPLICATION attribute") as caught:
        setup_database(dsn)
    assert f"run ALTER ROLE {role} REPLICATION as a superuser" in str(caught.value)
    assert query(database, "SELECT count(*) FROM pg_replication_slots") == [(0,)]


def test_replication_role_sets_up_table_by_table(database: str, make_role: MakeRole) -> None:
    role, dsn = make_role("REPLICATION")
    execute(database, f"GRANT CREATE ON DATABASE {database.split('dbname=')[1]} TO {role}",
            f"GRANT CREATE ON SCHEMA public TO {role}")  # fmt: skip
    execute(dsn, "CREATE TABLE mine (id int PRIMARY KEY)")

    report = setup_database(dsn)

    assert statuses(report)["role"] is StepStatus.OK
    assert report.step("publication").detail == "created publication txcache of 1 table(s)"
    assert [step.name for step in report.warnings] == [
        "max_slot_wal_keep_size",
        "ddl trigger",
        "new tables",
    ]
    assert "txcache-agent refuses to start" in report.step("ddl trigger").detail
    assert report.step("new tables").detail.startswith(
        "tables created later will not be published nor made FULL automatically"
    )
    assert query(dsn, "SELECT tablename::text FROM pg_publication_tables") == [("mine",)]
    assert query(dsn, "SELECT relreplident FROM pg_class WHERE relname = 'mine'") == [("f",)]

    execute(database, "CREATE TABLE theirs (id int)")  # owned by postgres
    with pytest.raises(SetupError, match=rf"role {role} does not own table public.theirs"):
        setup_database(dsn)


def test_what_a_role_may_do_is_tried_and_the_tries_leave_nothing(
    database: str, make_role: MakeRole
) -> None:
    role, dsn = make_role("REPLICATION")
    execute(database, f"GRANT CREATE ON DATABASE {database.split('dbname=')[1]} TO {role}")

    report = setup_database(dsn, check=True)

    assert report.step("role").status is StepStatus.OK
    trigger = report.step("ddl trigger")
    assert f"role {role} may not create event triggers" in trigger.detail, trigger.detail
    assert query(database, "SELECT count(*) FROM pg_replication_slots") == [(0,)]
    assert query(database, "SELECT count(*) FROM pg_publication") == [(0,)]
    assert query(database, "SELECT count(*) FROM pg_event_trigger") == [(0,)]


def test_replication_role_accepts_what_a_superuser_installed(
    shop: str, make_role: MakeRole
) -> None:
    setup_database(shop)
    _role, dsn = make_role("REPLICATION")
    execute(shop, "SELECT pg_drop_replication_slot('txcache')")

    report = setup_database(dsn)

    assert [step.name for step in report.warnings] == ["max_slot_wal_keep_size"]
    assert report.step("publication").detail == (
        "txcache publishes TABLES IN SCHEMA public with stored generated columns, via the "
        "partition root"
    )
    assert report.step("ddl trigger").status is StepStatus.OK
    assert report.step("slot").status is StepStatus.CHANGED


def test_slot_with_another_plugin_is_refused(database: str) -> None:
    query(database, "SELECT pg_create_logical_replication_slot('txcache', 'test_decoding')")
    with pytest.raises(SetupError, match="plugin test_decoding, txcache needs a logical slot"):
        setup_database(database)
    assert query(database, "SELECT count(*) FROM pg_publication") == [(0,)]


def test_several_problems_are_reported_together(postgres_factory: PostgresFactory) -> None:
    server = postgres_factory({"wal_level": "replica", "max_wal_senders": 0})
    with pytest.raises(SetupError) as caught:
        setup_database(server.dsn, schemas=["public", "missing"])
    message = str(caught.value)
    assert "wal_level is replica" in message
    assert "max_wal_senders is 0" in message
    assert "schema missing does not exist" in message
    assert len(caught.value.problems) == 3


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "txcache", "setup", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_cli_prints_report_and_exit_status(shop: str) -> None:
    check = run_cli("--dsn", shop, "--check")
    assert check.returncode == 3, check.stderr
    assert "missing  slot" in check.stdout

    done = run_cli("--dsn", shop, "--schema", "public")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("txcache setup: postgres@127.0.0.1:")
    assert (
        "  changed  slot                    created logical replication slot txcache" in lines[-2]
    )
    assert lines[-1] == "done: 4 step(s) changed the database (1 warning(s))"

    again = run_cli("--dsn", shop, "--check")
    assert again.returncode == 0
    assert again.stdout.splitlines()[-1] == "everything was already in place (1 warning(s))"


def test_cli_failure_exits_nonzero_with_the_message(postgres_factory: PostgresFactory) -> None:
    server = postgres_factory({"wal_level": "replica"})
    result = run_cli("--dsn", server.dsn)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("txcache setup: error: wal_level is replica")
    assert "ALTER SYSTEM SET wal_level = logical" in result.stderr


def test_cli_refuses_unreachable_server() -> None:
    result = run_cli("--dsn", "host=127.0.0.1 port=1 connect_timeout=2")
    assert result.returncode == 1
    assert "cannot connect to PostgreSQL" in result.stderr


def test_bounded_wal_keep_size_is_not_a_warning(postgres_factory: PostgresFactory) -> None:
    server = postgres_factory({"max_slot_wal_keep_size": "1GB"})
    report = setup_database(server.dsn)
    assert report.step("max_slot_wal_keep_size").status is StepStatus.OK
    assert report.step("max_slot_wal_keep_size").detail == "1GB"
    assert not report.warnings


def test_the_slot_is_created_for_failover(shop: str) -> None:
    """From PostgreSQL 17 a slot marked failover can be synchronized to a standby."""
    setup_database(shop)
    assert query(shop, "SELECT failover FROM pg_replication_slots") == [(True,)]
    assert "(pgoutput, failover)" in setup_database(shop, check=True).step("slot").detail


def test_print_sql_is_the_sql_an_administrator_runs(
    shop: str, make_role: MakeRole, postgres: EmbeddedPostgres
) -> None:
    """A role with no rights prints the plan; a superuser runs it with psql; the role then
    finds everything in place (and may replicate, as the agent's role must)."""
    role, dsn = make_role()
    printed = run_cli("--dsn", dsn, "--print-sql")
    assert printed.returncode == 3, printed.stderr
    script = printed.stdout
    assert f'ALTER ROLE "{role}" REPLICATION;' in script
    assert "CREATE PUBLICATION" in script
    assert "CREATE EVENT TRIGGER" in script
    slot = "pg_create_logical_replication_slot('txcache', 'pgoutput', failover => true);"
    assert slot in script
    assert "would create logical replication slot" in printed.stderr
    assert query(shop, "SELECT count(*) FROM pg_publication") == [(0,)]

    psql = [str(postgres.binary("psql")), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", shop]
    ran = subprocess.run(psql, input=script, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr

    report = setup_database(dsn, check=True)
    assert not report.missing, report.format()
    assert report.step("ddl trigger").status is StepStatus.OK
    # The agent's role records the shared catalog's digest in the administrator's table.
    writes = "SELECT has_table_privilege('txcache.shared_catalog', 'SELECT, INSERT, UPDATE')"
    assert query(dsn, writes) == [(True,)]
    assert run_cli("--dsn", dsn, "--print-sql").stdout == ""


OWNERS = (
    "SELECT DISTINCT pg_get_userbyid(owner)::text FROM ("
    " SELECT nspowner AS owner FROM pg_namespace WHERE nspname = 'txcache' UNION ALL"
    " SELECT proowner FROM pg_proc WHERE pronamespace = 'txcache'::regnamespace UNION ALL"
    " SELECT relowner FROM pg_class WHERE oid IN"
    " ('txcache.tracked_schemas'::regclass, 'txcache.ddl_counter'::regclass)) o"
)


def plant_escalation(dsn: str, role: str) -> None:
    """What the probe did: the role, owning the trigger's function, makes it grant the role
    superuser as soon as a superuser's DDL runs it."""
    execute(
        dsn,
        "CREATE OR REPLACE FUNCTION txcache.ddl_notice() RETURNS event_trigger "
        "LANGUAGE plpgsql AS $$BEGIN IF (SELECT rolsuper FROM pg_roles "
        f"WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE {role} SUPERUSER'; "
        "END IF; END$$",
    )


def is_superuser(database: str, role: str) -> bool:
    rows = query(database, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
    return bool(rows[0][0])


def refuses_changes_to_what_the_triggers_run(dsn: str) -> None:
    """The role at ``dsn`` may replace, drop or add no function of schema ``txcache``."""
    for statement in (
        "CREATE OR REPLACE FUNCTION txcache.ddl_notice() RETURNS event_trigger "
        "LANGUAGE plpgsql AS $$BEGIN END$$",
        "DROP FUNCTION txcache.schema_digest()",
        "CREATE FUNCTION txcache.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "DROP TABLE txcache.tracked_schemas",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            execute(dsn, statement)


def test_the_administrator_s_script_takes_over_what_the_triggers_run(
    database: str, make_role: MakeRole, postgres: EmbeddedPostgres
) -> None:
    """A role sets up what it may first: schema txcache and its functions are its own. The
    DDL triggers run them as whoever runs DDL, a superuser too, so the administrator's
    script takes them over (and drops a function the role added) before it installs the
    triggers: the role can then change none of them."""
    role, dsn = make_role("REPLICATION")
    execute(database, f"GRANT CREATE ON DATABASE {database.split('dbname=')[1]} TO {role}",
            f"GRANT CREATE ON SCHEMA public TO {role}")  # fmt: skip
    execute(dsn, "CREATE TABLE mine (id int PRIMARY KEY)")
    setup_database(dsn)
    execute(
        dsn,
        "CREATE FUNCTION txcache.extra() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "GRANT CREATE ON SCHEMA txcache TO PUBLIC",
    )
    assert query(database, OWNERS) == [(role,)]

    printed = run_cli("--dsn", dsn, "--print-sql")
    assert f"would take over schema txcache from role(s) {role}:" in printed.stderr, printed.stderr
    plant_escalation(dsn, role)  # after the script was printed, before it runs
    psql = [str(postgres.binary("psql")), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", database]
    ran = subprocess.run(psql, input=printed.stdout, capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr

    assert query(database, OWNERS) == [("postgres",)]
    assert query(database, "SELECT to_regprocedure('txcache.extra()') IS NULL") == [(True,)]
    refuses_changes_to_what_the_triggers_run(dsn)
    report = setup_database(dsn, check=True)
    assert not report.missing, report.format()
    assert report.step("ddl trigger").status is StepStatus.OK
    assert query(database, "SELECT schema_name::text FROM txcache.tracked_schemas") == [("public",)]
    execute(dsn, "CREATE TABLE later (id int PRIMARY KEY)")  # the triggers see the role's DDL
    assert query(dsn, "SELECT relreplident FROM pg_class WHERE relname = 'later'") == [("f",)]
    execute(database, "CREATE TABLE theirs (id int PRIMARY KEY)")
    assert not is_superuser(database, role)


def test_triggers_that_run_a_role_s_functions_are_a_warning_until_a_superuser_takes_them_over(
    database: str, make_role: MakeRole
) -> None:
    """Triggers installed over functions an ordinary role owns (the order of an older
    script): the role's check warns, and setup run by a superuser takes them over."""
    role, dsn = make_role("REPLICATION")
    execute(database, f"GRANT CREATE ON DATABASE {database.split('dbname=')[1]} TO {role}")
    setup_database(dsn)
    execute(
        database,
        *(
            statement
            for name, event in _setup._EVENT_TRIGGERS
            for statement in (
                f"CREATE EVENT TRIGGER {name} ON {event} EXECUTE FUNCTION txcache.ddl_notice()",
                f"ALTER EVENT TRIGGER {name} ENABLE ALWAYS",
            )
        ),
    )

    plant_escalation(dsn, role)
    owner = setup_database(dsn, check=True).step("ddl trigger owner")
    assert owner.status is StepStatus.WARNING, owner
    count = len(_ddl_notice.function_signatures())
    assert owner.detail.startswith(
        f"schema txcache, relation txcache.ddl_counter, relation txcache.tracked_schemas, "
        f"{count} function(s) belong to role(s) {role}"
    ), owner.detail
    assert f"belong to role(s) {role}; the DDL triggers run them" in owner.detail

    report = setup_database(database)
    names = [step.name for step in report.steps]
    assert names.index("ddl trigger owner") < names.index("publication"), "before any DDL"
    assert (
        f"took over schema txcache from role(s) {role}:" in report.step("ddl trigger owner").detail
    )
    assert query(database, OWNERS) == [("postgres",)]
    refuses_changes_to_what_the_triggers_run(dsn)
    assert not is_superuser(database, role), "the superuser's setup ran none of its code"
    execute(database, "CREATE TABLE theirs (id int PRIMARY KEY)")
    assert not is_superuser(database, role)
    again = setup_database(dsn, check=True)
    assert "ddl trigger owner" not in statuses(again)
    assert again.step("ddl trigger").status is StepStatus.OK


def test_a_managed_service_is_recognised_and_its_way_is_advised(
    postgres_factory: PostgresFactory,
) -> None:
    """On a server with RDS's roles, the report names the service and the fixes are RDS's
    (a parameter group, rds_replication), not ALTER SYSTEM or ALTER ROLE."""
    server = postgres_factory({"wal_level": "replica"})
    execute(server.dsn, "CREATE ROLE rds_superuser", "CREATE ROLE rds_replication",
            "CREATE ROLE app LOGIN")  # fmt: skip
    with pytest.raises(SetupError) as caught:
        setup_database(server.dsn.replace("user=postgres", "user=app"))
    message = str(caught.value)
    assert "on Amazon RDS / Aurora, set rds.logical_replication = 1" in message
    assert "on Amazon RDS / Aurora, GRANT rds_replication TO app" in message
    assert "ALTER SYSTEM" not in message


def test_a_service_s_caveats_are_warnings(database: str, postgres_factory: PostgresFactory) -> None:
    server = postgres_factory()
    execute(server.dsn, "CREATE ROLE neon_superuser")
    report = setup_database(server.dsn, check=True)
    service = [step for step in report.steps if step.name == "service"]
    assert service[0].detail == "Neon (it has role neon_superuser)"
    assert [step.status for step in service] == [
        StepStatus.OK,
        StepStatus.WARNING,
        StepStatus.WARNING,
    ]
    assert "about 40 hours" in service[2].detail
