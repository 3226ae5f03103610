"""Read-your-writes without a token passed by hand: what a thread or an asyncio task
commits through txcache, its later read-only transactions see — however stale the cache
may otherwise be — and no other context is held to it."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from types import SimpleNamespace

import txcache
from library_fixtures import LibraryStack, as_another_process
from txcache import _tokens as tokens


@txcache.cacheable
def price(item_id: int) -> int:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


@txcache.cacheable
async def price_async(item_id: int) -> int:
    row = await txcache.aio.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


def cached_price(lib: LibraryStack, item_id: int) -> int:
    """The price, read until it is a cache hit."""
    lib.caught_up()
    lib.fresh_pins()
    for _ in range(100):
        with lib.cache.read_only(staleness=60) as tx:
            value = price(item_id)
            if tx.hits:
                return value
    raise AssertionError("never cached")


def update(lib: LibraryStack, item_id: int, value: int) -> None:
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = %s WHERE id = %s", (value, item_id))


def update_then_timestamp(lib: LibraryStack, item_id: int, value: int) -> int:
    """:func:`update`, then a token of the database's state after it."""
    update(lib, item_id, value)
    return lib.cache.timestamp()


def test_a_thread_reads_what_it_wrote(lib: LibraryStack) -> None:
    assert cached_price(lib, 3) == 30
    update(lib, 3, 31)
    with lib.cache.read_only(staleness=60) as tx:
        assert price(3) == 31
        assert tx.not_before is not None


def test_a_read_after_a_write_hits_the_values_the_write_left_valid(database: str) -> None:
    """A read after the session's write runs at a fresh pin (★) past it. The agent answers
    ``PIN`` once every node has applied the stream through the pin: a node behind it knows
    no open version valid there, and every lookup missed. Deliveries spaced far apart and
    no pins but fresh ones make each read meet a node behind, unless the pin waits."""
    spaced = ("--pin-interval", "1h", "--heartbeat-interval", "50ms", "--delivery-spacing", "1s")
    with LibraryStack(database, agent_args=spaced) as lib:
        assert cached_price(lib, 1) == 10
        for value in range(20):
            update(lib, 2, 100 + value)  # another row: price(1) stays valid
            with lib.cache.read_only(staleness=60) as tx:
                assert price(1) == 10
                assert tx.not_before is not None
                assert (tx.hits, tx.misses) == (1, 0), f"read {value} after the write missed"


def test_another_thread_is_not_held_to_it(lib: LibraryStack) -> None:
    assert cached_price(lib, 3) == 30
    seen: list[int | None] = []

    def other_thread() -> None:
        with lib.cache.read_only(staleness=60) as tx:
            seen.append(tx.not_before)

    as_another_process(update, lib, 3, 31)  # nor is this thread
    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == [None]
    with lib.cache.read_only(staleness=60) as tx:
        assert tx.not_before is None


def test_a_commit_that_wrote_nothing_keeps_the_last_token(lib: LibraryStack) -> None:
    update(lib, 3, 31)
    with lib.cache.read_only(staleness=60) as tx:
        first = tx.not_before
    assert first is not None
    with lib.cache.read_write() as tx:
        tx.execute("SELECT 1")
    with lib.cache.read_only(staleness=60) as tx:
        assert tx.not_before == first


def test_a_transaction_created_before_a_write_is_not_held_to_it(lib: LibraryStack) -> None:
    """Its pin set is taken as it is created (docs/library.md): it reads what its context
    had written then."""
    lib.caught_up()
    lib.fresh_pins()
    early = lib.cache.read_only(staleness=60)
    update(lib, 3, 31)
    with early as tx:
        assert tx.not_before is None


def test_an_explicit_token_and_the_contexts_join(lib: LibraryStack) -> None:
    update(lib, 3, 31)
    later = as_another_process(update_then_timestamp, lib, 4, 41)
    with lib.cache.read_only(staleness=60, not_before=later) as tx:
        assert tx.not_before == later
        assert price(4) == 41
        assert price(3) == 31


