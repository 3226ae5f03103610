"""Django's cache framework on txcached: ``txcache.django.cache.TxcacheCache`` against real
nodes (one, several, with a password), and Django's own cache-backend cases
(``cache.tests.RedisCacheTests``) run by Django's ``runtests.py`` both on Django's
``RedisCache`` unchanged and on ``TxcacheCache``."""

from __future__ import annotations

import pickle
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured

import txcache
from conftest import StartNode
from django_cache_suite import harness
from txcache._serialize import ForeignValue
from txcache.django import cache as cache_module
from txcache.django.cache import TxcacheCache
from txcache.stack import NodeProcess, wait_until

PASSWORD = "django-cache-secret"

# The cases of Django's suite that do not pass, with the reason (docs/django-cache.md).
# Django's RedisCache passes every case against txcached; these three test
# RedisCacheClient's internals, which TxcacheCache replaces on purpose.
KNOWN_FAILURES = {
    "django_cache_suite.cases.TxcacheCacheTests.test_cache_client_class": (
        "asserts the client class is RedisCacheClient; TxcacheCache's is its subclass "
        "TxcacheCacheClient"
    ),
    "django_cache_suite.cases.TxcacheCacheTests.test_get_connection_pool_index": (
        "asserts reads go to a server other than the first (RedisCache's replicas); txcache "
        "nodes are shards, and keyless callers get the first"
    ),
    "django_cache_suite.cases.TxcacheCacheTests.test_incr_write_connection": (
        "mocks RedisCacheClient.get_client, which TxcacheCacheClient overrides to pick the "
        "key's node, so the mock is never called"
    ),
}

# Skipped by Django itself for every Redis backend: the cull caches are excluded for Redis.
DJANGOS_SKIPS = {
    f"{case}.{test}"
    for case in (
        "cache.tests.RedisCacheTests",
        "django_cache_suite.cases.TxcacheCacheTests",
    )
    for test in ("test_cull", "test_cull_delete_when_store_empty", "test_zero_cull")
}

Settings = Callable[..., None]


