"""The async RESP transport (``txcache.aio._resp``) against real nodes and a real agent: one
connection multiplexed across tasks, replies matched in order, cancelled callers that do not
desynchronise the stream, a silent or dead node marked down with the sync endpoint's backoff,
passwords; and, as pure logic on a stand-in transport, the FIFO matching itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import hiredis
import pytest
import redis

from conftest import StartNode, info
from library_fixtures import LibraryStack
from txcache import protocol
from txcache._nodes import CacheNode
from txcache._protocol import Miss
from txcache._resp import Endpoint, ReplyReader
from txcache.aio._agent import AsyncAgentClient
from txcache.aio._nodes import AsyncCacheNode
from txcache.aio._resp import AsyncEndpoint, AsyncRespConnection
from txcache.protocol import ConnectionLost, PasswordRefused, ReplyError, RespConnection
from txcache.stack import NodeProcess, wait_until


def test_many_tasks_share_one_connection_and_get_their_own_replies(start_node: StartNode) -> None:
    node_process = start_node("--max-memory", "16mb")

    async def body() -> None:
        # A generous timeout: on a loaded machine the first connect may take a while, and a
        # node marked down answers None.
        node = AsyncCacheNode(node_process.address, timeout=30)
        try:
            calls = (node.call("ECHO", f"task {i}") for i in range(500))
            replies = await asyncio.gather(*calls)
            assert replies == [f"task {i}".encode() for i in range(500)]
            with redis.Redis(host=node_process.host, port=node_process.port, protocol=2) as c:
                assert info(c, "clients")["connected_clients"] == 2  # ours and this one
        finally:
            node.close()

    asyncio.run(body())


def test_a_pipeline_is_one_write_answered_in_order(start_node: StartNode) -> None:
    node_process = start_node("--max-memory", "16mb")

    async def body() -> None:
        node = AsyncCacheNode(node_process.address)
        replies = await node.pipeline([("SET", "a", "1"), ("GET", "a"), ("NOSUCHCOMMAND",)])
        assert replies is not None
        assert replies[:2] == [b"OK", b"1"]
        assert isinstance(replies[2], ReplyError)
        node.close()

    asyncio.run(body())


def test_cancelled_callers_do_not_desynchronise_the_stream(start_node: StartNode) -> None:
    node_process = start_node("--max-memory", "16mb")

    async def body() -> None:
        node = AsyncCacheNode(node_process.address)
        await node.call("PING")  # connected: every task below writes at once
        tasks = [asyncio.create_task(node.call("ECHO", str(i))) for i in range(300)]
        await asyncio.sleep(0)  # each has written its request and waits for the reply
        for task in tasks[::3]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for i, result in enumerate(results):
            if i % 3:
                assert result == str(i).encode()
            else:
                assert isinstance(result, asyncio.CancelledError)
        assert await node.call("ECHO", "after") == b"after"
        assert node.is_up()
        node.close()

    asyncio.run(body())


def test_a_silent_node_is_marked_down_and_retried_after_the_backoff(start_node: StartNode) -> None:
    node_process = start_node("--max-memory", "16mb")
    pid = node_process.process.pid

    async def body() -> None:
        node = AsyncCacheNode(node_process.address, timeout=0.3)
        assert await node.call("PING") == b"PONG"
        stop(pid)
        try:
            started = time.monotonic()
            replies = await asyncio.gather(*(node.call("PING") for _ in range(5)))
            assert replies == [None] * 5  # every waiting call fails once the reply is late
            assert 0.25 < time.monotonic() - started < 2.0
            assert not node.is_up()
            started = time.monotonic()
            assert await node.lookup(b"k", 1, 2, with_tags=False) == protocol.Miss("unavailable")
            assert time.monotonic() - started < 0.05  # down: no call is made
        finally:
            os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(0.6)  # the first backoff is 0.5 s
        assert await node.call("PING") == b"PONG"
        assert node.is_up()
        node.close()

    asyncio.run(body())


def stop(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped (the signal is delivered when the
    process is next scheduled)."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: _state(pid) in ("T", "t"), f"process {pid} to stop", timeout=5)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def test_a_dead_node_is_down_and_a_restarted_one_is_used_again(start_node: StartNode) -> None:
    node_process = start_node("--max-memory", "16mb")
    port = node_process.port

    async def body() -> None:
        node = AsyncCacheNode(node_process.address)
        assert await node.call("PING") == b"PONG"
        node_process.kill()
        assert await node.call("PING") is None
        assert not node.is_up()
        start_node("--max-memory", "16mb", "--port", str(port))
        await asyncio.sleep(0.6)
        assert await node.call("PING") == b"PONG"
        node.close()

    asyncio.run(body())


def test_a_password_is_sent_first_and_a_wrong_one_refused(start_node: StartNode) -> None:
    node_process = start_node("--max-memory", "16mb", "--password", "s3cret-pw")

    async def body() -> None:
        node = AsyncCacheNode(node_process.address, password="s3cret-pw")
        assert await node.call("PING") == b"PONG"
        node.close()
        target = (node_process.host, node_process.port)
        with pytest.raises(PasswordRefused):
            await AsyncRespConnection.open(target, password="wrong")
        wrong = AsyncCacheNode(node_process.address, password="wrong")
        assert await wrong.call("PING") is None
        assert not wrong.is_up()

    asyncio.run(body())


def test_the_agents_waiting_commands_do_not_hold_its_refresh(lib: LibraryStack) -> None:
    async def body() -> None:
        agent = AsyncAgentClient(lib.agent_address, refresh_interval=60)
        waiting = asyncio.create_task(agent.commit_lsn(2**40, timeout=1.5))  # never decoded
        await asyncio.sleep(0.1)
        started = time.monotonic()
        assert await agent.refresh()
        assert time.monotonic() - started < 1.0
        assert agent.pins(staleness=60, not_before=None, now=time.time())
        assert await waiting is None
        await agent.close()

    lib.caught_up()
    lib.fresh_pins()
    asyncio.run(body())


# -- the FIFO on a stand-in transport (pure logic) --------------------------------------------


class _Transport(asyncio.Transport):
    """Records writes; nothing is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True


