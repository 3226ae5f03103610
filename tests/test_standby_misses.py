"""Misses on hot standbys: the agent pins snapshots on a streaming standby (``--standby``),
each certified as the commit point its replay had reached, and read-only transactions of a
library with ``replicas`` run their queries there — at exactly that commit point, never
beyond their staleness, never before their ``not_before``, and on the primary whenever the
standby cannot serve them."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import txcache
from async_fixtures import AsyncLib
from library_fixtures import AGENT_ARGS, LibraryStack, status_report
from txcache import aio
from txcache.aio import AsyncCache
from txcache.cli._probe import probe_agent
from txcache.stack import EmbeddedPostgres, ReplicatedPostgres, wait_until

STANDBY = "s1"


@pytest.fixture
def pair() -> Iterator[ReplicatedPostgres]:
    """A primary and its streaming standby (hot_standby_feedback on), for one test."""
    with ReplicatedPostgres() as servers:
        yield servers


@pytest.fixture
def stack(pair: ReplicatedPostgres) -> Iterator[LibraryStack]:
    """The stack on the primary, its agent also pinning the standby, and a library that runs
    misses on it; a table ``log`` (one row per commit of the test's writer)."""
    with standby_stack(pair) as servers:
        yield servers


@contextlib.contextmanager
def standby_stack(
    pair: ReplicatedPostgres,
    *agent_args: str,
    replicas: dict[str, str] | None = None,
    standby_options: str = "",
    **settings: Any,
) -> Iterator[LibraryStack]:
    """:func:`stack`, the agent run with ``agent_args`` too, the library with more
    ``replicas`` (standbys the agent's ``--standby`` flags among ``agent_args`` name) and
    ``settings``; ``standby_options`` go at the end of the standby's conninfo."""
    assert pair.standby is not None
    standby_dsn = f"{pair.standby.dsn} {standby_options}".strip()
    with psycopg.connect(pair.primary.dsn, autocommit=True) as db:
        db.execute("CREATE TABLE log (n integer PRIMARY KEY)")
    flags = (*AGENT_ARGS, "--standby", f"{STANDBY}={standby_dsn}", *agent_args)
    every = {STANDBY: standby_dsn, **(replicas or {})}
    with LibraryStack(pair.primary.dsn, agent_args=flags, replicas=every, **settings) as lib:
        yield lib


def where(cache: txcache.Cache, staleness: float = 5.0, **options: Any) -> tuple[Any, ...]:
    """One read-only transaction's pin, whether it ran on a standby, and ``max(n)``."""
    with cache.read_only(staleness=staleness, **options) as tx:
        row = txcache.query_one("SELECT coalesce(max(n), 0), pg_is_in_recovery() FROM log")
        assert row is not None
        assert tx.snapshot is not None
        return tx.snapshot, row[1], row[0]


def wait_for_standby_pin(stack: LibraryStack, staleness: float = 5.0) -> None:
    def on_standby() -> bool:
        stack.fresh_pins()
        pin, in_recovery, _ = where(stack.cache, staleness)
        return bool(pin.server is not None and in_recovery)

    wait_until(on_standby, "a transaction on a standby pin", timeout=30, log=stack._agent_log)


def test_a_miss_runs_on_the_standby_at_exactly_its_pin_s_commit_point(
    stack: LibraryStack, pair: ReplicatedPostgres
) -> None:
    wait_for_standby_pin(stack)
    readings = exact_readings_under_commits(stack.cache, pair.primary.dsn, {STANDBY: 50})
    seen_on_standby = {seen for _, in_recovery, seen in readings if in_recovery}
    assert len(seen_on_standby) >= 10, "the standby's pins must show the commits going on"


def test_two_standbys_share_the_misses_each_at_exactly_its_pin_s_commit_point(
    pair: ReplicatedPostgres,
) -> None:
    second = pair.add_standby()
    with standby_stack(pair, "--standby", f"s2={second.dsn}", replicas={"s2": second.dsn}) as lib:
        wait_for_standby_pin(lib)
        exact_readings_under_commits(lib.cache, pair.primary.dsn, {STANDBY: 20, "s2": 20})
        report = probe_agent(lib.agent_address)
        assert list(report.standbys) == [STANDBY, "s2"], report
        text = status_text(lib)
        assert f"  standbys       {STANDBY} " in text, text
        assert ", s2 " in text, text


def status_text(lib: LibraryStack) -> str:
    """What ``txcache status`` prints for ``lib``'s nodes and agent."""
    return status_report(lib.node_addresses, [lib.agent_address])[1]


def test_a_standby_on_another_timeline_than_the_stream_gives_no_pins() -> None:
    """A failover the agent's stream does not follow: the cascading standby ``s2`` follows
    its upstream, promoted to timeline 2 and written to, while the agent streams the
    primary's timeline 1, written to more. ``s2``'s replay positions are then positions of
    another history — a commit the primary never had — and must not be placed on the
    stream: the agent lists no pin of ``s2`` (saying why), and no reading sees that
    commit."""
    # A base backup of a standby needs full-page writes.
    with ReplicatedPostgres({"full_page_writes": "on"}) as pair:
        assert pair.standby is not None
        hides_commit_of_another_timeline(pair, pair.standby)


def hides_commit_of_another_timeline(pair: ReplicatedPostgres, upstream: EmbeddedPostgres) -> None:
    cascading = pair.add_standby(upstream=upstream)
    flags = ("--standby", f"s2={cascading.dsn}")
    with standby_stack(pair, *flags, replicas={"s2": cascading.dsn}) as lib:

        def on_s2() -> bool:
            lib.fresh_pins()
            pin, in_recovery, _ = where(lib.cache)
            return bool(in_recovery and pin.server == "s2")

        wait_until(on_s2, "a transaction on s2", timeout=30, log=lib._agent_log)
        with psycopg.connect(pair.primary.dsn, autocommit=True) as db:
            # The primary's stream must not wait for the standby promoted away from it.
            db.execute("ALTER SYSTEM RESET synchronized_standby_slots")
            db.execute("SELECT pg_reload_conf()")
        with psycopg.connect(upstream.dsn, autocommit=True) as db:
            db.execute("SELECT pg_promote(wait => true, wait_seconds => 60)")
            db.execute("INSERT INTO log VALUES (1000)")  # only on timeline 2
        for n in range(1, 201):  # timeline 1 writes more WAL: its positions pass s2's
            lib.write(f"INSERT INTO log VALUES ({n})")
        lib.caught_up()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lib.fresh_pins()
            pin, _in_recovery, seen = where(lib.cache)
            assert seen != 1000, f"a reading at {pin} saw a commit of another timeline"
        assert "it streams timeline 2, the agent's stream follows timeline 1" in lib._agent_log()


def exact_readings_under_commits(
    cache: txcache.Cache, primary_dsn: str, wanted: dict[str, int]
) -> list[tuple[Any, ...]]:
    """Readings of :func:`where` under a stream of single-row commits, until each standby
    of ``wanted`` served its number of distinct pins (60 s at most). Each reading must see
    every commit at or below its pin's timestamp and none after it — off by one commit
    either way fails — and run in recovery exactly when its pin is a standby's."""
    commits: list[tuple[int, int]] = []  # (n, xid), in commit order
    done = threading.Event()

    def writer() -> None:
        with psycopg.connect(primary_dsn, autocommit=True) as db:
            for n in range(1, 100_000):
                if done.is_set():
                    return
                with db.transaction():
                    db.execute("INSERT INTO log VALUES (%s)", (n,))
                    row = db.execute("SELECT pg_current_xact_id()::text").fetchone()
                assert row is not None
                commits.append((n, int(row[0])))

    def points(server: str) -> int:
        return len({pin.ts for pin, in_recovery, _ in readings if pin.server == server})

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    readings: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            readings.append(where(cache))
            if all(points(server) >= count for server, count in wanted.items()):
                break
    finally:
        done.set()
        thread.join(timeout=30)
    agent = cache.agent
    assert agent is not None
    lsns = [(agent.commit_lsn(xid, timeout=5.0), n) for n, xid in commits]
    assert all(lsn is not None for lsn, _ in lsns)
    for pin, in_recovery, seen in readings:
        # Every commit at or below the pin's timestamp, and none after it.
        expected = max((n for lsn, n in lsns if lsn is not None and lsn <= pin.ts), default=0)
        assert in_recovery == (pin.server is not None), pin
        if seen <= commits[-1][0]:  # the writer's last commit was recorded
            assert seen == expected, (pin, seen, expected)
    served = {server: points(server) for server in wanted}
    assert all(served[s] >= count for s, count in wanted.items()), (served, len(readings))
    counted = cache.latency.standby_counts()
    assert all(counted.get(server, 0) >= count for server, count in wanted.items()), counted
    return readings


def test_read_your_writes_never_runs_on_a_standby_that_has_not_replayed_the_write(
    stack: LibraryStack,
) -> None:
    wait_for_standby_pin(stack)
    reads_its_writes(stack.cache, range(1, 21))


def reads_its_writes(cache: txcache.Cache, numbers: range) -> None:
    """Insert each of ``numbers`` into ``log`` and read it back with ``not_before`` its
    commit: the read sees it, at a pin at or after the commit."""
    for n in numbers:
        with cache.read_write() as tx:
            tx.execute("INSERT INTO log VALUES (%s)", (n,))
        token = tx.commit_timestamp
        assert token is not None
        pin, _, seen = where(cache, not_before=token)
        assert seen == n
        assert pin.ts >= token


def test_a_standby_beyond_the_staleness_is_not_used(
    stack: LibraryStack, pair: ReplicatedPostgres
) -> None:
    assert pair.standby is not None
    wait_for_standby_pin(stack)
    with psycopg.connect(pair.standby.dsn, autocommit=True) as standby:
        # The standby stops replaying (the agent's pinner leaves a pause of someone else's
        # in place): its pins stop being current as commits go on.
        standby.execute("SELECT pg_wal_replay_pause()")
        try:
            wait_until(lambda: replay_state(standby) == "paused", "replay to pause", timeout=10)
            stack.write("INSERT INTO log VALUES (1)")
            written = time.time()
            stack.caught_up()
            # A pin within a staleness of 0.5 s from now on was current after the commit.
            time.sleep(max(0.0, written + 0.6 - time.time()))
            for _ in range(50):
                pin, in_recovery, seen = where(stack.cache, staleness=0.5)
                assert (pin.server, in_recovery, seen) == (None, False, 1), pin
            assert replay_state(standby) == "paused"
        finally:
            standby.execute("SELECT pg_wal_replay_resume()")


def replay_state(standby: psycopg.Connection[Any]) -> str:
    """The standby's ``pg_get_wal_replay_pause_state()``."""
    row = standby.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
    assert row is not None
    return str(row[0])


def test_a_standby_that_let_its_pins_go_pins_again_once_transactions_run(
    pair: ReplicatedPostgres,
) -> None:
    # Unused for a lease, the standby's pins go while another library keeps the primary's
    # in use; the transactions that then run on the primary for want of a standby pin must
    # bring them back (the refresh says WANTED): no fresh pin does it for them.
    with standby_stack(pair, "--pin-lease", "0.5s") as lib, lib.connect() as primary_only:
        wait_for_standby_pin(lib)
        stop = threading.Event()

        def keep_primary_pins_used() -> None:
            while not stop.is_set():
                where(primary_only)

        reader = threading.Thread(target=keep_primary_pins_used, daemon=True)
        reader.start()
        try:
            wait_until(
                lambda: not lib.standby_pins_listed(),
                "the unused standby pins to go",
                timeout=30,
                log=lib._agent_log,
            )

            def on_standby() -> bool:
                _pin, in_recovery, _ = where(lib.cache)
                return bool(in_recovery)

            wait_until(on_standby, "a transaction on the standby", timeout=30, log=lib._agent_log)
        finally:
            stop.set()
            reader.join(timeout=30)


def test_misses_go_to_the_primary_while_the_standby_is_down(
    stack: LibraryStack, pair: ReplicatedPostgres
) -> None:
    assert pair.standby is not None
    wait_for_standby_pin(stack)
    # Three connections to the standby in its pool, as after concurrent transactions: the
    # crash closes them all, and the first transaction after it finds one.
    taken = [stack.cache.checkout_replica(STANDBY) for _ in range(3)]
    for connection in taken:
        assert connection is not None
        stack.cache.release(connection)
    pair.standby.crash()  # its data stays: it starts again below
    try:
        stack.write("INSERT INTO log VALUES (1)")
        started = time.monotonic()
        for _ in range(50):
            _pin, in_recovery, seen = where(stack.cache, staleness=5.0)
            assert not in_recovery
            assert seen in (0, 1)
        # One transaction waits node_timeout for a connection; then the standby is passed
        # over (and the agent withdraws its pins).
        assert time.monotonic() - started < 20
    finally:
        pair.standby.start()
    wait_for_standby_pin(stack)
    # Back after one outage: the connections pooled before the crash, which the restarted
    # standby closed, were not used (their first statement would have been a second one).
    assert stack.cache.replica_health.outages(STANDBY) == 1


def wait_for_standby_pin_with_fallback(stack: LibraryStack) -> None:
    """Until a transaction runs on a standby pin the primary has a pin of the same commit
    point for (where it can go on if the standby fails)."""

    def standby_pin_with_fallback() -> bool:
        stack.fresh_pins()
        pin, in_recovery, _ = where(stack.cache)
        return in_recovery and pin.fallback is not None

    wait_until(standby_pin_with_fallback, "a standby pin at a primary pin's commit point",
               timeout=30, log=stack._agent_log)  # fmt: skip


def test_a_standby_that_dies_under_a_transaction_hands_it_to_the_primary_s_pin_of_its_point(
    stack: LibraryStack, pair: ReplicatedPostgres
) -> None:
    """Results read from the standby stay valid at the primary's pin of the same commit
    point: the transaction goes on there, no error reaches the application."""
    assert pair.standby is not None
    stack.write("INSERT INTO log VALUES (1)")
    stack.caught_up()

    wait_for_standby_pin_with_fallback(stack)
    with stack.cache.read_only(staleness=5) as tx:
        first = txcache.query_one("SELECT max(n), pg_is_in_recovery() FROM log")
        assert first == (1, True)
        assert tx.snapshot is not None
        standby_pin = tx.snapshot
        assert standby_pin.fallback is not None
        pair.standby.crash()
        try:
            second = txcache.query_one("SELECT max(n), pg_is_in_recovery() FROM log")
            assert second == (1, False)
            assert tx.snapshot is not None
            assert (tx.snapshot.ts, tx.snapshot.server) == (standby_pin.ts, None)
        finally:
            pair.standby.start()


REPLICA_TIMEOUT = 2.0
"""The ``replica_timeout`` of the hung-standby test."""


def test_a_standby_that_hangs_costs_the_transaction_on_it_one_replica_timeout_once(
    pair: ReplicatedPostgres,
) -> None:
    """Every process of the standby stopped (SIGSTOP: the kernel still accepts, nothing
    answers) under a transaction: its next query waits ``replica_timeout``, then the
    transaction goes on on the primary at its pin's commit point; no later transaction
    waits on the standby, and once it answers again a probe brings it back."""
    assert pair.standby is not None
    with standby_stack(pair, replica_timeout=REPLICA_TIMEOUT) as stack:
        stack.write("INSERT INTO log VALUES (1)")
        stack.caught_up()
        wait_for_standby_pin_with_fallback(stack)
        with contextlib.ExitStack() as hung:
            with stack.cache.read_only(staleness=5) as tx:
                query = "SELECT max(n), pg_is_in_recovery() FROM log"
                assert txcache.query_one(query) == (1, True)
                hung.enter_context(pair.standby.paused())
                started = time.monotonic()
                assert txcache.query_one(query) == (1, False)
                waited = time.monotonic() - started
                assert tx.snapshot is not None
                assert tx.snapshot.server is None
            assert REPLICA_TIMEOUT * 0.9 <= waited < REPLICA_TIMEOUT + 10
            on_standby = stack.cache.latency.standby_counts()
            started = time.monotonic()
            for _ in range(20):
                _pin, in_recovery, seen = where(stack.cache)
                assert (in_recovery, seen) == (False, 1)
            assert time.monotonic() - started < REPLICA_TIMEOUT, "a transaction waited again"
            assert stack.cache.latency.standby_counts() == on_standby
        wait_for_standby_pin(stack)


@txcache.cacheable
def logged_max() -> int:
    row = txcache.query_one("SELECT coalesce(max(n), 0) FROM log")
    assert row is not None
    return int(row[0])


def test_a_standby_that_hangs_while_a_hit_moves_the_transaction_asks_for_a_retry(
    pair: ReplicatedPostgres,
) -> None:
    """A hit valid only at an older pin of the standby moves the transaction there, on the
    standby's connection: a standby that hangs meanwhile is down, and the transaction, bound
    to what it read there, fails with ``SnapshotUnavailable`` — the error to retry, never
    the connection's."""
    assert pair.standby is not None
    with standby_stack(pair, replica_timeout=REPLICA_TIMEOUT) as stack:
        stack.write("CREATE TABLE other (x int)")  # read first, and unchanged: a move fits it
        stack.write("INSERT INTO log VALUES (1)")
        stack.caught_up()
        wait_for_standby_pin(stack)
        with stack.cache.read_only(staleness=30) as tx:
            assert logged_max() == 1  # computed on the standby: cached from its pin on
            assert tx.snapshot is not None
            assert tx.snapshot.server == STANDBY
        stack.write("INSERT INTO log VALUES (2)")  # the cached value's interval ends here
        stack.caught_up()

        def on_standby_past_the_write() -> bool:
            stack.fresh_pins()
            _pin, in_recovery, seen = where(stack.cache, 30)
            return bool(in_recovery) and seen == 2

        wait_until(on_standby_past_the_write, "a standby pin past the write", timeout=30,
                   log=stack._agent_log)  # fmt: skip
        with contextlib.ExitStack() as hung, stack.cache.read_only(staleness=30) as tx:
            assert txcache.query_one("SELECT count(*) FROM other") == (0,)
            assert tx.snapshot is not None
            assert tx.snapshot.server == STANDBY
            hung.enter_context(pair.standby.paused())
            with pytest.raises(txcache.SnapshotUnavailable, match="retry the transaction"):
                logged_max()
        assert not stack.cache.replica_health.usable(STANDBY), "the standby is down"


def test_a_stream_held_back_by_a_hung_standby_fails_fresh_pins_quickly_and_keeps_the_agent(
    stack: LibraryStack, pair: ReplicatedPostgres
) -> None:
    """The primary holds its logical stream back while a standby named in
    ``synchronized_standby_slots`` does not confirm: the agent can certify no fresh pin.
    ``PIN`` answers with an error within half ``agent_timeout`` — the agent is not counted
    as down, its refreshes still answer — and the library then asks for no fresh pin for a
    while, so that no transaction waits on one."""
    assert pair.standby is not None
    agent = stack.cache.agent
    assert agent is not None
    wait_for_standby_pin(stack)
    with pair.standby.paused():
        stack.write("INSERT INTO log VALUES (1)")  # a commit the stream cannot have now
        started = time.monotonic()
        assert agent.pin_now() is None
        waited = time.monotonic() - started
        assert waited < agent.endpoint.timeout, "PIN answers within its reply timeout"
        assert agent.endpoint.is_up()
        assert agent.refresh(), "the agent still answers its refreshes"
        started = time.monotonic()
        assert agent.pin_now() is None
        assert time.monotonic() - started < waited / 2, "no PIN asked right after one failed"
    stack.fresh_pins()


def test_the_agent_lets_a_hung_standby_s_pins_go_within_its_connect_timeout_and_says_so(
    pair: ReplicatedPostgres,
) -> None:
    """A standby that hangs (SIGSTOP) holds no pinner call past its conninfo's
    ``connect_timeout``: the agent logs that it does not answer, lists none of its pins
    (no library picks a pin there to wait on), and pins there again once it answers."""
    assert pair.standby is not None
    with standby_stack(pair, standby_options="connect_timeout=2") as stack:
        agent = stack.cache.agent
        assert agent is not None
        stack.write("INSERT INTO log VALUES (1)")
        stack.caught_up()
        wait_for_standby_pin(stack)

        def standby_pins() -> list[txcache.Pin]:
            agent.refresh()
            return [pin for pin in agent.listed_pins() if pin.server == STANDBY]

        with pair.standby.paused():

            def let_go() -> bool:
                agent.pin_now()  # keeps the standby's pinner awake
                return "it did not answer within 2s" in stack._agent_log() and not standby_pins()

            wait_until(let_go, "the standby's pins let go, said", timeout=30, log=stack._agent_log)
            text = status_text(stack)
            assert f"without pins: {STANDBY} (" in text, text
            assert "log lines starting 'standby pins:' say why" in text, text
        wait_until(standby_pins, "pins on the standby again", timeout=30, log=stack._agent_log)
        log = stack._agent_log()
        assert "check the standby (a stopped or overloaded server" in log


def test_the_async_driver_bounds_a_hung_standby_the_same_way(pair: ReplicatedPostgres) -> None:
    assert pair.standby is not None
    standby = pair.standby
    with standby_stack(pair) as stack:
        stack.write("INSERT INTO log VALUES (1)")
        stack.caught_up()
        wait_for_standby_pin_with_fallback(stack)  # the agent pins the standby
        query = "SELECT max(n), pg_is_in_recovery() FROM log"

        async def body(cache: AsyncCache) -> float:
            assert cache.agent is not None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await cache.agent.refresh()
                async with cache.read_only(staleness=5) as tx:
                    if await aio.query_one(query) != (1, True):
                        continue
                    assert tx.snapshot is not None
                    if tx.snapshot.fallback is None:
                        continue  # no primary pin of its commit point to go on at
                    with standby.paused():
                        started = time.monotonic()
                        assert await aio.query_one(query) == (1, False)
                        return time.monotonic() - started
            pytest.fail("no async transaction at a standby pin the primary shares")

        waited = AsyncLib(stack).run(
            body, replicas={STANDBY: standby.dsn}, replica_timeout=REPLICA_TIMEOUT
        )
        assert REPLICA_TIMEOUT * 0.9 <= waited < REPLICA_TIMEOUT + 10


def test_a_standby_that_dies_under_commits_hands_the_transaction_to_a_pin_its_reads_fit(
    stack: LibraryStack, pair: ReplicatedPostgres
) -> None:
    """Under a stream of commits the primary has no pin at the standby pin's commit point:
    the transaction goes on at a primary pin where what it read stays valid (a node's
    TXINTERVAL for its query's tags; here a table nobody writes)."""
    assert pair.standby is not None
    wait_for_standby_pin(stack)
    done = threading.Event()

    def writer() -> None:
        with psycopg.connect(pair.primary.dsn, autocommit=True) as db:
            n = 0
            while not done.is_set():
                n += 1
                db.execute("INSERT INTO log VALUES (%s)", (n,))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    # A query the library derives tags for (no function like pg_is_in_recovery() in it):
    # a node can then say where its result stays valid.
    query = "SELECT count(*) FROM items"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            # A primary pin the transaction can go to: nobody reads at the primary's, so
            # the agent lets them go, and once the standby is down it cannot take another
            # (the primary holds the stream back for it: synchronized_standby_slots).
            stack.fresh_pins()
            with stack.cache.read_only(staleness=5) as tx:
                first = txcache.query_one(query)
                assert tx.snapshot is not None
                if tx.snapshot.fallback is not None or tx.snapshot.server is None:
                    continue  # a pin the primary shares, or the primary's: try again
                pair.standby.crash()
                assert txcache.query_one(query) == first
                assert tx.snapshot.server is None
                break
        else:
            pytest.fail("no transaction ran at a standby pin the primary does not share")
    finally:
        done.set()
        thread.join(timeout=30)
        pair.standby.start()


def primary_pinner_horizons(pair: ReplicatedPostgres) -> list[Any]:
    """The ``backend_xmin`` of the agent's pinner sessions on the primary: what their
    exported snapshots hold of its vacuum horizon (``None``: nothing)."""
    with psycopg.connect(pair.primary.dsn, autocommit=True) as db:
        rows = db.execute(
            "SELECT backend_xmin FROM pg_stat_activity "
            "WHERE application_name LIKE 'txcache-agent pinner%%'"
        ).fetchall()
    return [row[0] for row in rows]


def test_pinning_the_primary_on_demand_leaves_its_horizon_to_the_standby(
    pair: ReplicatedPostgres,
) -> None:
    with standby_stack(pair, "--primary-pins", "on-demand") as lib:
        wait_for_standby_pin(lib)
        # Reads run on the standby; the primary's pins (the fixture's own PINs) go two pin
        # intervals after they stopped being current, and with them the horizon.
        lib.write("INSERT INTO log VALUES (1)")

        def horizon_free() -> bool:
            _, in_recovery, _ = where(lib.cache)
            return in_recovery and all(x is None for x in primary_pinner_horizons(pair))

        wait_until(horizon_free, "the primary's horizon to be free", timeout=30, log=lib._agent_log)
        # Read-your-writes still works: a fresh pin on the primary when the standby lags.
        reads_its_writes(lib.cache, range(2, 12))
        wait_until(horizon_free, "the primary's horizon to be free again", timeout=30,
                   log=lib._agent_log)  # fmt: skip
