"""What a read/write transaction knows of its commit, for the sync and the async driver
alike: the one-round-trip ``COMMIT`` that also learns the transaction id and the WAL
position after it, what ends a block, and :class:`CommitRecord` — the commit timestamp
(the ``not_before`` token of read-your-writes) and when it must be asked.
"""

from __future__ import annotations

from typing import Any, Literal

import psycopg

from txcache import _tokens as tokens
from txcache._lsn import WAL_POSITION
from txcache.errors import TransactionError

__all__ = ["COMMIT", "CommitRecord", "end_action", "rolled_back_error"]


# Commit in one round trip, learning the transaction id first. SET CONSTRAINTS ALL
# IMMEDIATE fires the pending deferred triggers now rather than inside COMMIT, so a write of
# theirs assigns the id before it is read (their outcome is the same). A held (WITH HOLD)
# cursor is still run to its end by COMMIT, and can write then: the flag says there is one.
# The WAL position after it is at or after the commit record: a token for the commit when
# the stream decodes none (it only locked rows, or wrote nothing published).
COMMIT = (
    "SET CONSTRAINTS ALL IMMEDIATE; "
    "SELECT pg_current_xact_id_if_assigned()::text, "
    "EXISTS (SELECT FROM pg_cursors WHERE is_holdable); "
    f"COMMIT; {WAL_POSITION}"
)


def end_action(
    status: psycopg.pq.TransactionStatus, *, committing: bool
) -> Literal["commit", "rollback", "none"]:
    """What ends a read/write block whose connection is in ``status``: a commit when the
    block ended normally with its transaction open, a rollback of anything else open."""
    if committing and status == psycopg.pq.TransactionStatus.INTRANS:
        return "commit"
    return "none" if status == psycopg.pq.TransactionStatus.IDLE else "rollback"


def rolled_back_error() -> TransactionError:
    """A read/write block caught a failed statement and went on: nothing was written."""
    return TransactionError(
        "a statement failed inside the read/write block, so the transaction was rolled "
        "back: nothing was written"
    )


class CommitRecord:
    """What a read/write transaction knows of its commit, and when its commit timestamp
    must be asked (sync and async transactions alike)."""

    def __init__(self) -> None:
        self.xid: int | None = None
        """The transaction's id (``pg_current_xact_id()``), known after commit; ``None``
        if it wrote nothing before ``COMMIT``."""
        self._committed = False
        self._timestamp: int | None = None
        self._commit_may_write = False  # COMMIT ran a held cursor: it may have written
        self._after: int | None = None  # the WAL position after the commit

    def _record_commit(self, row: tuple[Any, ...] | None, after: tuple[Any, ...] | None) -> None:
        """:data:`COMMIT`'s rows: the transaction id and whether a held cursor ran, and the
        WAL position after the commit. A commit that wrote becomes the context's
        read-your-writes floor (:mod:`txcache._tokens`)."""
        assert row is not None
        assert after is not None
        xid, holds_cursors = row
        self._after = int(after[0])
        self.xid = None if xid is None else int(xid)
        self._committed = True
        self._commit_may_write = self.xid is None and bool(holds_cursors)
        tokens.record(self)

    @property
    def wrote(self) -> bool:
        """Whether it committed and may have written (it has a commit timestamp)."""
        return self._committed and (self.xid is not None or self._commit_may_write)

    def settled_timestamp(self) -> int | None:
        """The commit timestamp if it can be had synchronously (``None`` otherwise: an
        async transaction not asked yet)."""
        raise NotImplementedError

    async def settled_timestamp_async(self) -> int | None:
        """The commit timestamp, from a coroutine."""
        raise NotImplementedError

    def _after_commit(self) -> int:
        """The WAL position read right after the commit: at or after it, so a token for it
        when the agent has no commit LSN (sound, possibly newer than needed)."""
        assert self._after is not None
        return self._after

    def _timestamp_to_ask(self) -> bool:
        """Whether the commit timestamp is still to be asked (it wrote, and it is not known
        yet); raises before the commit."""
        if not self._committed:
            raise TransactionError("commit_timestamp is known only after the commit")
        return self._timestamp is None and (self.xid is not None or self._commit_may_write)
