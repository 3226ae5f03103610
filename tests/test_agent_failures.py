"""The agent under failures: a stalled node, a restarted node, a lost replication slot."""

from __future__ import annotations

import os
import signal
import time

import psycopg
import redis

from agent_fixtures import SCHEMA, Stack, lsn
from conftest import StartNode, info, wait_for
from postgres_fixtures import PostgresFactory
from txcache import AgentProcess, NodeProcess, setup_database


def two_node_stack(database: str, start_node: StartNode) -> tuple[Stack, NodeProcess, redis.Redis]:
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(SCHEMA)
    setup_database(database)
    first, second = start_node(), start_node()
    agent = AgentProcess(database, [first.address, second.address], "--heartbeat-interval", "50ms")
    db = psycopg.connect(database, autocommit=True)
    cache = redis.Redis(host=first.host, port=first.port, protocol=2)
    other = redis.Redis(host=second.host, port=second.port, protocol=2, socket_timeout=30)
    return Stack(database, first, agent, cache, db), second, other


def test_a_stalled_node_never_holds_up_the_others_and_catches_up(database, start_node):
    stack, second, other = two_node_stack(database, start_node)
    try:
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
    finally:
        close(stack, other)


def close(stack: Stack, *clients: redis.Redis) -> None:
    stack.agent.stop()
    stack.db.close()
    stack.cache.close()
    for client in clients:
        client.close()


def test_a_restarted_node_is_reset_then_streamed(database, start_node):
    stack, second, other = two_node_stack(database, start_node)
    try:
        stack.write("INSERT INTO items (id) VALUES (1)")
        stack.caught_up(cache=other)
        port = second.port
        second.kill()
        stack.write("INSERT INTO items (id) VALUES (2)")
        reborn = start_node("--port", str(port))
        fresh = redis.Redis(host=reborn.host, port=reborn.port, protocol=2)
        stack.caught_up(cache=fresh)
        assert info(fresh, "txcache")["resets"] == 1
        stack.assert_streams_an_insert(3, cache=fresh)
        fresh.close()
    finally:
        close(stack, other)


def test_a_lost_slot_resets_every_node_loudly(postgres_factory: PostgresFactory, start_node):
    server = postgres_factory({"max_slot_wal_keep_size": "1MB"})
    dsn = server.dsn
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(SCHEMA)
        setup_database(dsn)
        node = start_node()
        agent = AgentProcess(dsn, [node.address], "--heartbeat-interval", "50ms")
        cache = redis.Redis(host=node.host, port=node.port, protocol=2)
        stack = Stack(dsn, node, agent, cache, db)
        probes = stack.probe("public.items:id=1")
        resets = info(cache, "txcache")["resets"]
        agent.stop()
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
        stack.agent = AgentProcess(dsn, [node.address], "--heartbeat-interval", "50ms")
        try:
            wait_for(
                lambda: info(cache, "txcache")["resets"] != resets,
                "the node's reset",
                timeout=20,
                detail=stack.agent.log_text,
            )
            assert info(cache, "txcache")["resets"] == resets + 1
            assert "REPLICATION SLOT LOST" in stack.agent.log_text()
            # The open probe was bounded by the reset: nothing stale survives the gap.
            assert stack.truncated(probes)["public.items:id=1"] is not None
            # And the recreated slot streams again.
            fresh = stack.probe("public.items:id=2")
            before_insert, _ = stack.write("INSERT INTO items (id) VALUES (2)")
            assert all(stack.truncated(fresh).values())
            # Pins are certified against the new stream only, never below the gap: a fresh
            # pin shows the insert made after the slot was recreated.
            endpoint = redis.Redis(host=stack.agent.host, port=stack.agent.port, protocol=2)
            pin_ts = endpoint.execute_command("PIN")[0]
            endpoint.close()
            assert pin_ts >= before_insert
        finally:
            stack.agent.stop()
            cache.close()


def test_a_fast_shutdown_is_not_held_up_by_the_agent(postgres_factory, start_node):
    """A shutting-down server waits for its walsenders' clients to confirm the end of the
    WAL; an agent that confirmed only what it had delivered held it until
    wal_sender_timeout (60 s). Between transactions the agent confirms the end."""
    server = postgres_factory()
    with psycopg.connect(server.dsn, autocommit=True) as db:
        db.execute(SCHEMA)
    setup_database(server.dsn)
    node = start_node()
    agent = AgentProcess(server.dsn, [node.address], "--heartbeat-interval", "50ms")
    try:
        time.sleep(0.5)
        started = time.monotonic()
        server.restart()
        assert time.monotonic() - started < 8, "the walsender waited for the agent"
        with psycopg.connect(server.dsn, autocommit=True) as db:
            db.execute("INSERT INTO items (id) VALUES (1)")
    finally:
        agent.stop()


def test_a_node_past_the_database_is_rewound(database, start_node):
    """A node whose position is past the database's WAL (the database was restored from a
    backup, or failed over to a standby that was behind) is rewound: its versioned entries,
    whose intervals name positions the database reuses, are dropped; plain values stay; it
    then follows the stream again."""
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(SCHEMA)
    setup_database(database)
    node = start_node()
    cache = redis.Redis(host=node.host, port=node.port, protocol=2)
    ahead = 2**40  # far past the WAL of a fresh cluster
    assert cache.execute_command("TXHEARTBEAT", ahead, 1) == 1
    cache.execute_command(
        "TXSET", "stale", b"old", ahead, "OPEN", "SNAPSHOT", ahead, "TAGS", "public.items:id=1"
    )
    cache.set("plain", b"p")
    agent = AgentProcess(database, [node.address], "--heartbeat-interval", "50ms")
    stack = Stack(database, node, agent, cache, psycopg.connect(database, autocommit=True))
    try:
        wait_for(
            lambda: info(cache, "txcache")["rewinds"] != 0,
            "the node's rewind",
            timeout=20,
            detail=agent.log_text,
        )
        assert info(cache, "txcache")["rewinds"] == 1
        assert stack.caught_up() < ahead
        assert cache.exists("stale") == 0
        assert cache.get("plain") == b"p"
        assert "CACHE NODE IS PAST THE DATABASE" in agent.log_text()
        stack.assert_streams_an_insert(1)
    finally:
        close(stack)


