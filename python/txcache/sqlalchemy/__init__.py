"""SQLAlchemy 2 on txcache: engines and sessions whose ORM and Core statements run inside
txcache transactions — checked, tagged and run at the pinned snapshot in a read-only block,
straight to PostgreSQL in a read/write one (docs/sqlalchemy.md). An optional extra:
``pip install 'txcache[sqlalchemy]'``.

```python
import txcache
from txcache import sqlalchemy as txsa
from sqlalchemy import select

cache = txcache.connect()
engine = txsa.create_engine(cache)
Session = txsa.sessionmaker(engine)

@txcache.cacheable
def cheap_items(limit: int) -> list[dict]:
    with Session() as session:        # joins the current txcache transaction
        found = session.scalars(select(Item).where(Item.price < limit))
        return [txsa.to_dict(item) for item in found]   # plain data: a hit equals a miss

with cache.read_only(staleness=30):
    items = cheap_items(10)

with Session() as session:            # outside a block: its own read/write transaction
    session.add(Item(id=7, name="lamp", price=5))
    session.commit()
with cache.read_only(not_before=session.commit_timestamp):
    assert any(item["id"] == 7 for item in cheap_items(10))
```

Every write committed through an engine also holds the later read-only transactions of the
thread or task that committed it to it (read-your-writes, no token by hand); a Core
connection's token is :func:`commit_timestamp` (``commit_timestamp(conn)``).

Async: :func:`create_async_engine`, :class:`AsyncSession` (``await
session.commit_timestamp()``), :func:`commit_timestamp_async`, :func:`async_sessionmaker`,
inside ``async with cache.read_only()`` of an :class:`~txcache.aio.AsyncCache`.
"""

from txcache.sqlalchemy._commits import commit_timestamp, commit_timestamp_async
from txcache.sqlalchemy._engine import (
    AsyncSession,
    Session,
    async_sessionmaker,
    create_async_engine,
    create_engine,
    sessionmaker,
)
from txcache.sqlalchemy._results import dicts, rows, to_dict

__all__ = [
    "AsyncSession",
    "Session",
    "async_sessionmaker",
    "commit_timestamp",
    "commit_timestamp_async",
    "create_async_engine",
    "create_engine",
    "dicts",
    "rows",
    "sessionmaker",
    "to_dict",
]
