"""A forked child (a pre-fork web server's worker, a multiprocessing pool) inherits the
parent's cache, whose connections are the parent's: it starts without a default cache, the
inherited one refuses transactions, and closing it ends nothing of the parent's."""

from __future__ import annotations

import os
from collections.abc import Callable

import txcache
from library_fixtures import LibraryStack


@txcache.cacheable
def price(item_id: int) -> int:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


def test_a_forked_child_leaves_the_parents_connections_alone(lib: LibraryStack) -> None:
    with lib.cache.read_only() as tx:
        assert tx.query_one("SELECT 1") == (1,)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report, close what it inherited, and leave at once
        status = 0 if txcache.default_cache() is None else 1
        lib.cache.close()
        os.write(write, bytes([status]))
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"\x00", "the child found the parent's cache as its default"
    os.close(read)
    os.waitpid(child, 0)
    assert txcache.default_cache() is lib.cache
    with lib.cache.read_only() as tx:  # every pooled session of the parent still works
        assert tx.query_one("SELECT 2") == (2,)
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = price WHERE id = 1")


def refused_in_child(use: Callable[[], object]) -> bool:
    """Whether ``use`` of an inherited cache raises the error that says to connect again."""
    try:
        use()
    except txcache.TransactionError as error:
        return "before fork()" in str(error) and "txcache.connect" in str(error)
    return False


def test_a_forked_child_cannot_use_the_cache_it_inherited(lib: LibraryStack) -> None:
    """A cache made before ``fork()`` (a module-level ``connect`` in a pre-fork server)
    refuses transactions in the child: run on the parent's sockets, they would put the
    parent's node connections and sessions out of step."""
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=60):
        assert price(1) == 10  # the node connections are open, a transaction parked
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report whether each use was refused, and leave at once
        status = 2
        try:
            uses = (lib.cache.read_only, lib.cache.read_write, lib.cache.checkout)
            status = 0 if all(refused_in_child(use) for use in uses) else 1
        finally:
            os.write(write, bytes([status]))
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"\x00", "the child used the cache it inherited"
    os.close(read)
    os.waitpid(child, 0)
    hits = price.stats.hits
    with lib.cache.read_only(staleness=60):  # the parent's connections are still in step
        assert price(1) == 10
        assert txcache.query_one("SELECT 2") == (2,)
    assert price.stats.hits == hits + 1
