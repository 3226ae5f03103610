"""``ASYNC``: which driver a module of the read path is.

The async modules of ``txcache.aio`` are the source of the read path's drivers; their sync
twins are generated from them (``tools/async_to_sync.py``, docs/architecture.md, "Sync
generated from async"). Where the two truly differ, the source says so once:

    if ASYNC:
        await asyncio.shield(self._give_back(connection))
    else:
        self._give_back(connection)

``ASYNC`` is true in the async source, so the test costs one global lookup; the generated
sync module keeps only the ``else`` branch.
"""

from __future__ import annotations

__all__ = ["ASYNC"]

ASYNC = True
