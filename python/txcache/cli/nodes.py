"""``txcache nodes``: list, add and remove the cache nodes that agents started without
``--node`` feed (the table ``txcache.cache_nodes``; docs/agent.md, "Cache nodes that join
and leave"). The active agent applies a change within its ``--membership-interval``, and
libraries follow at their next refresh."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from txcache._membership import (
    MembershipError,
    add_nodes,
    list_nodes,
    remove_nodes,
    slot_known,
)
from txcache.cli._arguments import add_dsn, add_slot

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``nodes`` and its options."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "nodes",
        help="list, add or remove the cache nodes the agent feeds",
        description=(
            "List, add or remove the cache nodes that agents started without --node feed "
            "(the table txcache.cache_nodes, per slot). The agent applies a change within "
            "its --membership-interval (1 s by default): a node added is replayed or reset "
            "before it gets the stream, so it never serves a value it missed the "
            "invalidation of; libraries place keys on the new list at their next refresh."
        ),
    )
    add_dsn(parser)
    add_slot(parser)
    # Each action a parser of its own: its addresses and options may come in any order
    # (``add --dsn D ADDRESS``), which one positional list after the action would refuse.
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    helps = {
        "list": "print the members, one per line",
        "add": "make nodes members (fed, and placed on libraries' rings)",
        "remove": "take nodes out (no longer fed, nor asked by libraries)",
    }
    for action, help_text in helps.items():
        sub = actions.add_parser(action, help=help_text, description=help_text)
        if action != "list":
            sub.add_argument(
                "addresses", nargs="+", metavar="ADDRESS", help="host:port, or rediss://host:port"
            )
        add_dsn(sub, inherited=True)
        add_slot(sub, inherited=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Carry out the action and say what changed; 1 (and why, on stderr) on an error."""
    try:
        if args.action == "list":
            for address in list_nodes(args.dsn, args.slot):
                print(address)
            return 0
        change = add_nodes if args.action == "add" else remove_nodes
        changed = change(args.dsn, args.slot, args.addresses)
        if not slot_known(args.dsn, args.slot):
            print(
                f"txcache nodes: warning: no agent of slot {args.slot!r} is known to this "
                "database (no replication slot and no lease of that name): the agents feed "
                "the nodes of their own --slot; is --slot (TXCACHE_SLOT) right?",
                file=sys.stderr,
            )
    except MembershipError as error:
        print(f"txcache nodes: error: {error}", file=sys.stderr)
        return 1
    adding = args.action == "add"
    done = "added" if adding else "removed"
    unchanged = "unchanged (already a member)" if adding else "unchanged (not a member)"
    for address in dict.fromkeys(given.strip() for given in args.addresses):
        print(f"{address}: {done if address in changed else unchanged}")
    return 0
