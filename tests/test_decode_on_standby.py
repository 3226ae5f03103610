"""The change stream decoded on a hot standby (``--decode-from``): the agent's slot lives on
the standby and its walsender decodes there, so the primary does no logical decoding; every
write on the primary still invalidates what it changed, a read after its own write sees it,
and a standby that restarts resumes the stream where the slot stands."""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import IO

import psycopg
import pytest

import txcache
from agent_fixtures import HEARTBEATS, Stack, open_probe
from cached_reads import assert_invalidated, cached, reread
from conftest import info, running_agent
from library_fixtures import AGENT_ARGS, LibraryStack
from txcache import protocol
from txcache._pinset import Pin
from txcache.stack import (
    EmbeddedPostgres,
    ReplicatedPostgres,
    TcpProxy,
    agent_walsenders,
    find_binary,
    hosts_dsn,
    parse_lsn,
    wait_for_stream_on,
    wait_until,
    wal_position,
)

QUERY = "SELECT name FROM items WHERE id = %s"


@pytest.fixture
def pair() -> Iterator[ReplicatedPostgres]:
    """A primary and its streaming standby (hot_standby_feedback on, synchronizing the
    primary's failover slots), for one test."""
    with ReplicatedPostgres() as servers:
        yield servers


@pytest.fixture
def lib(pair: ReplicatedPostgres) -> Iterator[LibraryStack]:
    """The stack on the primary (setup made its slot there), the agent decoding on the
    standby."""
    assert pair.standby is not None
    flags = (*AGENT_ARGS, "--decode-from", pair.standby.dsn)
    with LibraryStack(pair.primary.dsn, agent_args=flags) as stack:
        yield stack


def slots(dsn: str) -> list[tuple[str, bool]]:
    """The logical slots of the server at ``dsn``: name, and whether a synchronized copy."""
    with psycopg.connect(dsn) as db:
        rows = db.execute(
            "SELECT slot_name::text, synced FROM pg_replication_slots WHERE slot_type = 'logical'"
        ).fetchall()
    return [(str(name), bool(synced)) for name, synced in rows]


def replayed(dsn: str) -> bool:
    """Whether the database at ``dsn`` exists (the standby replayed its creation)."""
    try:
        psycopg.connect(dsn).close()
    except psycopg.OperationalError:
        return False
    return True


def test_the_stream_is_decoded_on_the_standby_and_invalidates_the_primary_s_writes(
    lib: LibraryStack, pair: ReplicatedPostgres
) -> None:
    assert pair.standby is not None
    assert ("txcache", False) in slots(pair.standby.dsn), "the agent's own slot, not a copy"
    assert "txcache" not in dict(slots(pair.primary.dsn)), "setup's slot on the primary dropped"
    assert agent_walsenders(pair.primary.dsn) == 0
    assert agent_walsenders(pair.standby.dsn) == 1

    assert cached(lib, QUERY, 1) == [("item 1",)]
    token = lib.commit("UPDATE items SET name = 'renamed' WHERE id = 1")
    assert assert_invalidated(lib, QUERY, token, 1) == [("renamed",)]
    assert cached(lib, QUERY, 2) == [("item 2",)]
    token = lib.commit("UPDATE items SET name = 'elsewhere' WHERE id = 3")
    assert reread(lib, QUERY, token, 2) == ([("item 2",)], False), "a change to another row"

    # txcache status knows, from the agent, that the primary has no slot on purpose, and
    # names one left there (setup run again, say) as the leftover it is.
    healthy = status(lib)
    assert healthy.returncode == 0, healthy.stdout
    assert "slot" not in healthy.stdout
    with psycopg.connect(pair.primary.dsn, autocommit=True) as db:
        db.execute("SELECT pg_create_logical_replication_slot('txcache', 'pgoutput')")
    leftover = status(lib)
    assert leftover.returncode == 1
    assert "slot txcache on this database is a leftover" in leftover.stdout
    assert "pg_drop_replication_slot('txcache')" in leftover.stdout


def status(lib: LibraryStack) -> subprocess.CompletedProcess[str]:
    """``txcache status`` of the stack, with the database: what an operator runs."""
    command = ["txcache", "status", "--dsn", lib.dsn, "--agent", lib.agent_address]
    command += ["--nodes", ",".join(lib.node_addresses)]
    return subprocess.run(
        [sys.executable, "-m", *command], capture_output=True, text=True, timeout=120
    )


def test_a_read_after_its_own_write_sees_it(lib: LibraryStack) -> None:
    for n in range(101, 121):
        with lib.cache.read_write() as tx:
            tx.execute("INSERT INTO items VALUES (%s, 'new', 1, 0)", (n,))
        token = tx.commit_timestamp
        assert token is not None
        with lib.cache.read_only(staleness=60, not_before=token) as reading:
            row = txcache.query_one("SELECT count(*) FROM items WHERE id = %s", (n,))
        assert row == (1,)
        assert reading.snapshot is not None
        assert reading.snapshot.ts >= token


