"""A failover to a streaming standby: the agent follows the promoted standby through a
multi-host DSN, loses no invalidation, and the cache nodes keep their entries when the
standby's timeline continues past everything they saw."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Literal

import psycopg
import pytest

from agent_fixtures import Stack, open_probe
from conftest import info, running_agent
from txcache.stack import ReplicatedPostgres, wait_until, wal_position

AGENT_SLOT = "txcache"


@pytest.fixture
def pair() -> Iterator[ReplicatedPostgres]:
    """A primary and its streaming (asynchronous) standby, which synchronizes the primary's
    failover slots; the primary sends no change to a logical client before the standby has
    it."""
    with ReplicatedPostgres() as servers:
        yield servers


def test_a_promoted_standby_keeps_the_cache_and_every_invalidation(
    pair: ReplicatedPostgres,
) -> None:
    primary, standby = pair.primary, pair.standby
    assert standby is not None
    with Stack(primary.dsn, agent_dsn=pair.dsn) as stack:
        agent = running_agent(stack)
        probes = stack.probe("public.items:id=1", "public.items:id=2", "public.items:id=3")
        stack.write("INSERT INTO items (id) VALUES (1)")
        position = stack.caught_up()
        wait_until(
            lambda: pair.slots_synced([AGENT_SLOT], position),
            "the standby's copy of the slot to catch up",
            timeout=60,
            log=agent.log_text,
        )
        stack.write("INSERT INTO items (id) VALUES (2)")  # the synced slot is behind this
        stack.caught_up()
        rewinds = info(stack.cache, "txcache")["rewinds"]
        stack.db.close()

        pair.fail_over("stop")  # a clean stop: the standby receives all WAL first
        with psycopg.connect(standby.dsn, autocommit=True) as new_primary:
            agent.wait_for_log(
                "timeline continues the old one",
                "the agent to follow the promoted standby",
                timeout=60,
            )
            new_primary.execute("INSERT INTO items (id) VALUES (3)")
            target = wal_position(new_primary)
        stack.applied_through(target, timeout=30, log=agent.log_text)
        assert info(stack.cache, "txcache")["rewinds"] == rewinds, agent.log_text()[-3000:]
        assert "HISTORY CHANGED" not in agent.log_text()
        # Every invalidation arrived, before and after the failover.
        assert [open_probe(stack.cache, key) for key in probes.values()] == [False] * 3


@pytest.mark.parametrize("how", ["stop", "crash"])
def test_no_invalidation_is_lost_when_the_primary_fails_under_writes(
    pair: ReplicatedPostgres, how: Literal["stop", "crash"]
) -> None:
    """A writer inserts rows one by one while the primary stops (cleanly, or as a crash: an
    immediate shutdown) and the standby is promoted: every insert the new primary has
    reaches the node, and none it lacks does (a commit acknowledged by a crashed primary
    may never have reached the standby: the failover slots keep the agent behind the
    standby, so the nodes never saw it and keep their entries)."""
    primary, standby = pair.primary, pair.standby
    assert standby is not None
    with Stack(primary.dsn, agent_dsn=pair.dsn) as stack:
        agent = running_agent(stack)
        rows = range(1000, 1400)
        probes = stack.probe(*(f"public.items:id={row}" for row in rows))
        wait_until(lambda: pair.slots_synced([AGENT_SLOT]), "the standby's copy of the slot",
                   timeout=60, log=agent.log_text)  # fmt: skip
        committed: list[int] = []
        stop = threading.Event()

        def write() -> None:
            """Insert the next row on whichever server is writable, until told to stop."""
            dsn = pair.dsn
            for row in rows:
                while not stop.is_set():
                    try:
                        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as db:
                            db.execute("INSERT INTO items (id) VALUES (%s)", (row,))
                        committed.append(row)
                        break
                    except psycopg.errors.UniqueViolation:
                        # It committed before the crash cut off the answer, and reached the
                        # standby: the new primary has it.
                        committed.append(row)
                        break
                    except psycopg.Error:
                        time.sleep(0.05)  # the primary stopping or the standby promoting
                if stop.is_set():
                    return

        writer = threading.Thread(target=write)
        writer.start()
        try:
            wait_until(lambda: len(committed) >= 50, "writes on the primary", timeout=30)
            stack.db.close()
            pair.fail_over(how)
            wait_until(lambda: len(committed) >= 150, "writes on the promoted standby",
                       timeout=60, log=agent.log_text)  # fmt: skip
        finally:
            stop.set()
            writer.join()
        with psycopg.connect(standby.dsn) as new_primary:
            target = wal_position(new_primary)
            present = {row for (row,) in new_primary.execute("SELECT id FROM items")}
        stack.applied_through(target, timeout=30, log=agent.log_text)
        invalidated = {
            row for row in rows if not open_probe(stack.cache, probes[f"public.items:id={row}"])
        }
        lost = sorted(set(committed) & present - invalidated)
        assert lost == [], f"{len(lost)} committed inserts never invalidated: {lost[:10]}"
        never_committed = sorted(invalidated - present)
        assert never_committed == [], f"invalidated, but not in the new history: {never_committed}"
        agent.wait_for_log("timeline continues the old one")
        assert info(stack.cache, "txcache")["rewinds"] == 0


def test_an_agent_restarted_during_a_failover_rewinds_the_nodes(pair: ReplicatedPostgres) -> None:
    """An agent that was down while the standby was promoted never saw the old timeline
    end: it cannot tell that the new one continues it, so it rewinds the nodes (their
    versioned entries dropped) rather than trust them, and streams on."""
    primary, standby = pair.primary, pair.standby
    assert standby is not None
    with Stack(primary.dsn, agent_dsn=pair.dsn) as stack:
        agent = running_agent(stack)
        probes = stack.probe("public.items:id=1")
        position = stack.caught_up()
        wait_until(
            lambda: pair.slots_synced([AGENT_SLOT], position),
            "the standby's copy of the slot",
            timeout=60,
            log=agent.log_text,
        )
        rewinds = info(stack.cache, "txcache")["rewinds"]
        agent.stop()
        stack.db.close()
        pair.fail_over("stop")
        stack.restart_agent()
        restarted = running_agent(stack)
        wait_until(
            lambda: info(stack.cache, "txcache")["rewinds"] == rewinds + 1,
            "the node to be rewound",
            timeout=60,
            log=restarted.log_text,
        )
        restarted.wait_for_log("CACHE NODE FOLLOWED ANOTHER DATABASE HISTORY")
        assert stack.cache.exists(probes["public.items:id=1"]) == 0
        with psycopg.connect(standby.dsn, autocommit=True) as new_primary:
            new_primary.execute("INSERT INTO items (id) VALUES (1)")
            target = wal_position(new_primary)
        stack.applied_through(target, timeout=30, log=restarted.log_text)


def test_a_multi_host_dsn_must_ask_for_the_primary(pair: ReplicatedPostgres) -> None:
    dsn = pair.dsn.replace(" target_session_attrs=read-write", "")
    stack = Stack(pair.primary.dsn, agent_dsn=dsn)
    with pytest.raises(Exception, match="target_session_attrs=read-write"):
        stack.start()
    stack.stop()
