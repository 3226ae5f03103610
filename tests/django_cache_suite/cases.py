"""Django's ``RedisCacheTests``, every case, with ``TxcacheCache`` as the backend: its
caches are those of the original class with the backend and ``LOCATION`` replaced (the
nodes and the password come from the ``TXCACHE`` setting, as an application's would)."""

from typing import Any, cast

from cache.tests import RedisCacheTests, caches_setting_for_tests, redis_excluded_caches
from django.test import override_settings

TXCACHE_PARAMS = {"BACKEND": "txcache.django.cache.TxcacheCache"}


def txcache_caches(**params: Any) -> dict[str, dict[str, Any]]:
    """What ``caches_setting_for_tests`` gives ``RedisCacheTests``, on ``TxcacheCache``."""
    return cast(
        dict[str, dict[str, Any]],
        caches_setting_for_tests(base=TXCACHE_PARAMS, exclude=redis_excluded_caches, **params),
    )


@override_settings(CACHES=txcache_caches())
class TxcacheCacheTests(RedisCacheTests):  # type: ignore[misc]  # Django's tests: untyped
    """``RedisCacheTests`` on ``TxcacheCache``."""

    # The original names RedisCache's settings on the method itself; the same case, with
    # this backend's (``__wrapped__`` is the case without its override).
    test_redis_pool_options = override_settings(
        CACHES=txcache_caches(
            OPTIONS={"db": 5, "socket_timeout": 0.1, "retry_on_timeout": True},
        )
    )(RedisCacheTests.test_redis_pool_options.__wrapped__)