def test_a_lagging_standby_s_keepalives_do_not_make_pins_current(
    lib: LibraryStack, pair: ReplicatedPostgres
) -> None:
    """The standby the stream is decoded on applies each commit 2 s late while the primary
    commits on, and pins are in demand: no pin is listed as current past a commit after it
    that is still to be replayed there — not by the primary's heartbeats, nor by the standby
    walsender's keepalives, whose position is its replay's and whose clock is its own (the
    library would serve reads staler than their staleness)."""
    assert pair.standby is not None
    assert lib.agent is not None
    address = f"{lib.agent.host}:{lib.agent.port}"
    with psycopg.connect(pair.standby.dsn, autocommit=True) as standby:
        standby.execute("ALTER SYSTEM SET recovery_min_apply_delay = '2s'")
        standby.execute("SELECT pg_reload_conf()")
    commits: list[tuple[int, float]] = []  # the WAL position each began after, and when done
    listed: list[Pin] = []
    with protocol.connect(address) as agent, asking_for_pins(address):
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            began = wal_position(lib.admin)
            lib.write("UPDATE items SET name = %s WHERE id = 5", f"lagging {len(commits)}")
            commits.append((began, time.time()))
            pins = agent.run(protocol.pins())
            listed += pins
            time.sleep(0.05)  # a write every 50 ms or so
    assert any(pin.ts > commits[0][0] for pin in listed), "no pin certified during the writes"
    # For each listed pin, how long after the first commit past it it was called current.
    late = {
        (pin.ts, round(pin.current_as_of - done, 2))
        for pin in listed
        for done in [min((d for began, d in commits if began > pin.ts), default=math.inf)]
        if done < pin.current_as_of - 0.5
    }
    worst = sorted(late, key=lambda pin: -pin[1])[:3]
    assert not late, f"pins current past a later commit (ts, seconds past it): {worst}"


@contextlib.contextmanager
def asking_for_pins(address: str) -> Iterator[None]:
    """Asks the agent at ``address`` for a fresh pin, one after another, until the block
    ends: pins are in demand (a pinner nobody asks takes none)."""
    done = threading.Event()
    pins: list[Pin] = []
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            with protocol.connect(address, timeout=30) as agent:
                while not done.is_set():
                    pins.append(agent.run(protocol.pin()))
        except BaseException as error:  # re-raised by the test's thread below
            failed.append(error)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    try:
        yield
    finally:
        done.set()
        asker.join(timeout=30)
    if failed:
        raise failed[0]
    assert pins, "no PIN was answered while the test wrote"


def test_a_standby_that_crashes_resumes_the_stream_and_the_cache_is_kept(
    lib: LibraryStack, pair: ReplicatedPostgres
) -> None:
    """Started again after a crash, the standby replays from its last restartpoint, behind
    what it decoded before — here, applying no commit less than 10 s old, it is still behind
    when the stream starts again: that is no database going back (the primary's position
    tells), and no node is rewound.
    (Then it is restarted without the delay: a fresh pin waits for the stream, and a PIN
    answers within half the library's ``agent_timeout``.)"""
    assert pair.standby is not None
    assert cached(lib, QUERY, 1) == [("item 1",)]
    assert cached(lib, QUERY, 2) == [("item 2",)]
    lib.commit("UPDATE items SET name = 'before the crash' WHERE id = 4")
    started = stream_starts(lib)
    pair.standby.crash()
    pair.restart_standby({"recovery_min_apply_delay": "10s"})
    wait_until(
        lambda: stream_starts(lib) > started,
        "the stream to start again on the restarted standby",
        timeout=30,
        log=lib._agent_log,
    )
    pair.restart_standby({})
    token = lib.commit("UPDATE items SET name = 'after the crash' WHERE id = 1")
    assert assert_invalidated(lib, QUERY, token, 1) == [("after the crash",)]
    assert reread(lib, QUERY, token, 2) == ([("item 2",)], False), "the cache was kept"
    assert rewinds(lib) == [0, 0]
    assert "WENT BACK" not in lib._agent_log()


def rewinds(lib: LibraryStack) -> list[int]:
    """Each node's count of rewinds (the agent found the database gone back)."""
    return [int(lib.node_info(a, "txcache")["rewinds"]) for a in lib.node_addresses]


def stream_starts(lib: LibraryStack) -> int:
    """How many replication sessions the agent has started."""
    return lib._agent_log().count("invalidation stream started")


