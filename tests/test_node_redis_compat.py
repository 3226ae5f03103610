"""The Redis commands Django's RedisCache and common clients send, through redis-py on RESP2
and RESP3: SET's options, expiry, several keys at once, counters, FLUSHDB, transactions
(redis-py's transactional pipelines), HELLO 3, and the versioned commands on RESP3."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.exceptions import ExecAbortError, ResponseError

from conftest import StartNode, info
from txcache.stack import NodeProcess, wait_until

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "value is not an integer or out of range"


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def rc(node: NodeProcess, protocol: int) -> Iterator[redis.Redis]:
    """A redis-py client of ``node`` speaking ``protocol`` (3: it sends HELLO 3 first)."""
    connection = redis.Redis(host=node.host, port=node.port, socket_timeout=10, protocol=protocol)
    yield connection
    connection.close()


def test_hello_negotiates_the_protocol(node: NodeProcess) -> None:
    client = redis.Redis(host=node.host, port=node.port, protocol=3)
    properties = client.execute_command("HELLO", 3)
    assert isinstance(properties, dict), "RESP3 replies HELLO with a map"
    assert properties[b"server"] == b"txcached"
    assert properties[b"proto"] == 3
    assert properties[b"modules"] == []
    assert set(properties) == {
        b"server",
        b"version",
        b"proto",
        b"id",
        b"mode",
        b"role",
        b"modules",
    }
    with pytest.raises(ResponseError, match="unsupported protocol version"):
        client.execute_command("HELLO", 4)
    with pytest.raises(ResponseError, match="Protocol version is not an integer"):
        client.execute_command("HELLO", "three")
    resp2 = redis.Redis(host=node.host, port=node.port, protocol=2)
    reply = resp2.execute_command("HELLO", 2)
    assert dict(zip(reply[::2], reply[1::2], strict=True))[b"proto"] == 2
    # redis-py's default is RESP3 now, and it just works.
    default = redis.Redis(host=node.host, port=node.port)
    assert default.set("k", "v")
    assert default.get("k") == b"v"
    assert default.get("missing") is None


def test_set_options(rc: redis.Redis) -> None:
    assert rc.set("k", "1", xx=True) is None
    assert rc.set("k", "1", nx=True) is True
    assert rc.set("k", "2", nx=True) is None
    assert rc.set("k", "2", xx=True) is True
    assert rc.set("k", "3", get=True) == b"2"
    assert rc.set("k", "4", nx=True, get=True) == b"3", "GET shows the old value anyway"
    assert rc.set("fresh", "x", get=True) is None
    assert rc.get("k") == b"3"
    assert rc.set("k", "v", ex=100)
    assert rc.ttl("k") == 100
    assert rc.set("k", "v", px=100_000)
    assert 99_000 < rc.pttl("k") <= 100_000
    assert rc.set("k", "v", exat=int(time.time()) + 200)
    assert 198 <= rc.ttl("k") <= 200
    assert rc.set("k", "v", pxat=int(time.time() * 1000) + 300_000)
    assert 298 <= rc.ttl("k") <= 300
    assert rc.set("k", "w", keepttl=True)
    assert 298 <= rc.ttl("k") <= 300
    assert rc.set("k", "x")
    assert rc.ttl("k") == -1, "a plain SET drops the expiry"
    assert rc.set("k", "gone", pxat=1), "a Unix time already past"
    assert rc.get("k") is None
    with pytest.raises(ResponseError, match="syntax error"):
        rc.execute_command("SET", "k", "v", "NX", "XX")
    with pytest.raises(ResponseError, match="syntax error"):
        rc.execute_command("SET", "k", "v", "EX", "10", "KEEPTTL")
    with pytest.raises(ResponseError, match="invalid expire time in 'set' command"):
        rc.execute_command("SET", "k", "v", "EX", "0")
    with pytest.raises(ResponseError, match=NOT_INTEGER):
        rc.execute_command("SET", "k", "v", "PX", "soon")
    assert rc.get("k") is None, "refused SETs store nothing"


def test_values_expire_and_are_never_returned_after(rc: redis.Redis) -> None:
    assert rc.set("brief", "v", px=150)
    assert rc.set("kept", "v")
    assert rc.get("brief") == b"v"
    assert 0 < rc.pttl("brief") <= 150
    wait_until(lambda: rc.get("brief") is None, "brief to expire")
    assert rc.ttl("brief") == -2
    assert rc.exists("brief", "kept") == 1
    assert rc.delete("brief") == 0
    assert rc.get("kept") == b"v"
    # Expired keys nobody reads go too: the node sweeps them.
    rc.mset({f"swept{i}": "v" for i in range(50)})
    for i in range(50):
        rc.pexpire(f"swept{i}", 50)
    wait_until(lambda: rc.dbsize() == 1, "the sweep to remove the expired keys")
    counters = info(rc, "txcache")
    assert counters["plain_expired"] >= 51
    assert counters["plain_expiring"] == 0


def test_ttl_expire_and_persist_follow_redis(rc: redis.Redis) -> None:
    assert rc.ttl("missing") == -2
    assert rc.pttl("missing") == -2
    assert rc.expire("missing", 10) is False
    assert rc.persist("missing") is False
    rc.set("k", "v")
    assert rc.ttl("k") == -1
    assert rc.expire("k", 10, xx=True) is False
    assert rc.expire("k", 10, gt=True) is False, "no expiry counts as infinite"
    assert rc.expire("k", 10, nx=True) is True
    assert rc.expire("k", 20, nx=True) is False
    assert rc.expire("k", 30, gt=True) is True
    assert rc.expire("k", 40, lt=True) is False
    assert rc.pexpire("k", 5_000, lt=True) is True
    assert 4_000 < rc.pttl("k") <= 5_000
    assert rc.ttl("k") == 5
    assert rc.persist("k") is True
    assert rc.persist("k") is False
    assert rc.ttl("k") == -1
    with pytest.raises(ResponseError, match="NX and XX, GT or LT options"):
        rc.execute_command("EXPIRE", "k", 10, "NX", "GT")
    with pytest.raises(ResponseError, match="GT and LT options"):
        rc.execute_command("EXPIRE", "k", 10, "GT", "LT")
    with pytest.raises(ResponseError, match="Unsupported option"):
        rc.execute_command("EXPIRE", "k", 10, "SOON")
    assert rc.expire("k", -1) is True, "a time in the past deletes the key"
    assert rc.exists("k") == 0


def test_several_keys_at_once(rc: redis.Redis) -> None:
    assert rc.mset({"a": "1", "b": "2", "c": "3"})
    assert rc.mget("a", "missing", "c") == [b"1", None, b"3"]
    assert rc.exists("a", "a", "missing", "b") == 3, "a key named twice counts twice"
    assert rc.delete("a", "b", "missing") == 2
    assert rc.mget(["a", "b", "c"]) == [None, None, b"3"]
    with pytest.raises(ResponseError, match="wrong number of arguments for 'mset'"):
        rc.execute_command("MSET", "a", "1", "b")


def test_counters(rc: redis.Redis) -> None:
    assert rc.incr("n") == 1
    assert rc.incr("n", 41) == 42
    assert rc.decr("n") == 41
    assert rc.decr("n", 11) == 30
    assert rc.incrby("n", -40) == -10
    assert rc.get("n") == b"-10"
    rc.set("counted", 5, ex=100)
    assert rc.incr("counted") == 6
    assert rc.ttl("counted") == 100, "INCR keeps the expiry"
    rc.set("text", "abc")
    with pytest.raises(ResponseError, match=NOT_INTEGER):
        rc.incr("text")
    rc.set("big", 2**63 - 1)
    with pytest.raises(ResponseError, match="increment or decrement would overflow"):
        rc.incr("big")
    with pytest.raises(ResponseError, match="decrement would overflow"):
        rc.decr("n", -(2**63))
    with pytest.raises(ResponseError, match=NOT_INTEGER):
        rc.execute_command("INCRBY", "n", "1.5")
    assert rc.get("n") == b"-10"


def test_plain_and_versioned_keys_stay_apart(rc: redis.Redis) -> None:
    stored = rc.execute_command("TXSET", "versioned", "v", 0, "OPEN", "SNAPSHOT", 5)
    assert stored == [b"inserted", 5, None], "RESP3's null is None too"
    for command in (("GET", "versioned"), ("INCR", "versioned"), ("EXPIRE", "versioned", 5)):
        with pytest.raises(ResponseError, match=WRONGTYPE):
            rc.execute_command(*command)
    with pytest.raises(ResponseError, match=WRONGTYPE):
        rc.set("versioned", "p", get=True)
    assert rc.mget("versioned") == [None]
    assert rc.ttl("versioned") == -1
    assert rc.persist("versioned") is False
    assert rc.set("versioned", "p", nx=True) is None, "it exists"
    assert rc.exists("versioned") == 1
    rc.set("plain", "x")
    with pytest.raises(ResponseError, match=WRONGTYPE):
        rc.execute_command("TXGET", "plain", 1, 2)


def test_versioned_commands_work_on_resp3(rc: redis.Redis) -> None:
    assert rc.execute_command("TXHEARTBEAT", 100, 1) == 1
    stored = rc.execute_command(
        "TXSET", "item", b"value", 0, "OPEN", "SNAPSHOT", 100, "TAGS", "s.t:id=1"
    )
    assert stored == [b"inserted", 100, None]
    hit = rc.execute_command("TXGET", "item", 100, 200, "WITHTAGS")
    assert hit == [b"value", 100, 101, 1, [b"s.t:id=1"]]
    assert rc.execute_command("TXGET", "other", 100, 200) == [None, b"compulsory"]
    assert rc.execute_command("TXSTATUS") == [100, 100, 1]
    assert rc.execute_command("TXINTERVAL", 100, "TAGS", "s.t:id=1") == [100, 101, 1]


def test_flushdb_clears_plain_keys_and_flushall_everything(rc: redis.Redis) -> None:
    rc.mset({"a": "1", "b": "2"})
    rc.set("brief", "v", ex=100)
    rc.execute_command("TXSET", "versioned", "v", 1, 2)
    assert rc.flushdb() is True
    assert rc.dbsize() == 1
    assert rc.execute_command("TXGET", "versioned", 1, 1)[0] == b"v"
    assert rc.flushdb(asynchronous=True) is True
    assert rc.flushall() is True
    assert rc.dbsize() == 0


def test_transactional_pipelines(rc: redis.Redis) -> None:
    with rc.pipeline() as pipe:
        pipe.mset({"a": "1", "b": "2"})
        pipe.expire("a", 300)
        pipe.incrby("b", 5)
        pipe.get("missing")
        pipe.mget("a", "b")
        pipe.ttl("a")
        assert pipe.execute() == [True, True, 7, None, [b"1", b"7"], 300]
    # An error in one queued command is its reply; the others run (no rollback).
    rc.set("text", "abc")
    with rc.pipeline() as pipe:
        pipe.set("c", "3")
        pipe.incr("text")
        pipe.incr("counter")
        results = pipe.execute(raise_on_error=False)
    assert results[0] is True
    assert results[2] == 1
    assert isinstance(results[1], ResponseError)
    assert rc.get("c") == b"3"
    # An error while queuing discards everything.
    with rc.pipeline() as pipe:
        pipe.set("d", "4")
        pipe.execute_command("NOSUCHCOMMAND")
        with pytest.raises((ExecAbortError, ResponseError), match="unknown command"):
            pipe.execute()
    assert rc.get("d") is None
    with rc.pipeline() as pipe:
        pipe.set("d", "4")
        pipe.execute_command("TXHEARTBEAT", 5, 1)
        with pytest.raises(ResponseError, match="not allowed inside a transaction"):
            pipe.execute()
    assert rc.get("d") is None
    # WATCH is refused: a transaction locks its shards instead.
    with rc.pipeline() as pipe, pytest.raises(ResponseError, match="WATCH is not supported"):
        pipe.watch("a")
    counters = info(rc, "stats")
    assert counters["transactions"] == 2
    assert counters["transactions_aborted"] == 2


def test_multi_exec_discard_by_hand(rc: redis.Redis) -> None:
    connection = rc.connection_pool.get_connection()

    def send(*command: str | int) -> object:
        connection.send_command(*command)
        return connection.read_response()

    try:
        assert send("MULTI") == b"OK"
        assert send("SET", "k", "v") == b"QUEUED"
        with pytest.raises(ResponseError, match="MULTI calls can not be nested"):
            send("MULTI")
        assert send("DISCARD") == b"OK"
        assert send("GET", "k") is None
        assert send("MULTI") == b"OK"
        assert send("INCR", "n") == b"QUEUED"
        assert send("GET", "n") == b"QUEUED"
        assert send("EXEC") == [1, b"1"]
        with pytest.raises(ResponseError, match="EXEC without MULTI"):
            send("EXEC")
        with pytest.raises(ResponseError, match="DISCARD without MULTI"):
            send("DISCARD")
    finally:
        rc.connection_pool.release(connection)


def test_other_clients_never_see_a_transaction_half_done(node: NodeProcess, protocol: int) -> None:
    """Writers set eight keys (spread over the shards) to one value per round, by a
    transaction and by MSET; readers read them all, by a transaction and by MGET, and always
    find one value."""
    keys = [f"group:{i}" for i in range(8)]
    rounds = 300

    def connect() -> redis.Redis:
        return redis.Redis(host=node.host, port=node.port, socket_timeout=10, protocol=protocol)

    connect().mset(dict.fromkeys(keys, "0"))
    failures: list[str] = []

    def write(by_transaction: bool) -> None:
        client = connect()
        for i in range(rounds):
            if by_transaction:
                with client.pipeline() as pipe:
                    for key in keys:
                        pipe.set(key, i)
                    pipe.execute()
            else:
                client.mset(dict.fromkeys(reversed(keys), i))

    def read(by_transaction: bool) -> None:
        client = connect()
        for _ in range(rounds):
            if by_transaction:
                with client.pipeline() as pipe:
                    for key in keys:
                        pipe.get(key)
                    values = pipe.execute()
            else:
                values = client.mget(keys)
            if len(set(values)) != 1:
                failures.append(repr(values))

    threads = [
        threading.Thread(target=function, args=(by_transaction,))
        for function in (write, read)
        for by_transaction in (True, False)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_expired_keys_make_room_before_live_keys_are_evicted(start_node: StartNode) -> None:
    node = start_node("--max-memory", "4mb", "--shards", "1")
    client = redis.Redis(host=node.host, port=node.port, protocol=3)
    value = b"x" * 10_000
    for i in range(150):
        client.set(f"brief{i}", value, px=100)
    for i in range(150):
        client.set(f"live{i}", value)
    wait_until(lambda: client.exists(*(f"brief{i}" for i in range(150))) == 0, "expiry")
    for i in range(150):
        client.set(f"more{i}", value)
    counters = info(client, "txcache")
    assert counters["evictions"] == 0, "the expired keys' room was enough"
    assert client.exists(*(f"live{i}" for i in range(150))) == 150
    assert counters["plain_expired"] == 150
    client.close()


def test_info_speaks_resp3(rc: redis.Redis) -> None:
    rc.set("k", "v", ex=10)
    fields = info(rc)
    for name in ("plain_expired", "plain_expiring", "transactions", "transactions_aborted"):
        assert name in fields, name
    assert fields["plain_expiring"] == 1
    assert rc.config_get("maxmemory") == {"maxmemory": str(64 << 20)}
    assert rc.config_get("nosuchparameter") == {}
    assert rc.client_getname() is None
