"""The pincushion against a real PostgreSQL: certified pins are exact commit points.

Writers append rows to a log table, each row in its own transaction, and learn each
transaction's commit LSN from the agent (``COMMITLSN``, read-your-writes). For every pin
the test imports its snapshot and checks that it sees exactly the rows whose commit LSN is
at most the pin's timestamp — no row missing, none too many.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis

from agent_fixtures import Stack
from txcache.stack import AgentProcess

LOG = "CREATE TABLE log (id bigserial PRIMARY KEY, writer integer, seq integer)"

PINS = ("--pin-interval", "50ms", "--pin-lease", "60s")
"""The agent's arguments here: a pin every 50 ms, each kept a minute (the tests import pins
well after taking them; how long pins live is ``test_pin_leases.py``'s)."""


def endpoint(agent: AgentProcess | None) -> redis.Redis:
    """A client of the agent's library endpoint."""
    assert agent is not None
    return redis.Redis(host=agent.host, port=agent.port, protocol=2, socket_timeout=30)


@pytest.fixture
def agent(database: str) -> Iterator[tuple[AgentProcess, redis.Redis]]:
    """The agent of a stack with ``log`` and one node, and a client of its endpoint."""
    with Stack(database, schema_sql=LOG, agent_args=PINS) as stack:
        assert stack.agent is not None
        client = endpoint(stack.agent)
        yield stack.agent, client
        client.close()


def commit_row(
    db: psycopg.Connection, client: redis.Redis, writer: int, seq: int
) -> tuple[int, int]:
    """Insert one row in its own transaction; returns (row id, commit LSN)."""
    with db.transaction():
        row = db.execute(
            "INSERT INTO log (writer, seq) VALUES (%s, %s) "
            "RETURNING id, pg_current_xact_id()::text",
            (writer, seq),
        ).fetchone()
        assert row is not None
    return int(row[0]), int(client.execute_command("COMMITLSN", row[1]))


def visible_rows(dsn: str, snapshot_id: str) -> set[int]:
    with psycopg.connect(dsn) as db:
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        db.execute(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'")
        return {row[0] for row in db.execute("SELECT id FROM log")}


def imported_snapshot(dsn: str, snapshot_id: str) -> str:
    """What ``pg_current_snapshot()`` says in a transaction that imported ``snapshot_id``."""
    with psycopg.connect(dsn) as db:
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        db.execute(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'")
        row = db.execute("SELECT pg_current_snapshot()::text").fetchone()
        assert row is not None
        return str(row[0])


def test_pins_are_listed_and_importable(
    database: str, agent: tuple[AgentProcess, redis.Redis]
) -> None:
    _process, client = agent
    with psycopg.connect(database, autocommit=True) as db:
        row_id, commit_lsn = commit_row(db, client, 0, 0)
    ts, snapshot_id, current_as_of, snapshot = client.execute_command("PIN")
    assert ts >= commit_lsn
    assert current_as_of > 0
    assert imported_snapshot(database, snapshot_id.decode()) == snapshot.decode()
    assert row_id in visible_rows(database, snapshot_id.decode())
    pins = client.execute_command("PINS")
    assert snapshot_id in [pin[1] for pin in pins]


def test_commitlsn_of_an_unknown_xid_times_out(agent: tuple[AgentProcess, redis.Redis]) -> None:
    _process, client = agent
    with pytest.raises(redis.ResponseError, match="TIMEOUT"):
        client.execute_command("COMMITLSN", 4_000_000_000, 100)


def test_concurrent_pin_requests_share_fresh_pins(
    database: str, agent: tuple[AgentProcess, redis.Redis]
) -> None:
    """Requests queued while a pin is taken are answered together by the next one: each
    was made before its snapshot, so it is fresh for all (a burst of read-your-writes
    transactions costs one export, not one each)."""
    process, client = agent
    with psycopg.connect(database, autocommit=True) as db:
        row_id, committed = commit_row(db, client, 0, 0)
    requests = 16
    start = threading.Barrier(requests)
    replies: list[list[Any]] = []

    def ask() -> None:
        own = redis.Redis(host=process.host, port=process.port, protocol=2, socket_timeout=30)
        with own:
            own.ping()
            start.wait()
            reply = own.execute_command("PIN")
        replies.append(reply)

    threads = [threading.Thread(target=ask) for _ in range(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pins = {(int(ts), snapshot_id.decode()) for ts, snapshot_id, *_ in replies}
    assert len(replies) == requests
    assert len(pins) < requests, f"every request took a pin of its own: {sorted(pins)}"
    for ts, snapshot_id in pins:
        assert ts >= committed, "a pin older than a commit made before it was asked for"
        assert row_id in visible_rows(database, snapshot_id)


def test_certified_pins_are_exact_under_concurrent_writers(
    database: str, agent: tuple[AgentProcess, redis.Redis]
) -> None:
    process, client = agent
    commits: dict[int, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(number: int) -> None:
        own = redis.Redis(host=process.host, port=process.port, protocol=2, socket_timeout=30)
        with own, psycopg.connect(database, autocommit=True) as db:
            seq = 0
            while not stop.is_set():
                row_id, lsn = commit_row(db, own, number, seq)
                with lock:
                    commits[row_id] = lsn
                seq += 1

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in writers:
        thread.start()
    pins = []
    # Pins sampled for a fixed time while the writers run (not a wait for anything).
    sampling_ends = time.monotonic() + 3.0
    while time.monotonic() < sampling_ends:
        pins.append(client.execute_command("PIN"))
        time.sleep(0.01)
    stop.set()
    for thread in writers:
        thread.join()
    assert len(pins) >= 10
    assert len(commits) >= 100
    for ts, snapshot_id, _current, _snapshot in pins:
        seen = visible_rows(database, snapshot_id.decode())
        expected = {row for row, lsn in commits.items() if lsn <= ts}
        assert seen == expected, (
            f"pin at {ts}: missing {sorted(expected - seen)[:5]}, "
            f"extra {sorted(seen - expected)[:5]}"
        )
    status = client.execute_command("STATUS").decode()
    print(status)
    assert "pins_certified" in status


def test_pins_after_an_agent_restart_are_exact(database: str) -> None:
    """Regression: fences replayed after a restart were matched to new pins by number, so
    new pins were certified against old fences (a timestamp too low)."""
    commits: dict[int, int] = {}
    with Stack(database, schema_sql=LOG, agent_args=PINS) as stack:
        assert stack.agent is not None
        client = endpoint(stack.agent)
        # A frozen node holds the slot acknowledgement back: the next agent replays old
        # fences.
        os.kill(stack.node.process.pid, signal.SIGSTOP)
        try:
            for seq in range(30):
                row_id, commit = commit_row(stack.db, client, 0, seq)
                commits[row_id] = commit
                client.execute_command("PIN")
            client.close()
            stack.agent.kill()
        finally:
            os.kill(stack.node.process.pid, signal.SIGCONT)
        stack.restart_agent()
        client = endpoint(stack.agent)
        pins = []
        for seq in range(40):
            row_id, commit = commit_row(stack.db, client, 1, seq)
            commits[row_id] = commit
            pins.append(client.execute_command("PIN"))
        client.close()
        for ts, snapshot_id, _current, _snapshot in pins:  # exported while the agent runs
            expected = {row for row, commit in commits.items() if commit <= ts}
            assert visible_rows(database, snapshot_id.decode()) == expected, f"pin at {ts}"
