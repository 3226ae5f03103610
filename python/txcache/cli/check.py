"""``txcache check``: the consistency checker (docs/check.md)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from txcache.check import CheckOptions, run_check
from txcache.check.faults import (
    FAILOVER_KINDS,
    FAULT_KINDS,
    PROMOTE_KINDS,
    SPARE_KINDS,
    STANDBY_KINDS,
    default_fault_kinds,
    fault_kinds_problem,
)
from txcache.check.report import as_json, as_markdown
from txcache.check.stack import CheckRefused
from txcache.cli._arguments import share

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``check`` and its options."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="prove every read-only transaction saw one commit point, under faults",
        description=(
            "Start a fresh stack, run concurrent read/write and read-only transactions "
            "through the library while injecting faults, then judge every read-only "
            "transaction against the exact commit history. A no_consistency control phase "
            "must show anomalies. Exit status 0 when the check passed, 1 otherwise."
        ),
    )
    defaults = CheckOptions()
    parser.add_argument(
        "--duration",
        type=float,
        default=defaults.duration,
        help="seconds of the checked phase (default: %(default)s)",
    )
    parser.add_argument(
        "--control-duration",
        type=float,
        default=defaults.control_duration,
        help="seconds of the no_consistency control phase; 0 skips it (default: %(default)s)",
    )
    parser.add_argument(
        "--faults",
        default=None,
        help=f"comma-separated fault kinds, '' for none (default: every kind the stack allows: "
        f"{','.join(FAULT_KINDS)}; with --standby-agents {','.join(FAILOVER_KINDS)} instead of "
        f"agent-kill,slot-lost; with --standby-postgres {','.join(PROMOTE_KINDS)} instead of "
        f"slot-lost; with --standby-reads or --decode-on-standby also "
        f"{','.join(STANDBY_KINDS)}; with --primary-spare {','.join(SPARE_KINDS)} instead of "
        f"{','.join(PROMOTE_KINDS)})",
    )
    parser.add_argument(
        "--standby-agents",
        type=int,
        default=defaults.standby_agents,
        help="agents standing by beside the active one, each reaching PostgreSQL through a "
        "proxy of its own, for the agent-failover-* faults (default: %(default)s)",
    )
    parser.add_argument(
        "--standby-postgres",
        action="store_true",
        help="run PostgreSQL (17 or later) as a primary and its synchronous streaming standby "
        "(asynchronous with --primary-spare), "
        "every DSN naming both and the slots failover slots, for the promote-* faults",
    )
    parser.add_argument(
        "--standby-reads",
        action="store_true",
        help="with --standby-postgres: the agent pins the standby too and the library runs "
        "misses there (replicas), for the standby-* faults",
    )
    parser.add_argument(
        "--decode-on-standby",
        action="store_true",
        help="with --standby-postgres: the agent decodes the stream on the standby, the "
        "primary named after it (--decode-from naming both: the stream moves when its server "
        "fails), for the standby-* faults on the stream's server",
    )
    parser.add_argument(
        "--primary-spare",
        action="store_true",
        help="with --decode-on-standby: the primary keeps a spare slot the stream moves to "
        "while the standby is down (--decode-primary-slot spare), the standby then "
        "asynchronous, for the standby-down fault",
    )
    parser.add_argument(
        "--fault-every",
        type=float,
        default=defaults.fault_every,
        help="seconds between faults (default: %(default)s)",
    )
    parser.add_argument(
        "--readers",
        type=int,
        default=defaults.readers,
        help="read-only threads (default: %(default)s)",
    )
    parser.add_argument(
        "--writers",
        type=int,
        default=defaults.writers,
        help="read/write threads (default: %(default)s)",
    )
    parser.add_argument(
        "--tenant-readers",
        type=int,
        default=defaults.tenant_readers,
        help="read-only threads of each other tenant (by search_path, by role) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--tenant-writers",
        type=int,
        default=defaults.tenant_writers,
        help="read/write threads of each other tenant (default: %(default)s)",
    )
    parser.add_argument(
        "--schema-share",
        type=share,
        default=defaults.schema_share,
        help="share of write transactions that are schema operations, 0 for none "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--ddl-tracking",
        choices=("triggers", "fingerprint"),
        default=defaults.ddl_tracking,
        help="how schema changes reach the caches: the DDL event triggers, or none (dropped "
        "after setup) and the agent's --ddl-tracking fingerprint (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=defaults.seed, help="workload seed (default: %(default)s)"
    )
    parser.add_argument("--report", type=Path, help="also write the Markdown report here")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.set_defaults(handler=run)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a CI job's timeout) as Ctrl-C: the check stops every process it
    started and removes its data, instead of leaving them to init."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    """Run the check; print the report; 0 if it passed."""
    several_agents, standby_postgres = args.standby_agents > 0, args.standby_postgres
    if args.faults is None:
        kinds = default_fault_kinds(
            several_agents=several_agents,
            standby_postgres=standby_postgres,
            standby_reads=args.standby_reads,
            decode_on_standby=args.decode_on_standby,
            primary_spare=args.primary_spare,
        )
    else:
        kinds = tuple(kind for kind in args.faults.split(",") if kind)
    problem = fault_kinds_problem(
        kinds,
        several_agents=several_agents,
        standby_postgres=standby_postgres,
        primary_spare=args.primary_spare,
    )
    if problem is None and args.ddl_tracking == "fingerprint" and args.standby_reads:
        problem = (
            "--standby-reads needs the DDL event triggers (the agent's --standby does): "
            "leave out --ddl-tracking fingerprint"
        )
    if problem is not None:
        print(f"txcache check: {problem}", file=sys.stderr)
        return 2
    options = CheckOptions(
        duration=args.duration,
        control_duration=args.control_duration,
        faults=kinds,
        fault_every=args.fault_every,
        readers=args.readers,
        writers=args.writers,
        tenant_readers=args.tenant_readers,
        tenant_writers=args.tenant_writers,
        seed=args.seed,
        schema_share=args.schema_share,
        standby_agents=args.standby_agents,
        standby_postgres=args.standby_postgres,
        ddl_tracking=args.ddl_tracking,
        standby_reads=args.standby_reads,
        decode_on_standby=args.decode_on_standby,
        primary_spare=args.primary_spare,
    )
    logging.basicConfig(format="  %(name)s: %(message)s", level=logging.WARNING)
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)  # restarts are on purpose
    try:
        with _terminate_as_interrupt():
            report = run_check(
                options, progress=lambda line: print(line, file=sys.stderr, flush=True)
            )
    except CheckRefused as refused:
        print(f"txcache check: {refused}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("txcache check: interrupted; every part it started is stopped", file=sys.stderr)
        return 130
    command = "txcache check " + shlex.join(sys.argv[2:] if len(sys.argv) > 2 else [])
    markdown = as_markdown(report, command.strip())
    print(markdown)
    if args.report:
        args.report.write_text(markdown)
    if args.json:
        args.json.write_text(as_json(report))
    return 0 if report.passed else 1
