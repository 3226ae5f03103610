"""Cache nodes that join and leave while everything runs (docs/agent.md, "Cache nodes that
join and leave"), against the real stack: an agent started without ``--node`` feeds the
nodes of ``txcache.cache_nodes``, ``txcache nodes`` changes them, and the library places
keys on the nodes the agent names (``NODES``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

import txcache
from library_fixtures import LibraryStack
from txcache import protocol
from txcache._cache_core import NO_NODES_FED
from txcache.cli import build_parser
from txcache.stack import wait_until


@txcache.cacheable
def item_name(item: int) -> str:
    row = txcache.query_one("SELECT name FROM items WHERE id = %s", (item,))
    assert row is not None
    return str(row[0])


ITEMS = range(1, 21)


@pytest.fixture
def lib(database: str) -> Iterator[LibraryStack]:
    """Two nodes, both in ``txcache.cache_nodes``; the library is given none of its own."""
    with LibraryStack(database, membership="database") as stack:
        yield stack


def nodes_command(lib: LibraryStack, *args: str) -> subprocess.CompletedProcess[str]:
    """``txcache nodes ARGS`` for the stack's database, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "txcache", "nodes", *args, "--dsn", lib.dsn],
        capture_output=True,
        text=True,
        timeout=60,
    )


def agent_nodes(lib: LibraryStack) -> tuple[str, ...]:
    """The agent's ``NODES``."""
    with protocol.connect(lib.agent_address) as agent:
        return agent.run(protocol.nodes())


def ring(lib: LibraryStack) -> list[str]:
    """The nodes the library places keys on now (it follows the agent as a transaction
    begins)."""
    lib.cache.follow_members()
    return [] if lib.cache.ring is None else [node.address for node in lib.cache.ring.nodes]


def follow(lib: LibraryStack, expected: list[str]) -> None:
    """Wait until the agent and the library both name exactly ``expected``."""
    wait_until(
        lambda: list(agent_nodes(lib)) == sorted(expected) and sorted(ring(lib)) == expected,
        f"the agent and the library to name the nodes {expected}",
        timeout=20,
        log=lambda: (
            f"agent: {agent_nodes(lib)}, library: {ring(lib)}\n"
            f"{lib.agent.log_text()[-3000:] if lib.agent else ''}"
        ),
    )


def read_all(lib: LibraryStack, not_before: int | None = None) -> list[str]:
    with lib.cache.read_only(staleness=60, not_before=not_before):
        return [item_name(item) for item in ITEMS]


def hits() -> int:
    return item_name.stats.hits