def test_another_database_is_refused_as_the_decoding_server(
    lib: LibraryStack, pair: ReplicatedPostgres
) -> None:
    assert pair.standby is not None
    lib.admin.execute("CREATE DATABASE other")
    other = pair.standby.dsn.replace("dbname=postgres", "dbname=other")
    wait_until(lambda: replayed(other), "the standby to replay CREATE DATABASE", timeout=30)
    refusal = refused_agent(lib, pair, other)
    assert 'reaches database "other"' in refusal
    assert "the stream must be decoded on a standby of the primary" in refusal


def test_a_standby_that_cannot_decode_is_refused_and_one_without_feedback_warned_of(
    lib: LibraryStack, pair: ReplicatedPostgres
) -> None:
    """On a second standby, which holds no slot (one with a logical slot would not start
    below wal_level = logical)."""
    second = pair.add_standby()
    second.restart({"wal_level": "replica"})
    refusal = refused_agent(lib, pair, second.dsn)
    assert "runs with wal_level = replica" in refusal
    second.restart({"hot_standby_feedback": "off"})
    with tempfile.TemporaryFile("w+") as log, agent_process(lib, pair, second.dsn, log):
        wait_until(
            lambda: "hot_standby_feedback off" in read_all(log),
            "the agent to warn of the standby's hot_standby_feedback",
            timeout=30,
            log=lambda: read_all(log),
        )


def agent_command(lib: LibraryStack, pair: ReplicatedPostgres, decoding: str) -> list[str]:
    """Another agent of the stack's primary, decoding on ``decoding``."""
    return [
        str(find_binary("txcache-agent")),
        "--dsn",
        pair.primary.dsn,
        "--decode-from",
        decoding,
        "--node",
        lib.node_addresses[0],
        "--listen",
        "127.0.0.1:0",
    ]


def refused_agent(lib: LibraryStack, pair: ReplicatedPostgres, decoding: str) -> str:
    """What an agent decoding on ``decoding`` said as it refused to start."""
    command = agent_command(lib, pair, decoding)
    agent = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert agent.returncode != 0, agent.stderr
    return agent.stderr


@contextlib.contextmanager
def agent_process(
    lib: LibraryStack, pair: ReplicatedPostgres, decoding: str, log: IO[str]
) -> Iterator[None]:
    """An agent decoding on ``decoding`` (standing by: the stack's holds the lease), its
    output to ``log``; stopped on exit."""
    agent = subprocess.Popen(agent_command(lib, pair, decoding), stderr=log, text=True)
    try:
        yield
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def read_all(log: IO[str]) -> str:
    log.seek(0)
    return log.read()


def test_a_promoted_decoding_standby_goes_on_as_the_primary_the_stream_is_decoded_on(
    pair: ReplicatedPostgres,
) -> None:
    """The standby the stream is decoded on is promoted (the primary stopped): its
    walsender decodes on across the new timeline, the agent's primary sessions follow it,
    and the nodes keep their entries and get every invalidation, before and after."""
    primary, standby = pair.primary, pair.standby
    assert standby is not None
    flags = (*HEARTBEATS, "--decode-from", standby.dsn)
    with Stack(primary.dsn, agent_dsn=pair.dsn, agent_args=flags) as stack:
        agent = running_agent(stack)
        probes = stack.probe("public.items:id=1", "public.items:id=2")
        stack.write("INSERT INTO items (id) VALUES (1)")
        stack.caught_up()
        rewinds = info(stack.cache, "txcache")["rewinds"]
        stack.db.close()

        pair.fail_over("stop")
        with psycopg.connect(standby.dsn, autocommit=True) as new_primary:
            new_primary.execute("INSERT INTO items (id) VALUES (2)")
            target = wal_position(new_primary)
        stack.applied_through(target, timeout=30, log=agent.log_text)
        assert info(stack.cache, "txcache")["rewinds"] == rewinds, agent.log_text()[-3000:]
        assert [open_probe(stack.cache, key) for key in probes.values()] == [False, False]


def test_a_promoted_decoding_standby_hands_the_stream_to_the_next_standby_s_spare() -> None:
    """The standby the stream is decoded on is promoted (the primary stopped), and a second
    standby, cascading from it, follows it: the stream, decoded on a primary now, moves to
    the second standby's spare slot (the promoted server's slot then dropped) — no node
    rewound or reset, every invalidation before and after."""
    # A base backup of a standby needs full-page writes on the primary.
    with ReplicatedPostgres({"full_page_writes": "on"}) as pair:
        primary, first = pair.primary, pair.standby
        assert first is not None
        second = pair.add_standby(upstream=first)
        hand_over_on_promotion(pair, primary, first, second)


