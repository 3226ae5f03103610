"""txcache: a transactional, automatically invalidated cache for PostgreSQL applications.

```python
import txcache

cache = txcache.connect()            # settings: arguments, TXCACHE_* variables, txcache.toml

@txcache.cacheable
def get_item(item_id):
    return txcache.query_one("SELECT * FROM items WHERE id = %s", (item_id,))

with cache.read_only(staleness=30):  # one commit point, at most 30 s old
    item = get_item(42)
with cache.read_write() as tx:       # straight to PostgreSQL
    tx.execute("UPDATE items SET max_bid = %s WHERE id = %s", (10, 42))
with cache.read_only(staleness=30, not_before=tx.commit_timestamp):
    ...                              # sees the update
```

The library is described in ``docs/library.md``; the exception tree is in
:mod:`txcache.errors`. Also here: preparing a database (:func:`setup_database`,
``txcache setup``). Starting PostgreSQL, nodes, the agent or a whole stack as child
processes is :mod:`txcache.stack`'s (``from txcache.stack import Stack, EmbeddedPostgres``);
``import txcache`` starts and imports no launcher.

The async API is :mod:`txcache.aio`: ``cache = await txcache.connect_async()``, ``async
with cache.read_only()``, ``@txcache.cacheable`` on an ``async def``; its main names are
also here, and ``txcache.aio`` has the typed ``query``/``query_one``/``execute``.
"""

from txcache import aio
from txcache._cacheable import CacheableFunction
from txcache._cacheable_base import function_stats
from txcache._config import Mode, Settings
from txcache._connect import Cache, connect, default_cache
from txcache._current import current_transaction
from txcache._decorator import cacheable
from txcache._keys import register_key_context
from txcache._pinset import Pin, PinPolicy, PinSet, newest_or_fresh, oldest_pin
from txcache._read_only import ReadOnlyTransaction
from txcache._serialize import ForeignValue, SafeSerializer, Serializer
from txcache._setup import SetupError, SetupReport, SetupStep, StepStatus, setup_database
from txcache._sql import UncacheableQuery
from txcache._stats import FunctionStats, OperationLatency
from txcache._transaction import ReadWriteTransaction, Transaction, execute, query, query_one
from txcache.aio import (
    AsyncCache,
    AsyncCacheableFunction,
    AsyncReadOnlyTransaction,
    AsyncReadWriteTransaction,
)
from txcache.aio import connect as connect_async
from txcache.errors import (
    ConfigurationError,
    NoTransaction,
    SnapshotUnavailable,
    StatementNotAllowed,
    TransactionError,
    TxcacheError,
    UnsupportedArgument,
    UnsupportedValue,
)

__all__ = [
    "AsyncCache",
    "AsyncCacheableFunction",
    "AsyncReadOnlyTransaction",
    "AsyncReadWriteTransaction",
    "Cache",
    "CacheableFunction",
    "ConfigurationError",
    "ForeignValue",
    "FunctionStats",
    "Mode",
    "NoTransaction",
    "OperationLatency",
    "Pin",
    "PinPolicy",
    "PinSet",
    "ReadOnlyTransaction",
    "ReadWriteTransaction",
    "SafeSerializer",
    "Serializer",
    "Settings",
    "SetupError",
    "SetupReport",
    "SetupStep",
    "SnapshotUnavailable",
    "StatementNotAllowed",
    "StepStatus",
    "Transaction",
    "TransactionError",
    "TxcacheError",
    "UncacheableQuery",
    "UnsupportedArgument",
    "UnsupportedValue",
    "aio",
    "cacheable",
    "connect",
    "connect_async",
    "current_transaction",
    "default_cache",
    "execute",
    "function_stats",
    "newest_or_fresh",
    "oldest_pin",
    "query",
    "query_one",
    "register_key_context",
    "setup_database",
]

__version__ = "0.1.0"
