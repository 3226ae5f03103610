"""A child process of ours (``txcached``, ``txcache-agent``) that logs to stderr.

It is started, its log is collected in the background, and the caller waits until a log
line says it is ready. Used by the tests, the demo and ``txcache up``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["ManagedProcess", "ProcessStartError", "find_binary"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ProcessStartError(RuntimeError):
    """The process exited or stayed silent instead of becoming ready; the message holds
    its log."""


def find_binary(name: str) -> Path:
    """Locate one of the project's binaries: ``$<NAME>_BIN`` (``TXCACHED_BIN``,
    ``TXCACHE_AGENT_BIN``), this checkout's build, or ``PATH``."""
    explicit = os.environ.get(name.upper().replace("-", "_") + "_BIN")
    if explicit:
        return Path(explicit)
    checkout = Path(__file__).resolve().parents[2]
    for profile in ("release", "debug"):
        candidate = checkout / "target" / profile / name
        if candidate.is_file():
            return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise ProcessStartError(f"{name} not found: run `make build`, or set its *_BIN variable")


class ManagedProcess:
    """A running child process; a context manager that stops it on exit."""

    def __init__(
        self, command: list[str], ready: re.Pattern[str], start_timeout: float = 15.0
    ) -> None:
        """Start ``command`` and wait until a stderr line matches ``ready``."""
        self.command = command
        self.log: deque[str] = deque(maxlen=5000)
        self.ready_match: re.Match[str] | None = None
        self._ready_pattern = ready
        self._ready = threading.Event()
        env = {**os.environ, "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout):
            self.stop()
            raise ProcessStartError(f"{command[0]} did not become ready:\n{self.log_text()}")

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = _ANSI.sub("", raw.rstrip("\n"))
            self.log.append(line)
            if not self._ready.is_set():
                match = self._ready_pattern.search(line)
                if match:
                    self.ready_match = match
                    self._ready.set()

    def log_text(self) -> str:
        """Everything the process has logged so far (the last 5000 lines)."""
        return "\n".join(self.log)

    def rss_bytes(self) -> int:
        """The process's resident set size, read from /proc."""
        fields = Path(f"/proc/{self.process.pid}/statm").read_text().split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def stop(self, timeout: float = 5.0) -> int:
        """Stop with SIGTERM (SIGKILL after ``timeout`` seconds); returns the exit status."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=1.0)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return self.process.returncode

    def kill(self) -> None:
        """Stop at once with SIGKILL, as a crash would."""
        self.process.kill()
        self.process.wait()
        self.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
