"""Several agents for one check (``--standby-agents``): each reaches PostgreSQL through a
proxy of its own, so that a fault can kill, stop or cut off the active one, and the
library is given every agent's address. Which one is active is read from their
``STATUS``; a takeover is timed from the fault to another agent saying ``role:active``."""

from __future__ import annotations

import dataclasses
import time

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from txcache import protocol
from txcache.stack import AgentProcess, Stack, TcpProxy, wait_until

__all__ = ["AgentGroup"]


class AgentGroup:
    """The stack's agent and ``standbys`` more, each behind a :class:`TcpProxy`."""

    def __init__(self, stack: Stack, standbys: int) -> None:
        """Move the stack's agent behind a proxy and start the standbys."""
        self.stack = stack
        database = conninfo_to_dict(stack.dsn)
        host, port = str(database["host"]), int(str(database["port"]))
        self.proxies = [TcpProxy(host, port) for _ in range(standbys + 1)]
        self.dsns = [
            make_conninfo(stack.dsn, host="127.0.0.1", port=proxy.port) for proxy in self.proxies
        ]
        stack.options = dataclasses.replace(stack.options, agent_dsn=self.dsns[0])
        stack.restart_agent()
        assert stack.agent is not None
        self.agents: list[AgentProcess] = [stack.agent]
        self.agents += [stack.start_standby_agent(dsn=dsn) for dsn in self.dsns[1:]]

    @property
    def addresses(self) -> list[str]:
        """Every agent's ``host:port``, as the library is given them."""
        return [f"127.0.0.1:{agent.port}" for agent in self.agents]

    def role(self, index: int) -> str | None:
        """Agent ``index``'s role; ``None`` while it does not answer."""
        try:
            with protocol.connect(self.addresses[index], timeout=0.5) as agent:
                return agent.run(protocol.agent_role())
        except (protocol.ConnectionLost, protocol.BadReply, OSError):
            return None

    def active(self, timeout: float = 60.0) -> int:
        """The index of the active agent, waiting until one is."""
        found: list[int] = []

        def one_active() -> bool:
            found[:] = [i for i in range(len(self.agents)) if self.role(i) == "active"]
            return len(found) == 1

        wait_until(one_active, "one agent to be active", timeout=timeout)
        return found[0]

    def takeover(self, old: int, since: float, timeout: float = 60.0) -> float:
        """Wait until an agent other than ``old`` is active; the seconds from ``since``
        (``time.monotonic()``) until it said so."""
        others = [i for i in range(len(self.agents)) if i != old]
        wait_until(
            lambda: any(self.role(i) == "active" for i in others),
            f"an agent other than {self.addresses[old]} to take over",
            timeout=timeout,
            log=lambda: self.agents[old].log_text()[-2000:],
        )
        return time.monotonic() - since

    def restart(self, index: int) -> None:
        """Start agent ``index`` again on its port, as a standby."""
        old = self.agents[index]
        old.stop()
        self.agents[index] = self.stack.start_standby_agent(dsn=self.dsns[index], port=old.port)

    def close(self) -> None:
        """Stop the proxies (the agents stop with the stack)."""
        for proxy in self.proxies:
            proxy.stop()
