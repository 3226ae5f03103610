"""What ``txcache status`` calls degraded (``txcache.cli._health.diagnose``): pure logic on
reports as the probes build them (the real thing runs in test_cli_up.py); and the bound on
asking a database that stops answering once connected (:func:`probe_database`)."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time

from txcache._pinset import Pin
from txcache._resp import ConnectionLost
from txcache.cli._health import (
    SILENT_STREAM_SECONDS,
    Problem,
    database_seconds,
    diagnose,
    probe_database,
)
from txcache.cli._probe import AgentReport, NodeReport

NOW = 1_800_000_000_000_000  # µs


def fed(address: str = "127.0.0.1:1", age: float = 0.2) -> NodeReport:
    return NodeReport(address, position=100, last_message_time=NOW - int(age * 1e6))


def agent(pins: int = 1, nodes_connected: int = 1, pin_error: str | None = None) -> AgentReport:
    listed = [Pin(ts=90 + n, snapshot_id=f"s{n}", current_as_of=NOW / 1e6) for n in range(pins)]
    status = {"nodes_connected": nodes_connected}
    return AgentReport("127.0.0.1:9", status=status, pins=listed, pin_error=pin_error)


def whats(problems: list[Problem]) -> list[tuple[str, str]]:
    return [(problem.part, problem.what) for problem in problems]


def test_a_healthy_stack_has_no_problem() -> None:
    assert diagnose([fed()], agent(), NOW, agent_given=True) == []


def test_a_node_that_never_received_the_stream_says_to_give_it_to_the_agent() -> None:
    node = NodeReport("127.0.0.1:5", position=0, last_message_time=0)
    [problem] = diagnose([node], agent(nodes_connected=1), NOW, agent_given=True)
    assert problem.part == "node 127.0.0.1:5"
    assert "receives no invalidation stream" in problem.what
    assert "--node 127.0.0.1:5" in problem.fix


def test_a_node_the_stream_stopped_reaching_is_degraded() -> None:
    problems = diagnose([fed(age=SILENT_STREAM_SECONDS + 5)], agent(), NOW, agent_given=True)
    assert whats(problems) == [
        ("node 127.0.0.1:1", "its last stream message is 15 s old: the agent is not feeding it")
    ]


def test_an_agent_that_cannot_take_a_pin_or_feeds_not_every_node_is_degraded() -> None:
    nodes = [fed("127.0.0.1:1"), fed("127.0.0.1:2")]
    stuck = agent(pins=0, nodes_connected=1, pin_error="ERR PIN: the stream is down")
    problems = diagnose(nodes, stuck, NOW, agent_given=True)
    assert [what for _, what in whats(problems)] == [
        "cannot take a pin (ERR PIN: the stream is down): every read-only transaction runs "
        "without the cache",
        "is connected to 1 node(s), 2 given here",
    ]


def test_an_agent_asked_for_its_nodes_is_judged_by_the_nodes_it_feeds() -> None:
    """Without --nodes, the nodes are the agent's own: none is the agent's problem (with
    the fix for an agent started without --node), and one it cannot reach is not for want
    of a --node."""
    [none] = diagnose([], agent(nodes_connected=0), NOW, agent_given=True, nodes_given=False)
    assert (none.part, none.what) == (
        "agent 127.0.0.1:9",
        "feeds no cache node: a library following it runs uncached",
    )
    assert "txcache nodes add HOST:PORT" in none.fix
    nodes = [fed("127.0.0.1:1"), fed("127.0.0.1:2")]
    [short] = diagnose(nodes, agent(nodes_connected=1), NOW, agent_given=True, nodes_given=False)
    assert short.what == "is connected to 1 of the 2 node(s) it feeds"
    assert "TXCACHE_NODES" not in short.fix
    assert "--node-password" in short.fix
    down = AgentReport("127.0.0.1:9", state="unreachable", error="refused")
    assert diagnose([], down, NOW, agent_given=True, nodes_given=False) == [], (
        "the agent that could not say which nodes it feeds is reported as unreachable"
    )


def test_settings_without_nodes_or_agent_say_the_library_would_not_cache() -> None:
    problems = diagnose([], None, NOW, agent_given=False)
    assert [part for part, _ in whats(problems)] == ["settings", "settings"]
    assert all("runs uncached" in problem.what for problem in problems)


def test_unreachable_parts_are_not_problems_twice() -> None:
    down = NodeReport("127.0.0.1:7", state="unreachable", error="refused")
    assert diagnose([down], agent(), NOW, agent_given=True) == []


_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", 4 + len(body)) + body


class SilentPostgres:
    """A server that lets a client connect as PostgreSQL would (no SSL, no password), then
    never answers: a database that hangs once the connection is made. ``asked`` is set when
    the first statement arrives."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.asked = threading.Event()
        self.sessions: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                session, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.sessions.append(session)
            threading.Thread(target=self._session, args=(session,), daemon=True).start()

    def _session(self, session: socket.socket) -> None:
        try:
            while self._start_up(session) in (_SSL_REQUEST, _GSSENC_REQUEST):
                session.sendall(b"N")  # no SSL, no GSS: the start-up message follows
            session.sendall(
                _message(b"R", struct.pack("!i", 0))  # AuthenticationOk
                + _message(b"S", b"server_version\x0016.0\x00")
                + _message(b"S", b"client_encoding\x00UTF8\x00")
                + _message(b"K", struct.pack("!ii", 1, 2))
                + _message(b"Z", b"I")  # ready for a query
            )
            if session.recv(65536):
                self.asked.set()
            while session.recv(65536):  # never answered
                pass
        except OSError:
            pass

    @staticmethod
    def _start_up(session: socket.socket) -> int:
        """Read one start-up packet; its code (protocol version or request)."""
        header = session.recv(8, socket.MSG_WAITALL)
        length, code = struct.unpack("!ii", header)
        if length > 8:
            session.recv(length - 8, socket.MSG_WAITALL)
        return int(code)

    def close(self) -> None:
        """Stop listening and end every session (the client sees the connection close)."""
        self.listener.close()
        for session in self.sessions:
            session.shutdown(socket.SHUT_RDWR)
            session.close()


