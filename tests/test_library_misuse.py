"""Regression tests from the library's review: misuse and resource exhaustion get a clear
error or are survived, never wrong data, never a leaked connection."""

from __future__ import annotations

import contextvars
import subprocess
import sys
import threading

import psycopg
import psycopg_pool
import pytest

import txcache
from library_fixtures import LibraryStack


@txcache.cacheable
def price_of(item_id: int) -> int:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


def test_a_transaction_used_from_another_thread_is_refused(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    failures: list[BaseException] = []
    with lib.cache.read_only(staleness=60):
        context = contextvars.copy_context()

        def other() -> None:
            try:
                context.run(price_of, 5)
            except BaseException as error:
                failures.append(error)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert len(failures) == 1
    assert isinstance(failures[0], txcache.TransactionError)
    assert "thread" in str(failures[0])


def test_a_failed_begin_leaves_no_transaction_behind(
    lib: LibraryStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted(*args: object, **kwargs: object) -> None:
        raise psycopg_pool.PoolTimeout("no connection")

    with monkeypatch.context() as patch:
        patch.setattr(lib.cache.pool, "getconn", exhausted)
        with pytest.raises(psycopg_pool.PoolTimeout), lib.cache.read_write():
            pass
    assert txcache.current_transaction() is None
    with lib.cache.read_write() as tx:
        tx.execute("SELECT 1")


def test_a_caught_statement_failure_rolls_back_and_says_so(lib: LibraryStack) -> None:
    available = lib.cache.pool.get_stats().get("pool_available", 0)

    def write_then_swallow_a_failure() -> None:
        with lib.cache.read_write() as tx:
            tx.execute("UPDATE items SET price = 1 WHERE id = 1")
            with pytest.raises(psycopg.errors.DivisionByZero):
                tx.execute("SELECT 1 / 0")

    with pytest.raises(txcache.TransactionError, match="rolled back"):
        write_then_swallow_a_failure()
    assert lib.cache.pool.get_stats().get("pool_available", 0) >= available, "leaked"
    row = lib.admin.execute("SELECT price FROM items WHERE id = 1").fetchone()
    assert row == (10,), "nothing was written"


def test_a_read_only_transaction_cannot_be_used_after_its_block(lib: LibraryStack) -> None:
    with lib.cache.read_only(staleness=60) as tx:
        tx.query("SELECT 1")
    with pytest.raises(txcache.TransactionError, match="ended"):
        tx.query("SELECT 1")


def test_a_malformed_node_address_is_a_configuration_error(lib: LibraryStack) -> None:
    with pytest.raises(txcache.ConfigurationError, match="nodes"):
        txcache.connect(lib.dsn, nodes=["bogus"], agent="127.0.0.1:1")


def test_a_policy_that_breaks_the_rules_gets_the_newest_pin(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    lib.cache.policy = lambda pin_set, now: txcache.Pin(1, "no-such-snapshot", 0.0)
    with lib.cache.read_only(staleness=60) as tx:
        assert price_of(3) == 30
        assert tx.snapshot is not None
        assert tx.snapshot.snapshot_id != "no-such-snapshot"


def test_one_pooled_connection_is_enough_for_queries_and_moves(database: str) -> None:
    with LibraryStack(database, pool_size=1) as lib:
        lib.caught_up()
        lib.fresh_pins()
        with lib.cache.read_only(staleness=60):
            assert price_of(2) == 20
        lib.commit("UPDATE items SET price = 21 WHERE id = 2")  # as another process
        with lib.cache.read_only(staleness=60) as tx:
            assert txcache.query_one("SELECT name FROM users WHERE id = 1") == ("user 1",)
            assert price_of(2) == 20  # the old version: the transaction moves
            assert tx.moves == 1


def test_sets_serialize_to_the_same_bytes_in_every_process() -> None:
    script = (
        "import sys; sys.path.insert(0, 'python');"
        "from txcache import SafeSerializer;"
        "print(SafeSerializer().dumps({'a', 'b', 'c', 'd', 'e', 'f'}).hex())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={"PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(outputs) == 1


def test_a_block_inside_another_says_which_runs_and_that_blocks_do_not_nest(
    lib: LibraryStack,
) -> None:
    with lib.cache.read_write():
        nested = "a read/write transaction is already running .* do not nest"
        with pytest.raises(txcache.TransactionError, match=nested), lib.cache.read_only():
            pass
    with lib.cache.read_only(staleness=60):
        nested = "a read-only transaction is already running .* do not nest"
        with pytest.raises(txcache.TransactionError, match=nested), lib.cache.read_write():
            pass
