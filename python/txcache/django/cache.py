"""Django's cache framework on txcache nodes: a ``CACHES`` backend served by ``txcached``.

Django's own ``RedisCache`` works against ``txcached`` unchanged: the node speaks the Redis
commands it sends (docs/node.md, "RESP3"). :class:`TxcacheCache` is that backend with
what an application already running txcache needs:

- ``LOCATION`` names txcache nodes, ``host:port`` each (a comma-separated string or a
  list; redis-py URLs are taken too), and every key lives on exactly one of them, placed
  by the library's consistent hashing. ``RedisCache`` instead writes everything to its
  first server and reads from the others as replicas; txcache nodes are independent
  shards that replicate nothing, so a read from another node would miss.
- The nodes' ``--password`` (Redis ``AUTH``).
- Defaults from the ``TXCACHE`` Django setting (``"NODES"``, ``"PASSWORD"``), then from the
  environment (``TXCACHE_NODES``, ``TXCACHE_PASSWORD``), as the library reads them.

The entries are plain Redis keys with Django's own expiry, beside the library's versioned
entries on the same nodes. docs/django-cache.md has the configuration and what Django's
cache tests show.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any

import redis
from django.conf import settings
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.core.exceptions import ImproperlyConfigured

from txcache._serialize import SafeSerializer
from txcache.integration import NodeRing, parse_address

__all__ = ["PlainDataSerializer", "TxcacheCache", "TxcacheCacheClient"]


class PlainDataSerializer:
    """``OPTIONS["serializer"]`` for a cache whose values are plain data: txcache's
    code-free format (:class:`txcache.SafeSerializer`, tagged with ``TXCACHE["SECRET"]`` or
    ``TXCACHE_SECRET`` if set) instead of Django's ``pickle``, so that whoever can write to
    the nodes cannot make the application run code; integers stay plain, for ``incr``.
    A value of another type raises ``UnsupportedValue`` when set; bytes it did not write
    raise ``ForeignValue`` when read."""

    def __init__(self, protocol: int | None = None) -> None:
        """``protocol`` is pickle's, which Django passes: unused."""
        given = getattr(settings, "TXCACHE", None)
        secret = given.get("SECRET") if isinstance(given, Mapping) else None
        secret = secret or os.environ.get("TXCACHE_SECRET") or None
        self._safe = SafeSerializer(secret.encode() if secret else None)

    def dumps(self, value: Any) -> bytes | int:
        """``value``'s bytes; an ``int`` as it is (the node's ``INCR`` reads it)."""
        if type(value) is int:
            return value
        return self._safe.dumps(value)

    def loads(self, data: bytes) -> Any:
        """The value ``data`` holds."""
        try:
            return int(data)
        except ValueError:
            return self._safe.loads(data)


class _Server:
    """A node's place on the ring: its URL, and its index in the client's server list."""

    def __init__(self, address: str, index: int) -> None:
        self.address = address
        self.index = index

    def is_up(self) -> bool:
        # The ring asks only to pick a node for questions any node answers, which this
        # backend never does; redis-py reconnects by itself.
        return True

    def close(self) -> None:
        pass


# Django's RedisCacheClient has no type information (mypy takes Django as Any).
class TxcacheCacheClient(RedisCacheClient):  # type: ignore[misc]
    """Django's ``RedisCacheClient`` over independent shards: a key's commands go to the
    node that holds it, and the commands naming several keys go to each node with its
    share. Serialization, connection pools and the options are Django's own."""

    def __init__(self, servers: list[str], **options: Any) -> None:
        """``servers``: one ``redis://`` URL per node; ``options`` as ``RedisCacheClient``
        takes them (the connection pool's keyword arguments, ``serializer``, …)."""
        super().__init__(servers, **options)
        self._ring = NodeRing([_Server(url, index) for index, url in enumerate(servers)])

    def get_client(self, key: str | None = None, *, write: bool = False) -> redis.Redis:
        """A client of the node that holds ``key`` (the first node when there is none).
        ``write`` does not matter: each node is the only copy of its keys."""
        client: redis.Redis = self._client(connection_pool=self._pool(self._index(key)))
        return client

    def _get_connection_pool_index(self, write: bool) -> int:
        # RedisCacheClient's own writes to the first server and reads from the others, its
        # replicas. Only keyless callers get here, and the first node is as good as any.
        return 0

    def _index(self, key: str | None) -> int:
        return 0 if key is None else self._ring.node_for(key.encode()).index

    def _pool(self, index: int) -> redis.ConnectionPool:
        if index not in self._pools:
            self._pools[index] = self._pool_class.from_url(
                self._servers[index], **self._pool_options
            )
        pool: redis.ConnectionPool = self._pools[index]
        return pool

    def _clients_by_node(self, keys: Iterable[str]) -> list[tuple[redis.Redis, list[str]]]:
        """``keys`` grouped by the node that holds them, each group with that node's client."""
        groups: dict[int, list[str]] = {}
        for key in keys:
            groups.setdefault(self._index(key), []).append(key)
        return [
            (self._client(connection_pool=self._pool(index)), group)
            for index, group in groups.items()
        ]

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """``MGET`` on each node for its keys; the keys found, with their values."""
        found: dict[str, Any] = {}
        for client, group in self._clients_by_node(keys):
            values = client.mget(group)
            found.update(
                (key, self._serializer.loads(value))
                for key, value in zip(group, values, strict=True)
                if value is not None
            )
        return found

    def set_many(self, data: Mapping[str, Any], timeout: int | None) -> None:
        """``MSET`` and an ``EXPIRE`` per key on each node, in one transaction per node (as
        ``RedisCacheClient`` does on its one write server)."""
        for client, group in self._clients_by_node(data):
            pipeline = client.pipeline()
            pipeline.mset({key: self._serializer.dumps(data[key]) for key in group})
            if timeout is not None:
                for key in group:
                    pipeline.expire(key, timeout)
            pipeline.execute()

    def delete_many(self, keys: Iterable[str]) -> None:
        """``DEL`` on each node for its keys."""
        for client, group in self._clients_by_node(keys):
            client.delete(*group)

    def clear(self) -> bool:
        """``FLUSHDB`` on every node: every plain key goes (the library's versioned entries
        stay); ``True`` when every node said so."""
        cleared = [
            bool(self._client(connection_pool=self._pool(index)).flushdb())
            for index in range(len(self._servers))
        ]
        return all(cleared)


