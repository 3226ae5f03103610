"""Hostile input and memory pressure: the node answers errors, stays up, and stays bounded."""

from __future__ import annotations

import random
import socket
import time

import pytest
import redis

from conftest import StartNode, info
from txcache.stack import NodeProcess


def raw_exchange(node: NodeProcess, payload: bytes, read_timeout: float = 2.0) -> bytes:
    """Send ``payload`` on a fresh connection and return what the node answers until it
    closes the connection or goes quiet."""
    with socket.create_connection((node.host, node.port), timeout=5) as sock:
        sock.sendall(payload)
        sock.settimeout(read_timeout)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            pass
        except ConnectionResetError:
            pass
        return received


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"*99999999999\r\n", b"-ERR Protocol error"),
        (b"*1\r\n$99999999999\r\n", b"-ERR Protocol error"),
        (b"*1\r\n$-5\r\n", b"-ERR Protocol error"),
        (b"*1\r\n$abc\r\n", b"-ERR Protocol error"),
        (b"*1\r\n:5\r\n", b"-ERR Protocol error"),
        (b"*2\r\n$3\r\nGET\r\n$1\r\nkXY\r\n", b"-ERR Protocol error"),
        (b"x" * 70_000, b"-ERR Protocol error"),
        (b'SET "unbalanced\r\n', b"-ERR Protocol error"),
        (b"*1\r\n*1\r\n*1\r\n$4\r\nPING\r\n", b"-ERR Protocol error"),
    ],
    ids=[
        "absurd-multibulk",
        "absurd-bulk",
        "negative-bulk",
        "non-numeric-length",
        "non-bulk-argument",
        "bulk-overrun",
        "endless-inline",
        "unbalanced-quotes",
        "nested-request",
    ],
)
def test_malformed_frames_get_an_error_and_a_closed_connection(
    node: NodeProcess, payload: bytes, expected: bytes
) -> None:
    answer = raw_exchange(node, payload)
    assert answer.startswith(expected), answer
    assert node.alive()
    assert redis.Redis(host=node.host, port=node.port, protocol=2).ping()


def test_inline_commands_work_for_humans(node: NodeProcess) -> None:
    answer = raw_exchange(node, b'PING\r\nSET k "a b"\r\nGET k\r\nQUIT\r\n')
    assert answer == b"+PONG\r\n+OK\r\n$3\r\na b\r\n+OK\r\n"


def test_random_garbage_never_disturbs_other_clients(node: NodeProcess) -> None:
    healthy = redis.Redis(host=node.host, port=node.port, protocol=2)
    healthy.set("canary", b"alive")
    generator = random.Random(20101004)
    prefixes = [b"*", b"$", b"*3\r\n$3\r\nSET\r\n", b"*2\r\n", b"", b"TXGET "]
    for _ in range(200):
        garbage = generator.choice(prefixes) + generator.randbytes(generator.randint(1, 300))
        raw_exchange(node, garbage, read_timeout=0.05)
        assert healthy.get("canary") == b"alive"
    assert node.alive()
    assert info(healthy, "stats")["protocol_errors"] > 0


def test_claimed_lengths_are_not_allocated(start_node: StartNode) -> None:
    node = start_node("--max-memory", "64mb", "--shards", "1")
    baseline = node.rss_bytes()
    # 40 clients each claim a 60 MB value and send only its first byte.
    sockets = []
    for i in range(40):
        sock = socket.create_connection((node.host, node.port))
        sock.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\nk%d\r\n$60000000\r\nx" % (len(str(i)) + 1, i))
        sockets.append(sock)
    time.sleep(0.5)  # deliberately: time to read (and wrongly allocate), nothing to await
    grown = node.rss_bytes() - baseline
    for sock in sockets:
        sock.close()
    assert grown < 20 << 20, f"RSS grew by {grown} bytes for 40 claimed 60 MB values"
    assert redis.Redis(host=node.host, port=node.port, protocol=2).ping()


def test_slow_partial_request_completes(node: NodeProcess) -> None:
    with socket.create_connection((node.host, node.port), timeout=5) as sock:
        for byte in b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n":
            sock.sendall(bytes([byte]))
        assert sock.recv(100) == b"$5\r\nhello\r\n"