@pytest.fixture(autouse=True)
def django_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Django settings as the backend reads them, without configuring Django for the whole
    test process: no ``TXCACHE`` setting and no ``TXCACHE_*`` environment unless a test
    sets them (the returned function sets ``TXCACHE``)."""
    for name in ("TXCACHE_NODES", "TXCACHE_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    stand_in = types.SimpleNamespace()
    monkeypatch.setattr(cache_module, "settings", stand_in)

    def set_txcache(**txcache: object) -> None:
        stand_in.TXCACHE = txcache

    return set_txcache


MakeCache = Callable[..., TxcacheCache]


@pytest.fixture
def make_cache() -> Iterator[MakeCache]:
    """``TxcacheCache(location, params)``, its connections closed after the test (Django's
    ``RedisCache`` keeps its pools for the life of the process)."""
    made: list[TxcacheCache] = []

    def make(location: str | list[str], params: dict[str, object] | None = None) -> TxcacheCache:
        cache = TxcacheCache(location, params or {})
        made.append(cache)
        return cache

    yield make
    for cache in made:
        if cache._unusable is not None or "_cache" not in cache.__dict__:
            continue  # never connected
        for pool in cache._cache._pools.values():
            pool.disconnect()


@pytest.fixture
def nodes(start_node: StartNode) -> list[NodeProcess]:
    """Three nodes: the backend spreads keys over them."""
    return [start_node("--max-memory", "64mb") for _ in range(3)]


@pytest.fixture
def raw(nodes: list[NodeProcess]) -> Iterator[list[redis.Redis]]:
    """A redis-py client of each of ``nodes``, to see where entries are."""
    clients = [redis.Redis(host=node.host, port=node.port, socket_timeout=10) for node in nodes]
    yield clients
    for client in clients:
        client.close()


def location(nodes: list[NodeProcess]) -> str:
    return ",".join(node.address for node in nodes)


def holder(raw: list[redis.Redis], key: str) -> list[int]:
    """The indexes of the nodes that hold ``key``."""
    return [index for index, client in enumerate(raw) if client.exists(key)]


def test_get_set_add_delete(nodes: list[NodeProcess], make_cache: MakeCache) -> None:
    cache = make_cache(nodes[0].address)
    assert cache.get("missing") is None
    assert cache.get("missing", "default") == "default"
    cache.set("key", {"a": [1, 2]})
    assert cache.get("key") == {"a": [1, 2]}
    assert cache.add("key", "other") is False
    assert cache.add("new", "value") is True
    assert cache.get("new") == "value"
    assert cache.has_key("new")
    assert cache.get_or_set("computed", lambda: 42) == 42
    assert cache.get_or_set("computed", lambda: 0) == 42
    assert cache.delete("key") is True
    assert cache.delete("key") is False
    assert cache.get("key") is None


def test_incr_and_decr(nodes: list[NodeProcess], make_cache: MakeCache) -> None:
    cache = make_cache(location(nodes))
    with pytest.raises(ValueError, match="not found"):
        cache.incr("counter")
    cache.set("counter", 10)
    assert cache.incr("counter") == 11
    assert cache.incr("counter", 9) == 20
    assert cache.decr("counter", 25) == -5
    assert cache.get("counter") == -5
    cache.set("text", "abc")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        cache.incr("text")


def test_keys_are_spread_over_the_nodes_one_node_each(
    nodes: list[NodeProcess], raw: list[redis.Redis], make_cache: MakeCache
) -> None:
    cache = make_cache(location(nodes))
    data = {f"k{i}": i * 10 for i in range(60)}
    assert cache.set_many(data) == []
    keys = [cache.make_key(key) for key in data]
    assert all(len(holder(raw, key)) == 1 for key in keys), "each key on exactly one node"
    assert all(client.dbsize() > 0 for client in raw), "every node holds some"
    assert cache.get_many([*data, "missing"]) == data
    cache.set("single", "v")
    assert cache.get_many(["single", "k1"]) == {"single": "v", "k1": 10}
    cache.delete_many([f"k{i}" for i in range(30)])
    assert cache.get_many(list(data)) == {f"k{i}": i * 10 for i in range(30, 60)}
    # Nodes listed in another order, or as a list: the same node for each key.
    shuffled = make_cache([nodes[2].address, nodes[0].address, nodes[1].address])
    assert shuffled.get_many(list(data)) == {f"k{i}": i * 10 for i in range(30, 60)}


def test_timeouts_are_the_nodes_expiry(
    nodes: list[NodeProcess], raw: list[redis.Redis], make_cache: MakeCache
) -> None:
    cache = make_cache(location(nodes), {"TIMEOUT": 100})

    def ttl(key: str) -> int:
        (index,) = holder(raw, cache.make_key(key))
        return int(raw[index].ttl(cache.make_key(key)))

    cache.set("default", "v")
    cache.set("forever", "v", timeout=None)
    cache.set("long", "v", timeout=1000)
    cache.set_many({"many1": 1, "many2": 2, "many3": 3}, timeout=500)
    assert [ttl("default"), ttl("forever"), ttl("long")] == [100, -1, 1000]
    assert {ttl(f"many{i}") for i in (1, 2, 3)} == {500}
    cache.set("zero", "v", timeout=0)
    assert cache.add("zero", "v", timeout=0) is True
    assert not cache.has_key("zero"), "a timeout of 0 stores nothing"
    assert cache.touch("default", 2000) is True
    assert ttl("default") == 2000
    assert cache.touch("default", None) is True
    assert ttl("default") == -1
    assert cache.touch("missing", 10) is False
    cache.set("brief", "v", timeout=1)
    cache.set_many({"brief1": 1, "brief2": 2, "brief3": 3}, timeout=1)
    wait_until(
        lambda: cache.get_many(["brief", "brief1", "brief2", "brief3"]) == {},
        "the entries with a one-second timeout to expire",
    )
    assert cache.get("forever") == "v"


def test_clear_empties_every_node_but_keeps_versioned_entries(
    nodes: list[NodeProcess], raw: list[redis.Redis], make_cache: MakeCache
) -> None:
    cache = make_cache(location(nodes))
    cache.set_many({f"k{i}": i for i in range(30)})
    for client in raw:
        assert client.execute_command("TXSET", "versioned", "v", 1, 2)[0] == b"inserted"
    assert cache.clear() is True
    assert cache.get_many([f"k{i}" for i in range(30)]) == {}
    for client in raw:
        assert client.dbsize() == 1
        assert client.execute_command("TXGET", "versioned", 1, 1)[0] == b"v"


def test_password(
    start_node: StartNode,
    django_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    make_cache: MakeCache,
) -> None:
    node = start_node("--password", PASSWORD)
    with pytest.raises(redis.AuthenticationError):
        make_cache(node.address).get("k")
    by_option = make_cache(node.address, {"OPTIONS": {"password": PASSWORD}})
    by_option.set("k", "v")
    assert by_option.get("k") == "v"
    monkeypatch.setenv("TXCACHE_PASSWORD", PASSWORD)
    assert make_cache(node.address).get("k") == "v", "from the environment"
    django_settings(PASSWORD="wrong")
    with pytest.raises(redis.AuthenticationError):
        make_cache(node.address).get("k")
    assert make_cache(node.address, {"OPTIONS": {"password": PASSWORD}}).get("k") == "v"
    django_settings(PASSWORD=PASSWORD)
    assert make_cache(node.address).get("k") == "v", "from the TXCACHE setting"


def test_the_plain_data_serializer_never_unpickles(
    start_node: StartNode, make_cache: MakeCache
) -> None:
    """With it, bytes written to the nodes by anyone are never code to the application:
    pickle's are refused; plain data and integers (incr) work as with Django's own."""
    node = start_node()
    options = {"OPTIONS": {"serializer": "txcache.django.cache.PlainDataSerializer"}}
    cache = make_cache(node.address, options)
    cache.set("order", {"id": 7, "lines": [(1, "lamp")]})
    assert cache.get("order") == {"id": 7, "lines": [(1, "lamp")]}
    cache.set("hits", 1)
    assert cache.incr("hits") == 2
    with pytest.raises(txcache.UnsupportedValue):
        cache.set("thing", object())
    with redis.Redis(host=node.host, port=node.port, protocol=2) as raw:
        raw.set(cache.make_and_validate_key("order"), pickle.dumps({"id": 7}))
    with pytest.raises(ForeignValue):
        cache.get("order")


def test_nodes_from_the_setting_or_the_environment(
    nodes: list[NodeProcess],
    django_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    make_cache: MakeCache,
) -> None:
    make_cache(location(nodes)).set_many({f"k{i}": i for i in range(20)})
    expected = {f"k{i}": i for i in range(20)}
    monkeypatch.setenv("TXCACHE_NODES", location(nodes))
    assert make_cache("").get_many(list(expected)) == expected
    monkeypatch.setenv("TXCACHE_NODES", "127.0.0.1:1")
    django_settings(NODES=[node.address for node in nodes])
    assert make_cache("").get_many(list(expected)) == expected
    semicolons = ";".join(f" {node.address} " for node in nodes)
    assert make_cache(semicolons).get_many(list(expected)) == expected


def test_malformed_locations_are_refused_at_first_use(
    django_settings: Settings, monkeypatch: pytest.MonkeyPatch, make_cache: MakeCache
) -> None:
    """Not as Django makes the cache: its system checks make every cache (and report a bad
    NODES as txcache.E008), which must not end in a traceback."""
    with pytest.raises(ImproperlyConfigured, match="needs the cache nodes"):
        make_cache("").get("k")
    with pytest.raises(ImproperlyConfigured, match="needs the cache nodes"):
        make_cache(" , ").get("k")
    bad = make_cache("127.0.0.1:6380,localhost")
    for _ in range(2):
        with pytest.raises(ImproperlyConfigured, match="LOCATION: not a host:port address"):
            bad.get("k")
    with pytest.raises(ImproperlyConfigured, match="not a host:port"):
        make_cache("127.0.0.1:http").set("k", 1)
    django_settings(NODES="nonsense")
    with pytest.raises(ImproperlyConfigured, match=r"TXCACHE\['NODES'\]: not a host:port"):
        make_cache("").get("k")
    django_settings(NODES="", PASSWORD="")
    with pytest.raises(ImproperlyConfigured, match="needs the cache nodes"):
        make_cache("").get("k")
    urls = ["redis://[::1]:6380", "redis://127.0.0.1:6381", "rediss://:pw@node:6382/0"]
    assert make_cache("[::1]:6380,127.0.0.1:6381,rediss://:pw@node:6382/0")._servers == urls
    monkeypatch.setattr(cache_module, "settings", types.SimpleNamespace(TXCACHE="nodes"))
    with pytest.raises(ImproperlyConfigured, match="must be a dict"):
        make_cache("").get("k")


def test_djangos_cache_cases(
    start_node: StartNode, pytestconfig: pytest.Config, tmp_path: Path
) -> None:
    """Django's ``RedisCacheTests`` on ``RedisCache`` (one node, default options) and on
    ``TxcacheCache`` (two nodes with a password from the ``TXCACHE`` setting): exactly the
    known cases fail, and exactly Django's own skips are skipped."""
    tests = harness.django_tests(pytestconfig.cache.mkdir("django-tests"))
    plain = start_node("--max-memory", "64mb")
    shards = [start_node("--max-memory", "64mb", "--password", PASSWORD) for _ in range(2)]
    environment = {
        "TXCACHE_SUITE_REDIS_URL": f"redis://{plain.address}",
        "TXCACHE_SUITE_NODES": location(shards),
        "TXCACHE_SUITE_PASSWORD": PASSWORD,
    }
    labels = ["cache.tests.RedisCacheTests", "django_cache_suite.cases.TxcacheCacheTests"]
    outcome = harness.run_cases(tests, labels, environment, tmp_path / "results.json")
    failed = set(outcome["failures"]) | set(outcome["errors"])
    assert failed == set(KNOWN_FAILURES), outcome["output"]
    assert set(outcome["skipped"]) == DJANGOS_SKIPS, outcome["output"]
    assert outcome["unexpected_successes"] == []
    assert outcome["ran"] > 2 * 50, "both classes ran"
