# Generated from python/txcache/aio/_cacheable.py by tools/async_to_sync.py. Do not edit:
# change the source and run `make generate` (`make lint` fails if this file differs).
"""A function wrapped by ``@txcache.cacheable``, called inside transactions of its driver,
with the keys, statistics, miss kinds and store rules every cacheable function has
(:class:`~txcache._cacheable_base.CacheableBase`). It is generated from its async twin
(``tools/async_to_sync.py``).

A value stored by one driver is a hit for the other: keys, values and intervals are the
same bytes whichever wrapper computed them. A call cancelled before its function returned
stores nothing (its frame is dropped, as for any exception); once its result is being
stored, the ``TXSET`` is written whole, so a cancellation then stores the complete value or
nothing. A call that holds its key's lease and raises — or is cancelled or interrupted —
releases it (``TXRELEASE``, not waited for).

A miss asks the node for the key's lease (the ``lease`` setting): the caller that gets it
computes the value, and the others that miss the key meanwhile wait for its store
(docs/library.md, "Hot keys: one recompute").
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from txcache._cacheable_base import (
    EMIT_INVALIDATION,
    CacheableBase,
    mixed_error,
    read_only_invalidation,
    runs_directly,
)
from txcache._current import current_transaction
from txcache._nodes import CacheNode
from txcache._protocol import Hit, Miss
from txcache._read_only import ReadOnlyTransaction
from txcache._transaction import Transaction
from txcache.errors import NoTransaction

if TYPE_CHECKING:
    from txcache._connect import Cache

__all__ = ["CacheableFunction"]

P = ParamSpec("P")
R = TypeVar("R")

_MAX_LEASE_PAUSE = 0.05
"""The longest pause between two looks at a key another caller holds the lease of."""


class CacheableFunction(CacheableBase[P, R]):
    """A function wrapped by :func:`txcache.cacheable`; call (and await) it as the function
    itself, inside a transaction of its driver (or outside any: an implicit one of the
    default cache)."""

    def __init__(self, function: Callable[P, R], **options: Any) -> None:
        """Wrap ``function``; ``options`` as :func:`txcache.cacheable` takes them."""
        super().__init__(function, **options)
        self.function = function

    def _default_cache(self) -> Cache | None:
        from txcache._connect import implicit_cache  # the cache module imports this one

        return implicit_cache()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return self._call(args, kwargs)
        except BaseException:
            self.stats.record_error()
            raise

    def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> int | None:
        """Make the cached results of this call stale, for what the database cannot see (an
        external API the function reads, say). Inside a read/write transaction the
        invalidation commits with it (its ``commit_timestamp`` is the token); elsewhere it
        commits at once through the default cache, and the ``not_before`` token of that
        commit is returned. Needs ``@cacheable(manual_invalidation=True)``."""
        self._require_manual("invalidate")
        key = self._call_key(args, kwargs, self._settings_here())
        return self._emit(self._manual_tag(key))

    def invalidate_all(self) -> int | None:
        """Make every cached result of this function stale, whatever its arguments and code
        version (as :meth:`invalidate` does for one call)."""
        self._require_manual("invalidate_all")
        return self._emit(self._manual_table)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        transaction = current_transaction()
        if transaction is None:
            return self._call_implicitly(args, kwargs)
        if not isinstance(transaction, ReadOnlyTransaction) or transaction.uncached:
            if not isinstance(transaction, Transaction):
                raise mixed_error(self.keys.name, function_is_async=False)
            if isinstance(transaction, ReadOnlyTransaction):
                transaction.check_usable()  # a failed block refuses every call
            transaction.check_owner()
            self._refuse_unkeyable(args, kwargs)
            self.stats.record_uncached()
            return self.function(*args, **kwargs)
        if transaction.reruns:  # an audit's rerun (txcache._audit_core): not the application's
            transaction.check_owner()
            return self.function(*args, **kwargs)
        return self._call_in(transaction, args, kwargs)

    def _call_implicitly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        cache = self._default_cache()
        if cache is None or runs_directly():
            self._refuse_unkeyable(args, kwargs)
            self.stats.record_uncached()
            return self.function(*args, **kwargs)
        with cache.read_only(staleness=cache.settings.staleness):
            return self._call(args, kwargs)

    def _call_in(
        self, transaction: ReadOnlyTransaction, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        started = time.perf_counter()
        transaction.check_owner()
        key, node, manual_tag = self._where(transaction, transaction.ring, args, kwargs)
        decode = self._decoder(transaction, key)
        found = transaction.lookup(node, key, decode)
        if isinstance(found, Miss) and found.lease:
            found = self._wait_for_lease(transaction, node, key, found, decode)
        if isinstance(found, Miss):
            return self._run(transaction, node, key, found, args, kwargs, manual_tag)
        hit, value = found
        self._record_hit(transaction, hit, started)
        self._sample_for_audit(transaction, self.function, args, kwargs, key, node, hit.value)
        return value

    def _wait_for_lease(
        self,
        transaction: ReadOnlyTransaction,
        node: CacheNode,
        key: bytes,
        miss: Miss,
        decode: Callable[[bytes], R],
    ) -> tuple[Hit, R] | Miss:
        """Another caller holds the key's lease (it is computing the value): look again,
        pausing a millisecond and then twice as long each time (at most 50 ms), until its
        store is a hit or the lease comes to this caller — an expired or released one does —
        and for at most twice the cache's lease: a caller that holds no lease then computes
        anyway."""
        self.stats.record_lease_wait()
        deadline = time.monotonic() + 2 * transaction.cache.settings.lease
        pause = 0.001
        found: tuple[Hit, R] | Miss = miss
        while isinstance(found, Miss) and found.lease and time.monotonic() < deadline:
            time.sleep(min(pause, found.lease / 1000))
            found = transaction.lookup(node, key, decode)
            pause = min(2 * pause, _MAX_LEASE_PAUSE)
        return found

    def _run(
        self,
        transaction: ReadOnlyTransaction,
        node: CacheNode,
        key: bytes,
        miss: Miss,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        manual_tag: str | None,
    ) -> R:
        started = time.perf_counter()
        frame = self._open_frame(transaction, manual_tag, (*args, *kwargs.values()))
        leased = miss.lease == 0  # this call holds the key's lease: a store ends it
        try:
            value = self.function(*args, **kwargs)
        except BaseException:
            if leased:
                node.release(key)  # a waiting caller computes it at once
            raise
        finally:
            self._close_frame(transaction, frame)
        self._record_miss(transaction, miss.kind, started)
        request = self._store_request(transaction, key, value, frame)
        if request is not None and not self._defer_store(transaction, node, key, request, frame):
            if not node.is_up() and transaction.ring is not None:
                node = transaction.ring.node_for(key)  # it went down: where the key goes now
            # Not waited for: the node stores it (ending the lease) while the caller goes on.
            node.store(key, *request, functools.partial(self._stored, transaction))
        elif leased:
            node.release(key)
        return value

    def _emit(self, tags: str) -> int | None:
        """Write ``tags`` (one per line) as a manual invalidation: in the current read/write
        transaction (``None`` returned: its commit is the token), else in one of its own of
        the default cache (its commit's token)."""
        transaction = current_transaction()
        if transaction is not None and not isinstance(transaction, Transaction):
            raise mixed_error(self.keys.name, function_is_async=False)
        if isinstance(transaction, ReadOnlyTransaction):
            raise read_only_invalidation()
        if transaction is not None:
            transaction.execute(EMIT_INVALIDATION, (tags,))
            return None
        cache = self._default_cache()
        if cache is None:
            raise NoTransaction("no cache to invalidate through: call txcache.connect() first")
        with cache.read_write() as written:
            written.execute(EMIT_INVALIDATION, (tags,))
        return written.commit_timestamp
