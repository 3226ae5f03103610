"""The agent under failures: a stalled node, a restarted node, a lost replication slot, a
database that never answers."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
from collections.abc import Iterator

import psycopg
import pytest
import redis

from agent_fixtures import Stack
from conftest import info, running_agent
from postgres_fixtures import PostgresFactory
from txcache import setup_database
from txcache._process import ManagedProcess
from txcache.stack import (
    AgentProcess,
    NodeProcess,
    ProcessStartError,
    find_binary,
    wait_until,
)


def test_a_stalled_node_never_holds_up_the_others_and_catches_up(database: str) -> None:
    with Stack(database, nodes=2) as stack:
        second = stack.nodes[1]
        other = stack.client(1, socket_timeout=30)
        tags = [f"public.items:id={n}" for n in range(20)]
        probes = stack.probe(*tags)
        other_probes = stack.probe(*tags, cache=other)
        resets = info(other, "txcache")["resets"]
        os.kill(second.process.pid, signal.SIGSTOP)
        try:
            for n in range(20):
                stack.write("INSERT INTO items (id) VALUES (%s)", n)
            # The first node gets everything while the second one is frozen.
            assert all(stack.truncated(probes).values())
        finally:
            os.kill(second.process.pid, signal.SIGCONT)
        # Thawed, the second one catches up by replay, not by a reset.
        assert all(stack.truncated(other_probes, cache=other).values())
        assert info(other, "txcache")["resets"] == resets


def test_a_restarted_node_is_reset_then_streamed(database: str) -> None:
    with Stack(database, nodes=2) as stack:
        other = stack.client(1, socket_timeout=30)
        stack.write("INSERT INTO items (id) VALUES (1)")
        stack.caught_up(cache=other)
        stack.nodes[1].kill()
        stack.write("INSERT INTO items (id) VALUES (2)")
        stack.restart_node(1)  # on its port: the agent reconnects to it
        fresh = stack.client(1)
        stack.caught_up(cache=fresh)
        assert info(fresh, "txcache")["resets"] == 1
        stack.assert_streams_an_insert(3, cache=fresh)


def test_a_lost_slot_resets_every_node_loudly(postgres_factory: PostgresFactory) -> None:
    server = postgres_factory({"max_slot_wal_keep_size": "1MB"})
    with Stack(server.dsn) as stack:
        db, cache = stack.db, stack.cache
        probes = stack.probe("public.items:id=1")
        resets = info(cache, "txcache")["resets"]
        assert stack.agent is not None
        stack.agent.stop()
        # Write far more WAL than the slot may keep, then let checkpoints remove it.
        for _ in range(4):
            db.execute("CREATE TABLE IF NOT EXISTS junk (filler text)")
            db.execute("INSERT INTO junk SELECT repeat('x', 2000) FROM generate_series(1, 10000)")
            db.execute("SELECT pg_switch_wal()")
            db.execute("CHECKPOINT")
        status = db.execute(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'txcache'"
        ).fetchone()
        assert status == ("lost",)
        stack.restart_agent()
        agent = stack.agent
        assert agent is not None
        wait_until(
            lambda: info(cache, "txcache")["resets"] != resets,
            "the node's reset",
            timeout=20,
            log=agent.log_text,
        )
        assert info(cache, "txcache")["resets"] == resets + 1
        agent.wait_for_log("REPLICATION SLOT LOST")
        # The open probe was bounded by the reset: nothing stale survives the gap.
        assert stack.truncated(probes)["public.items:id=1"] is not None
        # And the recreated slot streams again.
        fresh = stack.probe("public.items:id=2")
        before_insert, _ = stack.write("INSERT INTO items (id) VALUES (2)")
        assert all(stack.truncated(fresh).values())
        # Pins are certified against the new stream only, never below the gap: a fresh
        # pin shows the insert made after the slot was recreated.
        endpoint = redis.Redis(host=agent.host, port=agent.port, protocol=2)
        pin_ts = endpoint.execute_command("PIN")[0]
        endpoint.close()
        assert pin_ts >= before_insert


def drop_slot(db: psycopg.Connection) -> bool:
    """Stop the slot's walsender and drop the slot; ``False`` if the agent took it again
    first."""
    db.execute(
        "SELECT pg_terminate_backend(active_pid, 10000) FROM pg_replication_slots "
        "WHERE slot_name = 'txcache' AND active_pid IS NOT NULL"
    )
    try:
        db.execute("SELECT pg_drop_replication_slot('txcache')")
    except psycopg.errors.ObjectInUse:
        return False
    return True


def test_a_slot_dropped_while_the_agent_runs_is_created_again_and_every_node_reset(
    database: str,
) -> None:
    """A slot an operator or a managed service drops is a gap in the stream: the agent
    says so, creates the slot again and resets every node, never resumes silently."""
    with Stack(database) as stack:
        agent = stack.agent
        assert agent is not None
        probes = stack.probe("public.items:id=1")
        resets = info(stack.cache, "txcache")["resets"]
        wait_until(lambda: drop_slot(stack.db), "the slot dropped", timeout=20)
        agent.wait_for_log(
            "REPLICATION SLOT DROPPED", "the agent to find the slot gone", timeout=20
        )
        wait_until(
            lambda: info(stack.cache, "txcache")["resets"] != resets,
            "the node's reset",
            timeout=20,
            log=agent.log_text,
        )
        assert stack.truncated(probes)["public.items:id=1"] is not None
        failover = "failover" if stack.db.info.server_version >= 170000 else "true"
        slot = f"SELECT {failover} FROM pg_replication_slots WHERE slot_name = 'txcache'"
        assert stack.db.execute(slot).fetchall() == [(True,)]
        stack.assert_streams_an_insert(5)


def test_a_slot_created_again_behind_the_agent_s_back_resets_every_node(database: str) -> None:
    """A slot dropped and created again (by setup, say) while the agent was away starts
    past changes the agent never read: it must not resume there silently."""
    with Stack(database) as stack:
        agent = stack.agent
        assert agent is not None
        probes = stack.probe("public.items:id=1")
        resets = info(stack.cache, "txcache")["resets"]
        with agent.paused():
            assert drop_slot(stack.db)
            stack.write("UPDATE items SET id = id")  # a change no slot will ever send
            setup_database(database)  # creates the slot again, past that change
        wait_until(
            lambda: info(stack.cache, "txcache")["resets"] != resets,
            "the node's reset",
            timeout=20,
            log=agent.log_text,
        )
        agent.wait_for_log("THE REPLICATION SLOT IS AHEAD OF THE STREAM")
        assert stack.truncated(probes)["public.items:id=1"] is not None
        stack.assert_streams_an_insert(6)


EVENT_TRIGGERS = ("txcache_ddl_command_start", "txcache_ddl_command_end", "txcache_sql_drop")


def test_a_schema_change_the_triggers_missed_is_said_and_invalidates_the_table(
    database: str,
) -> None:
    """DDL the event triggers do not see (disabled here; exempt roles on some managed
    services) still shows in the stream: pgoutput describes the table anew before its next
    change. The agent says so and invalidates the table as the DDL's notice would have."""
    with Stack(database) as stack:
        agent = running_agent(stack)
        stack.write("INSERT INTO items (id) VALUES (1)")  # the stream describes items
        probes = stack.probe("public.items:id=50")
        for trigger in EVENT_TRIGGERS:
            stack.db.execute(f"ALTER EVENT TRIGGER {trigger} DISABLE")
        stack.db.execute("ALTER TABLE items ADD COLUMN extra integer DEFAULT 5")
        for trigger in EVENT_TRIGGERS:
            stack.db.execute(f"ALTER EVENT TRIGGER {trigger} ENABLE ALWAYS")
        assert all(value is None for value in stack.truncated(probes).values())
        stack.write("INSERT INTO items (id) VALUES (2)")  # matches no probe by its row
        assert all(stack.truncated(probes).values()), "the table was not invalidated"
        agent.wait_for_log("A SCHEMA CHANGE NO DDL TRIGGER REPORTED")


