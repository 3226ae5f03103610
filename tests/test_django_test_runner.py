"""Django's own test runner beside a development database on the same PostgreSQL server.

A small Django project (written to a temporary directory by the module's fixture) is
driven with ``manage.py test`` in a subprocess, as a developer runs it: its ``default``
alias (engine ``txcache.django.db``) names the *development* database, which a stack's
nodes and agent follow. The project's runner (``catalog/runner.py``, a ``DiscoverRunner``)
first reads the development database's row through txcache until it is a hit — the
process's cache is connected to it, and the nodes hold that row under the key of
``item_names()`` — then lets Django create ``test_<name>`` and run the tests:

- a ``TransactionTestCase`` (``serialized_rollback``) calls ``item_names()`` outside any
  transaction first, has the cache connected by another thread, writes its own row, reads
  it in ``txcache.django.read_only()`` and through a cached queryset, updates it in
  ``txcache.django.read_write()`` and reads that with its token. Every read is the test
  database's and none is a hit (no agent follows it), from a pool connected to the
  database Django's connection names (``SELECT current_database()`` on it);
- a ``TestCase`` reads the same inside its ``atomic()`` block.

Each run must end cleanly — exit status 0, every test database dropped (none left on the
server), no ``being accessed by other users`` — and the runner reads the development row
again afterwards, a hit through a cache connected to the development database once more.
In each mode of the library (``consistent``, ``no_consistency``, ``bypass``); with the
cache first connected inside the tests; with parallel workers on cloned test databases
(``fork`` and ``spawn``; the parent's cache connected before they start, and still sound
after them); with a ``DSN`` given in ``TXCACHE``; with ``--keepdb`` twice in a row; and
with a node and an agent of the test database's own, whose tests' reads are hits.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from postgres_fixtures import drop_database, fresh_database
from txcache.stack import EmbeddedPostgres, Stack, StackOptions

AGENT_ARGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")

SETTINGS = """
import os

from psycopg.conninfo import conninfo_to_dict

_database = conninfo_to_dict(os.environ["TXCACHE_DSN"])

