"""``txcache up`` and ``txcache status``, run as the user runs them: real subprocesses.

``txcache up`` starts PostgreSQL, setup, two nodes and the agent, writes the settings to an
env file once everything runs, and stops it all on SIGINT/SIGTERM. ``txcache status`` reports
on every endpoint and fails (exit 1) when one is unreachable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from redis.exceptions import NoPermissionError

from txcache import connect
from txcache.cli._health import database_seconds
from txcache.cli.up import format_settings
from txcache.stack import NodeProcess, TcpProxy, free_port, free_ports, wait_until

SETTING_NAMES = ["TXCACHE_DSN", "TXCACHE_NODES", "TXCACHE_AGENT"]
PASSWORD = "up-test-password"
START_TIMEOUT = 60.0


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without txcache settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXCACHE_")}
    keep = ("TXCACHE_PG_BIN", "TXCACHE_PG_TMPDIR", "TXCACHE_AGENT_BIN")
    env.update({k: os.environ[k] for k in keep if k in os.environ})
    return {**env, **settings}


def txcache(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """Run a short ``txcache`` command to completion."""
    return subprocess.run(
        [sys.executable, "-m", "txcache", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(**settings),
        check=False,
    )


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Up:
    """One ``txcache up`` subprocess."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.env_file = directory / "txcache.env"
        self.stderr_path = directory / "up.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "txcache", "up", "--env-file", str(self.env_file), *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=clean_env(),
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_ready(self) -> dict[str, str]:
        """Wait for the env file; the settings it holds."""
        deadline = time.monotonic() + START_TIMEOUT
        while not self.env_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"txcache up did not get ready:\n{self.stderr()}")
            time.sleep(0.05)
        lines = self.env_file.read_text().splitlines()
        return dict(line.split("=", 1) for line in lines)

    def children(self) -> list[int]:
        """PIDs of the direct children: the nodes, the agent, the postmaster."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            pids += [int(pid) for pid in (task / "children").read_text().split()]
        return pids

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig`` and wait; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            status = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        return status


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Up, dict[str, str]]]:
    """One running ``txcache up --nodes 2 --password …`` shared by the read-only tests."""
    directory = tmp_path_factory.mktemp("up")
    up = Up(directory, "--nodes", "2", "--max-memory", "32mb", "--password", PASSWORD)
    settings = up.wait_ready()
    yield up, settings
    up.stop()


def client(text: str) -> redis.Redis:
    host, port = address(text)
    return redis.Redis(host=host, port=port, protocol=2, socket_timeout=10, password=PASSWORD)


def test_settings_are_printed_and_written_to_the_env_file(stack: tuple[Up, dict[str, str]]) -> None:
    up, settings = stack
    assert list(settings) == [*SETTING_NAMES, "TXCACHE_PASSWORD"]
    assert settings["TXCACHE_PASSWORD"] == PASSWORD
    assert settings["TXCACHE_DSN"].startswith("postgresql://postgres@127.0.0.1:")
    assert len(settings["TXCACHE_NODES"].split(",")) == 2
    assert up.env_file.stat().st_mode & 0o777 == 0o600
    assert up.process.stdout is not None
    printed = [up.process.stdout.readline().strip() for _ in settings]
    assert printed == [f"{name}={value}" for name, value in settings.items()]
    log = up.stderr()
    assert "cache node 2 (txcached) listening on" in log
    assert f"agent (txcache-agent) listening on {settings['TXCACHE_AGENT']}" in log


def test_the_stack_serves_pins_and_streams_writes_to_every_node(
    stack: tuple[Up, dict[str, str]],
) -> None:
    _up, settings = stack
    nodes = [client(node) for node in settings["TXCACHE_NODES"].split(",")]
    agent = client(settings["TXCACHE_AGENT"])
    try:
        wait_until(lambda: agent.execute_command("PINS"), "a first pin")
        first_pin = agent.execute_command("PINS")[-1]
        before = [node.execute_command("TXSTATUS")[0] for node in nodes]
        with psycopg.connect(settings["TXCACHE_DSN"], autocommit=True) as db:
            db.execute("CREATE TABLE IF NOT EXISTS up_probe (id int PRIMARY KEY)")
            db.execute("INSERT INTO up_probe VALUES (1) ON CONFLICT DO NOTHING")
        wait_until(
            lambda: all(int(node.info("txcache")["invalidations"]) > 0 for node in nodes),
            "the write to reach every node",
        )
        after = [node.execute_command("TXSTATUS")[0] for node in nodes]
        assert all(new > old for old, new in zip(before, after, strict=True))
        # A new pin after the write, or the newest one's current_as_of moved on.
        # (The list is empty for a moment after the CREATE TABLE: no older pin is offered.)
        wait_until(
            lambda: agent.execute_command("PINS")[-1:] not in ([], [first_pin]), "the pins to move"
        )
        # The stream password is the agent's alone: the printed password cannot move N.
        with pytest.raises(NoPermissionError):
            nodes[0].execute_command("TXHEARTBEAT", 2**40, 1)
    finally:
        for connection in [*nodes, agent]:
            connection.close()


def test_status_reports_every_node_and_the_agent(stack: tuple[Up, dict[str, str]]) -> None:
    _up, settings = stack
    result = txcache("status", **settings)
    assert result.returncode == 0, result.stderr
    for node in settings["TXCACHE_NODES"].split(","):
        assert f"node {node}: up" in result.stdout
    assert f"agent {settings['TXCACHE_AGENT']}: up" in result.stdout
    assert "hit rate" in result.stdout
    assert "3 of 3 endpoint(s) up" in result.stdout


def test_status_asks_the_nodes_the_agent_feeds(stack: tuple[Up, dict[str, str]]) -> None:
    _up, settings = stack
    agent_only = {name: value for name, value in settings.items() if name != "TXCACHE_NODES"}
    result = txcache("status", **agent_only)
    assert result.returncode == 0, result.stderr
    for node in settings["TXCACHE_NODES"].split(","):
        assert f"node {node}: up" in result.stdout
    assert "3 of 3 endpoint(s) up" in result.stdout


def test_status_json_has_the_same_report(stack: tuple[Up, dict[str, str]]) -> None:
    _up, settings = stack
    result = txcache("status", "--json", **settings)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert [node["address"] for node in report["nodes"]] == settings["TXCACHE_NODES"].split(",")
    for node in report["nodes"]:
        assert node["reachable"] is True
        assert node["maxmemory"] == 32 * 1024 * 1024
        assert set(node["misses"]) == {"compulsory", "capacity", "staleness", "consistency"}
        assert node["lag_bytes"] is not None
    assert report["agent"]["pins"] >= 1
    assert report["agent"]["status"]["role"] == "active", "every STATUS field, text too"
    assert report["agent"]["newest_pin"]["age_seconds"] < 30


def test_status_reports_a_dead_node_beside_live_ones(stack: tuple[Up, dict[str, str]]) -> None:
    _up, settings = stack
    dead = f"127.0.0.1:{free_port()}"
    nodes = f"{settings['TXCACHE_NODES']},{dead}"
    agent = settings["TXCACHE_AGENT"]
    result = txcache("status", "--nodes", nodes, "--agent", agent, "--password", PASSWORD)
    assert result.returncode == 1
    assert f"node {dead}: UNREACHABLE" in result.stdout
    assert "Connection refused" in result.stdout
    assert "3 of 4 endpoint(s) up" in result.stdout
    assert "Traceback" not in result.stderr


def test_status_calls_a_node_the_agent_does_not_feed_degraded(
    stack: tuple[Up, dict[str, str]],
) -> None:
    _up, settings = stack
    with NodeProcess("--max-memory", "16mb", "--password", PASSWORD) as unfed:
        nodes = f"{settings['TXCACHE_NODES']},{unfed.address}"
        result = txcache("status", **{**settings, "TXCACHE_NODES": nodes})
    assert result.returncode == 1
    assert f"node {unfed.address}: up" in result.stdout  # it answers …
    assert f"DEGRADED node {unfed.address}: receives no invalidation stream" in result.stdout
    assert f"fix: start the agent with --node {unfed.address}" in result.stdout
    assert "is connected to 2 node(s), 3 given here" in result.stdout
    assert "4 of 4 endpoint(s) up; all reachable; 2 problem(s)" in result.stdout


def test_status_checks_the_database_setup_and_the_slot(stack: tuple[Up, dict[str, str]]) -> None:
    _up, settings = stack
    result = txcache("status", "--json", "--slot", "elsewhere", **settings)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    [problem] = report["problems"]
    assert problem["part"] == "database"
    assert problem["what"].startswith("setup step slot missing")
    assert problem["fix"] == "run txcache setup --slot elsewhere"


def test_status_without_an_agent_says_the_library_would_not_cache(
    stack: tuple[Up, dict[str, str]],
) -> None:
    _up, settings = stack
    result = txcache("status", **{**settings, "TXCACHE_AGENT": ""})
    assert result.returncode == 1
    assert "DEGRADED settings: no agent given: a library with these settings runs uncached" in (
        result.stdout
    )


def test_status_bounds_a_database_that_accepts_connections_but_never_answers(
    stack: tuple[Up, dict[str, str]],
) -> None:
    _up, settings = stack
    where = psycopg.conninfo.conninfo_to_dict(settings["TXCACHE_DSN"])
    proxy = TcpProxy(str(where["host"]), int(str(where["port"])), postgres=True)
    try:
        dsn = psycopg.conninfo.make_conninfo(settings["TXCACHE_DSN"], port=str(proxy.port))
        through = {**settings, "TXCACHE_DSN": dsn}
        healthy = txcache("status", **through)
        assert healthy.returncode == 0, healthy.stdout  # the database answers through the proxy
        proxy.cut()  # frozen: the kernel accepts connections, nothing answers
        started = time.monotonic()
        result = txcache("status", "--timeout", "1", **through)
        took = time.monotonic() - started
    finally:
        proxy.stop()
    assert result.returncode == 1
    assert (
        "DEGRADED database: unreachable: cannot connect to PostgreSQL: connection timeout expired"
        in result.stdout
    )
    assert "3 of 3 endpoint(s) up; all reachable; 1 problem(s)" in result.stdout
    assert took < database_seconds(1) + 10  # the interpreter's start-up aside


@pytest.mark.parametrize("timeout", ["inf", "1e12", "-1", "nan", "0", "two"])
def test_status_refuses_a_timeout_that_is_not_above_0_and_at_most_a_day(timeout: str) -> None:
    result = txcache("status", "--nodes", "127.0.0.1:1", "--timeout", timeout)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "txcache status: error: argument --timeout: the value must be a number of seconds, > 0 "
        f"and at most 86400 (one day), not {timeout!r}"
    )


def test_status_without_the_password_says_so(stack: tuple[Up, dict[str, str]]) -> None:
    _up, settings = stack
    result = txcache("status", **{**settings, "TXCACHE_PASSWORD": ""})
    assert result.returncode == 1
    for node in settings["TXCACHE_NODES"].split(","):
        assert f"node {node}: REFUSED: Authentication required" in result.stdout
    assert "give --password or set TXCACHE_PASSWORD" in result.stdout


def test_a_library_without_the_password_logs_what_the_agent_asks_for(
    stack: tuple[Up, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    _up, settings = stack
    caplog.set_level(logging.WARNING, logger="txcache")
    with connect(
        settings["TXCACHE_DSN"], nodes=settings["TXCACHE_NODES"], agent=settings["TXCACHE_AGENT"]
    ):
        wait_until(
            lambda: "it requires a password" in caplog.text,
            f"the agent's refusal in the log:\n{caplog.text}",
            timeout=30,
        )
    [line] = [r.getMessage() for r in caplog.records if "refuses the library's" in r.getMessage()]
    assert "(NOAUTH" in line, "once, naming the agent's reply"


def test_a_second_up_on_the_same_env_file_is_refused(stack: tuple[Up, dict[str, str]]) -> None:
    """It would write its own settings there, and remove the file when it stops while the
    first stack still runs."""
    up, _settings = stack
    command = [sys.executable, "-m", "txcache", "up", "--env-file", str(up.env_file)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "belongs to another txcache up, still running" in result.stderr
    assert up.env_file.exists()


def test_a_stack_on_a_second_database_of_the_cluster_takes_a_slot_of_its_own(
    stack: tuple[Up, dict[str, str]], tmp_path: Path
) -> None:
    """``txcache up --dsn`` of another database of a cluster a stack follows: the slot's
    name is taken (slots are the cluster's), the error says to choose another ``--slot``,
    and ``up`` takes one."""
    _, settings = stack
    with psycopg.connect(settings["TXCACHE_DSN"], autocommit=True) as admin:
        admin.execute("CREATE DATABASE second_shop")
    dsn = psycopg.conninfo.make_conninfo(settings["TXCACHE_DSN"], dbname="second_shop")
    (tmp_path / "taken").mkdir()
    taken = Up(tmp_path / "taken", "--dsn", dsn, "--nodes", "1")
    assert taken.process.wait(START_TIMEOUT) == 1
    assert "choose another --slot" in taken.stderr(), taken.stderr()
    taken.stop()
    (tmp_path / "second").mkdir()
    second = Up(tmp_path / "second", "--dsn", dsn, "--nodes", "1", "--slot", "second_shop")
    try:
        assert "dbname=second_shop" in second.wait_ready()["TXCACHE_DSN"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            slots = "SELECT active FROM pg_replication_slots WHERE slot_name = 'second_shop'"
            wait_until(lambda: conn.execute(slots).fetchone() == (True,), "the second slot used")
    finally:
        assert second.stop() == 0, second.stderr()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('second_shop')")  # WAL it would keep


def test_settings_are_shell_quoted_and_exported_with_shell() -> None:
    settings = {"TXCACHE_DSN": "host=db user=app", "TXCACHE_NODES": "127.0.0.1:1"}
    assert format_settings(settings) == "TXCACHE_DSN='host=db user=app'\nTXCACHE_NODES=127.0.0.1:1"
    exported = format_settings(settings, shell=True).splitlines()
    assert exported == ["export TXCACHE_DSN='host=db user=app'", "export TXCACHE_NODES=127.0.0.1:1"]


def test_status_with_nothing_listening_exits_1_with_a_clear_message() -> None:
    nodes, agent = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = txcache("status", "--json", TXCACHE_NODES=nodes, TXCACHE_AGENT=agent)
    assert time.monotonic() - started < 10  # no retries with backoff
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    [node] = report["nodes"]
    assert node["address"] == nodes
    assert node["reachable"] is False
    assert "Connection refused" in node["error"]
    assert report["agent"]["reachable"] is False


def test_status_without_endpoints_is_a_usage_error() -> None:
    result = txcache("status")
    assert result.returncode == 2
    assert "TXCACHE_NODES" in result.stderr


def test_sigint_stops_the_agent_the_nodes_and_postgres(tmp_path: Path) -> None:
    up = Up(tmp_path, "--nodes", "2", "--max-memory", "16mb")
    up.wait_ready()
    children = up.children()
    assert len(children) == 4  # two nodes, the agent, the postmaster
    assert up.stop(signal.SIGINT) == 0
    assert [pid for pid in children if alive(pid)] == []
    assert not up.env_file.exists()
    log = up.stderr()
    order = [log.index(part) for part in ("agent stopped", "cache node on", "PostgreSQL stopped")]
    assert order == sorted(order), log


def logged_pid(up: Up, part: str) -> int:
    """The pid ``up`` logged when ``part`` (e.g. ``listening on 127.0.0.1:5000``) started."""
    found = re.findall(rf"{re.escape(part)} \(pid (\d+)", up.stderr())
    assert found, up.stderr()
    return int(found[-1])


def test_a_part_that_dies_is_restarted_on_its_port_and_the_data_is_kept(tmp_path: Path) -> None:
    metrics = free_ports(2)  # the node's, and the one after it for the agent's
    up = Up(tmp_path, "--nodes", "1", "--max-memory", "16mb", "--metrics-port", str(metrics))
    settings = up.wait_ready()
    node, agent = settings["TXCACHE_NODES"], settings["TXCACHE_AGENT"]
    assert f"metrics at http://127.0.0.1:{metrics}/metrics" in up.stderr()
    with psycopg.connect(settings["TXCACHE_DSN"], autocommit=True) as db:
        db.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
    for part, restarted in (
        (f"listening on {node}", f"cache node 1 (txcached on {node}) restarted"),
        (f"listening on {agent}", f"the agent (txcache-agent on {agent}) restarted"),
    ):
        os.kill(logged_pid(up, part), signal.SIGKILL)
        wait_until(lambda: restarted in up.stderr(), restarted, timeout=30, log=up.stderr)  # noqa: B023
        assert up.process.poll() is None
    assert "exited; its log ends with" in up.stderr()
    # What a part warns of is shown as it happens: the agent lost its node.
    echoed = re.compile(r"txcache up: agent: .*WARN.*cache node unreachable")
    wait_until(lambda: echoed.search(up.stderr()), "the agent's warning", log=up.stderr)
    host, port = address(node)
    with redis.Redis(host=host, port=port, protocol=2, socket_timeout=10) as restarted_node:
        assert restarted_node.execute_command("TXSTATUS")[0] >= 0  # back on its address
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as page:
        assert b"txcached" in page.read()
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics + 1}/metrics", timeout=10) as page:
        assert b"txcache_agent_stream_position" in page.read()  # the agent's, after the node
    with psycopg.connect(settings["TXCACHE_DSN"], autocommit=True) as db:
        assert db.execute("SELECT x FROM kept").fetchall() == [(42,)]
    assert up.stop(signal.SIGINT) == 0


def test_a_stale_env_file_is_removed_even_when_up_then_fails(tmp_path: Path) -> None:
    # A killed run's file must not pass for this run's: a script waiting for the file would
    # load a dead stack's settings. Removed before the first check after parsing, so a run
    # that fails at once (no room for the ports) shows it without starting anything.
    env_file = tmp_path / "txcache.env"
    env_file.write_text("TXCACHE_DSN=postgresql://postgres@127.0.0.1:1/postgres\n")
    result = txcache("up", "--env-file", str(env_file), "--port-base", "65535")
    assert result.returncode == 2, result.stderr
    assert "leaves no room" in result.stderr
    assert f"removed the existing {env_file}" in result.stderr
    assert not env_file.exists()


def test_a_taken_port_fails_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = txcache("up", "--port-base", str(port - 1), "--nodes", "2")
    assert result.returncode == 1
    assert f"{port} (cache node 2)" in result.stderr
    assert "PostgreSQL started" not in result.stderr


def test_an_unreachable_database_fails_setup_with_exit_1() -> None:
    result = txcache("up", "--dsn", f"host=127.0.0.1 port={free_port()} user=postgres")
    assert result.returncode == 1
    assert "setup failed" in result.stderr
    assert "cannot connect to PostgreSQL" in result.stderr


BAD_VALUES = [
    ("--max-staleness=10x", 'argument --max-staleness: unknown duration unit "x" in "10x"'),
    ("--max-memory=10x", 'argument --max-memory: unknown size unit "x" in "10x"'),
    ("--max-memory=-1mb", 'argument --max-memory: "-1mb" is not a size'),
    ("--password=", "argument --password: the value must be a non-empty string, not ''"),
]


def test_bad_values_for_the_nodes_or_the_agent_are_refused_before_the_database_changes(
    stack: tuple[Up, dict[str, str]],
) -> None:
    _up, settings = stack
    with psycopg.connect(settings["TXCACHE_DSN"], autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS up_untouched")
        admin.execute("CREATE DATABASE up_untouched")
    untouched = psycopg.conninfo.make_conninfo(settings["TXCACHE_DSN"], dbname="up_untouched")
    for option, says in BAD_VALUES:
        result = txcache("up", option, "--dsn", untouched)
        assert result.returncode == 2, result.stderr
        [error] = [line for line in result.stderr.splitlines() if "error:" in line]
        assert error.startswith(f"txcache up: error: {says}"), error
        assert "setup" not in result.stderr
    with psycopg.connect(untouched, autocommit=True) as db:
        slots = db.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = current_database()"
        ).fetchall()
        assert slots == []
        assert db.execute("SELECT pubname FROM pg_publication").fetchall() == []
        assert db.execute("SELECT evtname FROM pg_event_trigger").fetchall() == []


def test_bad_values_are_refused_before_postgres_starts() -> None:
    for option, says in BAD_VALUES:
        result = txcache("up", option)
        assert result.returncode == 2, result.stderr
        assert says in result.stderr
        assert "PostgreSQL started" not in result.stderr
        assert "Traceback" not in result.stderr


def test_a_missing_binary_fails_before_anything_starts() -> None:
    result = txcache("up", TXCACHED_BIN="/nonexistent/txcached")
    assert result.returncode == 1
    assert "txcached is not an executable file" in result.stderr
    assert "make build" in result.stderr
    assert "PostgreSQL started" not in result.stderr
    assert "Traceback" not in result.stderr
