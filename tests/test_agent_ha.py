"""Agents in high availability: two agents of one slot, one active by the lease in
PostgreSQL, the other standing by; the active one killed, stopped or cut off from the
database, the standby taking over, and the old one never delivering again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import redis
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agent_fixtures import HEARTBEATS, Stack
from conftest import running_agent
from txcache.stack import AgentProcess, TcpProxy, wait_until

LEASE = ("--lease", "1s")
"""A short lease, so that a hung agent is taken over within a couple of seconds."""


def status(agent: AgentProcess) -> dict[str, str]:
    """The agent's ``STATUS`` fields; empty while it does not answer."""
    client = redis.Redis(host=agent.host, port=agent.port, protocol=2, socket_timeout=1)
    try:
        reply = client.execute_command("STATUS")
    except redis.RedisError:
        return {}
    finally:
        client.close()
    lines = reply.decode().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


def role(agent: AgentProcess) -> str | None:
    """``active`` or ``standby``; ``None`` while the agent does not answer."""
    return status(agent).get("role")


def wait_for_role(agent: AgentProcess, wanted: str, timeout: float = 30.0) -> float:
    """Wait until ``agent`` is ``wanted``; returns the seconds it took."""
    began = time.monotonic()
    wait_until(
        lambda: role(agent) == wanted,
        f"the agent on port {agent.port} to be {wanted}",
        timeout=timeout,
        log=agent.log_text,
    )
    return time.monotonic() - began


def wait_for_lease_lost(agent: AgentProcess) -> None:
    """Wait until ``agent`` has learned that another agent took its lease."""
    agent.wait_for_log(
        "LEASE TAKEN OVER", f"the agent on port {agent.port} to learn it lost the lease", timeout=30
    )


def sessions_of(stack: Stack, epoch: int) -> int:
    """How many sessions the agent of term ``epoch`` has open in PostgreSQL."""
    row = stack.db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'txcache-agent%%' "
        "AND application_name LIKE %s",
        (f"% e{epoch}",),
    ).fetchone()
    assert row is not None
    return int(row[0])


def node_epoch(stack: Stack) -> int:
    """The first node's epoch (``TXEPOCH``): the newest lease that spoke to it."""
    return int(stack.client(0, stream=True).execute_command("TXEPOCH"))


@pytest.fixture
def pair(database: str) -> Iterator[tuple[Stack, AgentProcess, AgentProcess]]:
    """A stack whose agent is active, and a second agent standing by."""
    with Stack(database, agent_args=(*HEARTBEATS, *LEASE)) as stack:
        standby = stack.start_standby_agent()
        yield stack, running_agent(stack), standby


def test_one_agent_is_active_and_the_other_sends_libraries_away(
    pair: tuple[Stack, AgentProcess, AgentProcess],
) -> None:
    stack, active, standby = pair
    assert role(active) == "active"
    standing_by = status(standby)
    assert standing_by["role"] == "standby"
    assert f":{active.port} " in standing_by["active_agent"]
    client = redis.Redis(host=standby.host, port=standby.port, protocol=2)
    for command in ("PINS", "PIN", "TAGCOLUMNS", "BARRIER", "DATABASE", "COMMITLSN 7"):
        with pytest.raises(redis.ResponseError, match=r"^STANDBY this agent is a standby"):
            client.execute_command(*command.split())
    assert client.execute_command("PING") in (b"PONG", True)
    client.close()
    assert node_epoch(stack) == int(status(active)["lease_epoch"])
    stack.assert_streams_an_insert(1)


def test_a_killed_agent_is_taken_over_within_about_a_second(
    pair: tuple[Stack, AgentProcess, AgentProcess],
) -> None:
    stack, active, standby = pair
    epoch = int(status(active)["lease_epoch"])
    active.kill()
    took = wait_for_role(standby, "active")
    # Its lease session ended with it: no need to wait for the lease to expire.
    assert took < 10, took
    assert int(status(standby)["lease_epoch"]) == epoch + 1
    stack.assert_streams_an_insert(1)
    assert node_epoch(stack) == epoch + 1


