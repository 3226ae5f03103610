"""A forked child (a pre-fork web server's worker, a multiprocessing pool) inherits the
parent's cache, whose connections are the parent's: it starts without a default cache, and
closing the inherited one ends nothing of the parent's."""

from __future__ import annotations

import os

import txcache
from library_fixtures import LibraryStack


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
