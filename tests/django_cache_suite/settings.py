"""Settings for Django's ``tests/runtests.py`` (``--settings=django_cache_suite.settings``),
as Django's own ``test_sqlite.py`` has them, plus the cache under test:

- ``CACHES["default"]``: Django's ``RedisCache`` with default options on the node
  ``$TXCACHE_SUITE_REDIS_URL`` (``cache.tests.RedisCacheTests`` finds it by its backend);
- ``TXCACHE``: the nodes and password of ``TxcacheCache`` (``django_cache_suite.cases``),
  from ``$TXCACHE_SUITE_NODES`` and ``$TXCACHE_SUITE_PASSWORD``.
"""

import os

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3"},
    "other": {"ENGINE": "django.db.backends.sqlite3"},
}

SECRET_KEY = "django_tests_secret_key"

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

USE_TZ = False

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["TXCACHE_SUITE_REDIS_URL"],
    }
}

TXCACHE = {
    "NODES": os.environ["TXCACHE_SUITE_NODES"],
    "PASSWORD": os.environ["TXCACHE_SUITE_PASSWORD"],
}

TEST_RUNNER = "django_cache_suite.runner.RecordingRunner"
