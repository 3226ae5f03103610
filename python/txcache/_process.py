"""The process primitives every launcher shares: a child process of ours (``txcached``,
``txcache-agent``) that logs to stderr, a server process that logs to a file, a free port,
and the one wait loop.

A :class:`ManagedProcess` is started, its log is collected in the background, and the caller
waits until a log line says it is ready. A :class:`ServerProcess` (an application server the
tests, demos and benchmarks drive: RUBiS, the examples) is ready once it answers.
:func:`wait_until` polls any other condition with a timeout whose error names what was
awaited and shows the log that explains why not. :mod:`txcache.stack` builds whole stacks
from these.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

__all__ = [
    "ManagedProcess",
    "ProcessStartError",
    "ServerProcess",
    "WaitTimeout",
    "answers_http",
    "child_pids",
    "find_binary",
    "free_port",
    "paused_processes",
    "tail",
    "wait_until",
]

T = TypeVar("T")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

LOG_TAIL_LINES = 25
"""How many lines of a process's log an error quotes."""


class ProcessStartError(RuntimeError):
    """The process exited or stayed silent instead of becoming ready; the message holds
    its log."""


class WaitTimeout(TimeoutError):
    """A condition :func:`wait_until` polled did not hold in time; the message names it and
    ends with the log that may say why."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port of ``host`` that was free a moment ago (for a process that cannot be told
    to pick one itself and report it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive TCP ports of ``host`` that were free a moment ago
    (for ``--port-base``-style options: node ``i`` on ``base + i``; for servers that must
    keep their ports, such as a primary and its standby that swap roles). They lie below
    the kernel's ephemeral range: an outgoing connection takes its source port from that
    range, and could take a port chosen there before its server binds it (or binds it
    again after a restart)."""
    below = _ephemeral_ports_start()
    chooser = random.Random()
    for _ in range(200):
        base = chooser.randrange(_LOWEST_CHOSEN_PORT, below - count)
        try:
            for port in range(base, base + count):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind((host, port))
        except OSError:
            continue
        return base
    raise OSError(f"no {count} consecutive free ports on {host} below {below}")


_LOWEST_CHOSEN_PORT = 10000
"""Where :func:`free_ports` starts looking: above the ports services usually take."""


def _ephemeral_ports_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unknown)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > _LOWEST_CHOSEN_PORT + 1000 else 32768


def wait_until(
    condition: Callable[[], T | None],
    what: str,
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    log: Callable[[], str] = lambda: "",
) -> T:
    """Poll ``condition`` every ``interval`` seconds until it returns something truthy, and
    return that. After ``timeout`` seconds raise :class:`WaitTimeout` naming ``what`` (as in
    "timed out after 10 s waiting for <what>") followed by ``log()``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = log()
            ending = f"\n{detail}" if detail else ""
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}{ending}")
        time.sleep(interval)


def find_binary(name: str) -> Path:
    """Locate one of the project's binaries: ``$<NAME>_BIN`` (``TXCACHED_BIN``,
    ``TXCACHE_AGENT_BIN``); in a checkout, its build (``target/release``, ``target/debug``);
    installed, the scripts directory of the installation holding this package, where pip put
    the wheel's binaries (a virtualenv's ``bin``, active or not); or ``PATH``."""
    import sysconfig

    variable = name.upper().replace("-", "_") + "_BIN"
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    here = Path(__file__).resolve()
    checkout = here.parents[2]
    if (checkout / "Cargo.toml").is_file():
        for profile in ("release", "debug"):
            candidate = checkout / "target" / profile / name
            if candidate.is_file():
                return candidate
    for scheme in (sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")):
        paths = sysconfig.get_paths(scheme)
        if any(here.is_relative_to(Path(paths[key]).resolve()) for key in ("purelib", "platlib")):
            candidate = Path(paths["scripts"]) / name
            if candidate.is_file():
                return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise ProcessStartError(
        f"{name} not found: in a checkout run `make build`; else install txcache's wheel "
        f"(`pip install txcache`, which installs it), put it on PATH, or set ${variable}"
    )


class ManagedProcess:
    """A running child process; a context manager that stops it on exit."""

    def __init__(
        self,
        command: list[str],
        ready: re.Pattern[str],
        start_timeout: float = 15.0,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        """Start ``command`` and wait until a stderr line matches ``ready``; ``echo`` is
        handed every line as it is read (from the reading thread)."""
        self.command = command
        self.log: deque[str] = deque(maxlen=5000)
        self._echo = echo
        self.ready_match: re.Match[str] | None = None
        self._ready_pattern = ready
        self._ready = threading.Event()
        env = {**os.environ, "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        # Set by a ready line, or by the end of stderr: a process that exits is not waited
        # for until the timeout.
        self._ready.wait(start_timeout)
        if self.ready_match is None:
            self._reader.join(timeout=1.0)  # the last lines, if it exited
            why = "exited" if self.process.poll() is not None else "did not become ready"
            self.stop()
            raise ProcessStartError(f"{command[0]} {why}:\n{self.log_text()}")

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = _ANSI.sub("", raw.rstrip("\n"))
            self.log.append(line)
            if self._echo is not None:
                self._echo(line)
            if not self._ready.is_set():
                match = self._ready_pattern.search(line)
                if match:
                    self.ready_match = match
                    self._ready.set()
        self._ready.set()

    def log_text(self) -> str:
        """Everything the process has logged so far (the last 5000 lines)."""
        return "\n".join(self.log)

    def wait_for_log(self, text: str, what: str | None = None, timeout: float = 10.0) -> None:
        """Wait until the process has logged ``text``: its stderr is read by a thread, so a
        line it wrote a moment ago may not be in :meth:`log_text` yet. Raises
        :class:`WaitTimeout` with the log after ``timeout`` seconds."""
        wait_until(
            lambda: text in self.log_text(),
            what or f"{self.command[0]} to log {text!r}",
            timeout=timeout,
            log=self.log_text,
        )

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

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The process stopped (SIGSTOP) inside the block, continued after it: a hung part,
        whose connections the kernel still accepts while nothing answers."""
        with paused_processes([self.process.pid], self.command[0]):
            yield

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


