"""The five write interactions of RUBiS, each one ``cache.read_write()`` transaction.

RUBiS locked whole tables around its writes; here the rows a write depends on are locked with
``SELECT … FOR UPDATE`` inside a READ COMMITTED transaction. Like RUBiS, StoreBid and
StoreBuyNow check neither the auction's end date nor (for StoreBuyNow) a buy-now price: the
emulated mix depends on these pages succeeding as they did in RUBiS; an item missing from
``items`` or without the quantity asked is an error page. Each function returns a
``Written``: the id it created (if any) and the transaction's ``commit_timestamp``, the token
to pass as ``not_before`` so that the next page sees the write.

Known RUBiS bugs fixed here: StoreComment stored the author's running rating total as the
comment's rating (we store the rating); ids are 1-based. Invalid input raises ``PageError``
and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg

import txcache
from rubis.interactions import PageError

__all__ = [
    "Written",
    "register_item",
    "register_user",
    "store_bid",
    "store_buy_now",
    "store_comment",
]


@dataclass(frozen=True, slots=True)
class Written:
    """What a write did: the id it created and its commit token."""

    id: int | None
    commit_timestamp: int | None


def register_user(
    cache: txcache.Cache,
    *,
    firstname: str,
    lastname: str,
    nickname: str,
    password: str,
    email: str,
    region: str,
    now: datetime,
) -> Written:
    """2 RegisterUser: a new user, after checking the region (by name) and the nickname."""
    with cache.read_write() as tx:
        row = tx.query_one("SELECT id FROM regions WHERE name = %s", (region,))
        if row is None:
            raise PageError(f"region {region} does not exist")
        if tx.query_one("SELECT id FROM users WHERE nickname = %s", (nickname,)) is not None:
            raise PageError(f"the nickname {nickname} is already taken")
        try:
            created = tx.query_one(
                "INSERT INTO users (firstname, lastname, nickname, password, email, rating, "
                "balance, creation_date, region) VALUES (%s, %s, %s, %s, %s, 0, 0, %s, %s) "
                "RETURNING id",
                (firstname, lastname, nickname, password, email, now, row[0]),
            )
        except psycopg.errors.UniqueViolation as error:  # registered meanwhile
            raise PageError(f"the nickname {nickname} is already taken") from error
    assert created is not None
    return Written(int(created[0]), tx.commit_timestamp)


def store_buy_now(
    cache: txcache.Cache, *, buyer: int, item_id: int, qty: int, now: datetime
) -> Written:
    """14 StoreBuyNow: lower the quantity, end the auction when none is left, record the
    purchase."""
    with cache.read_write() as tx:
        row = tx.query_one("SELECT quantity FROM items WHERE id = %s FOR UPDATE", (item_id,))
        if row is None:
            raise PageError(f"item {item_id} is not on sale")
        if not 1 <= qty <= row[0]:
            raise PageError(f"cannot buy {qty} of item {item_id}: {row[0]} left")
        left = row[0] - qty
        if left == 0:
            tx.execute("UPDATE items SET quantity = 0, end_date = %s WHERE id = %s", (now, item_id))
            tx.execute("UPDATE items_by_rc SET end_date = %s WHERE item_id = %s", (now, item_id))
        else:
            tx.execute("UPDATE items SET quantity = %s WHERE id = %s", (left, item_id))
        created = tx.query_one(
            "INSERT INTO buy_now (buyer_id, item_id, qty, date) VALUES (%s, %s, %s, %s) "
            "RETURNING id",
            (buyer, item_id, qty, now),
        )
    assert created is not None
    return Written(int(created[0]), tx.commit_timestamp)


def store_bid(
    cache: txcache.Cache,
    *,
    user_id: int,
    item_id: int,
    bid: float,
    max_bid: float,
    qty: int,
    now: datetime,
) -> Written:
    """17 StoreBid: check the bid against the item's minimum, quantity and max bid, insert
    it, count it, and update ``items.max_bid`` by RUBiS's rule (the bid's max bid replaces
    the stored one when the bid exceeds it)."""
    with cache.read_write() as tx:
        row = tx.query_one(
            "SELECT initial_price, quantity, nb_of_bids, max_bid FROM items WHERE id = %s "
            "FOR UPDATE",
            (item_id,),
        )
        if row is None:
            raise PageError(f"item {item_id} is not on sale")
        initial, quantity, count, stored = row
        highest = tx.query_one("SELECT max(bid) FROM bids WHERE item_id = %s", (item_id,))
        minimum = initial if highest is None or highest[0] is None else highest[0] + 1
        _check_bid(bid, max_bid, qty, minimum, quantity)
        created = tx.query_one(
            "INSERT INTO bids (user_id, item_id, qty, bid, max_bid, date) "
            "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            (user_id, item_id, qty, bid, max_bid, now),
        )
        tx.execute(
            "UPDATE items SET nb_of_bids = %s, max_bid = %s WHERE id = %s",
            (count + 1, max_bid if bid > stored else stored, item_id),
        )
    assert created is not None
    return Written(int(created[0]), tx.commit_timestamp)


def _check_bid(bid: float, max_bid: float, qty: int, minimum: float, quantity: int) -> None:
    """StoreBid's validation, as RUBiS words it."""
    if bid < minimum:
        raise PageError(f"your bid of {bid} is not acceptable: the minimum is {minimum}")
    if max_bid < bid:
        raise PageError(f"your maximum bid of {max_bid} is below your bid of {bid}")
    if not 1 <= qty <= quantity:
        raise PageError(f"you cannot request {qty} items: {quantity} are on sale")


