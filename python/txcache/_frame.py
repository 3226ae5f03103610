"""What one running cacheable function has read: the data its result depends on.

Every cache hit and every query result is recorded in every frame on the stack (paper §6.3):
an inner function's interval can be wider than its caller's, never narrower.
"""

from __future__ import annotations

from collections.abc import Iterable

from txcache._protocol import Interval

__all__ = ["Frame"]


class Frame:
    """The cache reads (intersected interval), the tags and the database snapshot of one
    cacheable call in progress."""

    __slots__ = ("function", "hi", "independent_of", "lo", "snapshot", "tags", "texts")

    def __init__(
        self,
        function: str = "",
        independent_of: frozenset[str] = frozenset(),
        texts: frozenset[str] = frozenset(),
    ) -> None:
        self.function = function
        """The qualified name of the function being computed."""
        self.texts = texts
        """The call's string arguments (positional and keyword) and the strings inside its
        containers: what its key names that a query may take a schema or table name from
        (``txcache.sqlalchemy``'s check of a ``schema_translate_map``)."""
        self.independent_of = independent_of
        """The key contexts its keys leave out (``@cacheable(independent_of=...)``): what it
        computes must not depend on them."""
        self.lo = 0
        """The largest ``lo`` of the cached values read."""
        self.hi: int | None = None
        """The smallest ``hi`` of the bounded cached values read; ``None``: none read."""
        self.tags: set[str] = set()
        """Tags of the queries run and of the open cached values read."""
        self.snapshot: int | None = None
        """The timestamp of the snapshot its queries ran at; ``None``: no query yet."""

    def read_cached(self, interval: Interval, tags: Iterable[str]) -> None:
        """A cached value valid over ``interval`` was used (``tags``: its tags if open)."""
        self.lo = max(self.lo, interval.lo)
        if interval.open:
            self.tags.update(tags)
        else:
            self.hi = interval.hi if self.hi is None else min(self.hi, interval.hi)

    def read_database(self, snapshot: int, tags: Iterable[str]) -> None:
        """A query read rows named by ``tags`` at ``snapshot``."""
        self.snapshot = snapshot
        self.tags.update(tags)