def test_without_pg_read_all_stats_a_standby_s_timeline_is_asked_of_its_walsender() -> None:
    """As above, ``--decode-from``'s role a replication role without ``pg_read_all_stats``,
    from which ``pg_stat_wal_receiver`` hides the timeline: the standbys' timelines are
    asked over replication sessions. (The last restartpoint's timeline, all SQL shows such a
    role, would keep the second standby on the old timeline for minutes after the
    promotion, its spare unusable: the stream would stay on the promoted server.)"""
    with ReplicatedPostgres({"full_page_writes": "on"}) as pair:
        primary, first = pair.primary, pair.standby
        assert first is not None
        with psycopg.connect(primary.dsn, autocommit=True) as db:
            db.execute("CREATE ROLE decoder LOGIN REPLICATION")
            target = wal_position(db)
        wait_until(lambda: standby_replayed(first.dsn) >= target, "the standby to replay the role")
        second = pair.add_standby(upstream=first)
        hand_over_on_promotion(pair, primary, first, second, role="decoder")


def standby_replayed(dsn: str) -> int:
    """Where the standby at ``dsn`` has replayed."""
    with psycopg.connect(dsn) as db:
        row = db.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


def hand_over_on_promotion(
    pair: ReplicatedPostgres,
    primary: EmbeddedPostgres,
    first: EmbeddedPostgres,
    second: EmbeddedPostgres,
    *,
    role: str = EmbeddedPostgres.user,
) -> None:
    """The body of the tests above: the stack on ``primary``, decoding on ``first`` (as
    ``role``) with ``second`` the spare, ``first`` promoted."""
    decode_from = hosts_dsn((first, second), user=role)
    flags = (*HEARTBEATS, "--decode-from", decode_from, "--decode-failover-after", "2s")
    with Stack(primary.dsn, agent_dsn=pair.dsn, agent_args=flags) as stack:
        agent = running_agent(stack)
        probes = stack.probe("public.items:id=1", "public.items:id=2", "public.items:id=3")
        stack.write("INSERT INTO items (id) VALUES (1)")
        target = stack.caught_up()
        wait_until(
            lambda: slot_position(second.dsn) >= target,
            "the spare slot on the second standby to follow the stream",
            timeout=30,
            log=agent.log_text,
        )
        before = info(stack.cache, "txcache")
        stack.db.close()

        pair.fail_over("stop")
        wait_for_stream_on(
            second.dsn,
            "the stream to move off the promoted standby to the second's spare slot",
            log=agent.log_text,
        )
        with psycopg.connect(first.dsn, autocommit=True) as new_primary:
            new_primary.execute("INSERT INTO items (id) VALUES (2)")
            target = wal_position(new_primary)
        stack.applied_through(target, timeout=30, log=agent.log_text)
        after = info(stack.cache, "txcache")
        assert (after["rewinds"], after["resets"]) == (before["rewinds"], before["resets"])
        opened = [open_probe(stack.cache, key) for key in probes.values()]
        assert opened == [False, False, True], "ids 1 and 2 invalidated, id 3 kept"
        wait_until(
            lambda: "txcache" not in dict(slots(first.dsn)),
            "the promoted server's idle slot to be dropped",
            timeout=30,
            log=agent.log_text,
        )


def moving_stack(
    primary: str, decode_from: str, *, failover_after: str = "2s", primary_slot: str = "drop"
) -> LibraryStack:
    """The stack on ``primary``, decoding on the first of ``decode_from``'s hosts that
    answers, moving on to a spare slot after 2 s without an answer, to any host after
    ``failover_after``; a primary among the hosts keeps a spare with ``primary_slot``
    ``spare``."""
    failing = ("--decode-spare-after", "2s", "--decode-failover-after", failover_after)
    flags = (*failing, "--decode-primary-slot", primary_slot)
    return LibraryStack(primary, agent_args=(*AGENT_ARGS, "--decode-from", decode_from, *flags))


def test_a_hung_decoding_standby_is_left_for_the_next_one_s_spare_slot_and_the_cache_kept(
    pair: ReplicatedPostgres,
) -> None:
    """The second standby keeps a spare slot, advanced to what the stream acknowledged. The
    first hangs (SIGSTOP): the stream, silent, moves to the spare — no node reset, the
    entries cached before still served — and invalidates exactly from there; once the first
    answers again, its slot is the spare and follows the stream. The move to a spare comes
    after ``--decode-spare-after``, long before ``--decode-failover-after``."""
    first = pair.standby
    assert first is not None
    second = pair.add_standby()
    decode_from = hosts_dsn((first, second))
    with moving_stack(pair.primary.dsn, decode_from, failover_after="10m") as lib:
        assert ("txcache", False) in slots(first.dsn)
        assert cached(lib, QUERY, 1) == [("item 1",)]
        assert cached(lib, QUERY, 2) == [("item 2",)]
        following(lib, second, "the spare slot on the second standby")
        resets = node_resets(lib)
        with first.paused():
            wait_for_stream_on(
                second.dsn, "the stream to move to the second standby", log=lib._agent_log
            )
            log = lib._agent_log()
            assert "the server the stream is decoded on sent nothing for" in log
            assert "THE --decode-from HOST THE STREAM IS DECODED ON HAS FAILED" in log
            assert "THE STREAM MOVED" not in log
            token = lib.commit("UPDATE items SET name = 'moved' WHERE id = 1")
            assert assert_invalidated(lib, QUERY, token, 1) == [("moved",)]
            token = lib.commit("UPDATE items SET name = 'elsewhere' WHERE id = 3")
            assert reread(lib, QUERY, token, 2) == ([("item 2",)], False), "the cache was kept"
        assert node_resets(lib) == resets
        following(lib, first, "the first standby's slot, now the spare")