def test_memory_stays_under_the_limit_far_past_it(start_node: StartNode) -> None:
    limit = 32 << 20
    node = start_node("--max-memory", str(limit))
    client = redis.Redis(host=node.host, port=node.port, protocol=2)
    value = b"v" * 1000
    written = 0
    for batch in range(100):  # 100 batches x 2000 x ~1 KB = ~200 MB, 6x the limit
        pipe = client.pipeline(transaction=False)
        for i in range(1000):
            n = batch * 1000 + i
            pipe.set(f"plain:{n}", value)
            pipe.execute_command(
                "TXSET", f"ver:{n}", value, 0, "OPEN", "SNAPSHOT", 10, "TAGS", f"s.t:id={n}"
            )
        pipe.execute()
        written += 2000 * len(value)
        assert info(client, "memory")["used_memory"] <= limit
    memory = info(client, "memory")
    stats = info(client, "txcache")
    assert written > 5 * limit
    assert stats["evictions"] > 0
    assert memory["used_memory"] > limit // 2, "eviction should keep the cache mostly full"
    rss = node.rss_bytes()
    print(f"limit={limit} used={memory['used_memory']} rss={rss} keys={stats['keys']}")
    assert rss < 2 * limit + (32 << 20), f"RSS {rss} is not bounded by the memory limit"
    # Recent keys are still served.
    assert client.get(f"plain:{100 * 1000 - 1}") == value


def test_pipelined_reads_of_large_values_do_not_pile_up_replies(start_node: StartNode) -> None:
    """Regression: 700 pipelined GETs of a 1 MiB value (14 KB of requests) made the node
    hold 700 MiB of replies at once."""
    node = start_node("--max-memory", "64mb")
    client = redis.Redis(host=node.host, port=node.port, protocol=2)
    client.set("big", b"x" * (1 << 20))
    baseline = node.rss_bytes()
    with socket.create_connection((node.host, node.port), timeout=30) as sock:
        sock.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 700)
        time.sleep(1.0)  # the client reads nothing: replies wait in the node
        peak = node.rss_bytes() - baseline
        received = 0
        while received < 700 * ((1 << 20) + 12):  # "$1048576\r\n" + value + "\r\n"
            chunk = sock.recv(1 << 20)
            assert chunk
            received += len(chunk)
    assert peak < 64 << 20, f"RSS grew by {peak} bytes while replies waited"
    assert client.get("big") == b"x" * (1 << 20)


def _multibulk(*args: bytes) -> bytes:
    """One request in RESP's multibulk form."""
    parts = [b"*%d\r\n" % len(args)]
    parts += [b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args]
    return b"".join(parts)


def _random_pipeline(rng: random.Random, count: int) -> bytes:
    """``count`` requests of every kind the hot path answers, on a few keys, with values that
    hold CR and LF; some inline."""
    keys = [b"plain:%d" % i for i in range(5)]
    versioned = [b"ver:%d" % i for i in range(5)]
    requests = []
    for _ in range(count):
        value = bytes(rng.choice(b"ab\r\n$*0") for _ in range(rng.randrange(0, 40)))
        lo = rng.randrange(1, 50)
        requests.append(
            rng.choice(
                [
                    _multibulk(b"SET", rng.choice(keys), value),
                    _multibulk(b"GET", rng.choice(keys)),
                    _multibulk(b"get", rng.choice(keys)),
                    _multibulk(
                        b"TXSET", rng.choice(versioned), value, b"%d" % lo, b"%d" % (lo + 1)
                    ),
                    _multibulk(b"TXGET", rng.choice(versioned), b"0", b"100"),
                    _multibulk(b"DEL", rng.choice(keys), rng.choice(versioned)),
                    _multibulk(b"ECHO", value),
                    b"GET " + rng.choice(keys) + b"\r\n",
                    b'ECHO "two words"\r\n',
                ]
            )
        )
    return b"".join(requests)


def _answers(node: NodeProcess, payload: bytes, rng: random.Random | None) -> bytes:
    """Everything ``node`` answers to ``payload`` on one connection: sent whole, or (with
    ``rng``) cut into pieces of 1 to 64 bytes that arrive apart, so that reads end inside
    requests."""
    marker = b"end-of-the-pipeline-5f0c2e7a"
    last = _multibulk(b"ECHO", marker)
    with socket.create_connection((node.host, node.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if rng is None:
            sock.sendall(payload + last)
        else:
            data = payload + last
            while data:
                size = rng.randrange(1, 65)
                sock.sendall(data[:size])
                data = data[size:]
                time.sleep(0.0005)  # so that the pieces arrive in separate reads
        received = b""
        while not received.endswith(b"$%d\r\n%s\r\n" % (len(marker), marker)):
            chunk = sock.recv(65536)
            assert chunk, f"the node closed the connection after {received[-200:]!r}"
            received += chunk
        return received


def test_a_pipeline_cut_anywhere_is_answered_as_if_sent_whole(start_node: StartNode) -> None:
    """The node answers each request while it is still in its read buffer and moves past it
    after: however a pipeline is cut into reads, the answers must be byte for byte those of
    the pipeline sent whole (the same requests on a fresh node)."""
    rng = random.Random(7)
    payload = _random_pipeline(rng, 400)
    whole = _answers(start_node(), payload, None)
    cut = _answers(start_node(), payload, rng)
    assert b"-ERR" not in whole, whole[:500]
    assert whole.count(b"\r\n") > 400
    assert cut == whole
