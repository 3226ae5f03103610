"""Read-your-writes within a context: every write a thread or an asyncio task commits makes
its later read-only transactions see it, with no token passed by hand (docs/library.md,
"Commit and read-your-writes").

The state is a context variable — a thread's, or a task's (asyncio copies the context into
each task, so what a task writes stays its own). A write is recorded as it commits, and its
token is asked only when a read-only transaction of the same context begins (:func:`floor`),
once:

- a read/write transaction of the library that committed a write (:func:`record`): its
  ``commit_timestamp`` (the agent's ``COMMITLSN``);
- a write committed outside any txcache transaction that an integration reports
  (:func:`wrote_elsewhere`: Django's own connection): the cache's ``timestamp()``, the WAL
  insert position, at or after every commit so far.

Tokens from elsewhere — a client's cookie, a ``Cache.timestamp()`` — join with
:func:`advance`; a request-scoped integration gives each request a state of its own
(:func:`scope`) and hands the client :func:`floor` at its end. Within a scope, the writes
of every task (and thread) the request started are shared too (:class:`_Shared`): a
request that writes in ``asyncio.gather`` hands its client a token covering them, and its
reads after them see them. Tokens only grow: a commit that wrote nothing keeps the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

__all__ = [
    "Pending",
    "Written",
    "advance",
    "floor",
    "floor_async",
    "reaches",
    "record",
    "scope",
    "written",
    "wrote_elsewhere",
]


class Pending(Protocol):
    """A committed write whose token is not known yet."""

    def settled_timestamp(self) -> int | None:
        """Its token, asked now from synchronous code; ``None`` when that is not possible
        here (an async source): it stays pending."""

    async def settled_timestamp_async(self) -> int | None:
        """Its token, asked now from a coroutine."""


@dataclass(frozen=True)
class _Elsewhere:
    """Writes committed outside the library: any WAL position taken after them covers
    them."""

    timestamp: Callable[[], int]
    """A sync cache's ``timestamp()``, or what calls it."""

    def settled_timestamp(self) -> int | None:
        return self.timestamp()

    async def settled_timestamp_async(self) -> int | None:
        return await asyncio.to_thread(self.timestamp)


@dataclass(frozen=True)
class _State:
    token: int | None = None
    """The newest token known (asked, or advanced to)."""
    pending: Pending | None = None
    """The last write committed since, its token not asked yet."""


_EMPTY = _State()
Written = Mapping[str, _State]
"""What a context has written, per cache DSN (tokens are positions in one cluster's WAL,
meaningless in another's); the DSNs that reach one database are read together
(:func:`reaches`)."""
_NOTHING: Written = MappingProxyType({})
_written: contextvars.ContextVar[Written] = contextvars.ContextVar(
    "txcache_written", default=_NOTHING
)


