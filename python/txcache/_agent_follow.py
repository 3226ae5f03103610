"""Several agents, one active: which the library talks to, decided without I/O and shared by
the sync :class:`~txcache._agent.AgentClient` and the async
:class:`~txcache.aio._agent.AsyncAgentClient`.

For high availability two or more ``txcache-agent`` processes run against one database:
exactly one is *active*, and every other (a *standby*) answers all but ``PING``, ``AUTH``,
``QUIT`` and ``STATUS`` with an error reply starting ``STANDBY``. The library names them all
(the ``agent`` setting) and follows one, the :class:`Follower`'s :attr:`~Follower.active`:
``PIN`` and ``COMMITLSN`` go to it alone (a wrong one just gives no answer, as a failure
does), and each refresh asks it first. A refresh that finds it unreachable or a standby asks
the others in the order configured and adopts the first that answers every command of the
refresh; one that finds it failing otherwise stops there, as with a single agent (another
agent would not answer better than the active one). So a takeover is followed within a
refresh interval plus the agent timeout, and one agent costs what it always did: the same
requests, no others.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from typing import Any

from txcache._resp import ReplyError

__all__ = ["Follower", "Verdict", "agent_addresses", "is_standby", "no_answer_yet", "verdict"]

log = logging.getLogger("txcache")

STANDBY_CODE = "STANDBY"
"""The code of a standby agent's error reply to every command it does not serve."""


class Verdict(enum.Enum):
    """What one agent made of a refresh's commands; the value completes "the agent at X
    is …" in the log."""

    ANSWERED = "answering"
    """Every command answered: the agent is active."""
    STANDBY = "a standby"
    """An error reply ``STANDBY …``: ask another agent."""
    DOWN = "unreachable"
    """No reply (down, or silent for the timeout): ask another agent."""
    REFUSED = "refusing the refresh"
    """Another error reply, or one of the wrong shape."""


_REFUSAL_HINTS = {
    "NOAUTH": "it requires a password: give the library its --password (the password "
    "setting, TXCACHE_PASSWORD)",
    "WRONGPASS": "the password setting is not the agent's --password",
}
"""What to do about an agent's refusal, by its error code."""


def is_standby(reply: Any) -> bool:
    """Whether ``reply`` is a standby agent's refusal (an error reply whose code is
    ``STANDBY``): the command belongs to the active agent."""
    if not isinstance(reply, ReplyError):
        return False
    code = str(reply).lstrip().partition(" ")[0]
    return code == STANDBY_CODE


def verdict(replies: Sequence[Any] | None) -> Verdict:
    """What an agent's ``replies`` to a refresh say (each as the library's endpoints give
    it: ``None`` for no reply; ``replies`` itself ``None`` when the agent was not reached,
    or cut short at the first reply that is not an answer)."""
    if replies is None or any(reply is None for reply in replies):
        return Verdict.DOWN
    if any(map(is_standby, replies)):
        return Verdict.STANDBY
    if any(isinstance(reply, ReplyError) for reply in replies):
        return Verdict.REFUSED
    return Verdict.ANSWERED


def agent_addresses(given: str | Sequence[str]) -> tuple[str, ...]:
    """The agents' addresses in ``given``: a comma-separated string, or one string per agent;
    spaces around each and empty parts dropped (the ``agent`` setting's check,
    :func:`txcache._validate.agents`, refuses a malformed one)."""
    parts = given.split(",") if isinstance(given, str) else given
    return tuple(part.strip() for part in parts if part.strip())


def no_answer_yet(addresses: Sequence[str]) -> str:
    """What ``connect()`` logs when no agent answered within its wait."""
    if len(addresses) == 1:
        return (
            f"the agent at {addresses[0]} has not answered yet; transactions read the "
            "database until it does"
        )
    return (
        f"none of the agents at {', '.join(addresses)} has answered yet; transactions read "
        "the database until one does"
    )


class Follower:
    """Which of the configured agents is the active one, and the order a refresh asks them
    in (module docstring). Not thread-safe: its client serializes refreshes."""

    def __init__(self, addresses: Sequence[str]) -> None:
        """Follow ``addresses[0]`` until a refresh finds otherwise."""
        if not addresses:
            raise ValueError("no agent address")
        self.addresses = tuple(addresses)
        self.active = 0
        """The index of the agent requests go to."""
        self._passed_over: Verdict | None = None
        self._refusals: dict[int, str] = {}
        """The last error each agent refused a refresh with, logged once."""

    @property
    def address(self) -> str:
        """The active agent's address."""
        return self.addresses[self.active]

    def order(self) -> list[int]:
        """The agents a refresh may ask, in turn: the active one, then the others in the
        order configured."""
        self._passed_over = None
        others = (index for index in range(len(self.addresses)) if index != self.active)
        return [self.active, *others]

    def goes_on(self, index: int, replies: Sequence[Any] | None) -> bool:
        """Whether a refresh that got ``replies`` (not all answers) from agent ``index`` asks
        the next one: yes past an unreachable agent or a standby, and past any failing agent
        but the active one (whose own error says nothing of the others: the next refresh
        asks it again). An error reply is logged, once per agent and error."""
        found = verdict(replies)
        if found is Verdict.REFUSED and replies is not None:
            self._log_refusal(index, next(r for r in replies if isinstance(r, ReplyError)))
        if index == self.active:
            self._passed_over = found
            return found in (Verdict.DOWN, Verdict.STANDBY)
        return True

    def _log_refusal(self, index: int, error: ReplyError) -> None:
        text = str(error).strip()
        if self._refusals.get(index) == text:
            return
        self._refusals[index] = text
        code = text.partition(" ")[0]
        hint = _REFUSAL_HINTS.get(code, "read the agent's log")
        log.warning(
            "txcache: the agent at %s refuses the library's requests (%s): %s; transactions "
            "read the database until it answers",
            self.addresses[index],
            text,
            hint,
        )

    def adopt(self, index: int) -> bool:
        """Make agent ``index``, which answered a whole refresh, the active one; ``True`` if
        that changed it (logged once, with why the previous one was passed over)."""
        self._refusals.pop(index, None)  # a refusal after this one is news again
        if index == self.active:
            return False
        previous, self.active = self.active, index
        why = (self._passed_over or Verdict.DOWN).value
        log.warning(
            "txcache: following the agent at %s (the agent at %s is %s)",
            self.addresses[index],
            self.addresses[previous],
            why,
        )
        return True
