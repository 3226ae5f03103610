"""Plain key-value mode, server commands, INFO and AUTH, through redis-py."""

from __future__ import annotations

import socket
import subprocess
import urllib.request

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoPermissionError, ResponseError
from redis.retry import Retry

from conftest import StartNode, info
from txcache.stack import NodeProcess, find_binary, free_port

ONCE = Retry(NoBackoff(), retries=0)
"""For a client whose refusal is the question: redis-py retries a refused connection or
authentication (connection errors) three times with backoff, seconds in all."""


def test_get_set_del_exists(client: redis.Redis) -> None:
    assert client.get("missing") is None
    assert client.set("a", b"1")
    assert client.set("b", b"")
    assert client.get("a") == b"1"
    assert client.get("b") == b""
    assert client.exists("a", "b", "a", "c") == 3
    assert client.dbsize() == 2
    assert client.delete("a", "c") == 1
    assert client.get("a") is None
    assert client.set("b", b"2")
    assert client.get("b") == b"2"


def test_flushall_empties_every_shard(client: redis.Redis) -> None:
    for i in range(100):
        client.set(f"k{i}", b"v")
    assert client.dbsize() == 100
    assert client.flushall()
    assert client.dbsize() == 0


def test_unknown_set_options_are_refused_not_ignored(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="syntax error"):
        client.execute_command("SET", "k", b"v", "EXX", 10)
    assert client.get("k") is None


def test_ping_echo_select_client(client: redis.Redis) -> None:
    assert client.ping()
    assert client.echo("hi") == b"hi"
    assert client.execute_command("SELECT", 0)
    with pytest.raises(redis.ResponseError, match="out of range"):
        client.execute_command("SELECT", 1)
    assert client.client_setname("tester")
    assert client.client_getname() == "tester"


def test_unknown_command_and_wrong_arity(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="unknown command 'NOPE'"):
        client.execute_command("NOPE", 1)
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'get'"):
        client.execute_command("GET")
    assert info(client, "stats")["command_errors"] == 2


def test_info_reports_every_documented_field(client: redis.Redis) -> None:
    client.set("plain", b"x" * 100)
    client.execute_command("TXSET", "v", b"y" * 1000, 0, "OPEN", "SNAPSHOT", 5, "TAGS", "s.t:c=1")
    client.get("plain")
    fields = info(client)
    for name in [
        "uptime_in_seconds",
        "connected_clients",
        "total_commands_processed",
        "maxmemory",
        "used_memory",
        "used_memory_values",
        "used_memory_keys",
        "used_memory_intervals",
        "used_memory_tags",
        "used_memory_history",
        "used_memory_rss",
        "hits",
        "misses_compulsory",
        "misses_capacity",
        "misses_staleness",
        "misses_consistency",
        "inserts",
        "extensions",
        "evictions",
        "nondeterminism_warnings",
        "keys",
        "versions",
        "open_versions",
    ]:
        assert name in fields, name
    assert fields["used_memory_values"] == 1100
    assert fields["keys"] == 2
    assert fields["open_versions"] == 1
    assert fields["used_memory_tags"] > 0
    assert fields["maxmemory"] == 64 << 20
    sizes = info(client, "sizes")
    assert sum(sizes.values()) == 2
    assert info(client, "nosuchsection") == {}


def test_config_set_maxmemory_evicts_and_refuses_what_never_fits(start_node: StartNode) -> None:
    node = start_node("--max-memory", "16mb", "--shards", "2")
    client = redis.Redis(host=node.host, port=node.port, protocol=2)
    for i in range(1000):
        client.set(f"k{i}", b"x" * 10_000)
    assert info(client, "memory")["used_memory"] <= 16 << 20
    assert client.config_get("maxmemory") == {"maxmemory": str(16 << 20)}
    assert client.config_set("maxmemory", "4mb")
    memory = info(client, "memory")
    assert memory["used_memory"] <= 4 << 20
    assert memory["maxmemory"] == 4 << 20
    assert info(client, "txcache")["evictions"] > 0
    with pytest.raises(redis.ResponseError, match=r"TOOLARGE .*can never fit"):
        client.set("huge", b"x" * (3 << 20))
    with pytest.raises(redis.ResponseError, match="TOOLARGE"):
        client.execute_command("TXSET", "huge", b"x" * (3 << 20), 1, 2)
    assert client.get("huge") is None
    client.close()


def test_auth_is_required_when_a_password_is_set(start_node: StartNode) -> None:
    node = start_node("--password", "s3cret")
    anonymous = redis.Redis(host=node.host, port=node.port, protocol=2, retry=ONCE)
    with pytest.raises(redis.AuthenticationError):
        anonymous.get("k")
    with pytest.raises(redis.AuthenticationError):
        anonymous.execute_command("TXGET", "k", 1, 2)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host=node.host, port=node.port, password="wrong", protocol=2, retry=ONCE).ping()
    good = redis.Redis(host=node.host, port=node.port, password="s3cret", protocol=2)
    assert good.set("k", b"v")
    assert good.get("k") == b"v"
    node.wait_for_log("AUTH failed")


