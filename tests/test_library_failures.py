"""The library when parts die: a dead cache node, a stalled one, a dead agent. The rule
(docs/library.md, "Failures"): slower, never wrong, never an application error."""

from __future__ import annotations

import os
import signal
import time

import txcache
from conftest import running_agent
from library_fixtures import LibraryStack
from txcache.stack import wait_until

reads: list[int] = []


@txcache.cacheable
def price(item_id: int) -> int:
    reads.append(item_id)
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


def prices(lib: LibraryStack, staleness: float = 60, not_before: int | None = None) -> list[int]:
    with lib.cache.read_only(staleness=staleness, not_before=not_before):
        return [price(item_id) for item_id in range(1, 21)]


def truth(lib: LibraryStack) -> list[int]:
    rows = lib.admin.execute("SELECT price FROM items ORDER BY id").fetchall()
    return [int(row[0]) for row in rows]


def update_all(lib: LibraryStack, delta: int) -> int | None:
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = price + %s", (delta,))
    return tx.commit_timestamp


def test_a_dead_node_means_misses_not_errors(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    assert prices(lib) == truth(lib)
    lib.nodes[0].kill()
    reads.clear()
    unavailable = price.stats.misses["unavailable"]
    assert prices(lib) == truth(lib)
    assert price.stats.misses["unavailable"] - unavailable == 1, "one call finds it dead"
    assert 0 < len(reads) < 20, "only the dead node's keys ran: the live node's were cached"
    reads.clear()
    assert prices(lib) == truth(lib)
    assert reads == [], "the dead node's keys are on the live node while it is down"
    token = update_all(lib, 1)
    assert prices(lib, not_before=token) == truth(lib)


def test_a_node_back_gets_its_keys_back(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    assert prices(lib) == truth(lib)
    lib.nodes[0].kill()
    assert prices(lib) == truth(lib)  # one call finds it dead: its keys move
    lib.restart_node(0)
    lib.caught_up()
    ring = lib.cache.ring
    assert ring is not None
    back = next(node for node in ring.nodes if node.address == lib.node_addresses[0])
    wait_until(back.is_up, "the library's probe to find the node back", timeout=30)
    reads.clear()
    assert prices(lib) == truth(lib)
    assert 0 < len(reads) < 20, "its keys are its own again (it restarted empty)"
    reads.clear()
    assert prices(lib) == truth(lib)
    assert reads == []
    assert int(lib.node_info(lib.node_addresses[0])["keys"]) > 0


def test_a_node_that_stops_reading_is_skipped_after_its_timeout(database: str) -> None:
    with LibraryStack(database, node_timeout=0.3) as lib:
        lib.caught_up()
        lib.fresh_pins()
        assert prices(lib) == truth(lib)
        os.kill(lib.nodes[1].process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert prices(lib) == truth(lib)
            assert time.monotonic() - started < 5, "one timeout, then the node is skipped"
        finally:
            os.kill(lib.nodes[1].process.pid, signal.SIGCONT)


def test_a_dead_agent_means_the_database_answers(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    assert prices(lib) == truth(lib)
    running_agent(lib).kill()
    token = update_all(lib, 5)
    assert token is not None, "a WAL position stands in for the commit LSN"
    assert prices(lib, not_before=token) == truth(lib)
    assert prices(lib, staleness=0) == truth(lib)
    # Deliberately idle until the last pins the dead agent listed have expired.
    assert lib.cache.agent is not None
    time.sleep(lib.cache.agent.pin_list_ttl + 0.1)
    assert prices(lib, staleness=60) == truth(lib), "the dead agent's pins are not offered"


def test_the_library_resumes_caching_when_the_agent_returns(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    running_agent(lib).kill()
    update_all(lib, 7)
    assert prices(lib, staleness=0) == truth(lib)
    lib.restart_agent()
    lib.fresh_pins()
    assert prices(lib, staleness=60) == truth(lib)
    reads.clear()
    assert prices(lib, staleness=60) == truth(lib)
    assert reads == [], "cached again"