def store_comment(
    cache: txcache.Cache,
    *,
    from_user_id: int,
    to_user_id: int,
    item_id: int,
    rating: int,
    comment: str,
    now: datetime,
) -> Written:
    """20 StoreComment: add the rating to the user's, insert the comment with its rating."""
    with cache.read_write() as tx:
        updated = tx.execute(
            "UPDATE users SET rating = rating + %s WHERE id = %s", (rating, to_user_id)
        )
        if updated.rowcount != 1:
            raise PageError(f"there is no user {to_user_id}")
        created = tx.query_one(
            "INSERT INTO comments (from_user_id, to_user_id, item_id, rating, date, comment) "
            "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            (from_user_id, to_user_id, item_id, rating, now, comment),
        )
    assert created is not None
    return Written(int(created[0]), tx.commit_timestamp)


def register_item(
    cache: txcache.Cache,
    *,
    seller: int,
    category: int,
    name: str,
    description: str,
    initial_price: float,
    reserve_price: float,
    buy_now: float,
    quantity: int,
    days: int,
    now: datetime,
) -> Written:
    """24 RegisterItem: a new auction from ``now`` for ``days``, listed in ``items_by_rc``
    under the seller's region."""
    end = now + timedelta(days=days)
    with cache.read_write() as tx:
        region = tx.query_one("SELECT region FROM users WHERE id = %s", (seller,))
        if region is None:
            raise PageError(f"there is no user {seller}")
        created = tx.query_one(
            "INSERT INTO items (name, description, initial_price, quantity, reserve_price, "
            "buy_now, nb_of_bids, max_bid, start_date, end_date, seller, category) "
            "VALUES (%s, %s, %s, %s, %s, %s, 0, 0, %s, %s, %s, %s) RETURNING id",
            (
                name,
                description,
                initial_price,
                quantity,
                reserve_price,
                buy_now,
                now,
                end,
                seller,
                category,
            ),
        )
        assert created is not None
        tx.execute(
            "INSERT INTO items_by_rc (item_id, region, category, end_date) VALUES (%s, %s, %s, %s)",
            (created[0], region[0], category, end),
        )
    return Written(int(created[0]), tx.commit_timestamp)