def test_before_failover_after_the_stream_moves_only_to_a_spare_slot(
    pair: ReplicatedPostgres,
) -> None:
    """With both standbys hung, only the primary (named last) answers: before
    ``--decode-failover-after`` the stream does not move there, which would reset every
    node; the standbys back, it resumes on one of them, the cache kept."""
    first = pair.standby
    assert first is not None
    second = pair.add_standby()
    decode_from = hosts_dsn((first, second, pair.primary))
    with moving_stack(pair.primary.dsn, decode_from, failover_after="10m") as lib:
        assert cached(lib, QUERY, 2) == [("item 2",)]
        following(lib, second, "the spare slot on the second standby")
        resets = node_resets(lib)
        with first.paused(), second.paused():
            wait_until(
                lambda: "no --decode-from host with a usable slot answers" in lib._agent_log(),
                "the agent to find no spare slot answering",
                timeout=60,
                log=lib._agent_log,
            )
            assert agent_walsenders(pair.primary.dsn) == 0
            assert "THE STREAM MOVED" not in lib._agent_log()
        lib.caught_up()
        invalidates_with_the_cache_kept(lib, resets, "standbys back")
        assert "txcache" not in dict(slots(pair.primary.dsn))


def test_a_decoding_host_that_answers_but_refuses_the_stream_is_left_for_a_spare_slot(
    pair: ReplicatedPostgres,
) -> None:
    """The standby the stream is decoded on still answers SQL, but the stream cannot start
    there (its slot held by another consumer here; a full ``max_wal_senders`` or a refused
    replication connection would do the same): it has failed as surely, and the stream
    moves to the second standby's spare, the cache kept."""
    with spare_ready(pair) as (lib, first, second):
        resets = node_resets(lib)
        assert lib.agent is not None
        with contextlib.ExitStack() as holding:
            with lib.agent.paused():
                holding.enter_context(holding_the_slot(first))
            wait_for_stream_on(
                second.dsn, "the stream to move to the second standby", log=lib._agent_log
            )
        assert "THE STREAM CANNOT RUN ON THE --decode-from HOST IN USE" in lib._agent_log()
        invalidates_with_the_cache_kept(lib, resets, "refused")


def test_a_decoding_standby_cut_off_from_its_upstream_is_left_for_a_spare_slot(
    pair: ReplicatedPostgres,
) -> None:
    """The standby the stream is decoded on answers, but receives no WAL (its upstream
    unreachable, as when a failover leaves it on the old timeline): unlike a standby whose
    replay is paused, it is left for the second standby's spare, the cache kept."""
    with spare_ready(pair) as (lib, first, second):
        resets = node_resets(lib)
        with psycopg.connect(first.dsn, autocommit=True) as standby:
            standby.execute("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1'")
            standby.execute("SELECT pg_reload_conf()")
        wait_for_stream_on(
            second.dsn, "the stream to move to the second standby", log=lib._agent_log
        )
        log = lib._agent_log()
        assert "receives no WAL" in log
        assert "THE STREAM CANNOT RUN ON THE --decode-from HOST IN USE" in log
        invalidates_with_the_cache_kept(lib, resets, "cut off")


def test_a_decoding_host_that_hangs_each_replication_start_is_left_for_a_spare_slot(
    pair: ReplicatedPostgres,
) -> None:
    """The standby the stream is decoded on answers SQL, but each replication connection
    goes silent after its start-up message (as a server stopped, or cut off, just after
    accepting it): the start is given up after the host's ``connect_timeout`` and counts as
    a failure, and the stream moves to the second standby's spare, the cache kept."""
    assert pair.standby is not None
    proxy = TcpProxy(pair.standby.host, pair.standby.port, postgres=True)
    try:
        with spare_ready(pair, first_port=proxy.port) as (lib, first, second):
            resets = node_resets(lib)
            proxy.hold_replication()
            with psycopg.connect(first.dsn, autocommit=True) as standby:
                standby.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                    "WHERE slot_name = 'txcache'"
                )
            wait_for_stream_on(
                second.dsn, "the stream to move to the second standby", log=lib._agent_log
            )
            log = lib._agent_log()
            assert "accepted the replication connection but did not answer" in log
            assert "THE STREAM CANNOT RUN ON THE --decode-from HOST IN USE" in log
            invalidates_with_the_cache_kept(lib, resets, "hung start")
    finally:
        proxy.stop()