def test_a_stopped_agent_is_taken_over_and_stands_by_when_it_resumes(
    pair: tuple[Stack, AgentProcess, AgentProcess],
) -> None:
    stack, active, standby = pair
    epoch = int(status(active)["lease_epoch"])
    os.kill(active.process.pid, signal.SIGSTOP)
    try:
        wait_for_role(standby, "active")
        stack.assert_streams_an_insert(1)
        # Its sessions were ended at the takeover: its pinners hold no snapshot.
        assert sessions_of(stack, epoch) == 0
        assert sessions_of(stack, epoch + 1) > 0
    finally:
        os.kill(active.process.pid, signal.SIGCONT)
    # Resumed, it finds its lease gone: it delivers nothing more and stands by.
    wait_for_lease_lost(active)
    wait_for_role(active, "standby")
    stack.assert_streams_an_insert(2)
    assert node_epoch(stack) == epoch + 1
    assert int(status(standby)["lease_epoch"]) == epoch + 1


def test_an_agent_cut_off_from_the_database_is_taken_over_and_fenced(database: str) -> None:
    """The active agent reaches PostgreSQL through a proxy that is then frozen (a network
    partition: its sessions stay open, nothing flows). The standby takes the lease once it
    expires and ends the old walsender; healed, the old agent stands by."""
    address = conninfo_to_dict(database)
    proxy = TcpProxy(str(address["host"]), int(str(address["port"])))
    try:
        proxied = make_conninfo(database, host="127.0.0.1", port=proxy.port)
        with Stack(database, agent_args=(*HEARTBEATS, *LEASE), agent_dsn=proxied) as stack:
            active = running_agent(stack)
            standby = stack.start_standby_agent(dsn=database)
            epoch = int(status(active)["lease_epoch"])
            proxy.cut()
            wait_for_role(standby, "active")
            stack.assert_streams_an_insert(1)
            assert sessions_of(stack, epoch) == 0, "ended though PostgreSQL never heard it go"
            # Cut off, the old agent stopped acting by its own clock.
            assert role(active) == "standby"
            proxy.heal()
            wait_for_lease_lost(active)
            stack.assert_streams_an_insert(2)
            assert node_epoch(stack) == epoch + 1
    finally:
        proxy.stop()


def test_a_stopping_agent_hands_over_at_once(
    pair: tuple[Stack, AgentProcess, AgentProcess],
) -> None:
    stack, active, standby = pair
    active.stop()
    active.wait_for_log("lease released")
    wait_for_role(standby, "active", timeout=5)
    stack.assert_streams_an_insert(1)


def test_the_lease_is_a_row_per_slot(pair: tuple[Stack, AgentProcess, AgentProcess]) -> None:
    stack, active, _standby = pair
    row = stack.db.execute(
        "SELECT holder, epoch, expires_at > clock_timestamp() FROM txcache.agent_lease "
        "WHERE slot = %s",
        (stack.options.slot,),
    ).fetchone()
    assert row is not None
    holder, epoch, current = row
    assert f":{active.port} " in holder
    assert current
    assert epoch == int(status(active)["lease_epoch"])


def test_an_agent_without_the_lease_table_names_the_fix(database: str) -> None:
    with Stack(database, agent_args=(*HEARTBEATS, *LEASE)) as stack:
        stack.db.execute("DROP TABLE txcache.agent_lease")
        with pytest.raises(Exception, match=r"txcache\.agent_lease does not exist"):
            stack.start_standby_agent()


def test_an_agent_whose_lease_session_dropped_keeps_the_lease(database: str) -> None:
    """The active agent's lease session ended under it (a connection reset, an
    administrator's pg_terminate_backend): it renews from a new session long before a
    standby may count it gone, so nothing changes hands (the default lease)."""
    with Stack(database) as stack:
        active = running_agent(stack)
        standby = stack.start_standby_agent()
        epoch = int(status(active)["lease_epoch"])
        (old_pid,) = lease_row(stack)
        stack.db.execute("SELECT pg_terminate_backend(%s)", (old_pid,))
        wait_until(
            lambda: lease_row(stack)[0] != old_pid,
            "the active agent to renew from a new session",
            timeout=10,
            log=active.log_text,
        )
        assert role(standby) == "standby"
        assert role(active) == "active"
        assert int(status(active)["lease_epoch"]) == epoch
        stack.assert_streams_an_insert(1)


def lease_row(stack: Stack) -> tuple[int]:
    """The lease session's pid, as the lease row names it."""
    row = stack.db.execute(
        "SELECT pid FROM txcache.agent_lease WHERE slot = %s", (stack.options.slot,)
    ).fetchone()
    assert row is not None
    return (int(row[0]),)
