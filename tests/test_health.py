"""What ``txcache status`` calls degraded (``txcache.cli._health.diagnose``): pure logic on
reports as the probes build them (the real thing runs in test_cli_up.py)."""

from __future__ import annotations

from txcache._pinset import Pin
from txcache.cli._health import SILENT_STREAM_SECONDS, Problem, diagnose
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


def test_settings_without_nodes_or_agent_say_the_library_would_not_cache() -> None:
    problems = diagnose([], None, NOW, agent_given=False)
    assert [part for part, _ in whats(problems)] == ["settings", "settings"]
    assert all("runs uncached" in problem.what for problem in problems)


def test_unreachable_parts_are_not_problems_twice() -> None:
    down = NodeReport("127.0.0.1:7", state="unreachable", error="refused")
    assert diagnose([down], agent(), NOW, agent_given=True) == []
