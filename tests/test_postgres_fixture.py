"""The embedded PostgreSQL the other tests run against."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postgres_fixtures import PostgresFactory
from txcache.stack import EmbeddedPostgres, PostgresStartError, wait_until


def one(conn: psycopg.Connection, query: str) -> Any:
    """The single value ``query`` returns."""
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def test_server_runs_with_logical_decoding_settings(postgres: EmbeddedPostgres) -> None:
    with psycopg.connect(postgres.dsn) as conn:
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('wal_level', 'max_replication_slots', 'max_wal_senders', 'fsync', "
                "'listen_addresses')"
            ).fetchall()
        )
        version = one(conn, "SHOW server_version_num")
    assert settings == {
        "wal_level": "logical",
        "max_replication_slots": "10",
        "max_wal_senders": "10",
        "fsync": "off",
        "listen_addresses": "127.0.0.1",
    }
    assert int(version) >= 180000
    assert postgres.dsn == f"host=127.0.0.1 port={postgres.port} user=postgres dbname=postgres"


def psql_answer(server: EmbeddedPostgres) -> str:
    """What ``psql`` (as ``server`` finds it) prints for ``SELECT 6 * 7`` there."""
    result = subprocess.run(
        [str(server.binary("psql")), server.dsn, "-Atc", "SELECT 6 * 7"],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_client_programs_are_shipped(postgres: EmbeddedPostgres) -> None:
    for program in ("psql", "pgbench", "pg_isready", "pg_recvlogical"):
        assert postgres.binary(program).is_file(), program
    assert psql_answer(postgres) == "42"
    version = subprocess.run(
        [str(postgres.binary("pgbench")), "--version"], capture_output=True, text=True, check=True
    )
    assert "pgbench (PostgreSQL) 18" in version.stdout


def test_a_build_of_the_server_alone_runs_the_wheel_s_client_programs(
    postgres: EmbeddedPostgres,
) -> None:
    """A bin directory with the server's programs only, as the PostgreSQL 17 build `make
    test` fetches: its server runs, the client programs it lacks are the wheel's, and the
    server's own programs never come from another build."""
    server_only = Path(tempfile.mkdtemp(prefix="txcache-server-only-"))
    try:
        server_only.chmod(0o755)  # as root, the server's account must reach it
        for program in ("initdb", "pg_ctl", "postgres"):
            (server_only / program).symlink_to(postgres.binary(program).resolve())
        with EmbeddedPostgres(bin_dir=server_only) as server:
            assert server.binary("postgres") == server_only / "postgres"
            assert server.binary("pg_dump") == server_only / "pg_dump"  # not a client it lends
            assert server.binary("pg_basebackup").parent != server_only
            assert server.binary("pg_basebackup").is_file()
            assert psql_answer(server) == "42"
    finally:
        shutil.rmtree(server_only)


def test_each_database_fixture_is_fresh(database: str, postgres: EmbeddedPostgres) -> None:
    with psycopg.connect(database) as conn:
        name = one(conn, "SELECT current_database()")
        tables = one(conn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        conn.execute("CREATE TABLE scratch (id int)")
    assert name.startswith("test_")
    assert tables == 0
    assert database == postgres.dsn_for(name)


def test_restart_keeps_data_and_applies_new_settings(postgres_factory: PostgresFactory) -> None:
    server = postgres_factory({"wal_level": "replica"})
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        assert one(conn, "SHOW wal_level") == "replica"
        conn.execute("CREATE TABLE kept (id int)")
        conn.execute("INSERT INTO kept VALUES (1)")
    server.restart({"wal_level": "logical"})
    assert server.settings == {"wal_level": "logical"}
    with psycopg.connect(server.dsn) as conn:
        assert one(conn, "SHOW wal_level") == "logical"
        assert conn.execute("SELECT id FROM kept").fetchall() == [(1,)]


def test_stop_ends_server_and_removes_its_directory(postgres_factory: PostgresFactory) -> None:
    server = postgres_factory()
    base, dsn = server.base_dir, server.dsn
    process = server._handle.process
    assert process is not None
    server.stop()
    server.stop()  # idempotent
    assert process.poll() is not None
    assert not base.exists()
    assert not server.running()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)


@pytest.fixture
def kept_dir() -> Iterator[Path]:
    """A directory the server's system user can reach (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="txcache-kept-"))
    path.chmod(0o711)
    yield path / "pg"
    shutil.rmtree(path, ignore_errors=True)


def test_kept_base_dir_is_reused(kept_dir: Path) -> None:
    with (
        EmbeddedPostgres(base_dir=kept_dir) as server,
        psycopg.connect(server.dsn, autocommit=True) as conn,
    ):
        conn.execute("CREATE TABLE kept (id int)")
    assert (kept_dir / "data" / "PG_VERSION").is_file()
    with EmbeddedPostgres(base_dir=kept_dir) as server, psycopg.connect(server.dsn) as conn:
        assert one(conn, "SELECT count(*) FROM kept") == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_unreachable_base_dir_is_named(tmp_path: Path) -> None:
    with pytest.raises(PostgresStartError, match=r"lack\(s\) o\+x") as caught:
        EmbeddedPostgres(base_dir=tmp_path / "pg")
    assert f"{tmp_path} " in str(caught.value)  # the base directory's parent, 0700


def test_a_bad_setting_fails_with_the_server_log() -> None:
    with pytest.raises(PostgresStartError, match="no_such_setting"):
        EmbeddedPostgres({"no_such_setting": 1})


_START_AND_DIE = """
import os, signal, sys
from txcache.stack import EmbeddedPostgres
server = EmbeddedPostgres()
print(server._handle.process.pid, server.base_dir, flush=True)
if sys.argv[1] == "crash":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _start_in_child(how: str) -> tuple[int, Path]:
    result = subprocess.run(
        [sys.executable, "-c", _START_AND_DIE, how], capture_output=True, text=True, check=False
    )
    pid, base = result.stdout.split()
    return int(pid), Path(base)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_gone(pid: int) -> None:
    wait_until(lambda: _gone(pid), f"PostgreSQL (postmaster pid {pid}) to exit", timeout=5)


def test_server_is_stopped_when_its_owner_exits_without_stopping_it() -> None:
    pid, base = _start_in_child("exit")
    _wait_gone(pid)
    assert not base.exists()


def test_server_of_a_crashed_owner_is_reaped_by_the_next_process() -> None:
    pid, base = _start_in_child("crash")
    # SIGKILL ran no finalizer: an orphan, which nothing of its own stops. Any later process
    # that starts a server sweeps what dead ones left — this one, or another test's running
    # meanwhile (so the orphan is not looked at in between: it may be gone already).
    _start_in_child("exit")
    _wait_gone(pid)
    assert not base.exists()