def test_a_node_that_followed_another_database_history_is_rewound(database, start_node):
    """A node whose origin names another database history (another cluster, or a timeline
    the database left in a failover or a restore) is rewound even when its position is
    behind the database's: its versioned entries are dropped, plain values stay, it is
    stamped with the database's history and follows the stream. A node of the same history
    is not rewound when the agent restarts."""
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(SCHEMA)
        row = db.execute(
            "SELECT system_identifier::text, pg_walfile_name(pg_current_wal_insert_lsn()) "
            "FROM pg_control_system()"
        ).fetchone()
    assert row is not None
    history = f"{row[0]}:{int(row[1][:8], 16)}".encode()
    setup_database(database)
    node = start_node()
    cache = redis.Redis(host=node.host, port=node.port, protocol=2)
    assert cache.execute_command("TXORIGIN", "42:1") == b"OK"  # another cluster's history
    assert cache.execute_command("TXHEARTBEAT", 1000, 1) == 1  # behind this database's WAL
    cache.execute_command(
        "TXSET", "foreign", b"v", 1000, "OPEN", "SNAPSHOT", 1000, "TAGS", "public.items:id=1"
    )
    cache.set("plain", b"p")
    agent = AgentProcess(database, [node.address], "--heartbeat-interval", "50ms")
    stack = Stack(database, node, agent, cache, psycopg.connect(database, autocommit=True))
    try:
        wait_for(
            lambda: cache.execute_command("TXORIGIN") == history,
            "the node stamped with the database's history",
            timeout=20,
            detail=agent.log_text,
        )
        assert info(cache, "txcache")["rewinds"] == 1
        assert cache.exists("foreign") == 0
        assert cache.get("plain") == b"p"
        assert "CACHE NODE FOLLOWED ANOTHER DATABASE HISTORY" in agent.log_text()
        stack.assert_streams_an_insert(1)
        agent.stop()
        stack.agent = AgentProcess(database, [node.address], "--heartbeat-interval", "50ms")
        stack.assert_streams_an_insert(2)
        assert info(cache, "txcache")["rewinds"] == 1, "the same history: no second rewind"
    finally:
        close(stack)


def test_a_node_another_agent_moved_on_is_not_rewound(database, start_node):
    """A node past the agent's last reading of the database, but not past the database (a
    second agent feeding it moved it on), keeps its entries: the agent reads the database's
    position again before it rewinds."""
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(SCHEMA)
    setup_database(database)
    placeholder = start_node()
    port = placeholder.port
    placeholder.kill()  # the agent starts with its node down: it connects later
    agent = AgentProcess(database, [f"127.0.0.1:{port}"])
    db = psycopg.connect(database, autocommit=True)
    walsender = None
    try:
        # The stream session reads the database's position when it starts. Then its
        # walsender is stopped, so that neither that reading nor the stream moves on.
        wait_for(
            lambda: "invalidation stream started" in agent.log_text(),
            "the stream session",
            timeout=20,
            detail=agent.log_text,
        )
        row = db.execute("SELECT active_pid FROM pg_replication_slots").fetchone()
        assert row is not None
        walsender = row[0]
        assert walsender is not None
        os.kill(walsender, signal.SIGSTOP)
        for i in range(3):
            db.execute("INSERT INTO items (id) VALUES (%s)", (i,))
        row = db.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        node = start_node("--port", str(port))
        cache = redis.Redis(host=node.host, port=node.port, protocol=2)
        # What a second agent streaming this database would have done meanwhile.
        assert cache.execute_command("TXHEARTBEAT", lsn(row[0]), 1) == 1
        wait_for(
            lambda: "cache node connected" in agent.log_text(),
            "the agent's node connection",
            timeout=20,
            detail=agent.log_text,
        )
        os.kill(walsender, signal.SIGCONT)
        walsender = None
        stack = Stack(database, node, agent, cache, db)
        stack.assert_streams_an_insert(7)
        assert info(cache, "txcache")["rewinds"] == 0, agent.log_text()[-3000:]
        assert "PAST THE DATABASE" not in agent.log_text()
    finally:
        if walsender is not None:
            os.kill(walsender, signal.SIGCONT)
        agent.stop()
        db.close()


def test_the_agent_streams_with_the_stream_password(database, start_node):
    """Applications hold the node's password, the agent its stream password: the stream
    flows, and only the agent can move the node's position."""
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(SCHEMA)
    setup_database(database)
    node = start_node("--password", "app", "--stream-password", "agent")
    cache = redis.Redis(host=node.host, port=node.port, password="app", protocol=2)
    agent = AgentProcess(database, [node.address], "--node-password", "agent")
    stack = Stack(database, node, agent, cache, psycopg.connect(database, autocommit=True))
    try:
        stack.assert_streams_an_insert(7)
    finally:
        close(stack)
