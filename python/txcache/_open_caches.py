"""The caches a process made and has not closed, in the order made: the last is the
default cache of implicit transactions (a cacheable function called outside any block).
Closing it makes the one made before it the default again. A forked child starts with none:
its caches are the parent's."""

from __future__ import annotations

import os
import threading
from typing import Generic, TypeVar

__all__ = ["OpenCaches"]

C = TypeVar("C")


class OpenCaches(Generic[C]):
    """The open caches of one kind (sync or async), in the order made. Thread-safe."""

    def __init__(self) -> None:
        """None yet; emptied in a forked child."""
        self._lock = threading.Lock()
        self._open: tuple[C, ...] = ()  # replaced whole: read without the lock
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

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._open = ()
