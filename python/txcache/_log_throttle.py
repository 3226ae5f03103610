"""Log lines an event may repeat on every transaction — a fall-back without the cache while
the agent is down — at most once per interval, the next line saying how many were held back:
what happened stays in the log without flooding it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["LogThrottle"]


class LogThrottle:
    """At most one line per ``interval`` seconds (of ``clock``) to ``logger``; thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._next = 0.0
        self._held = 0

    def log(self, level: int, message: str, *args: object) -> None:
        """Log ``message % args`` unless a line went out less than the interval ago (then
        count it, for the next line to say)."""
        if not self._logger.isEnabledFor(level):
            return
        now = self._clock()
        with self._lock:
            if now < self._next:
                self._held += 1
                return
            held, self._held, self._next = self._held, 0, now + self._interval
        if held:
            message += f" ({held} more like it since the last such line, not logged)"
        self._logger.log(level, message, *args)