def test_a_decoding_standby_left_without_wal_by_a_hung_primary_is_kept(
    pair: ReplicatedPostgres,
) -> None:
    """The primary hung, no standby receives WAL (the one the stream is decoded on gives up
    its WAL receiver after 2 s here): it is not blamed for that (another would be as
    silent), and the stream stays there; the primary back, the invalidations resume, the
    cache kept."""
    with spare_ready(pair) as (lib, first, _):
        resets = node_resets(lib)
        with psycopg.connect(first.dsn, autocommit=True) as standby:
            standby.execute("ALTER SYSTEM SET wal_receiver_timeout = '2s'")
            standby.execute("SELECT pg_reload_conf()")
        with pair.primary.paused():
            wait_until(
                lambda: lib._agent_log().count("no primary answers either") >= 2,
                "the silence check to find the standby without WAL, and no primary, twice",
                timeout=60,
                log=lib._agent_log,
            )
            # The stream stays: one session there, once the silence check's question to
            # the standby's walsender (a session "txcache-agent timeline") has ended.
            wait_for_stream_on(first.dsn, "the stream to stay on the standby", log=lib._agent_log)
            assert "THE STREAM CANNOT RUN" not in lib._agent_log()
        wait_until(
            lambda: lease_held(lib), "the agent to renew its lease", timeout=30, log=lib._agent_log
        )
        invalidates_with_the_cache_kept(lib, resets, "primary back")


def test_a_decoding_host_that_hangs_while_the_stream_session_starts_is_left(
    pair: ReplicatedPostgres,
) -> None:
    """The stream session's start on the standby takes long (its slot, dropped, is being
    created again, which waits for a transaction running on the primary), and the standby
    then hangs (cut off behind a proxy): the start is not waited for forever, since the
    standby no longer answers new sessions; the stream moves to the second standby's spare,
    the cache kept."""
    assert pair.standby is not None
    proxy = TcpProxy(pair.standby.host, pair.standby.port)
    blocker = psycopg.connect(pair.primary.dsn)
    try:
        with spare_ready(pair, first_port=proxy.port) as (lib, first, second):
            assert lib.agent is not None
            resets = node_resets(lib)
            blocker.execute("SELECT pg_current_xact_id()")  # running until the end
            with lib.agent.paused():
                drop_the_slot(first)
            wait_until(
                lambda: "REPLICATION SLOT DROPPED" in lib._agent_log(),
                "the agent to create its slot on the standby again",
                timeout=30,
                log=lib._agent_log,
            )
            proxy.cut()
            wait_for_stream_on(
                second.dsn, "the stream to move to the second standby", log=lib._agent_log
            )
            assert "stopped answering while the stream session started" in lib._agent_log()
            blocker.rollback()
            invalidates_with_the_cache_kept(lib, resets, "hung start")
    finally:
        blocker.close()
        proxy.stop()


def drop_the_slot(server: EmbeddedPostgres) -> None:
    """Slot ``txcache`` on ``server`` dropped, its walsender ended first (the agent must be
    paused: it would take the slot back)."""
    with psycopg.connect(server.dsn, autocommit=True) as db:
        db.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE slot_name = 'txcache'"
        )

        def inactive() -> bool:
            row = db.execute(
                "SELECT NOT active FROM pg_replication_slots WHERE slot_name = 'txcache'"
            ).fetchone()
            return row is not None and bool(row[0])

        wait_until(inactive, "the slot's walsender to end", timeout=30)
        db.execute("SELECT pg_drop_replication_slot('txcache')")


def invalidates_with_the_cache_kept(lib: LibraryStack, resets: list[int], name: str) -> None:
    """Item 2 renamed ``name`` through the library is invalidated exactly, and no node was
    reset since ``resets`` (``node_resets``) was read."""
    token = lib.commit(f"UPDATE items SET name = '{name}' WHERE id = 2")
    assert assert_invalidated(lib, QUERY, token, 2) == [(name,)]
    assert node_resets(lib) == resets


def lease_held(lib: LibraryStack) -> bool:
    """Whether the agent renewed its lease as often as it failed to (the primary hung, it
    cannot): until then it tells the libraries it is a standby."""
    log = lib._agent_log()
    return log.count("the lease is renewed") == log.count("cannot renew the lease")