def test_only_the_stream_password_allows_stream_commands(start_node: StartNode) -> None:
    node = start_node("--password", "app", "--stream-password", "agent")
    application = redis.Redis(host=node.host, port=node.port, password="app", protocol=2)
    assert application.set("k", b"v")
    for command in (("TXHEARTBEAT", 100, 1), ("TXINVALIDATE", 100, 1, "t"), ("TXRESET", 100, 1)):
        with pytest.raises(NoPermissionError, match=f"{command[0]} is a stream command"):
            application.execute_command(*command)
    with pytest.raises(NoPermissionError, match="TXREWIND is a stream command"):
        application.execute_command("TXREWIND", 100, 1)
    with pytest.raises(NoPermissionError, match="TXORIGIN is a stream command"):
        application.execute_command("TXORIGIN", "1:1")
    assert application.execute_command("TXSTATUS")[0] == 0, "nothing moved N"
    agent = redis.Redis(host=node.host, port=node.port, password="agent", protocol=2)
    assert agent.execute_command("TXHEARTBEAT", 100, 1) == 1
    assert agent.get("k") == b"v", "the stream password allows every command"
    assert application.execute_command("TXSTATUS")[0] == 100


def test_the_origin_names_the_database_history_the_stream_follows(node: NodeProcess) -> None:
    client = redis.Redis(host=node.host, port=node.port, protocol=2)
    assert client.execute_command("TXORIGIN") is None, "no history named yet"
    assert client.execute_command("TXORIGIN", "7311:1") == b"OK"
    assert client.execute_command("TXORIGIN") == b"7311:1"
    assert client.execute_command("TXORIGIN", "7311:2") == b"OK"
    assert client.execute_command("TXORIGIN") == b"7311:2"
    for bad in ("", "x" * 257):
        with pytest.raises(ResponseError, match="origin must be 1 to 256 bytes"):
            client.execute_command("TXORIGIN", bad)
    with pytest.raises(ResponseError, match="wrong number of arguments"):
        client.execute_command("TXORIGIN", "a", "b")
    assert client.execute_command("TXORIGIN") == b"7311:2", "a refused origin changes nothing"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--password", "same", "--stream-password", "same"], "equals --password"),
        (["--stream-password", ""], "empty --password or --stream-password"),
        (["--password", ""], "empty --password or --stream-password"),
    ],
)
def test_passwords_that_open_more_than_they_say_are_refused(flags: list[str], message: str) -> None:
    binary = find_binary("txcached")
    result = subprocess.run(
        [str(binary), "--port", "0", *flags], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_a_stream_password_alone_leaves_data_commands_open(start_node: StartNode) -> None:
    node = start_node("--stream-password", "agent")
    anonymous = redis.Redis(host=node.host, port=node.port, protocol=2, retry=ONCE)
    assert anonymous.set("k", b"v")
    with pytest.raises(NoPermissionError, match="TXHEARTBEAT is a stream command"):
        anonymous.execute_command("TXHEARTBEAT", 100, 1)
    with pytest.raises(redis.AuthenticationError):
        anonymous.execute_command("AUTH", "wrong")
    assert anonymous.execute_command("AUTH", "agent") is True
    assert anonymous.execute_command("TXHEARTBEAT", 100, 1) == 1


def test_auth_without_a_configured_password_is_an_error(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="without any password configured"):
        client.execute_command("AUTH", "x")


def test_max_clients_refuses_with_an_error(start_node: StartNode) -> None:
    node = start_node("--max-clients", "2")
    first = redis.Redis(host=node.host, port=node.port, protocol=2)
    second = redis.Redis(host=node.host, port=node.port, protocol=2)
    assert first.ping()
    assert second.ping()
    with pytest.raises(redis.ConnectionError, match="max number of clients"):
        redis.Redis(host=node.host, port=node.port, protocol=2, retry=ONCE).ping()
    assert first.ping()


def test_prometheus_endpoint_serves_the_same_metrics(start_node: StartNode) -> None:
    port = free_port()
    node = start_node("--metrics-port", str(port))
    client = redis.Redis(host=node.host, port=node.port, protocol=2)
    client.set("k", b"v")
    client.get("k")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    assert "# TYPE txcached_plain_hits_total counter" in body
    assert "txcached_plain_hits_total 1" in body
    assert "txcached_used_memory_values 1" in body
    assert 'txcached_objects_by_size{max_bytes="1"} 1' in body


def test_hello_speaks_resp2_and_resp3(node: NodeProcess) -> None:
    client = redis.Redis(host=node.host, port=node.port, protocol=2)
    reply = client.execute_command("HELLO", 2)
    properties = dict(zip(reply[::2], reply[1::2], strict=True))
    assert properties[b"server"] == b"txcached"
    assert properties[b"proto"] == 2
    resp3 = redis.Redis(host=node.host, port=node.port, protocol=3)
    assert resp3.ping()
    assert resp3.execute_command("HELLO")[b"proto"] == 3
    with pytest.raises(redis.ResponseError, match="unsupported protocol version"):
        client.execute_command("HELLO", 4)


def test_hello_auth_authenticates(start_node: StartNode) -> None:
    node = start_node("--password", "pw")
    with socket.create_connection((node.host, node.port), timeout=5) as sock:
        sock.sendall(b"HELLO 2\r\n")
        assert sock.recv(1000).startswith(b"-NOAUTH")
        sock.sendall(b"HELLO 2 AUTH default pw\r\n")
        assert b"txcached" in sock.recv(1000)
        sock.sendall(b"PING\r\n")
        assert sock.recv(1000) == b"+PONG\r\n"
