"""``not_before`` tokens: for writes made through the library, for writes made elsewhere
(``Cache.timestamp()``), and the ones refused."""

from __future__ import annotations

from typing import Any

import pytest

import txcache
from library_fixtures import LibraryStack
from txcache import protocol
from txcache.protocol import ReplyError


@txcache.cacheable
def price(item_id: int) -> int | None:
    """The price of one item."""
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    return None if row is None else int(row[0])


def read_price(lib: LibraryStack, not_before: int | None) -> int | None:
    with lib.cache.read_only(staleness=60, not_before=not_before):
        return price(3)


def test_a_timestamp_taken_after_a_write_made_elsewhere_sees_it(lib: LibraryStack) -> None:
    lib.caught_up()
    lib.fresh_pins()
    assert read_price(lib, None) == 30
    assert read_price(lib, None) == 30  # cached
    lib.write("UPDATE items SET price = 31 WHERE id = 3")  # psql, another service, …
    token = lib.cache.timestamp()
    assert read_price(lib, token) == 31


def test_a_token_after_everything_the_database_wrote_reads_the_newest_state(
    lib: LibraryStack, caplog: pytest.LogCaptureFixture
) -> None:
    """A token from before a restore (a browser's old cookie) must not break every read
    until it expires: the transaction reads everything written so far, with one warning
    per token."""
    lib.fresh_pins()  # with the agent: without it no token is checked (docs/library.md)
    assert read_price(lib, None) == 30
    lib.write("UPDATE items SET price = 31 WHERE id = 3")
    future = lib.cache.timestamp() + 2**40
    with caplog.at_level("WARNING", logger="txcache"):
        assert read_price(lib, future) == 31
        assert read_price(lib, future) == 31
    warnings = [r for r in caplog.records if "lies after everything" in r.getMessage()]
    assert len(warnings) == 1, caplog.text


@pytest.mark.parametrize(
    ("token", "error"),
    [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), ("0/16B3748", TypeError),
     (True, TypeError)],
)  # fmt: skip
def test_a_token_that_is_not_one_is_refused(
    lib: LibraryStack, token: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="not_before must be a token"):
        lib.cache.read_only(not_before=token)


def test_a_timestamp_is_not_before_the_last_commit_timestamp(lib: LibraryStack) -> None:
    with lib.cache.read_write() as tx:
        tx.execute("UPDATE items SET price = price WHERE id = 1")
    assert tx.commit_timestamp is not None
    assert lib.cache.timestamp() >= tx.commit_timestamp


def test_a_transaction_that_only_locked_rows_has_its_token_at_once(lib: LibraryStack) -> None:
    """It has a transaction id, but the stream decodes no commit of it: the agent says so
    once its stream passed the position read after the commit (a heartbeat later), rather
    than let the library wait out its timeout."""
    lib.fresh_pins()
    with lib.cache.read_write() as tx:
        tx.execute("SELECT * FROM items WHERE id = 1 FOR UPDATE")
    assert tx.xid is not None
    after = tx._after
    assert after is not None
    with (
        protocol.connect(lib.agent_address, timeout=70) as agent,
        pytest.raises(ReplyError, match="NOTDECODED"),  # not TIMEOUT, a minute later
    ):
        agent.run(protocol.commit_lsn(tx.xid, timeout_ms=60_000, upto=after))
    assert tx.commit_timestamp == after