class TxcacheCache(RedisCache):  # type: ignore[misc]
    """``BACKEND: "txcache.django.cache.TxcacheCache"``: Django's ``RedisCache`` on txcache
    nodes sharded by key (:class:`TxcacheCacheClient`).

    ``LOCATION`` is ``host:port`` (``[v6]:port``) of each node, or a redis-py URL
    (``redis://…``), in a comma-separated string or a list; empty, it is the ``"NODES"``
    of the ``TXCACHE`` setting, else ``$TXCACHE_NODES``. ``OPTIONS`` go to redis-py's
    connection pools, as with ``RedisCache``; without a ``"password"`` there, the
    ``"PASSWORD"`` of ``TXCACHE`` (else ``$TXCACHE_PASSWORD``) is sent to the nodes, if
    any.

    A ``LOCATION`` (or ``NODES``) that names no node or a malformed address is
    ``ImproperlyConfigured`` when the cache is first used, not when Django makes it: its
    system checks make every cache, and report a bad ``NODES`` as ``txcache.E008``."""

    _options: dict[str, Any]

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        """``server``: the ``LOCATION``; ``params``: the rest of the ``CACHES`` entry."""
        source = "LOCATION" if server else "TXCACHE['NODES']"
        self._unusable: ImproperlyConfigured | None = None
        try:
            urls = _node_urls(server or _txcache_setting("NODES") or "", source)
        except ImproperlyConfigured as error:
            self._unusable, urls = error, []
        super().__init__(urls, params)
        self._class = TxcacheCacheClient
        password = _txcache_setting("PASSWORD")
        if "password" not in self._options and password:
            self._options = {**self._options, "password": password}

    @cached_property
    def _cache(self) -> Any:
        """The client, made on first use (as ``RedisCache``'s): where the nodes named are
        unusable, their ``ImproperlyConfigured`` instead."""
        if self._unusable is not None:
            raise self._unusable
        return self._class(self._servers, **self._options)


def _txcache_setting(name: str) -> Any:
    """``TXCACHE[name]`` in Django's settings, else ``$TXCACHE_<name>`` (``None`` if
    neither is set, or either is empty)."""
    txcache = getattr(settings, "TXCACHE", None) or {}
    if not isinstance(txcache, Mapping):
        raise ImproperlyConfigured("the TXCACHE setting must be a dict")
    return txcache.get(name) or os.environ.get(f"TXCACHE_{name}") or None


def _node_urls(location: str | Iterable[str], source: str = "LOCATION") -> list[str]:
    """``redis://`` URLs of the nodes ``location`` (from ``source``, named in errors)
    names; ImproperlyConfigured when it names none or an address is malformed."""
    items = re.split("[;,]", location) if isinstance(location, str) else list(location)
    addresses = [item.strip() for item in items if item.strip()]
    if not addresses:
        raise ImproperlyConfigured(
            "TxcacheCache needs the cache nodes: LOCATION, TXCACHE['NODES'] or TXCACHE_NODES"
        )
    return [_node_url(address, source) for address in addresses]


def _node_url(address: str, source: str) -> str:
    if "://" in address:
        return address  # a redis-py URL already (redis://, rediss://, unix://), as RedisCache's
    try:
        host, port = parse_address(address)
    except ValueError as error:
        raise ImproperlyConfigured(f"TxcacheCache {source}: {error}") from None
    return f"redis://[{host}]:{port}" if ":" in host else f"redis://{host}:{port}"
