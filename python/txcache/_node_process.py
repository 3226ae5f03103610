"""Start and stop a ``txcached`` cache node as a child process.

Used by the tests, the demo and (later) ``txcache up``. The node is started on a port it
picks itself (``--port 0``); its first log line names the address, which is read back here,
so two nodes never race for a port.
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

__all__ = ["NodeProcess", "NodeStartError", "find_txcached"]

_LISTENING = re.compile(r"txcached listening address=(?P<host>[\d.:\[\]a-f]+):(?P<port>\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class NodeStartError(RuntimeError):
    """The node exited or stayed silent instead of listening; the message holds its log."""


def find_txcached() -> Path:
    """Locate the ``txcached`` binary: ``$TXCACHED_BIN``, this checkout's build, or ``PATH``."""
    explicit = os.environ.get("TXCACHED_BIN")
    if explicit:
        return Path(explicit)
    checkout = Path(__file__).resolve().parents[2]
    for profile in ("release", "debug"):
        candidate = checkout / "target" / profile / "txcached"
        if candidate.is_file():
            return candidate
    found = shutil.which("txcached")
    if found:
        return Path(found)
    raise NodeStartError(
        "txcached not found: run `make build`, or set TXCACHED_BIN to the binary's path"
    )


class NodeProcess:
    """One running ``txcached``; a context manager that stops it on exit."""

    def __init__(self, *args: str, binary: Path | None = None, start_timeout: float = 10.0) -> None:
        """Start the node with extra command-line ``args`` and wait until it listens."""
        self.binary = binary or find_txcached()
        self.log: deque[str] = deque(maxlen=2000)
        self._ready = threading.Event()
        self.host = ""
        self.port = 0
        command = [str(self.binary), "--port", "0", *args]
        env = {**os.environ, "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout):
            self.stop()
            raise NodeStartError(f"txcached did not start listening:\n{self.log_text()}")

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = _ANSI.sub("", raw.rstrip("\n"))
            self.log.append(line)
            match = _LISTENING.search(line)
            if match and not self._ready.is_set():
                self.host, self.port = match["host"], int(match["port"])
                self._ready.set()

    def log_text(self) -> str:
        """Everything the node has logged so far (the last 2000 lines)."""
        return "\n".join(self.log)

    def rss_bytes(self) -> int:
        """The node's resident set size, read from /proc."""
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

    def __enter__(self) -> NodeProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
