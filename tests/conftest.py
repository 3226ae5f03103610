"""Fixtures that start real ``txcached`` processes and connect real clients to them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from txcache.stack import AgentProcess, NodeProcess, Stack

pytest_plugins = ["postgres_fixtures", "agent_fixtures", "library_fixtures", "async_fixtures"]

StartNode = Callable[..., NodeProcess]


@pytest.fixture
def start_node() -> Iterator[StartNode]:
    """Start nodes alone (no database, no agent) with extra flags; every node started is
    stopped after the test. Whole stacks come from :class:`txcache.stack.Stack`, through
    ``agent_fixtures`` and ``library_fixtures``."""
    started: list[NodeProcess] = []

    def start(*args: str) -> NodeProcess:
        node = NodeProcess(*args)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


@pytest.fixture
def node(start_node: StartNode) -> NodeProcess:
    """One node with default settings but a small memory limit and two workers: the default
    (a worker per core but one) is a single worker on a 2-core machine, and the tests should
    run the node's threads against each other, as larger machines do."""
    return start_node("--max-memory", "64mb", "--threads", "2")


@pytest.fixture
def client(node: NodeProcess) -> Iterator[redis.Redis]:
    """A redis-py client of ``node``."""
    connection = redis.Redis(host=node.host, port=node.port, socket_timeout=10, protocol=2)
    yield connection
    connection.close()


def info(client: redis.Redis, section: str = "all") -> dict[str, int]:
    """INFO as integers (every txcached INFO field is one)."""
    return {key: int(value) for key, value in client.info(section).items()}


def running_agent(stack: Stack) -> AgentProcess:
    """``stack``'s agent, which the test started (``Stack.agent`` is ``None`` only before it
    starts and after it stops)."""
    assert stack.agent is not None, "the stack's agent is not running"
    return stack.agent
