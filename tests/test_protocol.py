"""The one Python client of the protocol (``txcache._protocol`` over ``txcache._resp``):
each command's decoder on replies as hiredis gives them, the commands against a real node
and a real agent, ``txcache status``'s probes in every state they report, and the package
working without redis-py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conftest import StartNode
from txcache import protocol, setup_database
from txcache._pinset import Pin
from txcache._resp import read_reply
from txcache.cli._probe import probe_agent, probe_node
from txcache.protocol import BadReply, Command, PasswordRefused, ReplyError
from txcache.stack import AgentProcess, free_port, wait_until

PASSWORD = "protocol-test-password"


# -- decoders ---------------------------------------------------------------------------------


def test_txget_decodes_a_hit_with_tags_and_a_miss() -> None:
    command = protocol.txget(b"k", 100, 250, with_tags=True)
    assert command.arguments == ("TXGET", b"k", 100, 250, "WITHTAGS")
    hit = command.read([b"v", 120, 251, 1, [b"public.items:id=42"]])
    assert hit == protocol.Hit(b"v", protocol.Interval(120, 251, True), ("public.items:id=42",))
    assert protocol.txget(b"k", 1, 2).read([None, b"capacity"]) == protocol.Miss("capacity")
    untagged = protocol.txget(b"k", 1, 2).read([b"v", 1, 2, 0])
    assert isinstance(untagged, protocol.Hit)
    assert untagged.tags == ()


def test_txset_sends_tags_only_with_a_snapshot() -> None:
    assert protocol.txset(b"k", b"v", 0, None, tags=["t"]).arguments == (
        "TXSET",
        b"k",
        b"v",
        0,
        "OPEN",
    )
    command = protocol.txset(b"k", b"v", 5, 9, snapshot=7, tags=["a", "b"])
    assert command.arguments == ("TXSET", b"k", b"v", 5, 9, "SNAPSHOT", 7, "TAGS", "a", "b")
    assert command.read([b"inserted", 7, None]) == protocol.Stored("inserted", 7, None)
    assert command.read([b"empty", None, None]) == protocol.Stored("empty", None, None)


def test_a_reply_of_the_wrong_shape_is_a_bad_reply_naming_the_command() -> None:
    cases: list[tuple[Command[Any], object]] = [
        (protocol.txstatus(), [1, 2]),
        (protocol.txstatus(), b"OK"),
        (protocol.txinterval(5, []), [None, 1, 0]),
        (protocol.pins(), [[1, b"snap"]]),
        (protocol.barrier(), 7),
        (protocol.txget(b"k", 1, 2), 3),
    ]
    for command, reply in cases:
        with pytest.raises(BadReply, match=str(command.arguments[0])):
            command.read(reply)


def test_info_keeps_every_field_and_integer_fields_the_numbers() -> None:
    text = b"# Server\r\nversion:0.1.0\r\nshards:4\r\n\r\n"
    text += b"# Memory\r\nused_memory:-12\r\nratio:1.5\r\n"
    fields = protocol.info().read(text)
    assert fields == {"version": "0.1.0", "shards": "4", "used_memory": "-12", "ratio": "1.5"}
    assert protocol.integer_fields(fields) == {"shards": 4, "used_memory": -12}
    assert protocol.info("memory").arguments == ("INFO", "memory")


def test_status_pins_catalog_and_barrier_decode_the_agents_replies() -> None:
    status = protocol.agent_status().read(b"commit_position:120\r\npins:3\r\n")
    assert status == {"commit_position": 120, "pins": 3}
    entry = [120, b"00000003-1", 1_700_000_000_250_000, b"10:12:11"]
    assert protocol.pins().read([entry]) == [Pin(120, "00000003-1", 1_700_000_000.25, "10:12:11")]
    assert protocol.pin().read(entry[:3]).snapshot_text is None
    catalog = protocol.tag_columns().read([[100, [[b"public.items", [b"id", b"sku"]]]]])
    assert catalog == [protocol.CatalogVersion(100, (("public.items", ("id", "sku")),))]
    assert protocol.barrier().read([5, 9]) == protocol.Barrier(5, 9)
    assert protocol.commit_lsn(77, timeout_ms=10).arguments == ("COMMITLSN", 77, 10)
    assert protocol.commit_lsn(77).read(300) == 300


# -- a real node ------------------------------------------------------------------------------


def test_the_versioned_commands_against_a_node(start_node: StartNode) -> None:
    node = start_node("--max-memory", "16mb")
    with protocol.connect(node.address, timeout=5) as connection:
        assert connection.run(protocol.txstatus()) == protocol.NodeStatus(0, None, 0)
        assert connection.call("TXHEARTBEAT", 100, 5_000_000) == 1
        assert connection.run(protocol.txstatus()) == protocol.NodeStatus(100, 100, 5_000_000)
        stored = connection.run(protocol.txset(b"k", b"v", 0, None, snapshot=100, tags=["s.t"]))
        assert stored == protocol.Stored("inserted", 100, None)
        hit = connection.run(protocol.txget(b"k", 95, 150, with_tags=True))
        assert hit == protocol.Hit(b"v", protocol.Interval(100, 101, True), ("s.t",))
        miss = connection.run(protocol.txget(b"other", 95, 150))
        assert miss == protocol.Miss("compulsory")
        assert connection.run(protocol.txinterval(120, ["s.t"])) == protocol.Interval(
            120, 121, True
        )
        every_field = connection.run(protocol.info())
        fields = protocol.integer_fields(every_field)
        assert fields["maxmemory"] == 16 * 1024 * 1024
        assert fields["hits"] == 1
        assert set(protocol.MISS_KINDS) <= {name[len("misses_") :] for name in fields}
        with pytest.raises(ReplyError, match="TXGET"):
            connection.run(protocol.txget(b"k", 9, 1))
        with pytest.raises(BadReply):  # a node answers PING, but not with a NodeStatus
            connection.run(Command(("PING",), protocol.txstatus().decode))


def test_a_node_with_a_password(start_node: StartNode) -> None:
    node = start_node("--max-memory", "16mb", "--password", PASSWORD)
    with protocol.connect(node.address, password=PASSWORD) as connection:
        assert connection.run(protocol.txstatus()).position == 0
    with pytest.raises(PasswordRefused) as refused:
        protocol.connect(node.address, password="wrong")
    assert "WRONGPASS" in str(refused.value.reply)


# -- txcache status's probes ------------------------------------------------------------------


def test_probe_node_reports_up_refused_and_unreachable(start_node: StartNode) -> None:
    node = start_node("--max-memory", "16mb", "--password", PASSWORD)
    report = probe_node(node.address, password=PASSWORD)
    assert (report.state, report.error, report.position) == ("up", None, 0)
    assert report.info["maxmemory"] == 16 * 1024 * 1024
    assert report.hit_rate is None

    anonymous = probe_node(node.address)
    assert anonymous.state == "refused"
    assert anonymous.error == ("Authentication required. (give --password or set TXCACHE_PASSWORD)")
    wrong = probe_node(node.address, password="wrong")
    assert wrong.state == "refused"
    assert "give --password" in (wrong.error or "")
    assert not (wrong.error or "").startswith("WRONGPASS")

    dead = probe_node(f"127.0.0.1:{free_port()}", timeout=1)
    assert dead.state == "unreachable"
    assert "Connection refused" in (dead.error or "")


@pytest.fixture
def mute_server() -> Iterator[tuple[str, threading.Event]]:
    """Not a txcached: a server on a free port that answers ``+OK`` to whatever it reads,
    or, once the event is set, reads nothing and answers nothing."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    silent, stop = threading.Event(), threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                if silent.is_set():
                    stop.wait()
                while not silent.is_set() and connection.recv(65536):
                    connection.sendall(b"+OK\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}", silent
    stop.set()
    thread.join(5)
    listener.close()


def test_probe_reports_a_bad_reply_and_a_silent_server(
    mute_server: tuple[str, threading.Event],
) -> None:
    address, silent = mute_server
    report = probe_node(address, timeout=2)
    assert report.state == "bad reply"
    assert report.error is not None
    assert report.error.startswith("unexpected reply to TXSTATUS: ")
    assert report.error.endswith("is this a txcached node?")

    silent.set()
    started = time.monotonic()
    agent_report = probe_agent(address, timeout=0.3)
    assert agent_report.state == "unreachable"
    assert "timed out" in (agent_report.error or "")
    assert time.monotonic() - started < 5


@pytest.fixture
def agent(
    database: str, start_node: StartNode
) -> Iterator[tuple[AgentProcess, psycopg.Connection]]:
    """The agent on a set-up database with one indexed table, feeding one node; and an
    autocommit connection to the database."""
    with psycopg.connect(database, autocommit=True) as db:
        db.execute("CREATE TABLE items (id integer PRIMARY KEY, sku text)")
        setup_database(database)
        node = start_node("--max-memory", "16mb")
        process = AgentProcess(database, [node.address], "--pin-interval", "50ms")
        try:
            yield process, db
        finally:
            process.stop()


def test_the_agent_commands_and_its_probe(agent: tuple[AgentProcess, psycopg.Connection]) -> None:
    process, db = agent
    address = f"{process.host}:{process.port}"
    with protocol.connect(address) as connection:
        wait_until(lambda: connection.run(protocol.pins()), "a pin")
        listed = connection.run(protocol.pins())
        assert [pin.ts for pin in listed] == sorted(pin.ts for pin in listed)
        fresh = connection.run(protocol.pin())
        assert fresh.ts >= listed[-1].ts
        assert fresh.snapshot_text is not None
        assert abs(fresh.current_as_of - time.time()) < 60
        status = connection.run(protocol.agent_status())
        assert {"commit_position", "pins", "pins_certified"} <= set(status)
        versions = connection.run(protocol.tag_columns())
        assert "id" in dict(versions[-1].tables)["public.items"]
        fence = connection.run(protocol.barrier())
        assert fence.decoded >= fence.barrier

        with db.transaction():
            row = db.execute(
                "INSERT INTO items VALUES (1, 'a') RETURNING pg_current_xact_id()::text"
            ).fetchone()
        assert row is not None
        lsn = connection.run(protocol.commit_lsn(int(row[0]), timeout_ms=20_000))
        assert lsn > fence.barrier

    report = probe_agent(address)
    assert report.state == "up"
    assert report.newest_pin is not None
    assert report.commit_position is not None
    not_a_node = probe_node(address)
    assert not_a_node.state == "refused"
    assert "TXSTATUS" in (not_a_node.error or "")


# -- no redis-py ------------------------------------------------------------------------------


def test_the_package_and_the_command_work_without_redis_py() -> None:
    # `None` in sys.modules makes `import redis` fail, as it does where redis-py is missing.
    program = (
        "import sys; sys.modules['redis'] = None\n"
        "import txcache, txcache.cli.status, txcache.cli._probe, txcache._protocol\n"
        "from txcache.cli import main\n"
        "raise SystemExit(main(['status', '--nodes', '127.0.0.1:1', '--timeout', '1']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert "node 127.0.0.1:1: UNREACHABLE" in result.stdout
    assert result.returncode == 1


def test_a_txget_reply_of_the_wrong_shape_is_an_error_not_a_hit_or_a_new_counter() -> None:
    """A node's miss type names a statistics counter, and a hit's value is bytes: anything
    else (a broken or hostile node) is a refused reply, logged, and a miss."""
    command = protocol.txget(b"k", 1, 2)
    assert command.read([None, b"capacity"]) == protocol.Miss("capacity")
    replies: list[list[Any]] = [[None, b"x" * 5000], [7, 1, 2, 1], [[b"a"], 1, 2, 1]]
    for reply in replies:
        outcome = read_reply(command, reply)
        assert isinstance(outcome, ReplyError), reply