def test_a_fast_shutdown_is_not_held_up_by_the_agent(postgres_factory: PostgresFactory) -> None:
    """A shutting-down server waits for its walsenders' clients to confirm the end of the
    WAL; an agent that confirmed only what it had delivered held it until
    wal_sender_timeout (60 s). Between transactions the agent confirms the end."""
    server = postgres_factory()
    with Stack(server.dsn) as stack:
        stack.caught_up()  # the agent streams, and is between transactions
        started = time.monotonic()
        server.restart()
        assert time.monotonic() - started < 8, "the walsender waited for the agent"
        with psycopg.connect(server.dsn, autocommit=True) as db:
            db.execute("INSERT INTO items (id) VALUES (1)")


def test_a_node_past_the_database_is_rewound(database: str) -> None:
    """A node whose position is past the database's WAL (the database was restored from a
    backup, or failed over to a standby that was behind) is rewound: its versioned entries,
    whose intervals name positions the database reuses, are dropped; plain values stay; it
    then follows the stream again."""
    with Stack(database) as stack:
        assert stack.agent is not None
        stack.agent.stop()
        # What the node would hold had it followed a database whose WAL then went back.
        node = stack.client(0, stream=True)
        ahead = 2**40  # far past the WAL of a fresh cluster
        assert node.execute_command("TXHEARTBEAT", ahead, 1) == 1
        node.execute_command(
            "TXSET", "stale", b"old", ahead, "OPEN", "SNAPSHOT", ahead, "TAGS", "public.items:id=1"
        )
        assert node.exists("stale") == 1
        node.set("plain", b"p")
        stack.restart_agent()
        agent = stack.agent
        assert agent is not None
        wait_until(
            lambda: info(node, "txcache")["rewinds"] != 0,
            "the node's rewind",
            timeout=20,
            log=agent.log_text,
        )
        assert info(node, "txcache")["rewinds"] == 1
        assert stack.caught_up() < ahead
        assert node.exists("stale") == 0
        assert node.get("plain") == b"p"
        agent.wait_for_log("CACHE NODE IS PAST THE DATABASE")
        stack.assert_streams_an_insert(1)


