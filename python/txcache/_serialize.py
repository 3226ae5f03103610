"""Values in the cache: a code-free, integrity-checked format.

The default :class:`SafeSerializer` writes MessagePack with extension types for the values
query results are made of (tuples, sets, ``Decimal``, dates and times, ``UUID``, big
integers), behind a version byte and a BLAKE2b tag (keyed with the configured secret, if
any). Reading never executes code: there is no class lookup and no ``pickle``. Bytes that
are not ours, or were changed, raise :class:`ForeignValue`, which the library counts as a
miss and logs — an application never sees it.

Only exact types are written (a ``namedtuple``, a ``str`` subclass or a ``bytearray`` would
come back as its base type, so a hit would differ from a miss), nested at most 64 levels:
anything else raises :class:`~txcache.errors.UnsupportedValue`. Datetimes keep their zone:
none, a fixed offset, or a ``zoneinfo.ZoneInfo`` key.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import hmac
import inspect
import logging
import threading
import uuid
import zoneinfo
from typing import Any, Protocol, cast

import msgpack

from txcache.errors import UnsupportedValue

__all__ = ["ForeignValue", "SafeSerializer", "Serializer", "keyed"]

log = logging.getLogger("txcache")

_VERSION = b"\x02"  # 2: the tag covers the key the value is stored under
_TAG_BYTES = 8
_INT64 = range(-(2**63), 2**64)
_MAX_DEPTH = 64
_SCALARS = frozenset(
    (type(None), bool, int, float, str, bytes, decimal.Decimal, datetime.date, uuid.UUID)
) | {datetime.timedelta}
_CONTAINERS = frozenset((list, tuple, set, frozenset))


class ForeignValue(ValueError):
    """The bytes were not written by this serializer (with this secret), or were changed."""


class Serializer(Protocol):
    """What a serializer provides. ``loads`` raises :class:`ForeignValue` (or any
    ``ValueError``) for bytes it did not write; it must never execute code from them.
    ``key`` is the cache key the bytes are stored under: a serializer that binds them to
    it (as :class:`SafeSerializer` does) refuses bytes moved to another key."""

    def dumps(self, value: Any, *, key: bytes = b"") -> bytes:
        """The bytes of ``value``; :class:`~txcache.errors.UnsupportedValue` if impossible."""
        ...

    def loads(self, data: bytes, *, key: bytes = b"") -> Any:
        """The value ``data`` holds."""
        ...


def keyed(serializer: Any) -> Serializer:
    """``serializer`` as the library calls it, with the key: one whose ``dumps`` and
    ``loads`` take no ``key`` (written for an earlier release) is adapted, its values then
    bound to no key — a warning says so once."""
    if all(_takes_key(getattr(serializer, name)) for name in ("dumps", "loads")):
        return cast(Serializer, serializer)
    log.warning(
        "the serializer %r takes no key= in dumps() and loads(): the values it writes are "
        "bound to no cache key, so a client of the cache nodes could move one to another "
        "key unnoticed; give both a keyword parameter key (bytes) and tag the value with it",
        serializer,
    )
    return _Keyless(serializer)


def _takes_key(method: Any) -> bool:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "key" or p.kind is p.VAR_KEYWORD for p in parameters)


class _Keyless:
    """A serializer of the old protocol, called with the key it ignores."""

    def __init__(self, serializer: Any) -> None:
        self._serializer = serializer

    def dumps(self, value: Any, *, key: bytes = b"") -> bytes:
        data: bytes = self._serializer.dumps(value)
        return data

    def loads(self, data: bytes, *, key: bytes = b"") -> Any:
        return self._serializer.loads(data)


_TUPLE, _SET, _FROZENSET, _DECIMAL, _DATETIME, _DATE, _TIME, _TIMEDELTA = range(1, 9)
_UUID, _BIGINT = 9, 10


class SafeSerializer:
    """MessagePack plus extension types, behind a version byte and an integrity tag."""

    def __init__(self, secret: bytes | None = None) -> None:
        """``secret`` keys the tag, so only holders of it can write values the library will
        read; without one the tag still detects corruption and foreign bytes."""
        self._key = secret or b""

    def dumps(self, value: Any, *, key: bytes = b"") -> bytes:
        """See :class:`Serializer`; the tag covers ``key`` and the body."""
        _check(value, 0)
        try:
            body: bytes = msgpack.packb(value, default=_pack_extension, strict_types=True)
        except (TypeError, ValueError, OverflowError) as error:
            raise UnsupportedValue(str(error)) from None
        return _VERSION + self._tag(key, body) + body

    def loads(self, data: bytes, *, key: bytes = b"") -> Any:
        """See :class:`Serializer`."""
        header = 1 + _TAG_BYTES
        if len(data) < header or data[:1] != _VERSION:
            raise ForeignValue("not a txcache value (unknown format or version)")
        body = data[header:]
        if not hmac.compare_digest(data[1:header], self._tag(key, body)):
            raise ForeignValue(
                "integrity tag mismatch (changed, written with another secret, or stored "
                "under another key)"
            )
        _depth.level = 0
        try:
            return _unpack(body)
        except ForeignValue:
            raise
        except Exception as error:  # whatever the bytes provoke, it is not our value
            raise ForeignValue(f"undecodable value: {error!r}") from None

    def _tag(self, key: bytes, body: bytes) -> bytes:
        tag = hashlib.blake2b(len(key).to_bytes(4, "big"), digest_size=_TAG_BYTES, key=self._key)
        tag.update(key)
        tag.update(body)
        return tag.digest()


def _check(value: Any, depth: int) -> None:
    """Refuse what cannot come back as itself, before anything is written."""
    if depth > _MAX_DEPTH:
        raise UnsupportedValue(f"values nested deeper than {_MAX_DEPTH} levels cannot be cached")
    kind = type(value)
    if kind in _SCALARS:
        return
    if kind in _CONTAINERS:
        for item in value:
            _check(item, depth + 1)
    elif kind is dict:
        for key, item in value.items():
            _check(key, depth + 1)
            _check(item, depth + 1)
    elif kind is datetime.datetime or kind is datetime.time:
        if value.tzinfo is not None and _zone_name(value.tzinfo) is None:
            raise UnsupportedValue(
                f"time zone {value.tzinfo!r} is not a fixed offset or a ZoneInfo"
            )
    else:
        raise UnsupportedValue(
            f"values of type {kind.__qualname__} cannot be cached by the default serializer "
            "(exact None/bool/int/float/str/bytes/list/tuple/dict/set, Decimal, date/time, "
            f"UUID){_orm_hint(kind)}"
        )


def _orm_hint(kind: type) -> str:
    """What to return instead of an SQLAlchemy or Django ORM instance, row or queryset (by
    duck type: the serializer imports neither)."""
    package = kind.__module__.split(".")[0]
    if hasattr(kind, "_sa_class_manager") or package == "sqlalchemy":
        return (
            ": an SQLAlchemy ORM instance or row is not plain data; return "
            "txcache.sqlalchemy.to_dict(instance), rows(result) or dicts(result) instead "
            "(docs/sqlalchemy.md)"
        )
    if (hasattr(kind, "_meta") and hasattr(kind, "_default_manager")) or package == "django":
        return (
            ": a Django model instance or queryset is not plain data; return "
            "list(queryset.values()) or .values_list(), or cache the queryset itself with "
            ".txcache() (docs/django.md)"
        )
    return (
        ": return plain data — a tuple or dict per row (txcache.query gives tuples unless "
        "a row_factory says otherwise), lists of them, a dataclass's asdict()"
    )


def _zone_name(zone: datetime.tzinfo) -> str | None:
    """``""`` for a fixed offset (the ISO text carries it), the key of a ``ZoneInfo``,
    ``None`` for any other ``tzinfo``."""
    if type(zone) is datetime.timezone:
        return ""
    if type(zone) is zoneinfo.ZoneInfo and zone.key:
        return str(zone.key)
    return None


_depth = threading.local()


def _unpack(data: bytes) -> Any:
    # msgpack's C decoder recurses through our extension hook: bound the depth ourselves.
    _depth.level += 1
    try:
        if _depth.level > _MAX_DEPTH + 1:
            raise ForeignValue(f"nested deeper than {_MAX_DEPTH} levels")
        return msgpack.unpackb(
            data, ext_hook=_unpack_extension, strict_map_key=False, use_list=True
        )
    finally:
        _depth.level -= 1


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, default=_pack_extension, strict_types=True)
    return packed


def _pack_extension(value: Any) -> msgpack.ExtType:
    kind = type(value)
    if kind is tuple:
        return msgpack.ExtType(_TUPLE, _pack(list(value)))
    if kind is set or kind is frozenset:
        code = _SET if kind is set else _FROZENSET
        # In the order of their bytes, not of their hashes: equal sets, equal bytes, in
        # every process (the node compares bytes to tell extensions from nondeterminism).
        return msgpack.ExtType(code, _pack(sorted(value, key=_pack)))
    if kind is int and value not in _INT64:
        return msgpack.ExtType(_BIGINT, str(value).encode())
    simple = _SIMPLE.get(kind)
    if simple is not None:
        code, encode = simple
        return msgpack.ExtType(code, encode(value))
    raise UnsupportedValue(
        f"values of type {kind.__qualname__} cannot be cached by the default serializer "
        "(exact None/bool/int/float/str/bytes/list/tuple/dict/set, Decimal, date/time, UUID)"
    )


_SIMPLE: dict[type, tuple[int, Any]] = {
    decimal.Decimal: (_DECIMAL, lambda v: str(v).encode()),
    datetime.datetime: (
        _DATETIME,
        lambda v: f"{v.isoformat()}|{v.fold}|{_zone_name(v.tzinfo) if v.tzinfo else ''}".encode(),
    ),
    datetime.date: (_DATE, lambda v: v.isoformat().encode()),
    datetime.time: (_TIME, lambda v: f"{v.isoformat()}|{v.fold}|".encode()),
    datetime.timedelta: (_TIMEDELTA, lambda v: _pack([v.days, v.seconds, v.microseconds])),
    uuid.UUID: (_UUID, lambda v: v.bytes),
}


def _unpack_extension(code: int, data: bytes) -> Any:
    if code in (_TUPLE, _SET, _FROZENSET):
        items = _unpack(data)
        return {_TUPLE: tuple, _SET: set, _FROZENSET: frozenset}[code](items)
    text = data.decode() if code not in (_UUID, _TIMEDELTA) else ""
    if code == _DECIMAL:
        return decimal.Decimal(text)
    if code in (_DATETIME, _TIME):
        iso, fold, zone = text.split("|")
        parse = datetime.datetime if code == _DATETIME else datetime.time
        value = parse.fromisoformat(iso).replace(fold=int(fold))
        if zone:  # the wall time and fold name the instant in that zone
            value = value.replace(tzinfo=zoneinfo.ZoneInfo(zone))
        return value
    if code == _DATE:
        return datetime.date.fromisoformat(text)
    if code == _TIMEDELTA:
        days, seconds, micros = msgpack.unpackb(data)
        return datetime.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == _UUID:
        return uuid.UUID(bytes=data)
    if code == _BIGINT:
        return int(text)
    raise ForeignValue(f"unknown extension type {code}")
