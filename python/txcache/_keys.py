"""Cache keys of cacheable calls: the function, its code, and its arguments, canonically.

A key is the 16-byte BLAKE2b digest of the function's qualified name, a hash of its code
(so a deployed change never reads the old version's results) and a canonical encoding of
the call's arguments bound to the signature (``f(1)``, ``f(x=1)`` and a default are one
call). Arguments of a type without a canonical encoding raise :class:`UnsupportedArgument`:
guessing (``repr``, ``id``) would let two different calls share a key.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import inspect
import math
import struct
import types
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from txcache.errors import UnsupportedArgument

__all__ = ["KEY_BYTES", "CallKeys", "code_hash", "encode_argument"]

KEY_BYTES = 16


def code_hash(function: Callable[..., Any]) -> bytes:
    """A digest of ``function``'s code: bytecode, constants (nested code recursively, the
    rest canonically encoded so that a set's hash order never matters) and names. Line
    numbers and file names are left out, so moving a function in its file keeps its cached
    results. Argument defaults need not be in it: a call's key encodes their values."""
    digest = hashlib.blake2b(digest_size=16)
    code = getattr(function, "__code__", None)
    if code is None:
        digest.update(repr(function).encode())
    else:
        _hash_code(code, digest)
    return digest.digest()


def _hash_code(code: types.CodeType, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr((code.co_names, code.co_varnames, code.co_argcount)).encode())
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            _hash_code(constant, digest)
        else:
            digest.update(_constant(constant))


def _constant(constant: object) -> bytes:
    try:
        return encode_argument(constant)
    except UnsupportedArgument:  # Ellipsis, complex, …: their repr is stable
        return repr(constant).encode()


class CallKeys:
    """Turns calls of one function into keys."""

    __slots__ = ("_parameters", "_positional_only_call", "_prefix", "_signature", "name")

    def __init__(self, function: Callable[..., Any], *, version: str = "") -> None:
        """Keys for ``function``; ``version`` (optional) is mixed in as the code hash is."""
        self.name = f"{function.__module__}.{function.__qualname__}"
        self._signature = inspect.signature(function)
        self._parameters = tuple(self._signature.parameters)
        # Binding can be skipped only when positional arguments map one to one onto
        # parameters: no *args, **kwargs or keyword-only parameter may reinterpret them.
        plain = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY
        self._positional_only_call = all(
            p.kind in plain for p in self._signature.parameters.values()
        )
        self._prefix = b"".join(
            (self.name.encode(), b"\0", code_hash(function), version.encode(), b"\0")
        )

    def key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bytes:
        """The key of the call ``function(*args, **kwargs)``."""
        digest = hashlib.blake2b(self._prefix, digest_size=KEY_BYTES)
        if self._positional_only_call and not kwargs and len(args) == len(self._parameters):
            # The common case: every parameter given positionally, no binding needed.
            for name, value in zip(self._parameters, args, strict=True):
                self._add(digest, name, value)
            return digest.digest()
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            self._add(digest, name, value)
        return digest.digest()

    def _add(self, digest: Any, name: str, value: Any) -> None:
        try:
            encoded = encode_argument(value)
        except UnsupportedArgument as error:
            raise UnsupportedArgument(
                f"{self.name}(): argument {name!r}: {error} — cacheable functions take "
                "values with a canonical form (None, bool, int, float, str, bytes, Decimal, "
                "date/time, UUID, Enum, and tuples, lists, dicts, sets of them)"
            ) from None
        digest.update(struct.pack("<I", len(encoded)))
        digest.update(encoded)


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
