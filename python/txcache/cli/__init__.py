"""The ``txcache`` command: one sub-command per module of this package.

Each command module has ``add_parser(subparsers)``, which registers its arguments and sets
``run`` (``args -> exit status``) as the parser's ``handler`` default. Exit statuses: 0 for
success, 1 for an error (the message goes to stderr; for ``status``: something is
unreachable), 2 for a usage error (argparse), 3 for ``setup --check`` finding steps to carry
out.

- ``setup`` (:mod:`txcache.cli.setup`): prepare a database.
- ``up`` (:mod:`txcache.cli.up`): run a whole local stack until Ctrl-C.
- ``status`` (:mod:`txcache.cli.status`): what the nodes and the agent report.
- ``check`` (:mod:`txcache.cli.check`): the consistency checker under faults.
- ``nodes`` (:mod:`txcache.cli.nodes`): the cache nodes the agent feeds.
- ``docs`` (:mod:`txcache.cli.docs`): the documentation that messages cite.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from txcache.cli import check, docs, nodes, setup, status, up

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``txcache`` command and all its sub-commands."""
    parser = argparse.ArgumentParser(
        prog="txcache", description="A transactional, automatically invalidated cache."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    setup.add_parser(subparsers)
    up.add_parser(subparsers)
    status.add_parser(subparsers)
    check.add_parser(subparsers)
    nodes.add_parser(subparsers)
    docs.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``txcache`` command with ``argv`` (default: ``sys.argv[1:]``)."""
    try:
        args = build_parser().parse_args(argv)
        status: int = args.handler(args)
    except KeyboardInterrupt:  # Ctrl-C before a command handles it: no traceback
        print("txcache: interrupted", file=sys.stderr)
        return 130
    return status
