"""Connections to hot standbys that never wait on the server longer than ``replica_timeout``.

A standby that hangs — stopped, its host gone, a network that drops packets — still has
its socket accepted by the kernel, so a query sent to it would wait forever and hold the
application's transaction with it. Every wait for the server on these connections (a
query, a ``BEGIN``, a ``ROLLBACK``, a pipeline's sync) ends after ``answer_timeout``
seconds: the connection is then closed, its state being unknown, and
:class:`StandbyNotAnswering` raised — an ``OperationalError``, which the read path treats
as a standby that failed: the transaction goes on on the primary and the standby is
down until a probe finds it answering (:class:`~txcache._replicas.ReplicaHealth`).

Its sync twin is generated from it (``tools/async_to_sync.py``).
"""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg.abc import PQGen

__all__ = ["AsyncReplicaConnection", "StandbyNotAnswering"]

RV = TypeVar("RV")

WAIT_INTERVAL = 0.1
"""Seconds between psycopg's checks for an interrupt while it waits (its own default)."""


class StandbyNotAnswering(psycopg.OperationalError):
    """A standby gave no answer within ``replica_timeout``; its connection is closed."""


class AsyncReplicaConnection(psycopg.AsyncConnection[Any]):
    """A connection to a hot standby whose every wait for the server is bounded."""

    answer_timeout: float | None = None
    """Seconds the server may take to answer (``None``: no bound); the cache's pool sets
    it to ``replica_timeout`` on each connection it makes."""

    async def wait(
        self, gen: PQGen[RV], interval: float = WAIT_INTERVAL, timeout: float | None = None
    ) -> RV:
        """psycopg's wait for ``gen``, at most ``answer_timeout`` seconds unless the caller
        asks for its own ``timeout``."""
        bound = self.answer_timeout if timeout is None else timeout
        try:
            return await super().wait(gen, interval, bound)
        except psycopg.OperationalError as error:
            if bound is None or not _timed_out(error) or timeout is not None:
                raise
            self.pgconn.finish()  # mid-protocol: never usable again
            raise StandbyNotAnswering(
                f"no answer from the standby within {bound:g} s (replica_timeout): "
                "it may be hung or overloaded; its connection is closed"
            ) from None


def _timed_out(error: psycopg.OperationalError) -> bool:
    """Whether ``error`` is psycopg's own "the wait's timeout expired" (a private class:
    matched by name, so a psycopg that renames it fails the standby tests, not silently)."""
    return type(error).__name__ == "_WaitTimeout"
