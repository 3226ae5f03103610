"""Every exception txcache raises, in one tree.

Exceptions::

    TxcacheError                  base of every txcache error
     ├── ConfigurationError       a setting is missing or malformed; the message names it
     ├── SetupError               the database cannot be set up (``txcache setup``)
     ├── UncacheableQuery         a query inside a cacheable function cannot be cached
     ├── UnsupportedArgument      a cacheable function got an argument with no canonical key
     │                            (also a ``TypeError``)
     ├── UnsupportedValue         a cacheable function returned what the serializer cannot
     │                            store (also a ``TypeError``)
     └── TransactionError         misuse of a transaction, or a failure it cannot hide
          ├── NoTransaction       a query outside ``read_only()`` / ``read_write()``
          ├── StatementNotAllowed a statement a read-only transaction must not run
          │                       (``COMMIT``, ``SET``, a write, …)
          └── SnapshotUnavailable the snapshot the transaction's data is valid at is gone

A cache node or the agent being down is never an exception: the library falls back to the
database. Database errors are psycopg's own (``psycopg.Error``) and pass through unchanged.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "NoTransaction",
    "SnapshotUnavailable",
    "StatementNotAllowed",
    "TransactionError",
    "TxcacheError",
    "UnsupportedArgument",
    "UnsupportedValue",
]


class TxcacheError(Exception):
    """Base class of every error txcache raises."""


class ConfigurationError(TxcacheError):
    """A setting is missing or malformed; the message names the setting and where it came
    from."""


class UnsupportedArgument(TxcacheError, TypeError):
    """A cacheable function was called with an argument that has no canonical encoding, so
    no cache key can name the call. The message names the function, the parameter and the
    type."""


class UnsupportedValue(TxcacheError, TypeError):
    """A cacheable function returned a value the serializer cannot store; the message names
    the function and the type."""


class TransactionError(TxcacheError):
    """A transaction was misused, or failed in a way the library cannot hide."""


class NoTransaction(TransactionError):
    """A query ran outside any transaction: wrap it in ``cache.read_only()`` or
    ``cache.read_write()``."""


class StatementNotAllowed(TransactionError):
    """A read-only transaction was asked to run a statement that would end or change the
    transaction (``COMMIT``, ``SAVEPOINT``, ``SET TRANSACTION``), change the session
    (``SET``, ``DISCARD``, ``LISTEN``, ``PREPARE``), write (``INSERT``, DDL, ``COPY``), run
    code the library cannot see (``DO``, ``CALL``), or that cannot be parsed. Nothing was
    sent to the database and the transaction goes on; the message names the statement and
    the reason."""


class SnapshotUnavailable(TransactionError):
    """Every snapshot the transaction's data is valid at has been released (the transaction
    outlived its pins' lease, or the pinner sessions died) and no fresh one fits. Retry the
    transaction; a longer ``--pin-lease`` on the agent makes this rarer."""
