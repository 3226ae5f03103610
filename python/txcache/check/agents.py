"""Several agents for one check (``--standby-agents``): each reaches PostgreSQL through
proxies of its own (one per server its DSN names: a primary and its standby with
``--standby-postgres``), so that a fault can kill, stop or cut off the active one, and the
library is given every agent's address. Which one is active is read from their
``STATUS``; a takeover is timed from the fault to another agent saying ``role:active``."""

from __future__ import annotations

import dataclasses
import time

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from txcache import protocol
from txcache.stack import AgentProcess, Stack, TcpProxy, wait_until

__all__ = ["AgentGroup", "AgentProxies"]


class AgentGroup:
    """The stack's agent and ``standbys`` more, each behind :class:`AgentProxies`."""

    def __init__(self, stack: Stack, standbys: int) -> None:
        """Move the stack's agent behind proxies and start the standbys."""
        self.stack = stack
        self.proxies: list[AgentProxies] = []
        try:
            for _ in range(standbys + 1):
                self.proxies.append(AgentProxies(stack.dsn))
            self.dsns = [proxies.dsn for proxies in self.proxies]
            stack.options = dataclasses.replace(stack.options, agent_dsn=self.dsns[0])
            stack.restart_agent()
            assert stack.agent is not None
            self.agents: list[AgentProcess] = [stack.agent]
            self.agents += [stack.start_standby_agent(dsn=dsn) for dsn in self.dsns[1:]]
        except BaseException:
            self.close()  # the agents stop with the stack
            raise

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
        for proxies in self.proxies:
            proxies.stop()


class AgentProxies:
    """One agent's way to PostgreSQL: a :class:`TcpProxy` to each server ``dsn`` names (a
    multi-host DSN names several), and :attr:`dsn` through them."""

    def __init__(self, dsn: str) -> None:
        """Start a proxy to every host and port of ``dsn``."""
        database = conninfo_to_dict(dsn)
        hosts = str(database["host"]).split(",")
        ports = str(database["port"]).split(",")
        if len(ports) == 1:
            ports *= len(hosts)
        self.proxies = [TcpProxy(h, int(p)) for h, p in zip(hosts, ports, strict=True)]
        self.dsn = make_conninfo(
            dsn,
            host=",".join("127.0.0.1" for _ in self.proxies),
            port=",".join(str(proxy.port) for proxy in self.proxies),
        )

    def cut(self) -> None:
        """Freeze every proxy: the agent is partitioned from every server."""
        for proxy in self.proxies:
            proxy.cut()

    def heal(self) -> None:
        """Let every proxy relay again."""
        for proxy in self.proxies:
            proxy.heal()

    def stop(self) -> None:
        """Stop every proxy."""
        for proxy in self.proxies:
            proxy.stop()
