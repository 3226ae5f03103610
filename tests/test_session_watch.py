"""Which statements leave a read/write block's session alone (pure: no database)."""

from __future__ import annotations

import pytest

from txcache._statements import changes_settings, check_read_only, leaves_session_alone

LEAVE_IT_ALONE = [
    "SELECT 1",
    "SELECT * FROM items WHERE id = %s FOR UPDATE",
    "INSERT INTO items VALUES (%s, %s) RETURNING id",
    "UPDATE items SET name = %s WHERE id = %s",
    "DELETE FROM items WHERE id = %s",
    "MERGE INTO items t USING other s ON t.id = s.id WHEN MATCHED THEN DELETE",
    "WITH gone AS (DELETE FROM items RETURNING *) SELECT count(*) FROM gone",
    "SAVEPOINT a; RELEASE SAVEPOINT a; ROLLBACK TO SAVEPOINT a",
    "LOCK TABLE items IN SHARE MODE",
    "SET CONSTRAINTS ALL IMMEDIATE",
    "SHOW search_path",
    "EXPLAIN ANALYZE UPDATE items SET name = 'x'",
    "SELECT pg_advisory_xact_lock(1)",
    "SELECT nextval('tickets')",
]
CHANGE_IT = [
    "SET search_path = pg_catalog",
    "SET LOCAL TimeZone = 'UTC'",
    "RESET ALL",
    "SELECT set_config('app.tenant', '7', false)",
    "UPDATE items SET name = pg_catalog.set_config('a.b', 'c', true)",
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_advisory_unlock_all()",
    "SELECT 1 INTO TEMP scratch",
    "CREATE TEMP TABLE scratch (x int)",
    "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
    "PREPARE p AS SELECT 1",
    "LISTEN channel",
    "DO $$ BEGIN PERFORM 1; END $$",
    "CALL procedure()",
    "COMMIT",
    "BEGIN",
    "ALTER TABLE items ADD COLUMN x int",
    "SELECT 1; SET search_path = pg_catalog",
    "SELECT (",  # cannot be parsed: assumed to change it
]


@pytest.mark.parametrize("statement", LEAVE_IT_ALONE)
def test_statements_that_leave_the_session_alone(statement: str) -> None:
    params = tuple(range(statement.count("%s"))) if "%s" in statement else None
    assert leaves_session_alone(statement, params)


@pytest.mark.parametrize("statement", CHANGE_IT)
def test_statements_that_may_change_the_session(statement: str) -> None:
    assert not leaves_session_alone(statement)


def test_placeholders_without_parameters_cannot_be_classified() -> None:
    assert not leaves_session_alone("UPDATE items SET name = %s")


def test_a_verdict_is_on_the_text_whatever_the_values() -> None:
    """An ``executemany``'s list of parameter sets, or a set that does not fit the
    placeholders (psycopg refuses that itself), is classified by the statement's text; the
    verdict, remembered per text, then holds for every later call of it."""
    update = "UPDATE items SET name = %s WHERE id = %s"
    for params in ([("a", 1)], [("a", 1), ("b", 2), ("c", 3)], ["a"], ["a", 1]):
        assert leaves_session_alone(update, params)
        assert not changes_settings(update, params)
        assert check_read_only("SELECT %s, %s", params) == 1
    assert leaves_session_alone(
        "UPDATE items SET name = %(name)s WHERE id = %(id)s", [{"name": "a", "id": 1}]
    )
    assert changes_settings("SELECT set_config(%s, %s, false)", [("a.b", "c"), ("a.b", "d")])
