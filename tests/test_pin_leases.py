"""Pins live while they are of use: a pin nobody uses is let go a lease after it stopped
being current (it holds the primary's vacuum horizon), one a library reports using
(``PINS used``) is kept, every pin goes after a lease without any use until the next
``PIN``, and the library reports the pin each transaction ran at.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
import redis

import txcache
from agent_fixtures import Stack
from txcache.stack import AgentProcess, wait_until

LOG = "CREATE TABLE log (id bigserial PRIMARY KEY)"
AGENT = ("--pin-interval", "50ms", "--pin-lease", "1s", "--schema-check-interval", "100ms")
"""A pin every 50 ms while something commits, kept a second unless used; the schema
checked every 100 ms while there are pins (a pin it takes is no library's use)."""


@pytest.fixture
def stack(database: str) -> Iterator[Stack]:
    """A stack whose agent takes pins while a writer commits a row every 10 ms."""
    stop = threading.Event()

    def write() -> None:
        with psycopg.connect(database, autocommit=True) as db:
            while not stop.wait(0.01):
                db.execute("INSERT INTO log DEFAULT VALUES")

    with Stack(database, schema_sql=LOG, agent_args=AGENT) as stack:
        writer = threading.Thread(target=write)
        writer.start()
        try:
            yield stack
        finally:
            stop.set()
            writer.join()


def endpoint(agent: AgentProcess | None) -> redis.Redis:
    """A client of the agent's library endpoint."""
    assert agent is not None
    return redis.Redis(host=agent.host, port=agent.port, protocol=2, socket_timeout=30)


def listed(client: redis.Redis, *used: int) -> set[int]:
    """The commit points of the pins listed, reporting ``used`` first."""
    arguments = [",".join(map(str, used))] if used else []
    return {pin[0] for pin in client.execute_command("PINS", *arguments)}


def first_pin(client: redis.Redis) -> int:
    """A fresh pin, once a newer one is listed (so it is not the newest)."""
    fresh = client.execute_command("PIN")[0]
    wait_until(lambda: max(listed(client, fresh)) > fresh, "a newer pin")
    return int(fresh)


def test_a_pin_nobody_uses_is_let_go_and_a_used_one_is_kept(stack: Stack) -> None:
    client = endpoint(stack.agent)
    used, unused = first_pin(client), None
    wait_until(lambda: len(listed(client, used) - {used}) >= 2, "newer pins")
    unused = min(listed(client, used) - {used})
    kept_until = time.monotonic() + 3  # three leases
    while time.monotonic() < kept_until:
        assert used in listed(client, used), "a pin in use is kept past its lease"
        time.sleep(0.2)  # a library's refresh interval: the pace of its reports
    wait_until(lambda: unused not in listed(client, used), "the unused pin to go after its lease")
    wait_until(lambda: used not in listed(client), "the pin to go once no longer used")
    client.close()


def test_without_any_use_every_pin_goes_until_one_is_asked_for(stack: Stack, database: str) -> None:
    client = endpoint(stack.agent)
    wait_until(lambda: not listed(client), "every pin to go a lease after the last use")
    sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '%pinner%'"
    with psycopg.connect(database, autocommit=True) as db:
        wait_until(lambda: db.execute(sessions).fetchone() == (0,), "the pinner sessions to end")
    fresh = client.execute_command("PIN")[0]
    assert fresh in listed(client, fresh)
    wait_until(lambda: max(listed(client, fresh)) > fresh, "periodic pins to resume")
    client.close()


def test_the_library_reports_the_pin_each_transaction_ran_at(stack: Stack) -> None:
    # A refresh interval longer than the test: only the test takes what was reported.
    cache = stack.connect(refresh_interval=3600)
    try:
        agent = cache.agent
        assert agent is not None

        def pins_known() -> bool:
            agent.refresh()
            return bool(agent.pins(staleness=60, not_before=None, now=time.time()))

        wait_until(pins_known, "the library to know pins")
        agent.take_used()
        with cache.read_only() as transaction:
            txcache.query_one("SELECT count(*) FROM log")
            assert transaction.snapshot is not None
            ran_at = transaction.snapshot.ts
        assert agent.take_used().primary == {ran_at}
        with cache.read_only():
            pass  # read nothing: used no pin
        assert agent.take_used().primary == set()
    finally:
        cache.close()


def test_pinner_connections_are_kept_across_rotations(stack: Stack, database: str) -> None:
    """A session whose pins all expired ends its transaction (releasing the vacuum horizon)
    and a later rotation begins its transaction on the same connection: new pins move to a
    fresh *transaction* every rotation, not to a new backend."""
    client = endpoint(stack.agent)
    pinners = (
        "SELECT pid, xact_start FROM pg_stat_activity "
        "WHERE application_name LIKE 'txcache-agent pinner%' AND xact_start IS NOT NULL"
    )
    transactions: dict[int, set[object]] = {}
    with psycopg.connect(database, autocommit=True) as db:

        def a_connection_began_again() -> bool:
            client.execute_command("PIN")  # demand: the pinner keeps rotating
            for pid, began in db.execute(pinners).fetchall():
                transactions.setdefault(pid, set()).add(began)
            return any(len(began) >= 2 for began in transactions.values())

        wait_until(
            a_connection_began_again, "a pinner connection to begin a new transaction", timeout=30
        )
    # Sessions outlive their rotation by about a lease: a handful live at once, and no
    # more connections than that were ever opened.
    assert len(transactions) <= 8, transactions
    client.close()