def _reply(*values: bytes) -> bytes:
    return b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in values)


def test_replies_split_anywhere_reach_their_callers_in_order() -> None:
    async def body() -> None:
        connection = AsyncRespConnection(("127.0.0.1", 1), timeout=5)
        transport = _Transport()
        connection.connection_made(transport)
        futures = connection.send([("GET", "a"), ("GET", "b"), ("GET", "c")])
        # hiredis's stub types the command as a 1-tuple.
        packed = [hiredis.pack_command(("GET", k)) for k in "abc"]  # type: ignore[arg-type]
        assert transport.written == [b"".join(packed)]
        futures[1].cancel()  # its caller went away: its reply is dropped
        data = _reply(b"1", b"2", b"3")
        for i in range(len(data)):
            connection.data_received(data[i : i + 1])
        assert futures[0].result() == b"1"
        assert futures[2].result() == b"3"
        assert connection.owed == 0
        connection.data_received(_reply(b"nobody asked"))
        assert transport.aborted
        assert not connection.usable
        with pytest.raises(ConnectionLost):
            connection.send([("PING",)])

    asyncio.run(body())


def test_an_endpoint_down_returns_none_without_connecting() -> None:
    async def body() -> None:
        endpoint = AsyncEndpoint("127.0.0.1:1", role="cache node", connect_timeout=0.2)
        assert await endpoint.call("PING") is None  # nothing listens on port 1
        assert not endpoint.is_up()
        assert await endpoint.call("PING") is None

    asyncio.run(body())


def claim(node_process: NodeProcess, database: str) -> None:
    """What an agent of ``database`` does first on a node: name it, then send the stream."""
    agent = redis.Redis(node_process.host, node_process.port)
    assert agent.execute_command("TXDATABASE", database) == b"OK"
    agent.execute_command("TXHEARTBEAT", "10", "100")
    agent.close()


def test_a_node_another_database_claims_is_down_for_both_drivers(start_node: StartNode) -> None:
    """A library connected to a node no agent fed yet (its declaration then stands): once
    another database's agent claims it, the next command is refused (-WRONGDB), and the node
    is down for the library — its reconnections' greetings refused — not a warning per call."""
    node_process = start_node("--max-memory", "16mb")

    def greeting() -> tuple[str, str]:
        return "TXDATABASE", "1/6"

    node = CacheNode(node_process.address, greeting=greeting)
    assert node.lookup(b"k", 1, 2, with_tags=False) == Miss("compulsory")

    async def body() -> None:
        async_node = AsyncCacheNode(node_process.address, greeting=greeting)
        assert await async_node.lookup(b"k", 1, 2, with_tags=False) == Miss("compulsory")
        claim(node_process, "1/5")
        assert await async_node.lookup(b"k", 1, 2, with_tags=False) == Miss("unavailable")
        assert not async_node.is_up()
        assert await async_node.database_interval(5, ["s.t"]) is None
        async_node.close()

    asyncio.run(body())
    assert node.lookup(b"k", 1, 2, with_tags=False) == Miss("unavailable")
    assert not node.is_up()
    node.close()
    fresh = CacheNode(node_process.address, greeting=greeting)
    assert fresh.lookup(b"k", 1, 2, with_tags=False) == Miss("unavailable"), "greeting refused"
    fresh.close()


