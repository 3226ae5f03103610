"""The page granularity: one cacheable function per dynamic read page, returning its HTML.

Each renders its page from its arguments alone — ids, the login, the page number and, for the
pages that depend on time, the virtual time (rounded by the application so that keys repeat,
see ``rubis.app.Clock``) — through the page builders of ``rubis.interactions``, which call
the shared cacheable functions of ``rubis.queries``. So a page hit costs one cache lookup, and
a page miss still finds most of its parts cached (the paper's two granularities, nested: a
page's validity interval is the intersection of its parts'). The library invalidates a page
when any row it read changes, like any other cacheable function.

Three pages are not cached whole: BuyNow, PutBid and PutComment are keyed by a login and an
item, a pair a later request almost never repeats (a session is one random user), so their
page entry would be a lookup and an insert that never pay off. They are plain functions whose
parts (``authenticate``, ``get_item``, ``item_bids``, ``get_user``) are cached.

A page that cannot be served raises ``PageError``; nothing is cached for it.
"""

from __future__ import annotations

from datetime import datetime

import txcache
from rubis import html
from rubis import interactions as build

__all__ = [
    "PAGES",
    "about_me",
    "bid_history",
    "browse_categories",
    "browse_categories_in_region",
    "browse_regions",
    "buy_now",
    "put_bid",
    "put_comment",
    "search_items_in_category",
    "search_items_in_region",
    "select_category_to_sell_item",
    "view_item",
    "view_user_info",
]


@txcache.cacheable
def browse_categories() -> str:
    """4 BrowseCategories."""
    return html.categories(build.categories_page())


@txcache.cacheable
def search_items_in_category(category: int, page: int, now: datetime, per_page: int) -> str:
    """5 SearchItemsInCategory at virtual time ``now``."""
    return html.search(build.category_search_page(category, page, now, per_page), per_page)


@txcache.cacheable
def browse_regions() -> str:
    """6 BrowseRegions."""
    return html.regions(build.regions_page())


@txcache.cacheable
def browse_categories_in_region(region: int) -> str:
    """7 BrowseCategoriesInRegion."""
    return html.region_categories(build.region_categories_page(region))


@txcache.cacheable
def search_items_in_region(
    region: int, category: int, page: int, now: datetime, per_page: int
) -> str:
    """8 SearchItemsInRegion at virtual time ``now``."""
    found = build.region_search_page(region, category, page, now, per_page)
    return html.search(found, per_page)


@txcache.cacheable
def view_item(item_id: int) -> str:
    """9 ViewItem."""
    return html.item(build.item_page(item_id))


@txcache.cacheable
def view_user_info(user_id: int) -> str:
    """10 ViewUserInfo."""
    return html.user_info(build.user_info_page(user_id))


@txcache.cacheable
def bid_history(item_id: int) -> str:
    """11 ViewBidHistory."""
    return html.bid_history(build.bid_history_page(item_id))


def buy_now(item_id: int, nickname: str, password: str) -> str:
    """13 BuyNow (not cached whole: see the module docstring)."""
    return html.buy_now(build.buy_now_page(item_id, nickname, password))


def put_bid(item_id: int, nickname: str, password: str) -> str:
    """16 PutBid (not cached whole)."""
    return html.put_bid(build.put_bid_page(item_id, nickname, password))


def put_comment(item_id: int, to_user_id: int, nickname: str, password: str) -> str:
    """19 PutComment (not cached whole)."""
    return html.put_comment(build.put_comment_page(item_id, to_user_id, nickname, password))


@txcache.cacheable
def select_category_to_sell_item(nickname: str, password: str) -> str:
    """22 SelectCategoryToSellItem."""
    return html.sell_categories(build.sell_categories_page(nickname, password))


@txcache.cacheable
def about_me(nickname: str, password: str, now: datetime) -> str:
    """26 AboutMe at virtual time ``now``."""
    return html.about_me(build.about_me_page(nickname, password, now))


#: The page functions by name, for statistics.
PAGES: dict[str, txcache.CacheableFunction[..., str]] = {
    name: function
    for name, function in globals().items()
    if isinstance(function, txcache.CacheableFunction)
}