def child_pids(parent: int) -> list[int]:
    """The live children of process ``parent`` (from each process's ``/proc/PID/stat``)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        if int(stat[stat.rfind(")") + 2 :].split()[1]) == parent:
            children.append(int(entry.name))
    return children


@contextlib.contextmanager
def paused_processes(pids: Sequence[int], what: str) -> Iterator[None]:
    """The processes ``pids`` (``what``, for a timeout's message) stopped (SIGSTOP) inside
    the block, continued after it. The block begins once every thread of each is stopped:
    the signal alone leaves a running thread a moment."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)

    def all_stopped() -> bool:
        return all(_stopped(pid) for pid in pids)

    try:
        wait_until(all_stopped, f"{what} to stop", timeout=10, interval=0.005)
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (or the process is gone)."""
    try:
        return all(
            (task / "stat").read_text().rpartition(")")[2].split()[0] in ("T", "t")
            for task in Path(f"/proc/{pid}/task").iterdir()
        )
    except OSError:
        return True


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, indented; a Rust error's backtrace (printed when
    ``RUST_BACKTRACE`` is set) is cut off so that the error itself shows."""
    kept = text.split("\nStack backtrace:", 1)[0].splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in kept)


def answers_http(url: str) -> bool:
    """Whether ``GET url`` answers ``200`` now (``False`` while nothing listens)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class ServerProcess:
    """A server run as a child process: its output goes to the file ``log``; it is ready
    once :meth:`ready` says so (polled; a server that exits meanwhile, or stays unready for
    ``timeout`` seconds, raises with the end of its log); it stops with ``SIGTERM``, then
    ``SIGKILL``. A context manager: leaving it stops the server. Subclasses say what
    "ready" is and name what they start (:attr:`what`)."""

    what = "the server"
    """How errors name it."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        log: Path,
        timeout: float = 60.0,
        new_session: bool = False,
    ) -> None:
        """Start ``command`` with exactly ``env`` and wait until it is ready.
        ``new_session``: in a process group of its own (signals to the caller's group, a
        Ctrl-C, do not reach it)."""
        self.log = log
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                list(command),
                env=dict(env),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
            )
        try:
            wait_until(self._ready_or_exited, f"{self.what} to answer", timeout=timeout,
                       log=self.output)  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def ready(self) -> bool:
        """Whether the server answers now (a subclass's test)."""
        raise NotImplementedError

    @property
    def pid(self) -> int:
        """The server's process."""
        return self.process.pid

    def output(self) -> str:
        """The end of the server's log."""
        return tail(self.log.read_text(errors="replace"))

    def _ready_or_exited(self) -> bool:
        if self.process.poll() is not None:
            raise ProcessStartError(
                f"{self.what} exited ({self.process.returncode}):\n{self.output()}"
            )
        return self.ready()

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server: ``SIGTERM`` (it shuts down cleanly), ``SIGKILL`` after
        ``timeout`` seconds."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