@contextlib.contextmanager
def spare_ready(
    pair: ReplicatedPostgres, *, first_port: int | None = None
) -> Iterator[tuple[LibraryStack, EmbeddedPostgres, EmbeddedPostgres]]:
    """The stack decoding on the standby (reached at ``first_port``, a proxy's, if given),
    a second standby's spare slot following the stream (moved to after 2 s of failure, to
    any host only after 10 minutes), item 2 cached: yields the stack and both standbys."""
    first = pair.standby
    assert first is not None
    second = pair.add_standby()
    decode_from = hosts_dsn((first, second))
    if first_port is not None:
        decode_from = decode_from.replace(f"port={first.port},", f"port={first_port},")
    with moving_stack(pair.primary.dsn, decode_from, failover_after="10m") as lib:
        assert cached(lib, QUERY, 2) == [("item 2",)]
        following(lib, second, "the spare slot on the second standby")
        yield lib, first, second


@contextlib.contextmanager
def holding_the_slot(server: EmbeddedPostgres) -> Iterator[None]:
    """Slot ``txcache`` on ``server`` taken from the agent's walsender by
    ``pg_recvlogical``, which holds it inside the block (the agent must be paused: it would
    take the slot back first)."""
    with psycopg.connect(server.dsn, autocommit=True) as db:
        db.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE slot_name = 'txcache'"
        )
    command = [str(server.binary("pg_recvlogical")), "--dbname", server.dsn]
    command += ["--slot", "txcache", "--start", "--file", "/dev/null", "--no-loop"]
    command += ["--option", "proto_version=1", "--option", "publication_names=txcache"]
    holder = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    query = (
        "SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_activity a "
        "ON a.pid = s.active_pid WHERE s.slot_name = 'txcache' "
        "AND a.application_name = 'pg_recvlogical'"
    )

    def held() -> bool:
        if holder.poll() is not None:
            raise AssertionError(f"pg_recvlogical exited: {holder.communicate()[1]}")
        with psycopg.connect(server.dsn) as db:
            row = db.execute(query).fetchone()
        return row is not None and row[0] == 1

    try:
        wait_until(held, "pg_recvlogical to hold the slot", timeout=30)
        yield
    finally:
        holder.kill()
        holder.communicate()  # reaps it and closes its pipe


def following(lib: LibraryStack, standby: EmbeddedPostgres, what: str) -> None:
    """Wait until the slot ``txcache`` on ``standby`` stands at or past the WAL position of
    now (a spare slot follows what the stream acknowledged), and the agent finds it usable:
    the slot's position alone does not say so, and a spare not usable when the stream
    fails stays so (spares are not tended then)."""
    target = wal_position(lib.admin)
    lib.caught_up()
    wait_until(
        lambda: slot_position(standby.dsn) >= target and spare_usable(lib, standby),
        f"{what} to follow the stream, usable",
        timeout=60,
        log=lib._agent_log,
    )


def spare_usable(lib: LibraryStack, standby: EmbeddedPostgres) -> bool:
    """Whether the agent last found the spare slot on ``standby`` usable (its log)."""
    host = f"host={standby.host}:{standby.port} "
    changes = [
        line
        for line in lib._agent_log().splitlines()
        if "changed usability" in line and host in line
    ]
    return bool(changes) and "usable=true" in changes[-1]


def slot_position(dsn: str) -> int:
    """Where slot ``txcache`` on the server at ``dsn`` is confirmed (0: there is none)."""
    with psycopg.connect(dsn) as db:
        row = db.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'txcache'"
        ).fetchone()
    return parse_lsn(row[0]) if row is not None and row[0] is not None else 0


def test_the_stream_falls_back_to_the_primary_and_returns_to_the_standby_s_spare(
    pair: ReplicatedPostgres,
) -> None:
    """``--decode-from`` names the primary, then the standby: the stream is decoded on the
    standby. The standby stopped, it falls back to the primary (a slot created there, every
    node reset), and every write still invalidates what it changed; the standby started
    again, its slot is the spare, and once caught up the stream returns there without a
    reset (the primary's slot dropped), as it does when the agent starts again."""
    standby = pair.standby
    assert standby is not None
    with moving_stack(pair.primary.dsn, hosts_dsn((pair.primary, standby))) as lib:
        wait_for_stream_on(standby.dsn, "the stream to start on the standby", log=lib._agent_log)
        standby.crash()
        wait_for_stream_on(
            pair.primary.dsn, "the stream to move to the primary", log=lib._agent_log
        )
        assert ("txcache", False) in slots(pair.primary.dsn)
        assert "THE STREAM MOVED" in lib._agent_log()
        assert cached(lib, QUERY, 2) == [("item 2",)]
        token = lib.commit("UPDATE items SET name = 'on the primary' WHERE id = 2")
        assert assert_invalidated(lib, QUERY, token, 2) == [("on the primary",)]
        resets = node_resets(lib)

        pair.restart_standby({})
        wait_for_stream_on(
            standby.dsn, "the stream to return to the standby's spare slot", log=lib._agent_log
        )
        wait_until(
            lambda: "txcache" not in dict(slots(pair.primary.dsn)),
            "the primary's idle slot to be dropped",
            timeout=30,
            log=lib._agent_log,
        )
        invalidates_with_the_cache_kept(lib, resets, "back on the standby")

        lib.restart_agent()
        wait_for_stream_on(
            standby.dsn, "the restarted agent to decode on the standby", log=lib._agent_log
        )
        invalidates_with_the_cache_kept(lib, resets, "after the restart")