def test_a_library_without_nodes_caches_on_the_agent_s(lib: LibraryStack) -> None:
    addresses = sorted(lib.node_addresses)
    follow(lib, addresses)
    listed = nodes_command(lib, "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == addresses
    read_all(lib)
    before = hits()
    read_all(lib)
    assert hits() - before == len(ITEMS)


def test_a_node_out_of_the_feed_and_back_serves_nothing_it_missed(lib: LibraryStack) -> None:
    first, second = sorted(lib.node_addresses)
    follow(lib, [first, second])
    read_all(lib)

    left = nodes_command(lib, "remove", first)
    assert left.returncode == 0, left.stderr
    assert left.stdout.strip() == f"{first}: removed"
    follow(lib, [second])
    token = lib.commit("UPDATE items SET name = name || ' v2'")
    with protocol.connect(first) as node:
        assert node.run(protocol.txstatus()).position < token, "out of the feed"

    joined = nodes_command(lib, "add", first)
    assert joined.returncode == 0, joined.stderr
    follow(lib, [first, second])
    lib.caught_up()  # the node is fed again: replayed, or reset
    assert read_all(lib, not_before=token) == [f"item {item} v2" for item in ITEMS]
    before = hits()
    assert read_all(lib, not_before=token) == [f"item {item} v2" for item in ITEMS]
    assert hits() - before == len(ITEMS), "both nodes current again"


def test_a_transaction_keeps_its_ring_when_a_node_leaves_meanwhile(lib: LibraryStack) -> None:
    first, second = sorted(lib.node_addresses)
    follow(lib, [first, second])
    read_all(lib)
    with lib.cache.read_only(staleness=60):
        assert nodes_command(lib, "remove", first).returncode == 0
        follow(lib, [second])  # the removed node's client is closed
        # Its keys now answer as a node that is down: misses, read from the database.
        assert [item_name(item) for item in ITEMS] == [f"item {item}" for item in ITEMS]
    before = hits()
    read_all(lib)
    read_all(lib)
    assert hits() - before >= len(ITEMS), "the second node holds every key now"


def test_a_new_node_joins_and_takes_its_share(lib: LibraryStack) -> None:
    third = lib.start_node().address
    joined = nodes_command(lib, "add", third)
    assert joined.returncode == 0, joined.stderr
    follow(lib, sorted([*lib.node_addresses]))
    lib.caught_up()
    read_all(lib)
    assert int(lib.node_info(third)["keys"]) > 0, "its share of the keys"
    before = hits()
    read_all(lib)
    assert hits() - before == len(ITEMS)
    again = nodes_command(lib, "add", third, third)
    assert again.stdout.strip() == f"{third}: unchanged (already a member)"
    assert again.stderr == ""


def test_nodes_for_a_slot_no_agent_has_used_warns(lib: LibraryStack) -> None:
    """A typo in --slot would add nodes no agent ever feeds."""
    node = lib.start_node().address
    added = nodes_command(lib, "--slot", "txcahce", "add", node)
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == f"{node}: added"
    assert "no agent of slot 'txcahce' is known to this database" in added.stderr


def test_every_node_removed_leaves_the_library_uncached_and_says_so(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    assert lib.cache.uncached_reason is None
    removed = nodes_command(lib, "remove", *lib.node_addresses)
    assert removed.returncode == 0, removed.stderr
    with caplog.at_level(logging.WARNING, logger="txcache"):
        follow(lib, [])
    assert lib.cache.uncached_reason == NO_NODES_FED
    said = [r.getMessage() for r in caplog.records if "feeds no cache node" in r.getMessage()]
    assert said == [f"{NO_NODES_FED}: every call runs against the database, uncached"]
    before = item_name.stats.uncached
    assert read_all(lib) == [f"item {item}" for item in ITEMS]
    assert item_name.stats.uncached - before == len(ITEMS)
    assert nodes_command(lib, "add", *lib.node_addresses).returncode == 0
    follow(lib, sorted(lib.node_addresses))
    assert lib.cache.uncached_reason is None, "cached again"


def test_a_node_is_one_member_however_it_is_written(lib: LibraryStack) -> None:
    """``redis://``, another case or a port with leading zeros name a member already there:
    not added again (the node would get every invalidation twice); remove takes the node's
    rows whatever their form."""
    first, second = lib.node_addresses
    host, port = first.rsplit(":", 1)
    again = nodes_command(lib, "add", f"redis://{host}:{port}", f"{host}:0{port}")
    assert again.stdout.splitlines() == [
        f"redis://{host}:{port}: unchanged (already a member)",
        f"{host}:0{port}: unchanged (already a member)",
    ], again.stderr
    with psycopg.connect(lib.dsn, autocommit=True) as db:  # a row written by hand
        db.execute(
            "INSERT INTO txcache.cache_nodes (slot, address) VALUES ('txcache', %s)",
            (f" redis://{host}:{port}",),
        )
    follow(lib, sorted([first, second]))  # the agent names the node once
    removed = nodes_command(lib, "remove", f"{host}:{port}")
    assert removed.stdout.strip() == f"{host}:{port}: removed"
    follow(lib, [second])


def test_a_row_that_names_no_node_leaves_the_others_in_force(lib: LibraryStack) -> None:
    """A row written by hand that is no address (a port past 65535) is skipped by the
    agent, and the libraries follow the other rows (a NODES they could not read would have
    kept their ring as it was)."""
    first, second = lib.node_addresses
    with psycopg.connect(lib.dsn, autocommit=True) as db:
        db.execute(
            "INSERT INTO txcache.cache_nodes (slot, address) VALUES ('txcache', '127.0.0.1:99999')"
        )
    assert nodes_command(lib, "remove", first).returncode == 0
    follow(lib, [second])
    assert lib.agent is not None
    lib.agent.wait_for_log("names no cache node", "the agent to log the row it skipped")


def test_nodes_refuses_what_it_cannot_do(lib: LibraryStack) -> None:
    bad = nodes_command(lib, "add", "no-port-here")
    assert bad.returncode == 1
    assert "a cache node's address must be host:port" in bad.stderr
    none = nodes_command(lib, "remove")
    assert none.returncode == 2
    assert "the following arguments are required: ADDRESS" in none.stderr
    with psycopg.connect(lib.dsn, autocommit=True) as admin:
        admin.execute("ALTER TABLE txcache.cache_nodes RENAME TO cache_nodes_gone")
        try:
            missing = nodes_command(lib, "list")
        finally:
            admin.execute("ALTER TABLE txcache.cache_nodes_gone RENAME TO cache_nodes")
    assert missing.returncode == 1
    assert "run `txcache setup` again" in missing.stderr


def test_an_agent_with_node_flags_names_them(database: str) -> None:
    with LibraryStack(database) as lib:
        assert agent_nodes(lib) == tuple(lib.node_addresses)
        assert lib.cache.agent is not None
        assert lib.cache.agent.members == tuple(lib.node_addresses)


@pytest.mark.parametrize(
    "argv",
    [
        ["nodes", "add", "--dsn", "D", "a:1", "b:2"],
        ["nodes", "--dsn", "D", "add", "a:1", "b:2"],
    ],
)
def test_nodes_takes_its_options_anywhere(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.action, args.addresses, args.dsn, args.slot) == (
        "add",
        ["a:1", "b:2"],
        "D",
        "txcache",
    )
