"""What a sync and an async cacheable function share, with no I/O: the keys and their
statistics, manual-invalidation tags, and each decision of a call — its key and node, what a
hit gives, which hits the audit samples, the frames, what a miss stores
(:class:`CacheableBase`); the registry of cacheable functions and the conditions under which
a call runs directly.

Inside a read-only transaction a call looks its key up (one round trip to the node that
owns it); a hit returns the stored value and narrows the transaction's pin set (and with
``audit_rate`` is sometimes kept for the audit: :mod:`txcache._audit_core`). A miss runs
the function in a new :class:`~txcache._frame.Frame` and stores the result with the
interval, snapshot and tags the frame gathered; an exception stores nothing. Elsewhere
(docs/library.md):

- in a read/write transaction the function runs uncached — writes must see the database;
- outside any transaction the call runs in an implicit read-only transaction of the
  default cache (the last one ``connect`` made), with its ``staleness`` setting; without a
  cache the function runs directly, and so it does while a condition an integration
  registered with :func:`run_directly_when` holds.

The drivers are :mod:`txcache.aio._cacheable` (the source) and the sync ``txcache._cacheable``
generated from it; :func:`txcache.cacheable` (:mod:`txcache._decorator`) picks one.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import logging
import random
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast

from txcache import _validate
from txcache._audit_core import SampledCall
from txcache._config import Settings
from txcache._current import current_transaction
from txcache._frame import Frame
from txcache._keys import CallKeys, undeclared_dependency
from txcache._pending_stores import PendingStore, Request
from txcache._protocol import Hit
from txcache._read_only_core import ReadOnlyCore
from txcache._ring import NodeClient, NodeRing
from txcache._sql import UncacheableQuery
from txcache._stats import AuditStats, FunctionStats
from txcache.errors import TransactionError, UnsupportedArgument, UnsupportedValue

if TYPE_CHECKING:
    from txcache._cache_core import CacheCore

__all__ = [
    "EMIT_INVALIDATION",
    "INVALIDATE_MESSAGE_PREFIX",
    "MANUAL_TAG_TABLE",
    "CacheableBase",
    "audit_stats",
    "function_stats",
    "mixed_error",
    "read_only_invalidation",
    "run_directly_when",
    "runs_directly",
]

log = logging.getLogger("txcache")

P = ParamSpec("P")
R = TypeVar("R")
N = TypeVar("N", bound=NodeClient)

_registry: weakref.WeakSet[CacheableBase[Any, Any]] = weakref.WeakSet()

MANUAL_TAG_TABLE = "txcache.calls"
"""The pseudo-table of manual-invalidation tags: ``txcache.calls/<function>:key=<hex>`` on
each result of a ``manual_invalidation`` function, the wildcard
``txcache.calls/<function>`` to invalidate them all. No real table is called that."""

INVALIDATE_MESSAGE_PREFIX = "txcache-invalidate"
"""The prefix of the logical messages manual invalidations are written as (docs/agent.md)."""

EMIT_INVALIDATION = (
    f"SELECT pg_catalog.pg_logical_emit_message(true, '{INVALIDATE_MESSAGE_PREFIX}', %s)"
)


_direct_conditions: list[Callable[[], bool]] = []


def run_directly_when(condition: Callable[[], bool]) -> None:
    """Have a cacheable call made outside any transaction run its function directly,
    uncached, whenever ``condition()`` is true, instead of in an implicit read-only
    transaction — for an integration whose callers can hold a database transaction of
    their own open (Django's ``atomic()`` on its own connection): the function must see
    that transaction's uncommitted writes, which a pinned snapshot does not, and its
    queries belong there. Checked before the lookup, so a hit and a miss agree.
    Registering the same condition twice keeps one."""
    if condition not in _direct_conditions:
        _direct_conditions.append(condition)


def runs_directly() -> bool:
    """Whether a call outside any transaction runs its function directly now
    (:func:`run_directly_when`)."""
    return any(condition() for condition in _direct_conditions)


def function_stats() -> list[FunctionStats]:
    """The statistics of every cacheable function defined in this process, by name."""
    return sorted((function.stats for function in _registry), key=lambda s: s.name)


def audit_stats() -> list[AuditStats]:
    """What the audit found for every cacheable function defined in this process, by
    name."""
    return sorted((function.audit for function in _registry), key=lambda s: s.name)


def _instead(decorated: object) -> str:
    """What to decorate instead of ``decorated``, which is not a function."""
    if isinstance(decorated, staticmethod):
        return "Put @staticmethod above @cacheable"
    if isinstance(decorated, classmethod):
        return (
            "A class cannot be an argument of a key: make it a @staticmethod (above "
            "@cacheable) taking what it needs of the class as arguments"
        )
    return "Wrap it in a def that calls it"


def _strings_in(values: Iterable[Any], depth: int = 8) -> Iterator[str]:
    """The strings among ``values`` and inside their tuples, lists, sets and dicts (keys and
    values), to ``depth`` levels: every one is in the call's key, as its argument encoding
    takes each container whole (a tenant's ``{"schema": "t_a"}``)."""
    for value in values:
        if isinstance(value, str):
            yield value
        elif depth and isinstance(value, dict):
            yield from _strings_in((*value.keys(), *value.values()), depth - 1)
        elif depth and isinstance(value, tuple | list | set | frozenset):
            yield from _strings_in(value, depth - 1)


class CacheableBase(Generic[P, R]):
    """What a sync and an async cacheable function share, no I/O: the keys, the
    statistics, manual-invalidation tags, and each decision of a call — its key and node,
    what a hit gives, the frames, and what a miss stores (``R``: what the function's result
    is, awaited for an ``async def``)."""

    def __init__(
        self,
        function: Callable[P, Any],
        *,
        version: str = "",
        manual_invalidation: bool = False,
        independent_of: Iterable[str] = (),
    ) -> None:
        if not inspect.isfunction(function):
            raise TypeError(
                f"@cacheable takes a function (def or async def), not a "
                f"{type(function).__name__}: its key names its code. {_instead(function)}"
            )
        version, manual_invalidation, independent = _validate.cacheable_options(
            version, manual_invalidation, independent_of
        )
        self.keys = CallKeys(function, version=version, independent_of=independent)
        self.stats = FunctionStats(self.keys.name)
        """This function's counters in this process."""
        self.audit = AuditStats(self.keys.name)
        """What the audit found for it in this process (docs/library.md, "Audit")."""
        self.manual_invalidation = manual_invalidation
        """Whether its results carry the tags :meth:`invalidate` and :meth:`invalidate_all`
        name (one more tag per stored result)."""
        self._manual_table = f"{MANUAL_TAG_TABLE}/{self.keys.name}"
        functools.update_wrapper(cast(Any, self), function)  # the wrapper is callable
        _registry.add(self)

    def __repr__(self) -> str:
        return f"<cacheable {self.keys.name}>"

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        """Itself, read from a class; read from an instance, a callable that refuses the
        call: the instance would be an argument of the key, and objects cannot be."""
        if instance is None:
            return self
        name = self.keys.name
        if isinstance(instance, type):  # @classmethod above @cacheable (until Python 3.13)
            bound = f"bound to the class {instance.__name__} by @classmethod"
            subject, kinds = "class", "classes"
        else:
            bound = f"called as a method of a {type(instance).__name__} object"
            subject, kinds = "instance", "objects"

        def method_call(*args: Any, **kwargs: Any) -> Any:
            raise UnsupportedArgument(
                f"{name} is cacheable and {bound}: the {subject} would be an argument of its "
                f'key, and {kinds} cannot be (docs/library.md, "The arguments in the key"); '
                f"make it a function, or a @staticmethod, and pass it what it reads from the "
                f"{subject}"
            )

        return method_call

    def key(self, *args: P.args, **kwargs: P.kwargs) -> bytes:
        """The cache key of this call, as a call made here would look it up: with the
        ``code_version`` and ``code_packages`` settings of the current transaction's cache
        and the session context it reads in — else of the default cache and its last
        catalog reading's session — else with neither."""
        return self.keys.key(args, kwargs, *self._key_space_here())

    def _key_space_here(self) -> tuple[Settings | None, bytes]:
        """The settings of the cache a call made here would read, and the digest of the
        session context it would read in (empty when not known)."""
        transaction = current_transaction()
        cache = transaction.cache if transaction is not None else self._default_cache()
        if cache is None:
            return None, b""
        context = getattr(transaction, "context", None) or cache.last_context()
        return cache.settings, context.digest if context is not None else b""

    def _settings_here(self) -> Settings | None:
        """The settings of the cache a call made here would read."""
        return self._key_space_here()[0]

    def _default_cache(self) -> CacheCore | None:
        """The cache of implicit transactions (the driver's own default cache)."""
        raise NotImplementedError

    def _refuse_unkeyable(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Encodes the call's arguments as a cached call would, for a call that runs
        uncached (no cache, a read/write transaction, Django's ``atomic()``): arguments a
        key cannot hold are refused there too, not first by the cache in production."""
        self.keys.check_arguments(args, kwargs)

    def _call_key(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], settings: Settings | None
    ) -> bytes:
        """The key naming this call in every session and key context: what a manual
        invalidation names."""
        return self.keys.invalidation_key(args, kwargs, settings)

    def _require_manual(self, method: str) -> None:
        if not self.manual_invalidation:
            raise TypeError(
                f"{self.keys.name}.{method}(): its results carry no manual-invalidation tag; "
                "declare it @txcache.cacheable(manual_invalidation=True)"
            )

    def _manual_tag(self, key: bytes) -> str:
        return f"{self._manual_table}:key={key.hex()}"

    def _where(
        self,
        transaction: ReadOnlyCore[Any],
        ring: NodeRing[N] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[bytes, N, str | None]:
        """The call's key, the node of ``ring`` (the transaction's cache's) that holds it,
        and its manual-invalidation tag (named by the call's key in every session context:
        an invalidation reaches them all)."""
        cache = transaction.cache
        assert transaction.context is not None, "a cacheable call in an uncached transaction"
        if transaction.frames:
            self._check_declared(transaction.frames)
        key = self.keys.key(args, kwargs, cache.settings, transaction.context.digest)
        manual_tag = None
        if self.manual_invalidation:
            manual_tag = self._manual_tag(self._call_key(args, kwargs, cache.settings))
        if cache.mode == "no_consistency":  # its values never reach consistent readers
            key = hashlib.blake2b(key, digest_size=len(key), person=b"no_consistency").digest()
        assert ring is not None
        return key, ring.node_for(key), manual_tag

    def _check_declared(self, frames: list[Frame]) -> None:
        """Refuse a call whose key names a key context that a function being computed
        around it is declared independent of: that function's result depends on it."""
        found = undeclared_dependency(
            ((frame.function, frame.independent_of) for frame in frames), self.keys.independent_of
        )
        if found is not None:
            outer, context = found
            raise UncacheableQuery(
                f"{outer} is declared independent of the key context {context!r}, but calls "
                f"{self.keys.name}, whose result depends on it: leave {context!r} out of "
                f"{outer}'s independent_of, or declare {self.keys.name} independent of it too"
            )

    def _decoder(self, transaction: ReadOnlyCore[Any], key: bytes) -> Callable[[bytes], R]:
        """How the transaction's lookups read the cached value under ``key``: its cache's
        serializer, a value it refuses logged (the lookup counts it a ``foreign`` miss)."""
        serializer = transaction.cache.serializer

        def decode(data: bytes) -> R:
            try:
                value: R = serializer.loads(data, key=key)
            except Exception as error:
                log.warning("ignored the cached value of %s: %s", self.keys.name, error)
                raise
            return value

        return decode

    def _record_hit(self, transaction: ReadOnlyCore[Any], found: Hit, started: float) -> None:
        """An accepted hit, since ``started``: recorded in every frame and the stats."""
        for frame in transaction.frames:
            frame.read_cached(found.interval, found.tags)
        self.stats.record_hit(time.perf_counter() - started)
        transaction.hits += 1

    def _sample_for_audit(
        self,
        transaction: ReadOnlyCore[Any],
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: bytes,
        node: NodeClient,
        cached: bytes,
    ) -> None:
        """Keep an accepted hit (``cached``, read under ``key`` from ``node``) on the
        transaction for the audit, with the probability ``audit_rate``, the undecorated
        ``function`` bound to a copy of its arguments. Costs one test when the cache does
        not audit."""
        cache = transaction.cache
        if cache.auditor is None or random.random() >= cache.settings.audit_rate:
            return
        if self.manual_invalidation:  # it reads outside the database: a rerun reads it now
            self.audit.record_skipped()
            return
        try:
            # The application may change its arguments after the call: the rerun must see
            # them as the key named them.
            args, kwargs = copy.deepcopy((args, kwargs))
        except Exception:  # an argument that cannot be copied: nothing to rerun with
            self.audit.record_skipped()
            return
        rerun = functools.partial(function, *args, **kwargs)
        assert transaction.context is not None, "a hit in an uncached transaction"
        sampled = SampledCall(self, rerun, key, node, transaction.context, cached)
        transaction.sampled.append(sampled)

    def _record_miss(self, transaction: ReadOnlyCore[Any], miss_kind: str, started: float) -> None:
        """A miss (``miss_kind``) ran, since ``started``."""
        self.stats.record_miss(miss_kind, time.perf_counter() - started)
        transaction.misses += 1

    def _open_frame(
        self,
        transaction: ReadOnlyCore[Any],
        manual_tag: str | None,
        arguments: Iterable[Any],
    ) -> Frame:
        """A frame for a miss's run with ``arguments`` (positional and keyword values), on
        the transaction's stack."""
        texts = frozenset(_strings_in(arguments))
        frame = Frame(self.keys.name, self.keys.independent_of, texts)
        transaction.frames.append(frame)
        if manual_tag is not None:  # callers' results depend on this call's too
            for each in transaction.frames:
                each.tags.add(manual_tag)
        return frame

    def _close_frame(self, transaction: ReadOnlyCore[Any], frame: Frame) -> None:
        popped = transaction.frames.pop()
        assert popped is frame, "frames out of order: a transaction used by two threads"

    def _store_request(
        self, transaction: ReadOnlyCore[Any], key: bytes, value: R, frame: Frame
    ) -> Request | None:
        """What ``TXSET`` stores under ``key`` for a miss's ``value`` (data bound to the key,
        interval, snapshot, tags), or ``None`` when nothing may be stored."""
        if transaction.uncached:
            return None  # it fell back to an unpinned snapshot: its reads have no timestamp
        if transaction.failed:
            return None  # a statement failed (and the function caught it): nothing is stored
        if transaction.catalog_moved:
            return None  # its tags may describe another catalog than the one it ran with
        try:
            data = transaction.cache.serializer.dumps(value, key=key)
        except UnsupportedValue as refused:
            raise UnsupportedValue(f"{self.keys.name} returned {refused}") from None
        snapshot = frame.snapshot
        if snapshot is None:
            snapshot = transaction.reference_point()
            if snapshot is None:
                return None
        # Without consistency a value may be built from stale nested values, so it claims
        # only "from the snapshot it was computed at until invalidated".
        if transaction.cache.mode == "no_consistency":
            return data, snapshot, None, snapshot, sorted(frame.tags)
        return data, frame.lo, frame.hi, snapshot, sorted(frame.tags)

    def _defer_store(
        self,
        transaction: ReadOnlyCore[Any],
        node: NodeClient,
        key: bytes,
        request: Request,
        frame: Frame,
    ) -> bool:
        """Whether the store of ``frame``'s value must wait for a pin to verify the catalog
        its queries ran with (an agent without DDL triggers): it is then queued, and stored
        as some transaction of the cache ends (:mod:`txcache._pending_stores`)."""
        verification = transaction.store_verification(frame)
        if verification is None:
            return False
        position, fingerprint = verification
        record = functools.partial(self._count_store, transaction.cache.mode)
        pending = PendingStore(node, key, request, position, fingerprint, record, time.monotonic())
        transaction.cache.pending_stores.add(pending)
        return True

    def _stored(self, transaction: ReadOnlyCore[Any], outcome: str | None) -> None:
        """Count a store's outcome (``None``: the node is down or refused it)."""
        self._count_store(transaction.cache.mode, outcome)

    def _count_store(self, mode: str, outcome: str | None) -> None:
        """Count a store's outcome under the cache's ``mode``."""
        self.stats.record_insert(outcome or "failed")
        if outcome == "nondeterministic" and mode != "no_consistency":
            log.warning(
                "%s returned a different value for the same arguments at the same database "
                "state: is it deterministic?",
                self.keys.name,
            )


def mixed_error(name: str, *, function_is_async: bool) -> TransactionError:
    """A cacheable function called in a transaction of the other kind: its queries would
    run through the wrong API (a sync function cannot await, an async one's awaits would
    get lists)."""
    if function_is_async:
        return TransactionError(
            f"{name} is an async cacheable function: call it inside `async with "
            "cache.read_only()` (or `read_write()`) of an async cache (txcache.connect_async), "
            "not in a sync transaction"
        )
    return TransactionError(
        f"{name} is a sync cacheable function: in an async transaction (`async with "
        "cache.read_only()`) cacheable functions must be `async def`"
    )


def read_only_invalidation() -> TransactionError:
    """A read-only transaction was asked to invalidate: it cannot write."""
    return TransactionError(
        "a read-only transaction cannot invalidate: call invalidate() in a read/write "
        "transaction or outside any"
    )