# A RESP3 map keyed by an array: hiredis raises TypeError (unhashable), not ProtocolError.
UNREADABLE = b"%1\r\n*1\r\n:1\r\n:2\r\n"


def test_an_unreadable_reply_loses_the_connection_not_the_call() -> None:
    """A broken or hostile node's reply hiredis cannot build is a lost connection (the node
    down, the call going on without it), never an exception the application sees."""

    async def body() -> None:
        connection = AsyncRespConnection(("127.0.0.1", 1), timeout=5)
        transport = _Transport()
        connection.connection_made(transport)
        (future,) = connection.send([("TXGET", "k", 1, 2)])
        connection.data_received(UNREADABLE)
        assert transport.aborted
        with pytest.raises(ConnectionLost, match="an unreadable reply: TypeError"):
            future.result()

    asyncio.run(body())
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def answer() -> None:
            peer, _ = listener.accept()
            with peer:
                peer.recv(4096)
                peer.sendall(UNREADABLE)
                peer.recv(4096)  # until the client closes

        server = threading.Thread(target=answer, daemon=True)
        server.start()
        connection = RespConnection(listener.getsockname())
        with pytest.raises(ConnectionLost, match="an unreadable reply: TypeError"):
            connection.call("TXGET", "k", 1, 2)
        server.join(timeout=10)


def test_an_unfinished_reply_may_buffer_no_more_than_the_limit() -> None:
    """Bytes that never finish a reply are refused once past the limit (a string that claims
    more than it sends, or an array of ever more elements), and the count starts again at
    each whole reply; both drivers read replies through this reader."""
    address = ("127.0.0.1", 1)
    claimed = ReplyReader(address, limit=100)
    claimed.feed(b"$1000\r\n" + b"x" * 90)
    assert claimed.gets() is False
    claimed.feed(b"x" * 10)
    with pytest.raises(ConnectionLost, match=r"more than 100 bytes without finishing a reply"):
        claimed.gets()
    endless = ReplyReader(address, limit=100)
    endless.feed(b"*1000\r\n")
    for _ in range(40):
        endless.feed(b":1\r\n")
        with contextlib.suppress(ConnectionLost):
            assert endless.gets() is False
            continue
        break
    else:
        pytest.fail("an array that never ends was buffered past the limit")
    whole = ReplyReader(address, limit=100)
    for _ in range(5):
        whole.feed(b"$60\r\n" + b"y" * 60 + b"\r\n")
        assert whole.gets() == b"y" * 60


def test_a_reply_dripped_byte_by_byte_is_bounded_by_the_timeout_as_a_whole() -> None:
    """A peer that sends one byte at a time, each before the socket's timeout, cannot hold
    a call longer than the timeout: the reply must arrive whole within it (both drivers)."""
    reply = b"$20\r\n" + b"x" * 20 + b"\r\n"
    stop = threading.Event()

    def drip(listener: socket.socket) -> None:
        peer, _ = listener.accept()
        with peer:
            peer.recv(4096)
            for byte in reply:
                if stop.wait(0.2):
                    return
                with contextlib.suppress(OSError):
                    peer.sendall(bytes([byte]))

    async def async_call(address: tuple[str, int]) -> None:
        connection = await AsyncRespConnection.open(address, timeout=1.0)
        try:
            await connection.call("GET", "k")
        finally:
            connection.close()

    def call(driver: str, address: tuple[str, int]) -> None:
        if driver == "sync":
            RespConnection(address, timeout=1.0).call("GET", "k")
        else:
            asyncio.run(async_call(address))

    for driver in ("sync", "async"):
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            server = threading.Thread(target=drip, args=(listener,), daemon=True)
            server.start()
            started = time.monotonic()
            with pytest.raises(ConnectionLost):
                call(driver, listener.getsockname())
            assert time.monotonic() - started < 3, f"{driver}: waited for every byte"
            stop.set()
            server.join(timeout=10)
            stop.clear()


@contextlib.contextmanager
def silent_server() -> Iterator[tuple[tuple[str, int], queue.Queue[socket.socket]]]:
    """A server that accepts connections and answers nothing: its address, and the
    connections it accepted, in order."""
    accepted: queue.Queue[socket.socket] = queue.Queue()
    with socket.socket() as listener, contextlib.ExitStack() as peers:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)

        def accept() -> None:
            with contextlib.suppress(OSError):  # the listener closed: the test is over
                while True:
                    accepted.put(peers.enter_context(listener.accept()[0]))

        threading.Thread(target=accept, daemon=True).start()
        yield listener.getsockname(), accepted


