"""The async API against a real stack: the same contract as the sync one (docs/library.md,
"Async") — hits and misses with the same keys and values as the sync API, nested cacheable
calls, read-your-writes through an async read/write block, many tasks at once each at one
commit point, a hit in one round trip, and the refusals (another task, the other API)."""

from __future__ import annotations

import asyncio
import functools
import random
from typing import Any

import pytest
from psycopg.rows import dict_row

import txcache
from async_fixtures import AsyncLib, fresh_pins
from txcache import aio
from txcache.aio import AsyncCache
from txcache.protocol import AsyncRespConnection, Hit

calls: list[int] = []


@txcache.cacheable
async def price_of(item_id: int) -> int:
    calls.append(item_id)
    row = await aio.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


@txcache.cacheable
async def total_of(first: int, last: int) -> int:
    return sum([await price_of(i) for i in range(first, last + 1)])


@txcache.cacheable
def sync_price_of(item_id: int) -> int:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


@txcache.cacheable
async def item_row(item_id: int) -> dict[str, Any] | None:
    return await aio.query_one(
        "SELECT id, name, price FROM items WHERE id = %s", (item_id,), row_factory=dict_row
    )


def test_a_miss_then_a_hit_with_the_sync_apis_statistics(alib: AsyncLib) -> None:
    calls.clear()
    before: dict[str, Any] = price_of.stats.as_dict()

    async def body(cache: AsyncCache) -> tuple[int, int]:
        async with cache.read_only(staleness=60) as tx:
            first = await price_of(4)
            assert tx.snapshot is not None  # the miss ran a query at a pin
        async with cache.read_only(staleness=60) as tx:
            second = await price_of(4)
            assert tx.snapshot is None  # the hit needed no database transaction
        return first, second

    assert alib.run(body) == (40, 40)
    assert calls == [4]
    after = price_of.stats
    assert after.hits == before["hits"] + 1
    assert after.misses["compulsory"] == before["misses"].get("compulsory", 0) + 1
    assert after.inserts["inserted"] >= 1
    assert isinstance(price_of, txcache.AsyncCacheableFunction)
    assert price_of.stats in txcache.function_stats()


def test_values_cached_by_one_api_are_hits_for_the_other(alib: AsyncLib) -> None:
    """The same key derivation, node placement and value encoding: a key an async call
    stored is a hit for a sync transaction, and the other way round."""
    lib = alib.lib
    with lib.cache.read_only(staleness=60):
        assert sync_price_of(8) == 80  # stored by the sync API
    sync_key = sync_price_of.key(8)

    async def body(cache: AsyncCache) -> bytes:
        async with cache.read_only(staleness=60) as tx:
            assert tx.context is not None
            expected = price_of.keys.key((7,), {}, cache.settings, tx.context.digest)
            assert price_of.key(7) == expected
            assert await price_of(7) == 70  # stored by the async API
            assert cache.ring is not None
            node = cache.ring.node_for(sync_key)
            assert lib.cache.ring is not None
            assert node.address == lib.cache.ring.node_for(sync_key).address
            decode = functools.partial(cache.serializer.loads, key=sync_key)
            found = await tx.lookup(node, sync_key, decode)
            assert isinstance(found, tuple)
            assert isinstance(found[0], Hit)
            assert found[1] == 80
        return price_of.key(7)

    async_key = alib.run(body)
    assert lib.cache.ring is not None
    with lib.cache.read_only(staleness=60) as tx:
        assert price_of.key(7) == async_key  # the sync cache's settings and session context
        decode = functools.partial(lib.cache.serializer.loads, key=async_key)
        found = tx.lookup(lib.cache.ring.node_for(async_key), async_key, decode)
        assert isinstance(found, tuple)
        assert found[1] == 70