def test_with_a_spare_on_the_primary_the_stream_falls_back_there_with_the_cache_kept(
    pair: ReplicatedPostgres,
) -> None:
    """``--decode-from`` names the standby, then the primary, which keeps a spare slot
    (``--decode-primary-slot spare``; not a failover one, which the standby would copy over
    its own). The standby stopped, the stream moves to the primary's spare after
    ``--decode-spare-after`` — no node reset, long before ``--decode-failover-after`` —
    and invalidates exactly from there, also after the agent restarts; the standby back,
    the stream returns to its spare, and the primary's stays a spare."""
    standby = pair.standby
    assert standby is not None
    decode_from = hosts_dsn((standby, pair.primary))
    with moving_stack(
        pair.primary.dsn, decode_from, failover_after="10m", primary_slot="spare"
    ) as lib:
        wait_for_stream_on(standby.dsn, "the stream to start on the standby", log=lib._agent_log)
        assert cached(lib, QUERY, 2) == [("item 2",)]
        following(lib, pair.primary, "the spare slot on the primary")
        assert not failover_slot(pair.primary.dsn), "the primary's spare is no failover slot"
        resets = node_resets(lib)

        standby.crash()
        wait_for_stream_on(
            pair.primary.dsn, "the stream to move to the primary's spare", log=lib._agent_log
        )
        assert "THE STREAM MOVED" not in lib._agent_log()
        invalidates_with_the_cache_kept(lib, resets, "on the primary spare")
        lib.restart_agent()
        wait_for_stream_on(
            pair.primary.dsn, "the restarted agent to decode there", log=lib._agent_log
        )
        invalidates_with_the_cache_kept(lib, resets, "after the restart")

        pair.restart_standby({})
        wait_for_stream_on(
            standby.dsn, "the stream to return to the standby's spare", log=lib._agent_log
        )
        invalidates_with_the_cache_kept(lib, resets, "back on the standby")
        assert ("txcache", False) in slots(pair.primary.dsn), "the primary's spare kept"
        assert agent_walsenders(pair.primary.dsn) == 0


def failover_slot(dsn: str) -> bool:
    """Whether slot ``txcache`` on the server at ``dsn`` is a failover slot."""
    with psycopg.connect(dsn) as db:
        row = db.execute(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = 'txcache'"
        ).fetchone()
    assert row is not None, "no slot txcache"
    return bool(row[0])


def test_a_decoding_standby_whose_replay_is_paused_is_not_left(pair: ReplicatedPostgres) -> None:
    """Silent because its replay is paused, the standby still answers: the stream stays on
    it (no new slot, no node reset) and goes on once replay resumes."""
    first = pair.standby
    assert first is not None
    second = pair.add_standby()
    with moving_stack(pair.primary.dsn, hosts_dsn((first, second))) as lib:
        assert cached(lib, QUERY, 2) == [("item 2",)]
        resets = node_resets(lib)
        with psycopg.connect(first.dsn, autocommit=True) as standby:
            standby.execute("SELECT pg_wal_replay_pause()")
            lib.write("UPDATE items SET name = 'while paused' WHERE id = 2")
            token = wal_position(lib.admin)
            wait_until(
                lambda: "sends nothing but answers" in lib._agent_log(),
                "the agent to find the silent standby alive",
                timeout=60,
                log=lib._agent_log,
            )
            standby.execute("SELECT pg_wal_replay_resume()")
        lib.caught_up()
        assert assert_invalidated(lib, QUERY, token, 2) == [("while paused",)]
        assert agent_walsenders(first.dsn) == 1
        assert agent_walsenders(second.dsn) == 0
        assert "THE STREAM MOVED" not in lib._agent_log()
        assert node_resets(lib) == resets


def node_resets(lib: LibraryStack) -> list[int]:
    """Each node's count of resets (a gap in what it was sent)."""
    return [int(lib.node_info(a, "txcache")["resets"]) for a in lib.node_addresses]
