"""A CPU quota on the database server, by the cgroup cpu controller, so that PostgreSQL is
the bottleneck on a machine with few cores — as in the paper's topology, where the database
ran on a machine of its own and the cache's job was to take work off it.

The quota is a CFS bandwidth limit: ``cores`` CPU-seconds per second, enforced per 100 ms
period. cgroup v2 (``cpu.max``) is used where its cpu controller is enabled, else v1
(``cpu.cfs_quota_us``). Moving processes between cgroups needs root.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from _cpu import postmaster_pid

from txcache.stack import child_pids

__all__ = ["DatabaseCpuQuota", "Throttling"]

_ROOT = Path("/sys/fs/cgroup")
_PERIOD_US = 100_000


@dataclass(frozen=True)
class Throttling:
    """How often the quota held the database back, from the cgroup's ``cpu.stat``."""

    periods: int
    """Enforcement periods in which the group ran."""
    throttled: int
    """Periods in which it used up its quota and waited."""
    throttled_s: float
    """Time it spent waiting for the next period."""

    def __sub__(self, earlier: Throttling) -> Throttling:
        return Throttling(
            self.periods - earlier.periods,
            self.throttled - earlier.throttled,
            self.throttled_s - earlier.throttled_s,
        )

    def as_dict(self) -> dict[str, Any]:
        """For a JSON report."""
        return {"periods": self.periods, "throttled": self.throttled, "s": self.throttled_s}


def _hierarchy() -> tuple[Path, bool]:
    """Where the cpu controller is mounted and whether it is cgroup v2."""
    controllers = _ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return _ROOT, True
    if (_ROOT / "cpu" / "cpu.cfs_quota_us").exists():
        return _ROOT / "cpu", False
    raise SystemExit(
        "--database-cpu needs the cgroup cpu controller (cgroup v2 with 'cpu' in "
        f"{controllers}, or v1 mounted at {_ROOT / 'cpu'}); neither is available here"
    )


class DatabaseCpuQuota:
    """A cgroup limited to ``cores`` CPUs holding the database server's processes (the
    postmaster and every child; backends forked later inherit the group). Removed, with
    its processes moved back, on exit."""

    def __init__(self, cores: float, name: str = "txcache-bench-database") -> None:
        """Create the group with its quota."""
        if cores <= 0:
            raise SystemExit(f"--database-cpu must be positive, not {cores}")
        if os.geteuid() != 0:
            raise SystemExit("--database-cpu moves PostgreSQL into a cgroup: run as root")
        self.cores = cores
        self.root, self.v2 = _hierarchy()
        self.group = self.root / name
        if self.v2:
            (self.root / "cgroup.subtree_control").write_text("+cpu")
        self.group.mkdir(exist_ok=True)
        quota = round(cores * _PERIOD_US)
        if self.v2:
            (self.group / "cpu.max").write_text(f"{quota} {_PERIOD_US}")
        else:
            (self.group / "cpu.cfs_period_us").write_text(str(_PERIOD_US))
            (self.group / "cpu.cfs_quota_us").write_text(str(quota))

    def confine(self, server: Any) -> int:
        """Move ``server``'s postmaster and its live children into the group; how many
        processes moved. Call again after a restart of the server."""
        postmaster = postmaster_pid(server)
        children = child_pids(postmaster)
        for pid in [postmaster, *children]:
            with suppress(OSError):  # exited meanwhile
                (self.group / "cgroup.procs").write_text(str(pid))
        return 1 + len(children)

    def throttling(self) -> Throttling:
        """The group's throttling so far."""
        stat = dict(
            line.split() for line in (self.group / "cpu.stat").read_text().splitlines() if line
        )
        waited = int(stat["throttled_usec"]) / 1e6 if self.v2 else int(stat["throttled_time"]) / 1e9
        return Throttling(int(stat["nr_periods"]), int(stat["nr_throttled"]), waited)

    def close(self) -> None:
        """Move every process back to the root group and remove the group."""
        with suppress(FileNotFoundError):
            for pid in (self.group / "cgroup.procs").read_text().split():
                with suppress(OSError):  # exited meanwhile
                    (self.root / "cgroup.procs").write_text(pid)
        with suppress(OSError):
            self.group.rmdir()

    def __enter__(self) -> DatabaseCpuQuota:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
