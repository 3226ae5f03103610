"""The RUBiS data generator: InitDB's rules, loaded with COPY.

``python -m rubis.generate --preset tiny|small|paper --dsn DSN [--seed N] [--replace]``

Follows RUBiS 1.4.3's InitDB (docs/rubis.md lists the rules and where this port differs):
users ``user{i}``/``password{i}`` in region ``i mod 62`` (1-based here), old items then active
items with 40 % reserve prices, 10 % buy-now prices, 80 % quantity 1, 0-19 bids each, one
comment each; active items spread over categories by the category file's counts. The output
depends only on the preset and the seed.

Loading order: tables without secondary indexes, COPY of every row (items in chunks, each
chunk's bids and comments right after it), users last (their ratings sum the comments about
them), ``items_by_rc`` from items joined with users, the clock row, then the indexes, the
identity sequences and ANALYZE — all in one transaction.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from rubis import data, schema
from rubis._items import ItemGroup, generate_items

__all__ = ["CLOCK_START", "PRESETS", "Preset", "Progress", "load", "main"]

#: The virtual time the loaded database starts at (the clock table's row).
CLOCK_START = datetime(2010, 10, 4)

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: called as a load advances."""

_CHUNK = 2_000


@dataclass(frozen=True, slots=True)
class Preset:
    """The size of a generated database."""

    users: int
    active_items: int
    old_items: int


#: ``tiny`` for tests, ``small`` for quick runs, ``paper`` = the TxCache evaluation's
#: in-memory configuration (about 850 MB in the paper).
PRESETS: dict[str, Preset] = {
    "tiny": Preset(users=1_000, active_items=300, old_items=500),
    "small": Preset(users=20_000, active_items=5_000, old_items=8_000),
    "paper": Preset(users=160_000, active_items=35_000, old_items=50_000),
}


def _quiet(phase: str, done: int, total: int) -> None:
    """The default progress callback: silence."""


def load(
    conn: psycopg.Connection[Any],
    preset: Preset,
    *,
    seed: int = 1,
    progress: Progress = _quiet,
) -> None:
    """Create the schema in the empty database of ``conn`` and fill it; commits."""
    with conn.transaction():
        schema.create_tables(conn)
        _load_names(conn)
        ratings = [0] * (preset.users + 1)
        for group in _groups(preset, seed):
            _load_items(conn, group, ratings, progress)
        _load_users(conn, preset.users, ratings, progress)
        _derive(conn, progress)


def _groups(preset: Preset, seed: int) -> Iterator[ItemGroup]:
    """The two item groups, old items first (ids 1…), then active items; the active group
    is made once the old one is consumed, so its bid and comment ids follow on."""
    categories = data.categories()
    old = ItemGroup(
        table="old_items",
        first_id=1,
        count=preset.old_items,
        users=preset.users,
        category_counts=[1] * len(categories),
        now=CLOCK_START,
        rng=random.Random(f"{seed}:old_items"),
    )
    yield old
    yield ItemGroup(
        table="items",
        first_id=preset.old_items + 1,
        count=preset.active_items,
        users=preset.users,
        category_counts=[category.count for category in categories],
        now=CLOCK_START,
        rng=random.Random(f"{seed}:items"),
        next_bid_id=old.next_bid_id,
        next_comment_id=old.next_comment_id,
    )


def _copy(conn: psycopg.Connection[Any], table: str, rows: Sequence[Sequence[object]]) -> None:
    """COPY ``rows`` into ``table`` (every column, in order)."""
    statement = f"COPY {table} FROM STDIN"
    with conn.cursor().copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def _load_names(conn: psycopg.Connection[Any]) -> None:
    """Categories and regions from the data files."""
    _copy(conn, "categories", [(c.id, c.name) for c in data.categories()])
    _copy(conn, "regions", list(enumerate(data.regions(), start=1)))


def _load_items(
    conn: psycopg.Connection[Any], group: ItemGroup, ratings: list[int], progress: Progress
) -> None:
    """One item group with its bids and comments, in chunks; adds comment ratings to
    ``ratings`` (indexed by user id)."""
    done = 0
    progress(group.table, 0, group.count)
    for chunk in generate_items(group, _CHUNK):
        _copy(conn, group.table, chunk.items)
        _copy(conn, "bids", chunk.bids)
        _copy(conn, "comments", chunk.comments)
        for comment in chunk.comments:
            ratings[comment[2]] += comment[4]
        done += len(chunk.items)
        progress(group.table, done, group.count)


def _user_rows(count: int, ratings: list[int]) -> Iterator[tuple[object, ...]]:
    """InitDB's users: ``Great{i} User{i}``, ``user{i}``/``password{i}``, region ``i mod 62``
    as a 1-based id (the original passed the 0-based value)."""
    region_count = len(data.regions())
    for i in range(1, count + 1):
        yield (
            i,
            f"Great{i}",
            f"User{i}",
            f"user{i}",
            f"password{i}",
            f"Great{i}.User{i}@rubis.com",
            ratings[i],
            0.0,
            CLOCK_START,
            i % region_count + 1,
        )


def _load_users(
    conn: psycopg.Connection[Any], count: int, ratings: list[int], progress: Progress
) -> None:
    """The users, after the comments so that each rating is the sum of those about them."""
    progress("users", 0, count)
    _copy(conn, "users", list(_user_rows(count, ratings)))
    progress("users", count, count)


def _derive(conn: psycopg.Connection[Any], progress: Progress) -> None:
    """items_by_rc, the clock, indexes, sequences, statistics."""
    progress("indexes", 0, 1)
    conn.execute(
        "INSERT INTO items_by_rc (item_id, region, category, end_date) "
        "SELECT i.id, u.region, i.category, i.end_date FROM items i JOIN users u ON u.id = i.seller"
    )
    conn.execute("INSERT INTO clock (id, now) VALUES (1, %s)", (CLOCK_START,))
    schema.create_indexes(conn)
    schema.reset_sequences(conn)
    conn.execute("ANALYZE")
    progress("indexes", 1, 1)


class _Bar:
    """A one-line progress display on stderr, one line per phase."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.phase = ""

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase != self.phase and self.phase:
            sys.stderr.write("\n")
        self.phase = phase
        elapsed = time.monotonic() - self.started
        percent = 100 * done // max(total, 1)
        sys.stderr.write(f"\r{phase:>10}: {done:>9,}/{total:,} {percent:3}%  {elapsed:6.1f} s")
        sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: load a preset into an empty database."""
    parser = argparse.ArgumentParser(prog="python -m rubis.generate", description=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--dsn", required=True, help="the database to fill (must be empty)")
    parser.add_argument("--seed", type=int, default=1, help="the random seed (default 1)")
    parser.add_argument("--replace", action="store_true", help="drop existing RUBiS tables")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with psycopg.connect(args.dsn) as conn:
        if args.replace:
            with conn.transaction():
                schema.drop_tables(conn)
        load(conn, PRESETS[args.preset], seed=args.seed, progress=_Bar())
    sys.stderr.write(f"\nloaded {args.preset} in {time.monotonic() - started:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
