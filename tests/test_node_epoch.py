"""Epoch fencing on a real node (docs/protocol.md, ``TXEPOCH``): once an agent announced a
newer epoch, the connections of the agent it took over from can no longer move the node,
while data commands and a single agent that never announces one are left alone."""

from __future__ import annotations

from typing import Any

from conftest import StartNode
from txcache import protocol
from txcache.protocol import ReplyError, RespConnection
from txcache.stack import NodeProcess

TAKEN_OVER = "another agent took over"


def refusal(reply: Any) -> str:
    """The text of an error reply (failing the test when ``reply`` is not one)."""
    assert isinstance(reply, ReplyError), f"expected an error reply, got {reply!r}"
    return str(reply)


def fenced(connection: int, node: int) -> str:
    """The fence's refusal of a connection at epoch ``connection`` on a node at ``node``."""
    older = f"this connection's epoch {connection} is older than this node's {node}"
    return f"FENCED {older}: {TAKEN_OVER}"


def txcache_fields(connection: RespConnection) -> dict[str, int]:
    """The ``txcache`` section of ``INFO``, as integers."""
    fields = connection.run(protocol.info("txcache"))
    return protocol.integer_fields(fields)


def test_a_stale_agent_is_fenced_once_another_announced_a_newer_epoch(node: NodeProcess) -> None:
    with (
        protocol.connect(node.address, timeout=5) as stale,
        protocol.connect(node.address, timeout=5) as current,
    ):
        assert stale.call("TXEPOCH") == 0, "no epoch before any TXEPOCH"
        assert stale.call("TXEPOCH", 1) == b"OK"
        assert stale.call("TXHEARTBEAT", 100, 1_000_000) == 1
        assert current.call("TXEPOCH", 2) == b"OK"
        for command in (
            ("TXINVALIDATE", 110, 2_000_000, "public.items"),
            ("TXHEARTBEAT", 120, 3_000_000),
            ("TXORIGIN", "7311:1"),
            ("TXRESET", 130, 4_000_000),
            ("TXREWIND", 10, 5_000_000),
        ):
            assert refusal(stale.call(*command)) == fenced(1, 2), command
        assert stale.run(protocol.txstatus()).position == 100, "the stale agent moved nothing"
        assert current.call("TXORIGIN") is None, "nor named an origin"
        assert refusal(stale.call("TXEPOCH", 1)) == (
            f"FENCED epoch 1 is older than this node's 2: {TAKEN_OVER}"
        )
        assert stale.call("TXEPOCH") == 2, "TXEPOCH is never fenced"
        assert stale.call("SET", "k", b"v") == b"OK", "data commands are not fenced"
        assert current.call("TXINVALIDATE", 110, 2_000_000, "public.items") == 1
        assert current.call("TXORIGIN", "7311:1") == b"OK"
        assert current.run(protocol.txstatus()).position == 110
        fields = txcache_fields(current)
        assert fields["stream_epoch"] == 2
        assert fields["stream_fenced"] == 6, "five stream commands and one TXEPOCH"
    with protocol.connect(node.address, timeout=5) as reconnected:
        assert reconnected.call("TXEPOCH") == 2, "the epoch outlives the connections"
        assert refusal(reconnected.call("TXHEARTBEAT", 140, 6_000_000)) == fenced(0, 2)


def test_a_single_agent_that_never_sends_an_epoch_works_until_one_is_raised(
    start_node: StartNode,
) -> None:
    node = start_node("--max-memory", "16mb", "--stream-password", "agent")
    with (
        protocol.connect(node.address, password="agent", timeout=5) as agent,
        protocol.connect(node.address, timeout=5) as application,
    ):
        assert agent.call("TXHEARTBEAT", 100, 1_000_000) == 1
        assert agent.call("TXINVALIDATE", 110, 2_000_000, "public.items") == 1
        assert "TXEPOCH is a stream command" in refusal(application.call("TXEPOCH", 5))
        assert agent.call("TXEPOCH") == 0, "an application cannot fence the agent"
        assert agent.call("TXHEARTBEAT", 120, 3_000_000) == 1
        with protocol.connect(node.address, password="agent", timeout=5) as successor:
            assert successor.call("TXEPOCH", 1) == b"OK"
            assert successor.call("TXHEARTBEAT", 130, 4_000_000) == 1
        assert refusal(agent.call("TXHEARTBEAT", 140, 5_000_000)) == fenced(0, 1)
        assert agent.run(protocol.txstatus()).position == 130


def test_a_fenced_stream_command_aborts_a_transaction(node: NodeProcess) -> None:
    with (
        protocol.connect(node.address, timeout=5) as stale,
        protocol.connect(node.address, timeout=5) as current,
    ):
        assert stale.call("TXEPOCH", 3) == b"OK"
        assert current.call("TXEPOCH", 4) == b"OK"
        replies = stale.pipeline(
            [["MULTI"], ["SET", "k", b"v"], ["TXHEARTBEAT", 100, 1_000_000], ["EXEC"]]
        )
        assert replies[:2] == [b"OK", b"QUEUED"]
        assert refusal(replies[2]) == fenced(3, 4)
        assert refusal(replies[3]).startswith("EXECABORT")
        assert stale.call("GET", "k") is None, "the transaction was discarded"
        assert stale.run(protocol.txstatus()).position == 0
        assert txcache_fields(current)["stream_fenced"] == 1
