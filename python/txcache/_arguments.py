"""The canonical encoding of a cacheable call's arguments: equal bytes only for arguments
that are the same to the function (docs/library.md, "What a key names").

Every supported type has a tag of its own, so ``1``, ``1.0``, ``True`` and ``"1"`` never
collide; a type without a canonical form raises :class:`UnsupportedArgument` (guessing with
``repr`` or ``id`` would let two different calls share a key).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from txcache.errors import UnsupportedArgument

__all__ = ["encode_argument"]


def encode_argument(value: Any) -> bytes:
    """The canonical bytes of ``value``: equal for values that are the same argument, and
    tagged by type so that ``1``, ``1.0``, ``True`` and ``"1"`` never collide."""
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value)
    if isinstance(value, enum.Enum):
        cls = type(value)
        inner = encode_argument(value.value)
        return b"E" + f"{cls.__module__}.{cls.__qualname__}".encode() + b"\0" + inner
    raise UnsupportedArgument(f"type {type(value).__qualname__} has no canonical encoding")


def _sized(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("<I", len(body)) + body


def _sequence(tag: bytes, items: Any) -> bytes:
    return _sized(tag, b"".join(_sized(b"", encode_argument(item)) for item in items))


def _unordered(tag: bytes, items: Any) -> bytes:
    return _sized(tag, b"".join(sorted(_sized(b"", encode_argument(i)) for i in items)))


def _mapping(value: Mapping[Any, Any]) -> bytes:
    pairs = sorted(
        _sized(b"", encode_argument(key)) + _sized(b"", encode_argument(item))
        for key, item in value.items()
    )
    return _sized(b"D", b"".join(pairs))


def _float(value: float) -> bytes:
    if math.isnan(value):
        return b"fnan"  # every NaN is the same argument
    return b"f" + struct.pack("<d", value)  # keeps -0.0 apart from 0.0, as repr does


def _datetime(value: datetime.datetime) -> bytes:
    return b"T" + value.isoformat().encode() + b"|" + str(value.fold).encode()


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    type(None): lambda _: b"N",
    bool: lambda v: b"b1" if v else b"b0",
    int: lambda v: b"i" + format(v, "x").encode(),  # hex: no digit limit
    float: _float,
    str: lambda v: b"s" + v.encode("utf-8", "surrogatepass"),
    bytes: lambda v: b"y" + v,
    bytearray: lambda v: b"y" + bytes(v),
    decimal.Decimal: lambda v: b"d" + str(v).encode(),
    datetime.datetime: _datetime,
    datetime.date: lambda v: b"a" + v.isoformat().encode(),
    datetime.time: lambda v: b"t" + v.isoformat().encode(),
    datetime.timedelta: lambda v: b"v" + repr((v.days, v.seconds, v.microseconds)).encode(),
    uuid.UUID: lambda v: b"u" + v.bytes,
    tuple: lambda v: _sequence(b"(", v),
    list: lambda v: _sequence(b"[", v),
    dict: _mapping,
    set: lambda v: _unordered(b"{", v),
    frozenset: lambda v: _unordered(b"{", v),
}
