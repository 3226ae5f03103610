"""The experiment modes against the real stack, and the public surface of the package."""

from __future__ import annotations

import subprocess
import sys

import txcache
import txcache.protocol
import txcache.stack
from library_fixtures import LibraryStack, as_another_process


@txcache.cacheable
def item_price(item_id: int) -> int:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


def connect_like(lib: LibraryStack, **settings: object) -> txcache.Cache:
    return txcache.connect(
        lib.dsn,
        nodes=[node.address for node in lib.nodes],
        agent=lib.agent_address,
        refresh_interval=0.05,
        **settings,  # type: ignore[arg-type]
    )


def stage_a_split_history(lib: LibraryStack, cache: txcache.Cache) -> None:
    """Item 2's old price and item 3's new price are both in ``cache``: they never existed
    together (one commit changed both)."""
    lib.caught_up()
    lib.fresh_pins()
    with cache.read_only(staleness=60):
        assert (item_price(2), item_price(3)) == (20, 30)

    def write() -> txcache.ReadWriteTransaction:
        with cache.read_write() as tx:
            tx.execute("UPDATE items SET price = price + 1 WHERE id IN (2, 3)")
        return tx

    token = as_another_process(write).commit_timestamp
    assert token is not None
    lib.caught_up()
    lib.fresh_pins(after=token - 1)
    with cache.read_only(staleness=60, not_before=token):
        assert item_price(3) == 31


def test_no_consistency_mode_serves_values_that_never_existed_together(lib: LibraryStack) -> None:
    inconsistent = connect_like(lib, mode="no_consistency")
    try:
        stage_a_split_history(lib, inconsistent)
        with inconsistent.read_only(staleness=60):
            seen = (item_price(2), item_price(3))
    finally:
        inconsistent.close()
    assert seen == (20, 31), "the control mode must show the anomaly the default prevents"


def test_the_consistent_mode_never_mixes_the_same_history(lib: LibraryStack) -> None:
    stage_a_split_history(lib, lib.cache)
    with lib.cache.read_only(staleness=60):
        seen = (item_price(2), item_price(3))
    assert seen in {(20, 30), (21, 31)}


def test_no_consistency_values_never_reach_consistent_readers(lib: LibraryStack) -> None:
    inconsistent = connect_like(lib, mode="no_consistency")
    try:
        stage_a_split_history(lib, inconsistent)
    finally:
        inconsistent.close()
    runs_before = item_price.stats.miss_count
    with lib.cache.read_only(staleness=60):
        item_price(2)
    assert item_price.stats.miss_count == runs_before + 1, "another mode's keys"


def test_function_stats_are_listed(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    with lib.cache.read_only(staleness=60):
        item_price(4)
        item_price(4)
    [stats] = [s for s in txcache.function_stats() if s.name == item_price.keys.name]
    assert stats is item_price.stats
    assert stats.hits >= 1
    assert stats.as_dict()["hit_rate"] == stats.hit_rate


def test_the_public_names_are_exactly_these() -> None:
    assert set(txcache.__all__) == {
        *("Cache", "CacheableFunction", "ConfigurationError"),
        *("AsyncCache", "AsyncCacheableFunction", "AsyncReadOnlyTransaction"),
        *("AsyncReadWriteTransaction", "aio", "connect_async"),
        *("ForeignValue", "FunctionStats", "Mode", "NoTransaction", "OperationLatency"),
        *("Pin", "PinPolicy", "PinSet", "ReadOnlyTransaction", "ReadWriteTransaction"),
        *("SafeSerializer", "Serializer", "Settings", "SetupError", "SetupReport"),
        *("SetupStep", "StepStatus", "SnapshotUnavailable", "Transaction"),
        "StatementNotAllowed",
        *("TransactionError", "TxcacheError", "UncacheableQuery", "UnsupportedArgument"),
        *("UnsupportedValue", "cacheable", "connect", "current_transaction"),
        *("default_cache", "execute", "function_stats", "newest_or_fresh", "query"),
        *("query_one", "register_key_context", "setup_database", "oldest_pin"),
    }
    for name in txcache.__all__:
        assert getattr(txcache, name) is not None


def test_the_launchers_are_in_txcache_stack_and_nowhere_else() -> None:
    assert set(txcache.stack.__all__) == {
        *("Stack", "StackOptions", "TlsFiles", "PartFailed", "StartInterrupted"),
        "EMBEDDED_SETTINGS",
        *("EmbeddedPostgres", "PostgresStartError", "find_postgres_bin", "postgres_uri"),
        *("ReplicatedPostgres", "hosts_dsn"),
        *("NodeProcess", "NodeStartError", "find_txcached", "AgentProcess", "TcpProxy"),
        *("agent_walsenders", "wait_for_stream_on"),
        *("ServerProcess", "answers_http", "ProcessStartError", "find_binary"),
        *("free_port", "free_ports", "wait_until", "WaitTimeout", "tail", "child_pids"),
        *("wal_position", "parse_lsn"),
    }
    for name in txcache.stack.__all__:
        assert getattr(txcache.stack, name) is not None
        assert not hasattr(txcache, name) or name in txcache.__all__, name


def test_the_protocol_client_names_are_exactly_these() -> None:
    assert set(txcache.protocol.__all__) == {
        *("connect", "RespConnection", "AsyncRespConnection", "Command", "parse_address"),
        *("ConnectionLost", "PasswordRefused", "ReplyError", "BadReply", "MISS_KINDS"),
        *("txget", "txset", "txinterval", "txstatus", "txdatabase", "max_staleness", "info"),
        "stream_name",
        *("parse_fields", "integer_fields", "Hit", "Miss", "Interval", "Stored"),
        *("NodeStatus", "agent_status", "agent_role", "pins", "pin", "commit_lsn", "tag_columns"),
        *("CatalogVersion", "barrier", "Barrier", "database", "DatabaseIdentity", "nodes"),
        *("standby_pins", "agent_standbys"),
    }
    for name in txcache.protocol.__all__:
        assert getattr(txcache.protocol, name) is not None


def test_importing_the_library_imports_no_launcher() -> None:
    program = (
        "import sys, txcache\n"
        "print(sorted(m for m in sys.modules if m.startswith('txcache.') and m.endswith(\n"
        "    ('stack', '_stack', '_process', '_postgres', '_node_process', '_agent_process'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
