"""Whether a block changed its connection's session, seen from the client.

A read/write block's connection goes back to the pool reset, and the full reset costs the
database more than a small write: it plans every prepared statement of the connection
again at its next use (``DISCARD PLANS``). A block whose statements all leave the session
alone (:func:`~txcache._statements.leaves_session_alone`: queries, ``INSERT``, ``UPDATE``,
``DELETE``, ``MERGE``, savepoints) and after which the settings PostgreSQL reports are
unchanged only has its sequences' state forgotten. What a function changes inside without
reporting it is not seen here, as in a read-only transaction (docs/library.md,
"Connections and session state").
"""

from __future__ import annotations

from typing import Any

from txcache._current import Params
from txcache._session import SessionReset
from txcache._statements import leaves_session_alone

__all__ = ["REPORTED_SETTINGS", "SessionWatch", "reported_settings"]

# Settings PostgreSQL reports to the client whenever they change (search_path from version
# 18): read from the connection after each statement (no round trip), they catch a
# function that changes the session (a SET or set_config in its body, which the statement
# check cannot see). is_superuser follows the current role, so it also catches a SET ROLE
# between a superuser and another role; other role changes take a round trip
# (txcache._session.CHECK_CONTEXT).
REPORTED_SETTINGS = (
    "search_path",
    "TimeZone",
    "DateStyle",
    "IntervalStyle",
    "standard_conforming_strings",
    "client_encoding",
    "session_authorization",
    "is_superuser",
)


def reported_settings(connection: Any) -> tuple[bytes | None, ...]:
    """The values of :data:`REPORTED_SETTINGS` the server last reported on ``connection``
    (a psycopg connection, sync or async)."""
    pgconn = connection.pgconn
    return tuple(pgconn.parameter_status(name.encode()) for name in REPORTED_SETTINGS)


class SessionWatch:
    """What a read/write block did to its connection's session: every statement it sends
    is classified before it runs, and the reported settings compared after."""

    def __init__(self, connection: Any) -> None:
        """Start watching ``connection``, whose session is as the pool gave it."""
        self._settings = reported_settings(connection)
        self.changed = False
        """Whether the block may have changed more than its sequences' state."""

    def statement(self, statement: object, params: Params) -> None:
        """``statement`` is about to run."""
        if not self.changed and not leaves_session_alone(statement, params):
            self.changed = True

    def unclassified(self) -> None:
        """Something ran that the watch cannot classify (a ``COPY``, a stream)."""
        self.changed = True

    def ran(self, connection: Any) -> None:
        """A statement has run on ``connection``."""
        if not self.changed and reported_settings(connection) != self._settings:
            self.changed = True

    @property
    def reset(self) -> SessionReset:
        """What the connection needs before it goes back to the pool."""
        return SessionReset.FULL if self.changed else SessionReset.SEQUENCES
