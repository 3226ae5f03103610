"""Django on txcache (docs/django.md): the ORM inside ``@txcache.cacheable`` functions and
txcache transactions, queryset caching, and request-scoped transactions. An optional
extra: ``pip install 'txcache[django]'``.

```python
# settings.py
INSTALLED_APPS = [..., "txcache.django"]
DATABASES = {"default": {"ENGINE": "txcache.django.db", "NAME": "shop", ...}}
MIDDLEWARE = ["txcache.django.middleware.TransactionMiddleware", ...]   # above sessions
TXCACHE = {"NODES": "10.0.0.5:6380,10.0.0.6:6380", "AGENT": "10.0.0.7:6390", "STALENESS": 30}

# anywhere
import txcache, txcache.django

@txcache.cacheable
def cheap_items(limit: int) -> list[dict]:
    return list(Item.objects.filter(price__lt=limit).values("id", "name", "price"))

with txcache.django.read_only(staleness=30):
    items = cheap_items(10)                        # the ORM reads at one pinned snapshot
with txcache.django.read_write() as tx:
    Item.objects.filter(id=7).update(price=5)      # the ORM writes in the transaction
with txcache.django.read_only(not_before=tx.commit_timestamp):
    assert any(item["id"] == 7 for item in cheap_items(10))

Item.objects.filter(category=3).txcache(staleness=30)   # objects = CachedManager()
```

Its names are imported on first use, so importing this package needs no configured
settings: :func:`get_cache`, :func:`close`, :func:`read_only`, :func:`read_write`,
:class:`CachedQuerySet`, :data:`CachedManager`. Elsewhere: the database backend
(``txcache.django.db``), :mod:`txcache.django.middleware`, :mod:`txcache.django.decorators`,
the active time zone and language in cacheable calls' keys (:mod:`txcache.django.contexts`),
the checks (:mod:`txcache.django.checks`) and the ``txcache_setup`` / ``txcache_status``
management commands.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txcache.django.conf import close, get_cache
    from txcache.django.queryset import CachedManager, CachedQuerySet
    from txcache.django.transactions import read_only, read_write

__all__ = ["CachedManager", "CachedQuerySet", "close", "get_cache", "read_only", "read_write"]

_HOMES = {
    "get_cache": "txcache.django.conf",
    "close": "txcache.django.conf",
    "read_only": "txcache.django.transactions",
    "read_write": "txcache.django.transactions",
    "CachedManager": "txcache.django.queryset",
    "CachedQuerySet": "txcache.django.queryset",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'txcache.django' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
