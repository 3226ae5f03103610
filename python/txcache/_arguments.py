"""The canonical encoding of a cacheable call's arguments: equal bytes exactly for arguments a
function cannot tell apart (docs/library.md, "What a key names").

Two values share an encoding only if they have one type and one value down to what ``==``
forgets: a ``dict``'s insertion order, a datetime's zone (not just its offset) and ``fold``, a
``Decimal``'s exponent and sign (``1.0``, ``1.00``, ``-0``; ``NaN``, ``sNaN``), a float's
64 bits (``-0.0``; the sign and payload of a NaN), a UUID's ``is_safe``. The encoding is
injective, and :func:`decode_argument` reverses it. A type this module does not know, a
subclass of one it knows (a namedtuple, a ``str`` subclass, a ``datetime`` subclass) and a
zone without a canonical name raise :class:`UnsupportedArgument`: guessing with ``repr`` or
``id`` would let two different calls share a key.

Each value is a tag byte then its body; an item of a container is its length (4 bytes,
little-endian) then its encoding::

    n  None                  ?0 ?1  False, True        I  int (hex)       F  float (8 bytes)
    S  str (UTF-8)           B  bytes                  W  bytearray       M  Decimal (str)
    Y  date                  H  time + zone            @  datetime + zone V  timedelta
    U  UUID + is_safe        Z  zone                   )  tuple           ]  list
    }  dict (k, v, ...)      <  set                    >  frozenset       e  Enum member

A zone is nothing (naive), ``z`` + the key of a ``zoneinfo.ZoneInfo``, or ``o`` (unnamed) /
``O`` + name, after the offset, for a ``datetime.timezone``: what its pickle keeps. Retired
tags, never to be reused (a process of an older release sharing the cache would read another
call's result under them): ``N b i f s y d T a t v u ( [ D { E``.

Decisions:

- Sets and frozensets are keyed by their contents (their items' encodings, sorted). Their
  iteration order is not part of their value: the language promises none, and it follows
  string hashing (salted in each process) and the history of additions and removals, so
  equal sets iterate differently across processes and call sites. A function whose result
  depends on it returns different results for one argument already; keying by order would
  split the cache of every other function without making that one correct (it should
  iterate ``sorted(s)``, or take a list). A dict's insertion order is part of its value,
  kept by the language in every process, so it is in the key.
- A ``ZoneInfo`` is keyed by its name, so it must be the instance ``ZoneInfo(key)`` returns:
  datetimes sharing one tzinfo object subtract by wall clock, those in two objects by
  instant, so an instance from ``ZoneInfo.no_cache`` (or from before ``clear_cache``) is
  refused, as is one read from a file (its key is ``None``). Other tzinfo classes (pytz,
  dateutil, custom ones) have no canonical name and are refused. The rules a name stands
  for are the process's tz database: processes sharing a cache must share its version. A
  zone passed as an argument itself is keyed by the same rules.
- An Enum member is keyed by its class's module and qualified name and its value; a class
  that cannot be found by those names (one defined inside a function) is refused.
- Identity is not in the key: two arguments that are one list and two equal lists share it.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import importlib
import struct
import sys
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

from txcache.errors import UnsupportedArgument

__all__ = ["decode_argument", "encode_argument"]

_LENGTH = struct.Struct("<I")
_DOUBLE = struct.Struct("<d")
_DATE = struct.Struct("<HBB")
_TIME = struct.Struct("<BBBIB")  # hour, minute, second, microsecond, fold
_DATETIME = struct.Struct("<HBBBBBIB")  # the date's fields, then the time's
_TIMEDELTA = struct.Struct("<iII")  # days, seconds, microseconds
_UTC = b"o" + _TIMEDELTA.pack(0, 0, 0)  # the zone of datetime.UTC, the most common
_SAFETY = {uuid.SafeUUID.safe: b"s", uuid.SafeUUID.unsafe: b"u", uuid.SafeUUID.unknown: b"?"}
_SAFETY_OF = {code: safety for safety, code in _SAFETY.items()}
_ZONE_ADVICE = (
    "pass zoneinfo.ZoneInfo(name) (ZoneInfo('Europe/London')) or a fixed datetime.timezone"
)


def encode_argument(value: Any) -> bytes:
    """The canonical bytes of ``value``: equal exactly for values a function cannot tell
    apart; :class:`UnsupportedArgument` for a value without a canonical form."""
    try:
        encoder = _ENCODERS.get(type(value))
        if encoder is not None:
            return encoder(value)
        if isinstance(value, enum.Enum):
            return _enum(value)
    except RecursionError:
        raise UnsupportedArgument("the value is nested too deeply or contains itself") from None
    raise UnsupportedArgument(_refusal(type(value)))


def _refusal(kind: type) -> str:
    name = f"{kind.__module__}.{kind.__qualname__}"
    if issubclass(kind, datetime.tzinfo):
        return f"tzinfo {name} has no canonical name: {_ZONE_ADVICE}"
    base = next((b for b in kind.__mro__[1:] if b in _ENCODERS), None)
    if base is None:
        return f"type {kind.__qualname__} has no canonical encoding"
    return (
        f"type {kind.__qualname__} has no canonical encoding: it is a subclass of "
        f"{base.__qualname__}, which a function can tell apart from it; pass a plain "
        f"{base.__qualname__}"
    )


# --- encoding ------------------------------------------------------------------------------


def _frame(encoded: bytes) -> bytes:
    return _LENGTH.pack(len(encoded)) + encoded


def _items(tag: bytes, values: Iterable[Any]) -> bytes:
    parts = [tag]
    for value in values:
        encoded = encode_argument(value)
        parts += (_LENGTH.pack(len(encoded)), encoded)
    return b"".join(parts)


def _unordered(tag: bytes, values: Iterable[Any]) -> bytes:
    return tag + b"".join(sorted(_frame(encode_argument(value)) for value in values))


def _str(value: str) -> bytes:  # _text, inlined: every str argument goes through here
    try:
        return b"S" + value.encode()
    except UnicodeEncodeError:  # lone surrogates, kept as the code points they are
        return b"S" + value.encode("utf-8", "surrogatepass")


def _text(value: str) -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError:  # lone surrogates, kept as the code points they are
        return value.encode("utf-8", "surrogatepass")


def _timedelta(value: datetime.timedelta) -> bytes:
    return _TIMEDELTA.pack(value.days, value.seconds, value.microseconds)


def _datetime(v: datetime.datetime) -> bytes:
    fields = _DATETIME.pack(
        v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.fold
    )
    return b"@" + fields + _zone(v.tzinfo)


def _time(v: datetime.time) -> bytes:
    fields = _TIME.pack(v.hour, v.minute, v.second, v.microsecond, v.fold)
    return b"H" + fields + _zone(v.tzinfo)


def _zone(tz: datetime.tzinfo | None) -> bytes:
    if tz is None:
        return b""
    if tz is datetime.UTC:
        return _UTC
    if type(tz) is zoneinfo.ZoneInfo:
        return _named_zone(tz)
    if type(tz) is datetime.timezone:
        # What pickle keeps: (offset,) or (offset, name), so `timezone(offset, "UTC+01:00")`
        # stays apart from `timezone(offset)`, whose tzname() is the same.
        offset, *name = tz.__getinitargs__()  # type: ignore[attr-defined]
        return (b"O" if name else b"o") + _timedelta(offset) + b"".join(map(_text, name))
    raise UnsupportedArgument(_refusal(type(tz)))


def _named_zone(tz: zoneinfo.ZoneInfo) -> bytes:
    key = tz.key
    if key is None:
        raise UnsupportedArgument(
            f"a ZoneInfo read from a file has no key to name it by: {_ZONE_ADVICE}"
        )
    try:
        canonical = zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        canonical = None
    if canonical is not tz:
        raise UnsupportedArgument(
            f"this ZoneInfo {key!r} is not the one ZoneInfo({key!r}) returns (it comes from "
            "ZoneInfo.no_cache or from before ZoneInfo.clear_cache), and datetimes in two "
            f"instances of a zone subtract differently: pass ZoneInfo({key!r})"
        )
    return b"z" + _text(key)


def _uuid(value: uuid.UUID) -> bytes:
    safety = _SAFETY.get(value.is_safe)
    if safety is None:
        raise UnsupportedArgument(f"UUID with is_safe={value.is_safe!r} has no canonical form")
    return b"U" + value.bytes + safety


def _enum(member: enum.Enum) -> bytes:
    cls = type(member)
    module, qualname = cls.__module__, cls.__qualname__
    if _resolve(module, qualname) is not cls:
        raise UnsupportedArgument(
            f"enum {qualname} cannot be found as {module}.{qualname}: define it at the top "
            "level of its module"
        )
    path = _frame(_text(module)) + _frame(_text(qualname))
    return b"e" + path + encode_argument(member._value_)


def _resolve(module: str, qualname: str) -> object:
    found: object = sys.modules.get(module)
    for name in qualname.split("."):
        found = getattr(found, name, None)
    return found


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    type(None): lambda _: b"n",
    bool: lambda v: b"?1" if v else b"?0",
    int: lambda v: b"I%x" % v,  # hex: no digit limit
    float: lambda v: b"F" + _DOUBLE.pack(v),
    str: _str,
    bytes: lambda v: b"B" + v,
    bytearray: lambda v: b"W" + v,
    # str() keeps sign, digits and exponent; a context with capitals=0 would write "e".
    decimal.Decimal: lambda v: b"M" + str(v).replace("e", "E").encode(),
    datetime.datetime: _datetime,
    datetime.date: lambda v: b"Y" + _DATE.pack(v.year, v.month, v.day),
    datetime.time: _time,
    datetime.timedelta: lambda v: b"V" + _timedelta(v),
    uuid.UUID: _uuid,
    zoneinfo.ZoneInfo: lambda v: b"Z" + _zone(v),
    datetime.timezone: lambda v: b"Z" + _zone(v),
    tuple: lambda v: _items(b")", v),
    list: lambda v: _items(b"]", v),
    dict: lambda v: _items(b"}", chain.from_iterable(v.items())),
    set: lambda v: _unordered(b"<", v),
    frozenset: lambda v: _unordered(b">", v),
}


# --- decoding ------------------------------------------------------------------------------

# What decoding bytes that are no encoding raises: a constructor refusing a field, a zone or
# a module that does not exist, nesting deeper than the interpreter's stack.
_NOT_AN_ENCODING = (
    ArithmeticError,
    AttributeError,
    ImportError,
    LookupError,
    RecursionError,
    TypeError,
    ValueError,
)


def decode_argument(encoded: bytes) -> Any:
    """The value whose canonical encoding is ``encoded`` (``ValueError`` if there is none).

    An Enum member's class is imported by its module and qualified name, as pickle does:
    decode only what :func:`encode_argument` produced."""
    try:
        value = _decode(bytes(encoded))
    except _NOT_AN_ENCODING as error:
        raise ValueError(f"not an argument's encoding: {error!r}") from error
    if encode_argument(value) != encoded:  # so that decoding, too, is one to one
        raise ValueError("not an argument's encoding: not the canonical one")
    return value


def _decode(data: bytes) -> Any:
    decoder = _DECODERS.get(data[:1])
    if decoder is None:
        raise ValueError(f"unknown tag {data[:1]!r}")
    return decoder(data[1:])


def _take(body: bytes, at: int) -> tuple[bytes, int]:
    """The item framed at ``at`` in ``body``, and where the next one starts."""
    start = at + _LENGTH.size
    if start > len(body):
        raise ValueError("truncated length")
    (length,) = _LENGTH.unpack_from(body, at)
    if start + length > len(body):
        raise ValueError(f"an item claims {length} bytes, {len(body) - start} remain")
    return body[start : start + length], start + length


def _items_of(body: bytes) -> list[Any]:
    items, at = [], 0
    while at < len(body):
        item, at = _take(body, at)
        items.append(_decode(item))
    return items


def _fixed(layout: struct.Struct, body: bytes) -> tuple[Any, ...]:
    if len(body) < layout.size:
        raise ValueError(f"{len(body)} bytes where {layout.size} are needed")
    return layout.unpack_from(body)


def _decode_datetime(body: bytes) -> datetime.datetime:
    year, month, day, hour, minute, second, microsecond, fold = _fixed(_DATETIME, body)
    tz = _decode_zone(body[_DATETIME.size :])
    return datetime.datetime(year, month, day, hour, minute, second, microsecond, tz, fold=fold)


def _decode_time(body: bytes) -> datetime.time:
    hour, minute, second, microsecond, fold = _fixed(_TIME, body)
    tz = _decode_zone(body[_TIME.size :])
    return datetime.time(hour, minute, second, microsecond, tz, fold=fold)


def _decode_zone(data: bytes) -> datetime.tzinfo | None:
    if not data:
        return None
    tag, body = data[:1], data[1:]
    if tag == b"z":
        return zoneinfo.ZoneInfo(body.decode("utf-8", "surrogatepass"))
    if tag not in (b"o", b"O"):
        raise ValueError(f"unknown zone tag {tag!r}")
    offset = datetime.timedelta(*_fixed(_TIMEDELTA, body))
    if tag == b"o":
        return datetime.timezone(offset)
    return datetime.timezone(offset, body[_TIMEDELTA.size :].decode("utf-8", "surrogatepass"))


def _decode_uuid(body: bytes) -> uuid.UUID:
    safety = _SAFETY_OF.get(body[16:])
    if len(body) != 17 or safety is None:
        raise ValueError("a UUID is 16 bytes and a safety code")
    return uuid.UUID(bytes=body[:16], is_safe=safety)


def _decode_enum(body: bytes) -> enum.Enum:
    module, at = _take(body, 0)
    qualname, at = _take(body, at)
    cls: Any = importlib.import_module(module.decode("utf-8", "surrogatepass"))
    for name in qualname.decode("utf-8", "surrogatepass").split("."):
        cls = getattr(cls, name)
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        raise ValueError(f"{module!r}, {qualname!r} is not an Enum")
    return cls(_decode(body[at:]))


def _decode_dict(body: bytes) -> dict[Any, Any]:
    items = _items_of(body)
    if len(items) % 2:
        raise ValueError("a dict's items come in pairs")
    return dict(zip(items[::2], items[1::2], strict=True))


def _decode_bool(body: bytes) -> bool:
    if body not in (b"0", b"1"):
        raise ValueError(f"not a bool: {body!r}")
    return body == b"1"


def _decode_none(body: bytes) -> None:
    if body:
        raise ValueError("None has no body")


_DECODERS: dict[bytes, Callable[[bytes], Any]] = {
    b"n": _decode_none,
    b"?": _decode_bool,
    b"I": lambda body: int(body, 16),
    b"F": lambda body: _fixed(_DOUBLE, body)[0],
    b"S": lambda body: body.decode("utf-8", "surrogatepass"),
    b"B": bytes,
    b"W": bytearray,
    b"M": lambda body: decimal.Decimal(body.decode("ascii")),
    b"Y": lambda body: datetime.date(*_fixed(_DATE, body)),
    b"H": _decode_time,
    b"@": _decode_datetime,
    b"V": lambda body: datetime.timedelta(*_fixed(_TIMEDELTA, body)),
    b"U": _decode_uuid,
    b"Z": _decode_zone,
    b")": lambda body: tuple(_items_of(body)),
    b"]": _items_of,
    b"}": _decode_dict,
    b"<": lambda body: set(_items_of(body)),
    b">": lambda body: frozenset(_items_of(body)),
    b"e": _decode_enum,
}
