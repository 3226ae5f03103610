"""The cacheable functions the RUBiS pages share (the paper's function granularity).

Each is ``@txcache.cacheable``: in a read-only transaction its result is cached and
invalidated by the tags of its queries; in a read/write transaction it runs uncached. Every
query is deterministic — a total ``ORDER BY`` wherever RUBiS paged or listed without one — and
time enters only as a parameter (the virtual clock's ``now``), never through ``now()``.

Values are plain dicts, lists and tuples of ints, floats, strings and datetimes, so that a hit
equals the miss it replaces.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import txcache

__all__ = [
    "RECENT",
    "Record",
    "authenticate",
    "categories",
    "category_item_ids",
    "comments_about",
    "get_item",
    "get_user",
    "item_bids",
    "region_item_ids",
    "regions",
    "user_bought",
    "user_current_bids",
    "user_selling",
    "user_sold",
    "user_won",
]

Record = dict[str, Any]
#: AboutMe's window for items won, bought and sold.
RECENT = timedelta(days=30)

_ITEM = (
    "id",
    "name",
    "description",
    "initial_price",
    "quantity",
    "reserve_price",
    "buy_now",
    "nb_of_bids",
    "max_bid",
    "start_date",
    "end_date",
    "seller",
    "category",
)
_USER: tuple[str, ...] = ("id", "firstname", "lastname", "nickname", "email", "rating")
_USER += ("balance", "creation_date", "region")
_BID = ("id", "user_id", "item_id", "qty", "bid", "max_bid", "date")
_COMMENT = ("id", "from_user_id", "to_user_id", "item_id", "rating", "date", "comment")


def _record(names: tuple[str, ...], row: tuple[Any, ...]) -> Record:
    """A row as a dict by column name."""
    return dict(zip(names, row, strict=True))


@txcache.cacheable
def get_item(item_id: int) -> Record | None:
    """Item ``item_id`` from ``items``, else from ``old_items`` (``old`` says which);
    ``None`` if neither has it."""
    row = txcache.query_one(
        "SELECT id, name, description, initial_price, quantity, reserve_price, buy_now, "
        "nb_of_bids, max_bid, start_date, end_date, seller, category FROM items WHERE id = %s",
        (item_id,),
    )
    old = row is None
    if row is None:
        row = txcache.query_one(
            "SELECT id, name, description, initial_price, quantity, reserve_price, buy_now, "
            "nb_of_bids, max_bid, start_date, end_date, seller, category "
            "FROM old_items WHERE id = %s",
            (item_id,),
        )
    return None if row is None else {**_record(_ITEM, row), "old": old}


@txcache.cacheable
def get_user(user_id: int) -> Record | None:
    """User ``user_id`` without the password; ``None`` if there is none."""
    row = txcache.query_one(
        "SELECT id, firstname, lastname, nickname, email, rating, balance, creation_date, "
        "region FROM users WHERE id = %s",
        (user_id,),
    )
    return None if row is None else _record(_USER, row)


@txcache.cacheable
def authenticate(nickname: str, password: str) -> int | None:
    """The id of the user with this nickname and password, or ``None``."""
    row = txcache.query_one(
        "SELECT id FROM users WHERE nickname = %s AND password = %s", (nickname, password)
    )
    return None if row is None else int(row[0])


@txcache.cacheable
def item_bids(item_id: int) -> list[Record]:
    """The bids on item ``item_id``, newest first."""
    rows = txcache.query(
        "SELECT id, user_id, item_id, qty, bid, max_bid, date FROM bids WHERE item_id = %s "
        "ORDER BY date DESC, id DESC",
        (item_id,),
    )
    return [_record(_BID, row) for row in rows]


@txcache.cacheable
def categories() -> list[tuple[int, str]]:
    """Every category, (id, name) by id."""
    return [
        (int(i), str(n)) for i, n in txcache.query("SELECT id, name FROM categories ORDER BY id")
    ]


@txcache.cacheable
def regions() -> list[tuple[int, str]]:
    """Every region, (id, name) by id."""
    return [(int(i), str(n)) for i, n in txcache.query("SELECT id, name FROM regions ORDER BY id")]


@txcache.cacheable
def category_item_ids(category: int, now: datetime, page: int, per_page: int) -> list[int]:
    """A page of the active items of a category, soonest to end first (then by id: RUBiS
    had no tie-break, so its pages were nondeterministic)."""
    rows = txcache.query(
        "SELECT id FROM items WHERE category = %s AND end_date >= %s "
        "ORDER BY end_date, id LIMIT %s OFFSET %s",
        (category, now, per_page, page * per_page),
    )
    return [int(row[0]) for row in rows]


@txcache.cacheable
def region_item_ids(
    region: int, category: int, now: datetime, page: int, per_page: int
) -> list[int]:
    """A page of the active items of a category sold from a region, from ``items_by_rc``."""
    rows = txcache.query(
        "SELECT item_id FROM items_by_rc WHERE region = %s AND category = %s "
        "AND end_date >= %s ORDER BY end_date, item_id LIMIT %s OFFSET %s",
        (region, category, now, per_page, page * per_page),
    )
    return [int(row[0]) for row in rows]


@txcache.cacheable
def comments_about(user_id: int) -> list[Record]:
    """The comments about user ``user_id``, newest first."""
    rows = txcache.query(
        "SELECT id, from_user_id, to_user_id, item_id, rating, date, comment FROM comments "
        "WHERE to_user_id = %s ORDER BY date DESC, id DESC",
        (user_id,),
    )
    return [_record(_COMMENT, row) for row in rows]


@txcache.cacheable
def user_current_bids(user_id: int, now: datetime) -> list[tuple[int, float]]:
    """(item id, the user's highest max bid) for each running auction the user bid on."""
    rows = txcache.query(
        "SELECT b.item_id, max(b.max_bid) FROM bids b JOIN items i ON i.id = b.item_id "
        "WHERE b.user_id = %s AND i.end_date >= %s GROUP BY b.item_id ORDER BY b.item_id",
        (user_id, now),
    )
    return [(int(item), float(bid)) for item, bid in rows]


@txcache.cacheable
def user_won(user_id: int, now: datetime) -> list[int]:
    """Ids of auctions the user bid on that ended in the last 30 days (RUBiS's "won")."""
    rows = txcache.query(
        "SELECT DISTINCT b.item_id FROM bids b JOIN old_items o ON o.id = b.item_id "
        "WHERE b.user_id = %s AND o.end_date >= %s AND o.end_date < %s ORDER BY b.item_id",
        (user_id, now - RECENT, now),
    )
    return [int(row[0]) for row in rows]


@txcache.cacheable
def user_bought(user_id: int, now: datetime) -> list[Record]:
    """The user's buy-now purchases of the last 30 days, newest first."""
    rows = txcache.query(
        "SELECT id, item_id, qty, date FROM buy_now WHERE buyer_id = %s AND date >= %s "
        "ORDER BY date DESC, id DESC",
        (user_id, now - RECENT),
    )
    return [_record(("id", "item_id", "qty", "date"), row) for row in rows]


@txcache.cacheable
def user_selling(user_id: int) -> list[int]:
    """Ids of up to 20 of the user's items in the active table, soonest to end first."""
    rows = txcache.query(
        "SELECT id FROM items WHERE seller = %s ORDER BY end_date, id LIMIT 20", (user_id,)
    )
    return [int(row[0]) for row in rows]


@txcache.cacheable
def user_sold(user_id: int, now: datetime) -> list[int]:
    """Ids of up to 20 of the user's auctions that ended in the last 30 days, latest first."""
    rows = txcache.query(
        "SELECT id FROM old_items WHERE seller = %s AND end_date >= %s "
        "ORDER BY end_date DESC, id LIMIT 20",
        (user_id, now - RECENT),
    )
    return [int(row[0]) for row in rows]