def test_a_task_reads_what_it_wrote_and_no_other_task_is_held_to_it(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()

    async def body() -> None:
        async with await txcache.connect_async(
            lib.dsn, nodes=lib.node_addresses, agent=lib.agent_address, refresh_interval=0.05
        ) as cache:

            async def writer() -> int | None:
                async with cache.read_write() as tx:
                    await tx.execute("UPDATE items SET price = 51 WHERE id = 5")
                async with cache.read_only(staleness=60) as read:
                    assert await price_async(5) == 51
                    return read.not_before

            async def reader() -> int | None:
                async with cache.read_only(staleness=60) as read:
                    return read.not_before

            written = await asyncio.create_task(writer())
            assert written is not None
            assert await asyncio.create_task(reader()) is None

    asyncio.run(body())


class FakeCommit:
    """A committed write of a cache on ``dsn`` whose token is ``token`` (pure logic)."""

    def __init__(self, dsn: str, token: int) -> None:
        self.cache = SimpleNamespace(settings=SimpleNamespace(dsn=dsn))
        self.wrote = True
        self.token = token
        self.asked = 0

    def settled_timestamp(self) -> int | None:
        self.asked += 1
        return self.token

    async def settled_timestamp_async(self) -> int | None:
        return self.settled_timestamp()


def test_tokens_are_kept_per_database_and_asked_once() -> None:
    """Tokens are positions in one cluster's WAL: a context's writes are kept per database."""

    def body() -> None:
        first, second = FakeCommit("dbname=a", 100), FakeCommit("dbname=b", 7)
        tokens.record(first)
        tokens.record(second)
        assert tokens.floor("dbname=a") == 100
        assert tokens.floor("dbname=a") == 100
        assert first.asked == 1
        assert tokens.floor("dbname=b") == 7
        assert tokens.floor("dbname=c") is None
        tokens.advance("dbname=b", 5)
        assert tokens.floor("dbname=b") == 7
        with tokens.scope():
            assert tokens.floor("dbname=a") is None
        assert tokens.floor("dbname=a") == 100

    contextvars.copy_context().run(body)


def test_the_dsns_that_reach_one_database_share_their_tokens() -> None:
    """Two caches of one database under different DSNs (a tenant's search_path in
    ``options``, another host name for the server) read each other's writes; a DSN of
    another database, of a running copy of the cluster (its files cloned: same identifier
    and oid, another WAL), or not yet known to reach one, is not held to them."""

    def body() -> None:
        tokens.reaches("host=localhost dbname=a", ("cluster", 1, "started"))
        tokens.reaches("host=127.0.0.1 dbname=a options=-csearch_path=t", ("cluster", 1, "started"))
        tokens.reaches("host=localhost dbname=b", ("cluster", 2, "started"))
        tokens.reaches("host=clone dbname=a", ("cluster", 1, "started later"))
        tokens.record(FakeCommit("host=localhost dbname=a", 100))
        assert tokens.floor("host=127.0.0.1 dbname=a options=-csearch_path=t") == 100
        assert tokens.floor("host=localhost dbname=b") is None
        assert tokens.floor("host=clone dbname=a") is None
        assert tokens.floor("host=elsewhere dbname=a") is None
        tokens.record(FakeCommit("host=127.0.0.1 dbname=a options=-csearch_path=t", 120))
        assert tokens.floor("host=localhost dbname=a") == 120

    contextvars.copy_context().run(body)


def test_a_cache_reads_the_writes_of_another_cache_of_its_database(lib: LibraryStack) -> None:
    """One cache per tenant on one database (``options`` in the DSN): a thread that wrote
    through one reads the write through the other, however stale that one's pins."""
    assert cached_price(lib, 3) == 30
    tenant_dsn = lib.dsn + " application_name=tenant"
    with lib.connect(dsn=tenant_dsn, **lib.cache_settings) as tenant, tenant.read_write() as tx:
        tx.execute("UPDATE items SET price = 32 WHERE id = 3")
    with lib.cache.read_only(staleness=60) as tx:
        assert price(3) == 32
        assert tx.not_before is not None


def test_a_request_scope_sees_its_writes_and_its_clients_token_only(lib: LibraryStack) -> None:
    """One web request: a thread's earlier requests no longer hold it; what it wrote is the
    token to hand its client."""
    update(lib, 3, 31)  # an earlier request of this thread
    client_token = as_another_process(update_then_timestamp, lib, 4, 41)
    with lib.cache.request_scope():
        with lib.cache.read_only(staleness=60) as tx:
            assert tx.not_before is None
        assert lib.cache.written_token() is None
    with lib.cache.request_scope(not_before=client_token):
        with lib.cache.read_only(staleness=60) as tx:
            assert tx.not_before == client_token
            assert price(4) == 41
        update(lib, 5, 51)
        handed = lib.cache.written_token()
        assert handed is not None
        assert handed > client_token
    with lib.cache.read_only(staleness=60) as tx:  # the thread's own record is back
        assert tx.not_before is not None
        assert tx.not_before < handed


def test_a_request_scope_shares_the_writes_of_the_tasks_it_starts() -> None:
    """Writes made in ``asyncio.gather`` or ``create_task`` land in each task's copy of the
    context: the scope still covers them — the largest token stands, concurrent commits
    ending in any order — and each is asked once."""

    async def body() -> None:
        late, early = FakeCommit("dbname=a", 100), FakeCommit("dbname=a", 90)

        async def write(commit: FakeCommit) -> None:
            tokens.record(commit)

        with tokens.scope():
            await asyncio.gather(write(late), write(early))
            assert await tokens.floor_async("dbname=a") == 100
            assert await tokens.floor_async("dbname=a") == 100
            assert tokens.floor("dbname=b") is None
        assert (late.asked, early.asked) == (1, 1)
        assert await tokens.floor_async("dbname=a") is None, "the scope's writes stay in it"

    contextvars.copy_context().run(asyncio.run, body())


def test_a_request_hands_its_client_the_writes_of_its_gathered_tasks(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()

    async def body() -> None:
        async with await txcache.connect_async(
            lib.dsn, nodes=lib.node_addresses, agent=lib.agent_address, refresh_interval=0.05
        ) as cache:

            async def write(item_id: int, value: int) -> None:
                async with cache.read_write() as tx:
                    await tx.execute("UPDATE items SET price = %s WHERE id = %s", (value, item_id))

            with cache.request_scope():
                await asyncio.gather(write(6, 61), write(7, 71))
                handed = await cache.written_token()
                assert handed is not None, "the gathered writes are the request's"
            async with cache.read_only(staleness=60, not_before=handed):
                assert (await price_async(6), await price_async(7)) == (61, 71)

    asyncio.run(body())