class _Shared:
    """The writes committed in one request's scope by any task or thread of it: those copy
    the request's context, so what they record in their own state the request's never
    sees. Each pending write is asked for its token once, by the first read (or response)
    that needs it; the largest token stands (concurrent commits end in any order).
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, int] = {}
        self._pending: dict[str, list[Pending]] = {}

    def add(self, database: str, pending: Pending) -> None:
        """A write to ``database`` committed in the scope."""
        with self._lock:
            self._pending.setdefault(database, []).append(pending)

    def taken(self, database: str) -> tuple[int | None, list[Pending]]:
        """The token so far and the writes not yet asked (now the caller's to ask)."""
        with self._lock:
            return self._tokens.get(database), self._pending.pop(database, [])

    def settled(self, database: str, asked: list[int | None], left: list[Pending]) -> int | None:
        """Fold the tokens ``asked`` in; put back the writes ``left`` (not askable here:
        async writes, read from sync code). The token as of now."""
        with self._lock:
            known = [token for token in (self._tokens.get(database), *asked) if token is not None]
            if known:
                self._tokens[database] = max(known)
            if left:
                self._pending.setdefault(database, []).extend(left)
            return self._tokens.get(database)


_shared: contextvars.ContextVar[_Shared | None] = contextvars.ContextVar(
    "txcache_shared_writes", default=None
)


def _share(database: str, pending: Pending) -> None:
    shared = _shared.get()
    if shared is not None:
        shared.add(database, pending)


def _shared_floor(database: str) -> int | None:
    """The token of the scope's writes to ``database`` by every task of it (sync)."""
    shared = _shared.get()
    if shared is None:
        return None
    token, pending = shared.taken(database)
    asked = [write.settled_timestamp() for write in pending]
    left = [write for write, got in zip(pending, asked, strict=True) if got is None]
    return shared.settled(database, [token, *asked], left)


async def _shared_floor_async(database: str) -> int | None:
    """:func:`_shared_floor` for a coroutine (pending tokens awaited)."""
    shared = _shared.get()
    if shared is None:
        return None
    token, pending = shared.taken(database)
    asked = [await write.settled_timestamp_async() for write in pending]
    return shared.settled(database, [token, *asked], [])


RunningDatabase = tuple[str, int, str]
"""A database on a running server: its cluster's system identifier, its oid and when the
server started (two running copies of one cluster's files share the first two, never
their WAL)."""

_reached: Mapping[str, RunningDatabase] = MappingProxyType({})
"""The database each DSN reaches, as its cache's sessions found it. Replaced whole, never
changed in place, so that readers need no lock."""
_reached_lock = threading.Lock()


def reaches(dsn: str, database: RunningDatabase) -> None:
    """A cache on ``dsn`` reaches ``database``: the writes recorded under every DSN that
    reaches it count for each (two caches of one database — a tenant's ``options=-c
    search_path=…``, ``localhost`` and ``127.0.0.1`` — see each other's writes). Cheap when
    already known: called as every transaction learns its session."""
    global _reached
    if _reached.get(dsn) == database:
        return
    with _reached_lock:
        _reached = MappingProxyType({**_reached, dsn: database})


def _alike(dsn: str) -> list[str]:
    """``dsn`` and every other DSN known to reach its database."""
    reached = _reached
    database = reached.get(dsn)
    if database is None:
        return [dsn]
    return [dsn, *(other for other, its in reached.items() if its == database and other != dsn)]


def _newest(*tokens: int | None) -> int | None:
    known = [token for token in tokens if token is not None]
    return max(known) if known else None


def _with(database: str, state: _State) -> None:
    _written.set(MappingProxyType({**_written.get(), database: state}))


def _of(database: str, written: Written | None = None) -> _State:
    return (_written.get() if written is None else written).get(database, _EMPTY)


def record(commit: Any) -> None:
    """``commit`` (a read/write transaction, sync or async, a :class:`Pending` with a
    ``cache``) just committed: if it wrote, the context's later reads of its database must
    see it."""
    if commit.wrote:
        database = commit.cache.settings.dsn
        _with(database, _State(_of(database).token, commit))
        _share(database, commit)


def wrote_elsewhere(database: str, timestamp: Callable[[], int]) -> None:
    """A write committed in this context outside any txcache transaction (an integration's
    own connection) on ``database`` (a cache's DSN): the context's later reads must see it.
    ``timestamp`` — a sync cache's ``timestamp()``, the WAL position — is called only when
    a read needs the token, once per run of such writes: that position covers them all."""
    state = _of(database)
    if not isinstance(state.pending, _Elsewhere):
        elsewhere = _Elsewhere(timestamp)
        _with(database, _State(state.token, elsewhere))
        _share(database, elsewhere)


def advance(database: str, token: int | None) -> None:
    """Make the context's later reads of ``database`` (a cache's DSN) see everything up to
    ``token`` too."""
    if token is None:
        return
    state = _of(database)
    if state.token is None or token > state.token:
        _with(database, _State(token, state.pending))


def written() -> Written:
    """The context's writes so far (no I/O): taken as a read-only transaction is created,
    whose :func:`floor` covers them — not those committed between its creation and start."""
    return _written.get()


def floor(database: str, written: Written | None = None) -> int | None:
    """The token of the context's writes to ``database`` (a cache's DSN, and every DSN
    that reaches the same database), as of ``written``, else now, for a sync read-only
    transaction beginning: asks a pending write's token first (a round trip). ``None``:
    the context wrote nothing there."""
    return _newest(*(_floor_of(dsn, written) for dsn in _alike(database)))


async def floor_async(database: str, written: Written | None = None) -> int | None:
    """:func:`floor` for an async read-only transaction (a pending token is awaited)."""
    return _newest(*[await _floor_of_async(dsn, written) for dsn in _alike(database)])


def _floor_of(dsn: str, written: Written | None) -> int | None:
    state = _of(dsn, written)
    own = state.token
    if state.pending is not None:
        own = _settle(dsn, state, state.pending.settled_timestamp())
    return _newest(own, _shared_floor(dsn))


async def _floor_of_async(dsn: str, written: Written | None) -> int | None:
    state = _of(dsn, written)
    own = state.token
    if state.pending is not None:
        own = _settle(dsn, state, await state.pending.settled_timestamp_async())
    return _newest(own, await _shared_floor_async(dsn))


def _settle(database: str, state: _State, asked: int | None) -> int | None:
    if asked is None:  # not known here (an async write, read from sync code): kept
        return state.token
    token = asked if state.token is None else max(asked, state.token)
    if _of(database) is state:  # not replaced meanwhile (a write committed in between)
        _with(database, _State(token, None))
    return token


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Run the block with nothing written yet, and the context's state back afterwards:
    one web request (which then advances to its client's token: :func:`advance`). The
    tasks and threads it starts share their writes with it (:class:`_Shared`)."""
    reset = _written.set(_NOTHING)
    reset_shared = _shared.set(_Shared())
    try:
        yield
    finally:
        _shared.reset(reset_shared)
        _written.reset(reset)
