"""Django's own cache-backend test cases (``cache.tests.RedisCacheTests`` in Django's source)
run against real ``txcached`` nodes: the settings module Django's ``runtests.py`` is given,
the test runner that records the outcome, the cases for ``TxcacheCache``, and the harness
that fetches Django's tests and runs them (``tests/test_django_cache_backend.py``)."""