def test_a_node_that_followed_another_database_history_is_rewound(database: str) -> None:
    """A node whose origin names another database history (another cluster, or a timeline
    the database left in a failover or a restore) is rewound even when its position is
    not past the database's: its versioned entries are dropped, plain values stay, it is
    stamped with the database's history and follows the stream. A node of the same history
    is not rewound when the agent restarts."""
    with Stack(database) as stack:
        row = stack.db.execute(
            "SELECT system_identifier::text, pg_walfile_name(pg_current_wal_insert_lsn()) "
            "FROM pg_control_system()"
        ).fetchone()
        assert row is not None
        history = f"{row[0]}:{int(row[1][:8], 16)}".encode()
        position = stack.caught_up()
        assert stack.agent is not None
        stack.agent.stop()
        node = stack.client(0, stream=True)
        assert node.execute_command("TXORIGIN") == history
        assert node.execute_command("TXORIGIN", "42:1") == b"OK"  # another cluster's history
        node.execute_command(
            "TXSET",
            "foreign",
            b"v",
            position,
            "OPEN",
            "SNAPSHOT",
            position,
            "TAGS",
            "public.items:id=1",
        )
        assert node.exists("foreign") == 1
        node.set("plain", b"p")
        stack.restart_agent()
        agent = stack.agent
        assert agent is not None
        # Read on a new stream connection: the restarted agent raised the node's epoch,
        # which fences this one's stream commands.
        wait_until(
            lambda: node_origin(stack) == history,
            "the node stamped with the database's history",
            timeout=20,
            log=agent.log_text,
        )
        assert info(node, "txcache")["rewinds"] == 1
        assert node.exists("foreign") == 0
        assert node.get("plain") == b"p"
        agent.wait_for_log("CACHE NODE FOLLOWED ANOTHER DATABASE HISTORY")
        stack.assert_streams_an_insert(1)
        stack.restart_agent()
        stack.assert_streams_an_insert(2)
        assert info(node, "txcache")["rewinds"] == 1, "the same history: no second rewind"


def node_origin(stack: Stack) -> bytes | None:
    """The first node's ``TXORIGIN``, read on a new stream connection; ``None`` when an
    agent raised the node's epoch meanwhile (the connection is fenced: ask again)."""
    try:
        origin: bytes | None = stack.client(0, stream=True).execute_command("TXORIGIN")
    except redis.ResponseError as error:
        if str(error).startswith("FENCED"):
            return None
        raise
    return origin