SECRET_KEY = "txcache-test-runner"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "txcache.django", "catalog"]
DATABASES = {
    "default": {
        "ENGINE": "txcache.django.db",
        "NAME": _database["dbname"],
        "USER": _database.get("user", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
    }
}
# NODES, AGENT and MODE come from the TXCACHE_* environment, as the library reads them.
TXCACHE = {"STALENESS": 30, "REFRESH_INTERVAL": 0.05}
if os.environ.get("PROJECT_GIVES_DSN"):
    TXCACHE["DSN"] = os.environ["TXCACHE_DSN"]  # the development database's
TEST_RUNNER = "catalog.runner.Runner"
"""

MODELS = """
from django.db import models

from txcache.django import CachedManager


class Item(models.Model):
    name = models.CharField(max_length=50)
    objects = CachedManager()
"""

READS = '''
import os

from django.db import connection

import txcache
import txcache.django
from catalog.models import Item
from txcache.stack import wait_until


@txcache.cacheable
def item_names() -> list[str]:
    return list(Item.objects.order_by("id").values_list("name", flat=True))


def cached_names() -> list[str]:
    return [item.name for item in Item.objects.order_by("id").txcache()]


def check_cache_database() -> None:
    """The cache's pool is connected to the database Django's connection names."""
    with txcache.django.get_cache().pool.connection() as pooled:
        (name,) = pooled.execute("SELECT current_database()").fetchone()
    named = connection.settings_dict["NAME"]
    assert name == named, f"the cache reads {name}, Django's connection names {named}"


def cached_in(database: str) -> bool:
    """Whether the agent of TXCACHE_AGENT follows ``database`` (the "development" one,
    unless PROJECT_AGENT_FOLLOWS says "test"), and the mode caches."""
    follows = os.environ.get("PROJECT_AGENT_FOLLOWS", "development")
    return follows == database and os.environ["TXCACHE_MODE"] != "bypass"


def read(names: list[str], database: str, not_before: int | None = None) -> None:
    """Read ``names`` with item_names() until a hit if ``database`` is cached (else once,
    and never a hit)."""
    hits = item_names.stats.hits

    def hit() -> bool:
        with txcache.django.read_only(not_before=not_before):
            found = item_names()
        assert found == names, f"the {database} database read {found}, not {names}"
        return not cached_in(database) or item_names.stats.hits > hits

    wait_until(hit, f"a hit of item_names() in the {database} database", timeout=30)
    if not cached_in(database):
        assert item_names.stats.hits == hits, f"a hit in the {database} database"
'''

RUNNER = """
import os

from django.test.runner import DiscoverRunner

from catalog.reads import check_cache_database, read


def read_development() -> None:
    read(["development"], "development")
    check_cache_database()


class Runner(DiscoverRunner):
    def setup_databases(self, **kwargs):
        if not os.environ.get("PROJECT_CONNECTS_IN_TESTS"):
            read_development()
        return super().setup_databases(**kwargs)

    def run_checks(self, databases):
        super().run_checks(databases)
        if os.environ.get("PROJECT_CONNECTS_BEFORE_WORKERS"):
            check_cache_database()  # connected to the test database, then workers start

    def teardown_databases(self, old_config, **kwargs):
        if os.environ.get("PROJECT_CONNECTS_BEFORE_WORKERS"):
            check_cache_database()  # no worker ended its connections
        super().teardown_databases(old_config, **kwargs)
        read_development()
        print("development read again after the run")
"""

TESTS = """
from concurrent.futures import ThreadPoolExecutor

import txcache.django
from django.test import TestCase, TransactionTestCase

from catalog.models import Item
from catalog.reads import cached_names, check_cache_database, item_names, read


class ThroughTransactions(TransactionTestCase):
    serialized_rollback = True

    def test_reads_and_writes_the_test_database(self):
        self.assertEqual(item_names(), [])  # first, outside any transaction
        with ThreadPoolExecutor(1) as another:  # the cache connected first by another thread
            another.submit(check_cache_database).result()
        Item.objects.create(id=1, name="test")
        check_cache_database()
        read(["test"], "test")
        with txcache.django.read_only():
            self.assertEqual(cached_names(), ["test"])
        self.assertEqual(item_names(), ["test"])
        with txcache.django.read_write() as written:
            Item.objects.filter(id=1).update(name="written")
        read(["written"], "test", not_before=written.commit_timestamp)
        with txcache.django.read_only(not_before=written.commit_timestamp):
            self.assertEqual(cached_names(), ["written"])


class InsideAtomic(TestCase):
    def test_reads_the_test_database(self):
        Item.objects.create(id=1, name="test case")
        self.assertEqual(item_names(), ["test case"])
        self.assertEqual(cached_names(), ["test case"])
"""

MANAGE = """
import multiprocessing
import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":  # not again in a worker the spawn start method starts
    if os.environ.get("PROJECT_START_METHOD"):
        multiprocessing.set_start_method(os.environ["PROJECT_START_METHOD"])
    execute_from_command_line(sys.argv)
"""

PROJECT = {
    "manage.py": MANAGE,
    "project/__init__.py": "",
    "project/settings.py": SETTINGS,
    "catalog/__init__.py": "",
    "catalog/models.py": MODELS,
    "catalog/reads.py": READS,
    "catalog/runner.py": RUNNER,
    "catalog/tests.py": TESTS,
}


@dataclass
class Project:
    """The project on disk, the development database's stack, and the server."""

    directory: Path
    stack: Stack
    server: EmbeddedPostgres

    @property
    def development(self) -> str:
        """The development database's name."""
        return str(psycopg.conninfo.conninfo_to_dict(self.stack.dsn)["dbname"])

    def manage(self, *args: str, mode: str = "consistent", **environment: str) -> str:
        """``manage.py args`` with the stack's settings and ``TXCACHE_MODE=mode``; its
        output. Fails the test, with that output, if it exits with another status than 0."""
        env = {**os.environ, **self.stack.settings(), "TXCACHE_MODE": mode, **environment}
        env["DJANGO_SETTINGS_MODULE"] = "project.settings"
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, (
            f"manage.py {' '.join(args)} exited {done.returncode}:\n{output}"
        )
        return output

    def test_databases(self) -> list[str]:
        """The databases of the server whose name starts with ``test_<development>``."""
        with psycopg.connect(self.server.dsn, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT datname FROM pg_database WHERE starts_with(datname, %s) ORDER BY 1",
                (f"test_{self.development}",),
            ).fetchall()
        return [name for (name,) in rows]


@pytest.fixture(scope="module")
def project(
    postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    """The project, its development database (migrated, one row: ``development``) on the
    session's server, and a stack following it."""
    directory = tmp_path_factory.mktemp("django_test_runner")
    for name, text in PROJECT.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text.lstrip())
    databases = fresh_database(postgres)
    options = StackOptions(dsn=next(databases), nodes=2, max_memory="64mb", agent_args=AGENT_ARGS)
    try:
        with Stack(options) as stack:
            made = Project(directory, stack, postgres)
            made.manage("migrate", "--run-syncdb", "--verbosity", "0")
            with psycopg.connect(stack.dsn, autocommit=True) as admin:
                admin.execute("INSERT INTO catalog_item (id, name) VALUES (1, 'development')")
            yield made
    finally:
        next(databases, None)  # drops the database


@pytest.fixture(autouse=True)
def no_test_database_left(project: Project) -> Iterator[None]:
    """Drop what a test leaves on the server (a kept test database, one a failed run left),
    so that the next test starts without it."""
    yield
    for name in project.test_databases():
        drop_database(project.server, name)


def ran_cleanly(project: Project, output: str, tests: int = 2) -> None:
    """The run passed its tests, read the development database again after them, and left
    no test database on the server."""
    assert f"Ran {tests} tests" in output, output
    assert "\nOK" in output, output
    assert "development read again after the run" in output, output
    assert "being accessed by other users" not in output, output
    assert project.test_databases() == [], output


@pytest.mark.parametrize("mode", ["consistent", "no_consistency", "bypass"])
def test_tests_read_the_test_database_and_it_is_dropped(project: Project, mode: str) -> None:
    output = project.manage("test", "catalog", "--noinput", mode=mode)
    ran_cleanly(project, output)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_parallel_workers_read_their_clones(project: Project, start_method: str) -> None:
    output = project.manage(
        "test",
        "catalog",
        "--noinput",
        "--parallel",
        "2",
        PROJECT_START_METHOD=start_method,
        PROJECT_CONNECTS_BEFORE_WORKERS="1",
    )
    assert "Cloning test database" in output, output
    ran_cleanly(project, output)


def test_a_dsn_given_follows_the_test_database(project: Project) -> None:
    output = project.manage("test", "catalog", "--noinput", PROJECT_GIVES_DSN="1")
    ran_cleanly(project, output)


def test_a_kept_test_database_is_read_in_the_next_run(project: Project) -> None:
    kept = f"test_{project.development}"
    for _ in range(2):  # creates it, then runs on it again
        output = project.manage("test", "catalog", "--noinput", "--keepdb")
        assert "Using existing test database" in output, output
        assert "Preserving test database" in output, output
        assert "development read again after the run" in output, output
        assert project.test_databases() == [kept], output


def test_an_agent_following_the_test_database_caches_the_tests(project: Project) -> None:
    project.manage("test", "catalog", "--noinput", "--keepdb", mode="bypass")  # creates it
    tests_dsn = project.server.dsn_for(f"test_{project.development}")
    options = StackOptions(
        dsn=tests_dsn, nodes=1, max_memory="64mb", slot="txcache_tests", agent_args=AGENT_ARGS
    )
    with Stack(options) as tests_stack:
        output = project.manage(
            "test",
            "catalog",
            "--noinput",
            "--keepdb",
            TXCACHE_NODES=",".join(tests_stack.node_addresses),
            TXCACHE_AGENT=tests_stack.agent_address,
            PROJECT_AGENT_FOLLOWS="test",
        )
    assert "\nOK" in output, output
    assert "development read again after the run" in output, output


@pytest.mark.parametrize("mode", ["consistent", "bypass"])
def test_a_cache_first_connected_in_the_tests_lets_the_database_drop(
    project: Project, mode: str
) -> None:
    output = project.manage(
        "test", "catalog", "--noinput", mode=mode, PROJECT_CONNECTS_IN_TESTS="1"
    )
    ran_cleanly(project, output)
