"""The restart policy of ``txcache up`` (``txcache.cli._supervise``), on a stand-in stack
and a clock of its own: pure logic, no processes (the real thing is in test_cli_up.py)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from txcache.cli._supervise import FIRST_DELAY, MAX_DELAY, STABLE_AFTER, Supervisor
from txcache.stack import PartFailed


@dataclass
class FakeNode:
    address: str = "127.0.0.1:1"
    up: bool = True

    def alive(self) -> bool:
        return self.up

    def log_text(self) -> str:
        return "node log"


@dataclass
class FakeStack:
    nodes: list[FakeNode] = field(default_factory=lambda: [FakeNode()])
    postgres: None = None
    agent: None = None
    failures_left: int = 0
    restarts: int = 0

    def restart_node(self, index: int) -> None:
        self.restarts += 1
        if self.failures_left:
            self.failures_left -= 1
            raise PartFailed("cache node 1 did not start", "  | port taken")
        self.nodes[index].up = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def supervised(stack: FakeStack) -> tuple[Supervisor, Clock, list[str]]:
    clock = Clock()
    lines: list[str] = []
    return Supervisor(stack, lines.append, clock), clock, lines  # type: ignore[arg-type]


def test_a_dead_part_is_restarted_after_the_first_delay() -> None:
    stack = FakeStack()
    supervisor, clock, lines = supervised(stack)
    stack.nodes[0].up = False
    supervisor.check()
    assert stack.restarts == 0
    assert "exited; its log ends with" in lines[0]
    assert "restarting it in 1 s" in lines[0]
    clock.now = FIRST_DELAY - 0.01
    supervisor.check()
    assert stack.restarts == 0
    clock.now = FIRST_DELAY
    supervisor.check()
    assert stack.restarts == 1
    assert lines[-1].endswith("restarted")


def test_failed_restarts_wait_twice_as_long_each_time_up_to_the_maximum() -> None:
    stack = FakeStack(failures_left=10)
    supervisor, clock, lines = supervised(stack)
    stack.nodes[0].up = False
    supervisor.check()
    waits = []
    while stack.failures_left:
        clock.now += 0.5
        before = stack.restarts
        supervisor.check()
        if stack.restarts > before:
            waits.append(clock.now)
    gaps = [later - earlier for earlier, later in itertools.pairwise(waits)]
    assert gaps[:4] == [2.0, 4.0, 8.0, 16.0]
    assert max(gaps) == MAX_DELAY
    assert "next attempt in 30 s" in lines[-1]


def test_a_part_that_stayed_up_starts_again_from_the_first_delay() -> None:
    stack = FakeStack()
    supervisor, clock, lines = supervised(stack)
    for _ in range(3):  # three crashes in a row: the delay grows
        stack.nodes[0].up = False
        supervisor.check()
        clock.now += 100
        supervisor.check()
    stack.nodes[0].up = False
    supervisor.check()
    assert "restarting it in 8 s" in lines[-1]
    clock.now += 8
    supervisor.check()  # restarted
    clock.now += STABLE_AFTER
    supervisor.check()  # up for a minute
    stack.nodes[0].up = False
    supervisor.check()
    assert "restarting it in 1 s" in lines[-1]
