"""What each reply of the versioned node commands means to the library, for the sync and
the async node client alike (docs/protocol.md; the commands are :mod:`txcache._protocol`'s).

A node that cannot be reached is *down*: a lookup misses with kind ``unavailable`` and an
insert is skipped, at once, until the retry time. Nothing here raises for a node failure: a
dead node means slower, never an error (docs/library.md).
"""

from __future__ import annotations

import logging

from txcache import _protocol as protocol
from txcache._log_throttle import LogThrottle
from txcache._protocol import Hit, Interval, Miss
from txcache._resp import ReplyError

__all__ = [
    "delete_result",
    "follows_another_database",
    "insert_result",
    "interval_result",
    "lookup_result",
]

log = logging.getLogger("txcache")
# A node refusing requests (full: TOOLARGE, say) refuses many in a row: a line a minute per
# node and command, with how many more there were.
_refusals: dict[tuple[str, str], LogThrottle] = {}


def _log_refusal(address: str, command: str, reply: ReplyError) -> None:
    throttle = _refusals.setdefault((address, command), LogThrottle(log))
    throttle.log(logging.WARNING, "cache node %s refused %s: %s", address, command, reply)


def follows_another_database(reply: object) -> bool:
    """Whether ``reply`` is a node's ``-WRONGDB``: it follows another database's stream than
    this connection declared (``TXDATABASE``), so its ``N`` vouches for nothing this cache
    stores — it is to be treated as down (docs/protocol.md, ``TXDATABASE``)."""
    return isinstance(reply, ReplyError) and str(reply).startswith("WRONGDB")


def lookup_result(address: str, reply: Hit | Miss | ReplyError | None) -> Hit | Miss:
    """What a ``TXGET`` reply means: the hit or miss, ``unavailable`` when the node is down,
    ``error`` (logged) when it refused the request."""
    if reply is None:
        return Miss("unavailable")
    if isinstance(reply, ReplyError):
        _log_refusal(address, "TXGET", reply)
        return Miss("error")
    return reply


def insert_result(address: str, reply: protocol.Stored | ReplyError | None) -> str | None:
    """The outcome of a ``TXSET`` reply; ``None`` when the node is down or refused it."""
    if reply is None:
        return None
    if isinstance(reply, ReplyError):
        _log_refusal(address, "TXSET", reply)
        return None
    return reply.outcome


def delete_result(address: str, reply: int | ReplyError | None) -> int | None:
    """The number of keys a ``DEL`` reply says were removed; ``None`` when the node is down
    or refused it."""
    if isinstance(reply, ReplyError):
        _log_refusal(address, "DEL", reply)
        return None
    return reply


def interval_result(reply: Interval | ReplyError | None) -> Interval | None:
    """The interval of a ``TXINTERVAL`` reply; ``None`` when the node cannot say."""
    if reply is None or isinstance(reply, ReplyError):
        return None
    return reply