def read_until(peer: socket.socket, sent: bytes) -> None:
    """Read ``peer`` until the client has sent ``sent`` (for at most 10 s)."""
    peer.settimeout(10)
    received = b""
    while sent not in received:
        chunk = peer.recv(4096)
        assert chunk, f"closed before sending {sent!r}: {received!r}"
        received += chunk


def closed_by_client(peer: socket.socket) -> bool:
    """Read ``peer`` until the client closes it (``True``), or for 10 s (``False``)."""
    peer.settimeout(10)
    try:
        while peer.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_a_connection_whose_opener_or_probe_is_cancelled_is_closed() -> None:
    """A connection is closed at once, not left to the garbage collector, when the task
    opening it is cancelled while ``AUTH`` is unanswered, and when closing the endpoint
    cancels its probe while the probe's ``PING`` is unanswered."""

    async def body(address: tuple[str, int], accepted: queue.Queue[socket.socket]) -> None:
        # Replies are awaited for 60 s: a connection left open would close only then.
        opening = asyncio.create_task(
            AsyncRespConnection.open(address, password="secret", timeout=60)
        )
        peer = await asyncio.to_thread(accepted.get, timeout=10)
        await asyncio.to_thread(read_until, peer, b"AUTH")
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert await asyncio.to_thread(closed_by_client, peer)

        endpoint = AsyncEndpoint(f"{address[0]}:{address[1]}", role="cache node", timeout=60)
        endpoint.refused("is told down by the test")  # probed in 0.5 s
        probe = await asyncio.to_thread(accepted.get, timeout=10)
        await asyncio.to_thread(read_until, probe, b"PING")
        endpoint.close()
        assert await asyncio.to_thread(closed_by_client, probe)

    with silent_server() as (address, accepted):
        asyncio.run(body(address, accepted))


class PongServer:
    """A server that answers every ``PING`` with ``PONG`` and can close every connection
    it holds at once, as a restarting server or an agent changing terms does."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = "{}:{}".format(*self._listener.getsockname())
        self._peers: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                peer, _ = self._listener.accept()
                with self._lock:
                    self._peers.append(peer)
                threading.Thread(target=self._answer, args=(peer,), daemon=True).start()

    @staticmethod
    def _answer(peer: socket.socket) -> None:
        with contextlib.suppress(OSError):  # closed by close_connections
            while data := peer.recv(4096):
                peer.sendall(b"+PONG\r\n" * data.count(b"PING"))

    def close_connections(self) -> int:
        """Close every connection accepted so far; how many there were."""
        with self._lock:
            peers, self._peers = self._peers, []
        for peer in peers:
            peer.shutdown(socket.SHUT_RDWR)
            peer.close()
        return len(peers)

    def close(self) -> None:
        """Stop listening and close every connection."""
        self._listener.close()
        self.close_connections()


def test_a_connection_the_server_closed_while_idle_is_replaced_not_taken_for_down() -> None:
    """A server that closes its clients' idle connections (it restarted, or an agent took
    over and ended its standby term's connections) still answers the next call, on a new
    connection, and is not marked down, for both drivers and both kinds of endpoint."""
    server = PongServer()
    try:
        endpoint = Endpoint(server.address, role="agent")
        assert endpoint.call("PING") == b"PONG"
        assert server.close_connections() == 1
        assert endpoint.call("PING") == b"PONG"
        assert endpoint.is_up()
        # A reply owed on an idle connection the server then closed (a store not waited
        # for): read by settle as the connection gone, not the server down.
        replies: list[object] = []
        assert server.close_connections() >= 1
        endpoint.send_later(protocol.Command(("PING",), lambda reply: reply), replies.append)
        endpoint.settle()
        assert endpoint.is_up()
        assert endpoint.call("PING") == b"PONG"
        endpoint.close()

        async def body(multiplex: bool) -> None:
            endpoint = AsyncEndpoint(server.address, role="agent", multiplex=multiplex)
            assert await endpoint.call("PING") == b"PONG"
            # Closed while the loop does not run: the end of stream is read only after the
            # next call was sent on the connection.
            assert server.close_connections() >= 1  # the sync endpoint's closed one too
            assert await endpoint.call("PING") == b"PONG"
            assert endpoint.is_up()
            endpoint.close()

        asyncio.run(body(multiplex=False))
        asyncio.run(body(multiplex=True))
    finally:
        server.close()
