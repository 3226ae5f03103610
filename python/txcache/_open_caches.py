"""The caches a process made and has not closed, in the order made: the last is the
default cache of implicit transactions (a cacheable function called outside any block).
Closing it makes the one made before it the default again. A forked child starts with none:
its caches are the parent's. With none open, a framework's provider makes one (Django's
process cache: a worker or a script that calls a cacheable function first)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["OpenCaches"]

C = TypeVar("C")


class OpenCaches(Generic[C]):
    """The open caches of one kind (sync or async), in the order made. Thread-safe."""

    def __init__(self) -> None:
        """None yet; emptied in a forked child."""
        self._lock = threading.Lock()
        self._open: tuple[C, ...] = ()  # replaced whole: read without the lock
        self.provider: Callable[[], C] | None = None
        """What makes the default cache when none is open (a framework's), kept in a
        forked child: the provider makes the child's own."""
        os.register_at_fork(after_in_child=self._forget)

    def opened(self, cache: C) -> None:
        """``cache`` was made: it is the default now."""
        with self._lock:
            self._open = (*self._open, cache)

    def closed(self, cache: C) -> None:
        """``cache`` was closed: the one made before it (still open) is the default again."""
        with self._lock:
            self._open = tuple(each for each in self._open if each is not cache)

    def last(self) -> C | None:
        """The default: the last made and not closed, if any."""
        open_now = self._open
        return open_now[-1] if open_now else None

    def default(self) -> C | None:
        """The cache of implicit transactions: :meth:`last`, else the provider's, if any."""
        last = self.last()
        if last is not None or self.provider is None:
            return last
        return self.provider()

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._open = ()
