"""Reading any query through the cache, for tests of what invalidates a cached result.

One cacheable function, :func:`rows_of`, caches the rows of whatever statement it is given;
every run of it (a miss) is recorded in :data:`runs`. :func:`cached` reads a statement
until a second read is a hit; :func:`reread` reads it again at a pin no older than a
commit and says whether the function ran again.
"""

from __future__ import annotations

import txcache
from library_fixtures import LibraryStack

Rows = list[tuple[object, ...]]

runs: list[str] = []
"""The statements :func:`rows_of` ran, in order (a hit runs nothing)."""


@txcache.cacheable
def rows_of(statement: str, *params: object) -> Rows:
    """The rows of ``statement``; each run (a miss) is recorded in :data:`runs`."""
    runs.append(statement)
    return [tuple(row) for row in txcache.query(statement, params)]


def read(lib: LibraryStack, statement: str, *params: object, not_before: int | None = None) -> Rows:
    """``statement``'s rows through the cache, in a read-only transaction of its own."""
    with lib.cache.read_only(staleness=60, not_before=not_before):
        return rows_of(statement, *params)


def truth(lib: LibraryStack, statement: str, *params: object) -> Rows:
    """``statement``'s rows in the database now."""
    return [tuple(row) for row in lib.admin.execute(statement, params).fetchall()]


# Reads before one must be a hit: the first may not store (it read the catalog anew, and a
# result is stored only once the agent's stream has passed that reading), the one after the
# stack settled does — and without DDL triggers a stored value waits for a later pin, and
# the first read may still run at a pin from before the schema change that made the test's
# objects (nothing computed there is stored).
_READS_TO_A_HIT = 4


def cached(lib: LibraryStack, statement: str, *params: object) -> Rows:
    """Read ``statement`` through the cache, each read once the stack settled and with a
    fresh pin known, until a read is a hit (at most :data:`_READS_TO_A_HIT`); every read
    returns the same rows, which it returns."""
    first: Rows | None = None
    for _ in range(_READS_TO_A_HIT):
        lib.caught_up()
        lib.fresh_pins()
        runs.clear()
        got = read(lib, statement, *params)
        first = got if first is None else first
        assert got == first
        if not runs:
            return first
    raise AssertionError(f"no read of {statement!r} was a hit in {_READS_TO_A_HIT}")


def reread(lib: LibraryStack, statement: str, token: int, *params: object) -> tuple[Rows, bool]:
    """Read at a pin no older than ``token``: the rows (checked against the database) and
    whether the function ran again (a miss)."""
    runs.clear()
    got = read(lib, statement, *params, not_before=token)
    assert got == truth(lib, statement, *params)
    return got, runs == [statement]


def assert_invalidated(lib: LibraryStack, statement: str, token: int, *params: object) -> Rows:
    """Read at a pin no older than ``token``: the function must run again; its rows."""
    got, ran = reread(lib, statement, token, *params)
    assert ran, "the change did not invalidate the cached result"
    return got
