"""Rows of items, their bids and their comments, by InitDB's rules (no I/O).

One ``ItemGroup`` is either the old items or the active items; ``generate_items`` yields
its rows in chunks, each chunk's bids and comments with it. Every random draw comes from the
group's own ``random.Random``, so a group's rows depend only on the seed and its size.

The reserve, buy-now and quantity-1 shares are exact: InitDB gives them to the first 40 %,
10 % and 80 % of a group's items by position, so the buy-now items are among the reserve
items and all have quantity 1. This port keeps those counts and that nesting but assigns the
positions through a seeded shuffle, so that they do not follow the ids.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

__all__ = [
    "BUY_NOW_SHARE",
    "COMMENT_RATINGS",
    "MAX_BIDS",
    "MAX_COMMENT",
    "MAX_DESCRIPTION",
    "RESERVE_SHARE",
    "UNIQUE_SHARE",
    "Chunk",
    "CommentRow",
    "ItemGroup",
    "generate_items",
    "stored_max_bid",
]

RESERVE_SHARE = 0.40
BUY_NOW_SHARE = 0.10
UNIQUE_SHARE = 0.80
MAX_BIDS = 19
MAX_DESCRIPTION = 8_192
MAX_COMMENT = 2_048
COMMENT_RATINGS = (-5, -3, 0, 3, 5)

CommentRow = tuple[int, int, int, int, int, datetime, str]
"""(id, from_user_id, to_user_id, item_id, rating, date, comment)"""

_DAY = timedelta(days=1)
_TEXT = "This incredible item is exactly what you need! " * (MAX_DESCRIPTION // 40)
_COMMENT = "This is a very bad comment. Stay away from this seller! " * (MAX_COMMENT // 40)


@dataclass(slots=True)
class ItemGroup:
    """The old or the active items: where they go and what they are drawn from.

    ``category_counts`` weighs the categories (1-based ids in list order): the group's items
    are spread over them in proportion, by largest remainders.
    """

    table: str
    first_id: int
    count: int
    users: int
    category_counts: list[int]
    now: datetime
    rng: random.Random
    next_bid_id: int = 0
    next_comment_id: int = 0

    @property
    def active(self) -> bool:
        """Whether these are the active items (end dates after ``now``)."""
        return self.table == "items"


@dataclass(slots=True)
class Chunk:
    """Rows for COPY, each a tuple in the table's column order."""

    items: list[tuple[object, ...]] = field(default_factory=list)
    bids: list[tuple[object, ...]] = field(default_factory=list)
    comments: list[CommentRow] = field(default_factory=list)


def spread(count: int, weights: list[int]) -> list[int]:
    """``count`` split in proportion to ``weights``, by largest remainders."""
    total = sum(weights)
    exact = [count * weight / total for weight in weights]
    shares = [int(value) for value in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: shares[i] - exact[i])
    for i in by_remainder[: count - sum(shares)]:
        shares[i] += 1
    return shares


def _plan(group: ItemGroup) -> tuple[list[int], list[int]]:
    """Per position of the group: its category id and its rank for the share thresholds."""
    categories = [
        category_id
        for category_id, share in enumerate(spread(group.count, group.category_counts), start=1)
        for _ in range(share)
    ]
    group.rng.shuffle(categories)
    ranks = list(range(group.count))
    group.rng.shuffle(ranks)
    return categories, ranks


def generate_items(group: ItemGroup, chunk_size: int) -> Iterator[Chunk]:
    """The group's rows, ``chunk_size`` items at a time."""
    categories, ranks = _plan(group)
    chunk = Chunk()
    for position in range(group.count):
        _item(group, chunk, position, categories[position], ranks[position])
        if len(chunk.items) == chunk_size:
            yield chunk
            chunk = Chunk()
    if chunk.items:
        yield chunk


def _dates(group: ItemGroup, days: int) -> tuple[datetime, datetime]:
    """Start and end of an auction lasting ``days``: active ones started in the last day and
    end after ``now``; old ones ended at least a day before ``now``."""
    started = timedelta(seconds=group.rng.randrange(86_400))
    start = group.now - started - _DAY * (0 if group.active else 8)
    return start, start + days * _DAY


def _prices(group: ItemGroup, rank: int) -> tuple[float, float, float, int]:
    """Initial price, reserve price, buy-now price and quantity of the item ranked ``rank``."""
    rng = group.rng
    initial = float(rng.randint(1, 5_000))
    reserve = initial + rng.randrange(1_000) if rank < RESERVE_SHARE * group.count else 0.0
    buy_now = (
        initial + reserve + rng.randrange(1_000) if rank < BUY_NOW_SHARE * group.count else 0.0
    )
    quantity = 1 if rank < UNIQUE_SHARE * group.count else rng.randint(1, 10)
    return initial, reserve, buy_now, quantity


def _item(group: ItemGroup, chunk: Chunk, position: int, category: int, rank: int) -> None:
    """Append one item, its bids and its comment to ``chunk``."""
    rng = group.rng
    item_id = group.first_id + position
    initial, reserve, buy_now, quantity = _prices(group, rank)
    start, end = _dates(group, rng.randint(1, 7))
    seller = rng.randint(1, group.users)
    description = _TEXT[: rng.randint(1, MAX_DESCRIPTION)]
    bids, max_bid = _bids(group, chunk, item_id, initial, quantity, start, end)
    chunk.items.append(
        (
            item_id,
            f"RUBiS automatically generated item #{item_id}",
            description,
            initial,
            quantity,
            reserve,
            buy_now,
            bids,
            max_bid,
            start,
            end,
            seller,
            category,
        )
    )
    _comment(group, chunk, item_id, seller, start, end)


def _moment(group: ItemGroup, start: datetime, end: datetime) -> datetime:
    """A uniform second of the auction's elapsed part."""
    elapsed = (min(end, group.now) - start).total_seconds()
    return start + timedelta(seconds=group.rng.randrange(max(int(elapsed), 1)))


def _bids(
    group: ItemGroup,
    chunk: Chunk,
    item_id: int,
    price: float,
    quantity: int,
    start: datetime,
    end: datetime,
) -> tuple[int, float]:
    """Append 0-19 bids, each raising the price by 1-10 from a uniform user with a max bid
    of the bid plus the same raise; returns the count and the item's resulting max bid."""
    rng = group.rng
    count = rng.randint(0, MAX_BIDS)
    max_bid = 0.0
    for _ in range(count):
        raise_by = rng.randint(1, 10)
        price += raise_by
        group.next_bid_id += 1
        user = rng.randint(1, group.users)
        qty = rng.randint(1, quantity)
        date = _moment(group, start, end)
        chunk.bids.append((group.next_bid_id, user, item_id, qty, price, price + raise_by, date))
        max_bid = stored_max_bid(max_bid, price, price + raise_by)
    return count, max_bid


def stored_max_bid(stored: float, bid: float, max_bid: float) -> float:
    """``items.max_bid`` after a bid, by RUBiS's StoreBid: the bid's max bid replaces the
    stored value when the bid (not its max bid) exceeds it."""
    return max_bid if bid > stored else stored


def _comment(
    group: ItemGroup, chunk: Chunk, item_id: int, seller: int, start: datetime, end: datetime
) -> None:
    """Append one comment from a uniform user about the seller."""
    rng = group.rng
    group.next_comment_id += 1
    author = rng.randint(1, group.users)
    rating = rng.choice(COMMENT_RATINGS)
    text = _COMMENT[: rng.randint(1, MAX_COMMENT)]
    date = _moment(group, start, end)
    chunk.comments.append((group.next_comment_id, author, seller, item_id, rating, date, text))
