"""``@cacheable``: memoize a function's results in the cache, per (function, code, args).

Inside a read-only transaction a call looks its key up (one round trip to the node that
owns it); a hit returns the stored value and narrows the transaction's pin set. A miss runs
the function in a new :class:`~txcache._frame.Frame` and stores the result with the
interval, snapshot and tags the frame gathered; an exception stores nothing.

Elsewhere (documented in docs/library.md):
- in a read/write transaction the function runs uncached — writes must see the database;
- outside any transaction the call runs in an implicit read-only transaction of the
  default cache (the last one :func:`~txcache.connect` made), with its ``staleness``
  setting; without a cache the function runs directly.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from txcache._config import Settings
from txcache._frame import Frame
from txcache._keys import CallKeys
from txcache._nodes import Hit, Miss
from txcache._stats import FunctionStats
from txcache._transaction import ReadOnlyTransaction, current_transaction
from txcache.errors import NoTransaction, TransactionError

__all__ = ["CacheableFunction", "cacheable", "function_stats"]

log = logging.getLogger("txcache")

P = ParamSpec("P")
R = TypeVar("R")

_registry: weakref.WeakSet[CacheableFunction[Any, Any]] = weakref.WeakSet()

MANUAL_TAG_TABLE = "txcache.calls"
"""The pseudo-table of manual-invalidation tags: ``txcache.calls/<function>:key=<hex>`` on
each result of a ``manual_invalidation`` function, the wildcard
``txcache.calls/<function>`` to invalidate them all. No real table is called that."""

INVALIDATE_MESSAGE_PREFIX = "txcache-invalidate"
"""The prefix of the logical messages manual invalidations are written as (docs/agent.md)."""

_EMIT_INVALIDATION = (
    f"SELECT pg_catalog.pg_logical_emit_message(true, '{INVALIDATE_MESSAGE_PREFIX}', %s)"
)


def function_stats() -> list[FunctionStats]:
    """The statistics of every cacheable function defined in this process, by name."""
    return sorted((function.stats for function in _registry), key=lambda s: s.name)


class CacheableFunction(Generic[P, R]):
    """A function wrapped by :func:`cacheable`; call it as the function itself."""

    def __init__(
        self, function: Callable[P, R], *, version: str = "", manual_invalidation: bool = False
    ) -> None:
        self.function = function
        self.keys = CallKeys(function, version=version)
        self.stats = FunctionStats(self.keys.name)
        """This function's counters in this process."""
        self.manual_invalidation = manual_invalidation
        """Whether its results carry the tags :meth:`invalidate` and :meth:`invalidate_all`
        name (one more tag per stored result)."""
        self._manual_table = f"{MANUAL_TAG_TABLE}/{self.keys.name}"
        functools.update_wrapper(self, function)
        _registry.add(self)

    def __repr__(self) -> str:
        return f"<cacheable {self.keys.name}>"

    def key(self, *args: P.args, **kwargs: P.kwargs) -> bytes:
        """The cache key of this call, as a call made here would look it up: with the
        ``code_version`` and ``code_packages`` settings of the current transaction's cache,
        else of the default cache, else with none."""
        return self.keys.key(args, kwargs, _settings_here())

    def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> int | None:
        """Make the cached results of this call stale, for what the database cannot see (an
        external API the function reads, say). Inside a read/write transaction the
        invalidation commits with it (its ``commit_timestamp`` is the token); elsewhere it
        commits at once through the default cache, and the ``not_before`` token of that
        commit is returned. Needs ``@cacheable(manual_invalidation=True)``."""
        self._require_manual("invalidate")
        key = self.keys.key(args, kwargs, _settings_here())
        return _emit_invalidation(self._manual_tag(key))

    def invalidate_all(self) -> int | None:
        """Make every cached result of this function stale, whatever its arguments and code
        version (as :meth:`invalidate` does for one call)."""
        self._require_manual("invalidate_all")
        return _emit_invalidation(self._manual_table)

    def _require_manual(self, method: str) -> None:
        if not self.manual_invalidation:
            raise TypeError(
                f"{self.keys.name}.{method}(): its results carry no manual-invalidation tag; "
                "declare it @txcache.cacheable(manual_invalidation=True)"
            )

    def _manual_tag(self, key: bytes) -> str:
        return f"{self._manual_table}:key={key.hex()}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return self._call(args, kwargs)
        except BaseException:
            self.stats.record_error()
            raise

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        transaction = current_transaction()
        if transaction is None:
            return self._call_implicitly(args, kwargs)
        if not isinstance(transaction, ReadOnlyTransaction) or transaction.uncached:
            if isinstance(transaction, ReadOnlyTransaction):
                transaction.check_usable()  # a failed block refuses every call
            self.stats.record_uncached()
            return self.function(*args, **kwargs)
        return self._call_in(transaction, args, kwargs)

    def _call_implicitly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        from txcache._connect import default_cache  # a cycle only at import time

        cache = default_cache()
        if cache is None:
            self.stats.record_uncached()
            return self.function(*args, **kwargs)
        with cache.read_only(staleness=cache.settings.staleness):
            return self._call(args, kwargs)

    def _call_in(
        self, transaction: ReadOnlyTransaction, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        started = time.perf_counter()
        transaction.check_owner()
        cache = transaction.cache
        key = self.keys.key(args, kwargs, cache.settings)
        manual_tag = self._manual_tag(key) if self.manual_invalidation else None
        if cache.mode == "no_consistency":  # its values never reach consistent readers
            key = hashlib.blake2b(key, digest_size=len(key), person=b"no_consistency").digest()
        assert cache.ring is not None
        node = cache.ring.node_for(key)
        found = transaction.lookup(node, key)
        if isinstance(found, Hit):
            try:
                value: R = cache.serializer.loads(found.value)
            except Exception as error:  # a pluggable serializer may raise anything: a miss
                log.warning("ignored the cached value of %s: %s", self.keys.name, error)
                found = Miss("foreign")
            else:
                for frame in transaction.frames:
                    frame.read_cached(found.interval, found.tags)
                self.stats.record_hit(time.perf_counter() - started)
                return value
        return self._run(transaction, node, key, found.kind, args, kwargs, manual_tag)

    def _run(
        self,
        transaction: ReadOnlyTransaction,
        node: Any,
        key: bytes,
        miss_kind: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        manual_tag: str | None,
    ) -> R:
        started = time.perf_counter()
        frame = Frame()
        transaction.frames.append(frame)
        if manual_tag is not None:  # callers' results depend on this call's too
            for each in transaction.frames:
                each.tags.add(manual_tag)
        try:
            value = self.function(*args, **kwargs)
        finally:
            popped = transaction.frames.pop()
            assert popped is frame, "frames out of order: a transaction used by two threads"
        self.stats.record_miss(miss_kind, time.perf_counter() - started)
        self._store(transaction, node, key, value, frame)
        return value

    def _store(
        self, transaction: ReadOnlyTransaction, node: Any, key: bytes, value: R, frame: Frame
    ) -> None:
        if transaction.uncached:
            return  # it fell back to an unpinned snapshot: its reads have no timestamp
        if transaction.failed:
            return  # a statement failed (and the function caught it): nothing is stored
        if transaction.catalog_moved:
            return  # its tags may describe another catalog than the one the query ran with
        data = transaction.cache.serializer.dumps(value)
        snapshot = frame.snapshot
        if snapshot is None:
            snapshot = transaction.reference_point()
            if snapshot is None:
                return
        consistent = transaction.cache.mode != "no_consistency"
        # Without consistency a value may be built from stale nested values, so it claims
        # only "from the snapshot it was computed at until invalidated".
        lo, hi = (frame.lo, frame.hi) if consistent else (snapshot, None)
        outcome = node.insert(key, data, lo, hi, snapshot, sorted(frame.tags))
        self.stats.record_insert(outcome or "failed")
        if outcome == "nondeterministic" and consistent:
            log.warning(
                "%s returned a different value for the same arguments at the same database "
                "state: is it deterministic?",
                self.keys.name,
            )


def _emit_invalidation(tags: str) -> int | None:
    """Write ``tags`` (one per line) as a manual invalidation: in the current read/write
    transaction (``None`` returned: its commit is the token), else in one of its own of the
    default cache (its commit's token)."""
    transaction = current_transaction()
    if isinstance(transaction, ReadOnlyTransaction):
        raise TransactionError(
            "a read-only transaction cannot invalidate: call invalidate() in a read/write "
            "transaction or outside any"
        )
    if transaction is not None:
        transaction.execute(_EMIT_INVALIDATION, (tags,))
        return None
    from txcache._connect import default_cache  # a cycle only at import time

    cache = default_cache()
    if cache is None:
        raise NoTransaction("no cache to invalidate through: call txcache.connect() first")
    with cache.read_write() as written:
        written.execute(_EMIT_INVALIDATION, (tags,))
    return written.commit_timestamp


def _settings_here() -> Settings | None:
    """The settings of the cache a call made here would read."""
    transaction = current_transaction()
    if transaction is not None:
        return transaction.cache.settings
    from txcache._connect import default_cache  # a cycle only at import time

    cache = default_cache()
    return None if cache is None else cache.settings


@overload
def cacheable(function: Callable[P, R], /) -> CacheableFunction[P, R]: ...


@overload
def cacheable(
    *, version: str = "", manual_invalidation: bool = False
) -> Callable[[Callable[P, R]], CacheableFunction[P, R]]: ...


def cacheable(
    function: Callable[P, R] | None = None,
    /,
    *,
    version: str = "",
    manual_invalidation: bool = False,
) -> CacheableFunction[P, R] | Callable[[Callable[P, R]], CacheableFunction[P, R]]:
    """Make ``function`` cacheable: ``@cacheable`` or ``@cacheable(version="2")``.

    The function must depend only on its arguments and the database, and return a value the
    serializer can store. Its keys hash its code and the application code it can reach (see
    docs/library.md, "Keys and code changes"); ``version`` changes every key of this
    function, for a change the hash cannot see (a template, a method reached through an
    instance). The ``code_version`` setting does the same for every function.
    ``manual_invalidation`` lets :meth:`CacheableFunction.invalidate` make results stale by
    hand, for what the database cannot see.
    """
    if function is not None:
        return CacheableFunction(function, version=version)

    def decorate(inner: Callable[P, R]) -> CacheableFunction[P, R]:
        return CacheableFunction(inner, version=version, manual_invalidation=manual_invalidation)

    return decorate