def test_a_node_another_agent_moved_on_is_not_rewound(database: str) -> None:
    """A node past the agent's last reading of the database, but not past the database (a
    second agent feeding it moved it on), keeps its entries: the agent reads the database's
    position again before it rewinds."""
    with Stack(database) as stack:
        stack.node.kill()  # the agent starts again with its node down: it connects later
        stack.restart_agent()
        agent = stack.agent
        assert agent is not None
        # The stream session read the database's position when it started (the agent is
        # ready once it has). Then its walsender is stopped, so that neither that reading
        # nor the stream moves on.
        row = stack.db.execute(
            "SELECT active_pid FROM pg_replication_slots "
            "WHERE slot_name = 'txcache' AND database = current_database()"
        ).fetchone()
        assert row is not None
        walsender = row[0]
        assert walsender is not None
        os.kill(walsender, signal.SIGSTOP)
        try:
            for i in range(3):
                stack.write("INSERT INTO items (id) VALUES (%s)", i)
            position = stack.wal_position()
            stack.restart_node(0)
            node = stack.client(0, stream=True)
            # What a second agent streaming this database would have done meanwhile.
            assert node.execute_command("TXHEARTBEAT", position, 1) == 1
            agent.wait_for_log("cache node connected", "the agent's node connection", timeout=20)
        finally:
            os.kill(walsender, signal.SIGCONT)
        stack.assert_streams_an_insert(7, cache=node)
        assert info(node, "txcache")["rewinds"] == 0, agent.log_text()[-3000:]
        assert "PAST THE DATABASE" not in agent.log_text()


def test_the_agent_streams_with_the_stream_password(database: str) -> None:
    """Applications hold the node's password, the agent the stream password (one the stack
    makes up for each run and gives to the nodes and the agent alone): the stream flows,
    and only the agent can move the node's position."""
    with Stack(database, password="app") as stack:
        stack.assert_streams_an_insert(7)
        with pytest.raises(redis.exceptions.NoPermissionError):
            stack.cache.execute_command("TXHEARTBEAT", 2**40, 1)


def test_a_node_that_needs_a_password_the_agent_lacks_is_named_as_such(database: str) -> None:
    """A node's NOAUTH is no other database: the agent's log names the password to give."""
    setup_database(database)
    with (
        NodeProcess("--password", "app") as node,
        AgentProcess(database, [node.address]) as agent,
    ):
        agent.wait_for_log("cache node unreachable", "the agent to report the node")
        log = agent.log_text()
        assert "give the agent its --stream-password as --node-password" in log, log
        assert "ANOTHER DATABASE" not in log, log


def test_the_agent_refuses_to_start_while_schema_changes_go_unseen(database: str) -> None:
    """A disabled DDL trigger (or none: setup run by a role that may not create event
    triggers) means a redefined view or a new column would never reach the caches: the agent
    says so and does not start, and the library reads the database."""
    setup_database(database)
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute("ALTER EVENT TRIGGER txcache_ddl_command_end DISABLE")
        with pytest.raises(ProcessStartError) as refused:
            AgentProcess(database, ["127.0.0.1:1"]).stop()
        message = str(refused.value)
        assert "txcache_ddl_command_end" in message, message
        assert "ENABLE ALWAYS" in message, message
        admin.execute("ALTER EVENT TRIGGER txcache_ddl_command_end ENABLE ALWAYS")
    AgentProcess(database, ["127.0.0.1:1"]).stop()  # starts its stream


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port whose connections are accepted (by the kernel's backlog) and never answered:
    a stopped PostgreSQL, or one cut off after the handshake."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


def agent_against(port: int, connect_timeout: int) -> ManagedProcess:
    """An agent started against ``port``, once it says where it listens."""
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=app connect_timeout={connect_timeout}"
    command = [str(find_binary("txcache-agent")), "--dsn", dsn, "--node", "127.0.0.1:1"]
    command.append("--listen=127.0.0.1:0")
    return ManagedProcess(command, re.compile("txcache-agent listening"))


def test_a_database_that_never_answers_fails_the_start_within_its_connect_timeout() -> None:
    with silent_server() as port, agent_against(port, connect_timeout=1) as agent:
        assert agent.process.wait(timeout=30) != 0
        assert "no answer within" in agent.log_text(), agent.log_text()


def test_a_signal_ends_an_agent_waiting_for_the_database() -> None:
    """A service manager's stop must not wait for its kill: the checks at start listen for
    SIGTERM too."""
    with silent_server() as port, agent_against(port, connect_timeout=600) as agent:
        agent.wait_for_log("checking the database", "the agent to check the database")
        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(timeout=30) == 0, agent.log_text()
        assert "shutting down" in agent.log_text()
