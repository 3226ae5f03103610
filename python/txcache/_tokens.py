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
(:func:`scope`) and hands the client :func:`floor` at its end. Tokens only grow: a commit
that wrote nothing keeps the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
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
"""What a context has written, per database (by the caches' DSN: tokens are positions in
one cluster's WAL, meaningless in another's)."""
_NOTHING: Written = MappingProxyType({})
_written: contextvars.ContextVar[Written] = contextvars.ContextVar(
    "txcache_written", default=_NOTHING
)


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


def wrote_elsewhere(database: str, timestamp: Callable[[], int]) -> None:
    """A write committed in this context outside any txcache transaction (an integration's
    own connection) on ``database`` (a cache's DSN): the context's later reads must see it.
    ``timestamp`` — a sync cache's ``timestamp()``, the WAL position — is called only when
    a read needs the token, once per run of such writes: that position covers them all."""
    state = _of(database)
    if not isinstance(state.pending, _Elsewhere):
        _with(database, _State(state.token, _Elsewhere(timestamp)))


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
    """The token of the context's writes to ``database`` (as of ``written``, else now), for
    a sync read-only transaction beginning: asks a pending write's token first (a round
    trip). ``None``: the context wrote nothing there."""
    state = _of(database, written)
    if state.pending is None:
        return state.token
    return _settle(database, state, state.pending.settled_timestamp())


async def floor_async(database: str, written: Written | None = None) -> int | None:
    """:func:`floor` for an async read-only transaction (a pending token is awaited)."""
    state = _of(database, written)
    if state.pending is None:
        return state.token
    return _settle(database, state, await state.pending.settled_timestamp_async())


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
    one web request (which then advances to its client's token: :func:`advance`)."""
    reset = _written.set(_NOTHING)
    try:
        yield
    finally:
        _written.reset(reset)