def test_nested_calls_and_read_your_writes_through_an_async_write(alib: AsyncLib) -> None:
    calls.clear()

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            assert await total_of(1, 3) == 60
        assert calls == [1, 2, 3]
        async with cache.read_only(staleness=60):
            assert await price_of(2) == 20  # stored by the nested call
        assert calls == [1, 2, 3]
        async with cache.read_write() as tx:
            await tx.execute("UPDATE items SET price = 25 WHERE id = 2")
        token = await tx.commit_timestamp()
        assert isinstance(token, int)
        await fresh_pins(cache, after=token - 1)
        async with cache.read_only(staleness=60, not_before=token):
            assert await total_of(1, 3) == 65
            assert await price_of(1) == 10
        assert calls == [1, 2, 3, 2]  # 1 and 3 stayed valid; 2 and the total did not

    alib.run(body)


def test_a_read_write_block_that_wrote_nothing_has_no_token(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async with cache.read_write(isolation="repeatable read") as tx:
            assert await tx.query_one("SHOW transaction_isolation") == ("repeatable read",)
        assert await tx.commit_timestamp() is None

    alib.run(body)


def test_many_tasks_each_read_one_commit_point_while_writes_go_on(alib: AsyncLib) -> None:
    """Items 10, 11 and 12 always sum to 330: a writer moves price between them in one transaction.
    Every reader, in its own task and transaction, sees them from one commit point, through
    the cache or not."""
    ids = (10, 11, 12)

    async def reader(cache: AsyncCache) -> int:
        await asyncio.sleep(random.random() / 20)
        async with cache.read_only(staleness=60):
            return sum([await price_of(i) for i in random.sample(ids, len(ids))])

    async def writer(cache: AsyncCache) -> None:
        for _ in range(15):
            moved = random.randint(1, 9)
            source, target = random.sample(ids, 2)
            async with cache.read_write() as tx:
                await tx.execute(
                    "UPDATE items SET price = price + %s WHERE id = %s", (moved, target)
                )
                await tx.execute(
                    "UPDATE items SET price = price - %s WHERE id = %s", (moved, source)
                )
            await asyncio.sleep(0.01)

    async def body(cache: AsyncCache) -> list[int]:
        results: list[Any] = await asyncio.gather(
            writer(cache), *(reader(cache) for _ in range(120))
        )
        return results[1:]  # the readers' sums

    sums = alib.run(body)
    assert sums == [330] * len(sums)
    assert price_of.stats.hits > 0


def test_a_hit_is_one_round_trip(alib: AsyncLib, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[int] = []
    send = AsyncRespConnection.send

    def counting(self: AsyncRespConnection, commands: Any) -> Any:
        writes.append(len(commands))
        return send(self, commands)

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            await price_of(5)
        queries = cache.latency.queries
        monkeypatch.setattr(AsyncRespConnection, "send", counting)
        async with cache.read_only(staleness=60):
            assert await price_of(5) == 50
        monkeypatch.undo()
        assert cache.latency.queries == queries  # and no database statement

    alib.run(body, refresh_interval=30)  # no refresh of the agent in between
    assert writes == [1]  # one write of one command: TXGET


def test_rows_of_a_row_factory_come_back_the_same_from_a_hit(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            miss = await item_row(3)
        async with cache.read_only(staleness=60):
            hit = await item_row(3)
            bare = await aio.query("SELECT id FROM items WHERE id < %s", (3,), row_factory=dict_row)
        assert miss == hit == {"id": 3, "name": "item 3", "price": 30}
        assert bare == [{"id": 1}, {"id": 2}]

    alib.run(body)


def test_await_txcache_query_works_in_an_async_block(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            # txcache.query is typed for sync code; in an async block it is awaited
            assert await txcache.query("SELECT 1") == [(1,)]  # type: ignore[misc]
            cursor = await aio.execute("SELECT 2")
            assert await cursor.fetchall() == [(2,)]
        async with cache.read_write():
            assert await txcache.query_one("SELECT 3") == (3,)  # type: ignore[misc]

    alib.run(body)


def test_an_implicit_transaction_of_the_default_async_cache(alib: AsyncLib) -> None:
    calls.clear()

    async def body(cache: AsyncCache) -> None:
        assert aio.default_cache() is cache
        assert await price_of(6) == 60  # outside any block: an implicit read-only one
        assert txcache.current_transaction() is None
        assert await price_of(6) == 60

    alib.run(body, staleness=60)
    assert calls == [6]
    assert aio.default_cache() is None  # closed


def test_a_transaction_belongs_to_the_task_that_began_it(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            with pytest.raises(txcache.TransactionError, match="task that began it"):
                await asyncio.create_task(price_of(1))
            with pytest.raises(txcache.TransactionError, match="task that began it"):
                await asyncio.gather(aio.query("SELECT 1"))
            with pytest.raises(txcache.TransactionError, match="task that began it"):
                await asyncio.to_thread(txcache.query, "SELECT 1")

            async def own() -> int:
                async with cache.read_only(staleness=60):  # a task may begin its own
                    return await price_of(2)

            assert await asyncio.create_task(own()) == 20
            assert await price_of(1) == 10  # the block itself goes on
            nested = "a read-only transaction is already running .* do not nest"
            with pytest.raises(txcache.TransactionError, match=nested):
                async with cache.read_only():
                    pass

    alib.run(body)


def test_each_api_refuses_the_others_functions_and_blocks(alib: AsyncLib) -> None:
    lib = alib.lib

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            with pytest.raises(txcache.TransactionError, match="sync cacheable function"):
                sync_price_of(1)
            with (
                pytest.raises(txcache.TransactionError, match="already running"),
                lib.cache.read_only(),
            ):
                pass
        with lib.cache.read_only(staleness=60):
            with pytest.raises(txcache.TransactionError, match="async cacheable function"):
                await price_of(1)
            with pytest.raises(txcache.TransactionError, match="this one is sync"):
                await aio.query("SELECT 1")
        with pytest.raises(txcache.NoTransaction):
            await aio.query("SELECT 1")

    alib.run(body)


def test_statements_are_checked_and_a_failed_one_fails_the_block(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60) as tx:
            with pytest.raises(txcache.StatementNotAllowed):
                await aio.query("UPDATE items SET price = 0")
            assert await aio.query_one("SELECT count(*) FROM items") == (20,)
            cursor = await aio.execute("SELECT 1")
            with pytest.raises(txcache.StatementNotAllowed):
                await cursor.execute("SELECT 2")
            with pytest.raises(Exception, match="division by zero"):
                await aio.query("SELECT 1 / 0")
            assert tx.failed
            with pytest.raises(txcache.TransactionError, match="failed earlier"):
                await price_of(1)
        async with cache.read_only(staleness=60):
            assert await price_of(1) == 10  # the connection went back clean

    alib.run(body)


def test_a_caught_failure_in_an_async_write_rolls_it_back_and_says_so(alib: AsyncLib) -> None:
    async def caught_failure(cache: AsyncCache) -> None:
        async with cache.read_write():
            await aio.execute("UPDATE items SET price = 0 WHERE id = 1")
            with pytest.raises(Exception, match="division by zero"):
                await aio.execute("SELECT 1 / 0")

    async def body(cache: AsyncCache) -> None:
        with pytest.raises(txcache.TransactionError, match="rolled back"):
            await caught_failure(cache)
        async with cache.read_only(staleness=0):
            assert await aio.query_one("SELECT price FROM items WHERE id = 1") == (10,)

    alib.run(body)


@txcache.cacheable(manual_invalidation=True)
async def rate_of(currency: str) -> int:
    calls.append(len(currency))
    return len(currency) * 100


def test_manual_invalidation_from_async_code(alib: AsyncLib) -> None:
    calls.clear()

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            assert await rate_of("EUR") == 300
        async with cache.read_only(staleness=60):
            assert await rate_of("EUR") == 300
        token = await rate_of.invalidate("EUR")
        assert isinstance(token, int)
        await fresh_pins(cache, after=token - 1)
        async with cache.read_only(staleness=60, not_before=token):
            assert await rate_of("EUR") == 300
        async with cache.read_write() as tx:
            assert await rate_of.invalidate_all() is None
        token = await tx.commit_timestamp()
        assert token is not None
        async with cache.read_only(staleness=60):
            with pytest.raises(txcache.TransactionError, match="read-only"):
                await rate_of.invalidate("EUR")

    alib.run(body)
    assert calls == [3, 3]


def test_bypass_mode_runs_every_call_uncached(alib: AsyncLib) -> None:
    async def body(cache: AsyncCache) -> None:
        uncached = price_of.stats.uncached
        async with cache.read_only():
            assert await price_of(9) == 90
        assert price_of.stats.uncached == uncached + 1

    alib.run(body, mode="bypass")


@txcache.cacheable
async def shelf_name(item_id: int) -> str | None:
    row = await aio.query_one("SELECT name FROM shelf WHERE id = %s", (item_id,))
    return None if row is None else str(row[0])


def test_schema_changes_are_read_in_a_worker_thread_and_stored_after(alib: AsyncLib) -> None:
    """A view created after the catalog was read (an unknown relation: read again at once),
    then redefined (a new catalog generation: read again before the next query); what a
    cacheable function computed under the new definition is invalidated by its new base."""
    lib = alib.lib

    async def redefine(cache: AsyncCache, base: str) -> None:
        assert cache.agent is not None
        generation = cache.agent.catalog_generation
        lib.write(f"CREATE OR REPLACE VIEW shelf AS SELECT id, name FROM {base}")
        while cache.agent.catalog_generation == generation:
            await asyncio.sleep(0.02)

    async def body(cache: AsyncCache) -> None:
        async with cache.read_only(staleness=60):
            assert await price_of(1) == 10  # the catalog is read
        lib.write("CREATE VIEW shelf AS SELECT id, name FROM items")
        async with cache.read_only(staleness=0):
            assert await shelf_name(1) == "item 1"
        await redefine(cache, "users")
        async with cache.read_only(staleness=0):
            assert await shelf_name(1) == "user 1"
        async with cache.read_write() as tx:
            await tx.execute("UPDATE users SET name = 'shelved' WHERE id = 1")
        token = await tx.commit_timestamp()
        assert token is not None
        await fresh_pins(cache, after=token - 1)
        async with cache.read_only(staleness=60, not_before=token):
            assert await shelf_name(1) == "shelved", "the value depended on users"

    alib.run(body)


def test_a_query_at_a_snapshot_older_than_a_schema_change_runs_again_after_it(
    alib: AsyncLib,
) -> None:
    """The view is redefined and its new rows updated after the transaction's snapshot:
    PostgreSQL would run the new definition over the old rows (a sum no commit had); the
    query runs again at a snapshot after both."""

    async def body(cache: AsyncCache) -> None:
        async with cache.read_write() as setup:
            await setup.execute(
                "CREATE TABLE ledger_rows (id integer PRIMARY KEY, v integer NOT NULL);"
                "INSERT INTO ledger_rows SELECT i, i FROM generate_series(1, 4) i;"
                "CREATE VIEW ledger_low AS SELECT sum(v) AS total FROM ledger_rows WHERE id <= 2"
            )
        token = await setup.commit_timestamp()
        assert token is not None
        await fresh_pins(cache, after=token - 1)
        async with cache.read_only(staleness=60) as tx:
            assert await aio.query("SELECT count(*) FROM items")  # pinned before the changes
            alib.lib.write("UPDATE ledger_rows SET v = v + 100")
            alib.lib.write(
                "CREATE OR REPLACE VIEW ledger_low AS "
                "SELECT sum(v) AS total FROM ledger_rows WHERE id > 2"
            )
            assert await aio.query("SELECT total FROM ledger_low") == [(207,)], "not 7"
            assert tx.moves >= 1
            assert tx.catalog_moved

    alib.run(body)