def test_a_database_that_stops_answering_once_connected_is_reported_within_the_bound() -> None:
    server = SilentPostgres()
    dsn = f"host=127.0.0.1 port={server.port} user=u dbname=d sslmode=disable gssencmode=disable"
    try:
        started = time.monotonic()
        problems = probe_database(dsn, timeout=0.5)
        took = time.monotonic() - started
        assert server.asked.wait(10), "the check never connected: nothing was asked"
    finally:
        server.close()
    bound = database_seconds(0.5)
    assert bound == 2.5  # libpq's least connect_timeout, 2 s, then the timeout itself
    assert whats(problems) == [
        ("database", "does not answer: txcache setup --check did not finish within 2.5 s")
    ]
    assert "longer --timeout" in problems[0].fix
    assert bound <= took < bound + 2


def test_a_certificate_for_another_host_is_no_matter_of_the_ca() -> None:
    """``status`` says to give ``--tls-ca`` when the certificate did not verify against the
    CA, and that the certificate must name the host when it is a name mismatch."""
    for reason, hint in (
        ("certificate verify failed: unable to get local issuer", "give txcache status --tls-ca"),
        ("certificate verify failed: Hostname mismatch, certificate is not valid for 'x'",
         "the certificate does not name this host"),
    ):  # fmt: skip
        lost = ConnectionLost("cannot connect to x:1")
        lost.__cause__ = ssl.SSLCertVerificationError(1, reason)
        report = NodeReport("rediss://x:1")
        report.failed(lost, "a txcache node")
        assert report.state == "unreachable"
        assert hint in (report.error or ""), report.error
