"""txcache for ``asyncio``: the same contract as the sync library (docs/library.md,
"Async"), on :class:`psycopg.AsyncConnection` and an async client of the nodes and the agent.

```python
import txcache
from txcache import aio

cache = await txcache.connect_async()          # = txcache.aio.connect

@txcache.cacheable                             # an async def: awaited, same keys as sync
async def get_item(item_id):
    return await aio.query_one("SELECT * FROM items WHERE id = %s", (item_id,))

async with cache.read_only(staleness=30):
    item = await get_item(42)
async with cache.read_write() as tx:
    await tx.execute("UPDATE items SET price = 10 WHERE id = 42")
async with cache.read_only(not_before=await tx.commit_timestamp()):
    ...
```

``await txcache.query(...)`` works too (the current transaction's methods are coroutines in
an async block); :func:`query`, :func:`query_one` and :func:`execute` here are typed as
such.
"""

from txcache.aio._cacheable import AsyncCacheableFunction
from txcache.aio._connect import AsyncCache, connect, default_cache
from txcache.aio._read_only import AsyncReadOnlyTransaction
from txcache.aio._transaction import (
    AsyncReadWriteTransaction,
    AsyncTransaction,
    execute,
    query,
    query_one,
)

__all__ = [
    "AsyncCache",
    "AsyncCacheableFunction",
    "AsyncReadOnlyTransaction",
    "AsyncReadWriteTransaction",
    "AsyncTransaction",
    "connect",
    "default_cache",
    "execute",
    "query",
    "query_one",
]
