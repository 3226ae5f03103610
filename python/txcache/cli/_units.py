"""Durations and byte sizes as the nodes and the agent read them, checked before they are
handed over: ``txcache up`` refuses ``--max-staleness 10x`` at its command line, before
PostgreSQL starts or setup changes a database, rather than when the first node refuses it.

The grammar, the results and the messages are those of ``crates/model/src/units.rs``, the one
grammar of every ``txcached``/``txcache-agent`` option (``tests/test_cli_up.py`` checks the two
agree on the binaries themselves)::

    duration = number [unit]    unit: ns, us (µs), ms, s, m, h; no unit: seconds
    size     = number [unit]    unit: b, k kb kib, m mb mib, g gb gib (all powers of 1024);
                                no unit: bytes
    number   = digits ["." digits]

Units are case-insensitive; blanks around the value and between number and unit are
ignored. A decimal part is exact down to a nanosecond or a byte, anything finer is dropped.
No sign, exponent, digit separator or compound value (``1m30s``). A value that does not fit
(a duration of more than 2**64 - 1 s, more bytes than a ``usize`` holds) is refused.
"""

from __future__ import annotations

import json
import struct

__all__ = ["DURATION_FORMS", "SIZE_FORMS", "UnitError", "parse_duration", "parse_size"]

DURATION_FORMS = "units ns, us, ms, s, m, h; decimals allowed; a bare number is seconds"
"""The accepted forms of a duration, as ``--help`` texts and error messages state them."""

SIZE_FORMS = (
    "units b, k, m, g (or kb/kib, mb/mib, gb/gib: all powers of 1024); a bare number is bytes"
)
"""The accepted forms of a byte size, as ``--help`` texts and error messages state them."""

_NANOS = 1_000_000_000
_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "": _NANOS,
    "s": _NANOS,
    "m": 60 * _NANOS,
    "h": 3_600 * _NANOS,
}
_SIZE_UNITS = {"": 1, "b": 1}
_SIZE_UNITS |= {unit: 1 << 10 for unit in ("k", "kb", "kib")}
_SIZE_UNITS |= {unit: 1 << 20 for unit in ("m", "mb", "mib")}
_SIZE_UNITS |= {unit: 1 << 30 for unit in ("g", "gb", "gib")}

_U64_MAX = 2**64 - 1
_USIZE_MAX = 2 ** (8 * struct.calcsize("P")) - 1
_U128_LIMIT = 2**128  # the Rust parser computes in u128: anything from here on does not fit
_FRACTION_DIGITS = 20  # as units.rs: the decimals read; finer ones are dropped
_DIGITS = frozenset("0123456789")  # ASCII only, as Rust's is_ascii_digit (not str.isdigit)


class UnitError(ValueError):
    """A text that is not a duration or a size; the message names the accepted forms, word
    for word as the nodes and the agent say it."""


def parse_duration(text: str) -> int:
    """A duration in nanoseconds: ``200ms``, ``1.5s``, ``2m``, ``30`` (seconds), …"""
    nanos = _parse(text, "duration", _DURATION_UNITS)
    if nanos // _NANOS > _U64_MAX:
        raise UnitError(_too_large(text, "duration"))
    return nanos


def parse_size(text: str) -> int:
    """A byte size in bytes: ``4096``, ``64mb``, ``1.5gb``, …"""
    size = _parse(text, "size", _SIZE_UNITS)
    if size > _USIZE_MAX:
        raise UnitError(_too_large(text, "size"))
    return size


def _parse(text: str, what: str, units: dict[str, int]) -> int:
    """``number [unit]``: the number times the unit's factor, rounded down."""
    trimmed = text.strip()
    integer = _leading_digits(trimmed)
    if not integer:
        raise UnitError(_not_a_number(text, what))
    rest, fraction = trimmed[len(integer) :], ""
    if rest.startswith("."):
        fraction = _leading_digits(rest[1:])
        if not fraction:
            raise UnitError(_not_a_number(text, what))
        rest = rest[1 + len(fraction) :]
    written = rest.lstrip()
    factor = units.get(written.lower())
    if factor is None:
        if written[:1] in _DIGITS or written.startswith("."):
            raise UnitError(_not_a_number(text, what))  # "1 000", "1.2.3s"
        raise UnitError(_unknown_unit(text, what, written))
    whole = int(integer) * factor
    digits = fraction[:_FRACTION_DIGITS]
    value = whole + (int(digits) * factor // 10 ** len(digits) if digits else 0)
    if value >= _U128_LIMIT:
        raise UnitError(_too_large(text, what))
    return value


def _leading_digits(text: str) -> str:
    end = 0
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    return text[:end]


# The messages of units.rs's UnitError, with its Debug quoting of the text ("10x").


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _example_and_forms(what: str) -> tuple[str, str]:
    if what == "duration":
        return "200ms, 1.5s or 2m", DURATION_FORMS
    return "4096, 64mb or 1.5gb", SIZE_FORMS


def _not_a_number(text: str, what: str) -> str:
    example, forms = _example_and_forms(what)
    return f"{_quoted(text)} is not a {what}: expected a number and a unit, e.g. {example}; {forms}"


def _unknown_unit(text: str, what: str, unit: str) -> str:
    example, forms = _example_and_forms(what)
    where = f"{_quoted(unit)} in {_quoted(text)}"
    return f"unknown {what} unit {where}: expected e.g. {example}; {forms}"


def _too_large(text: str, what: str) -> str:
    limit = f"{_U64_MAX} s" if what == "duration" else f"{_USIZE_MAX} bytes"
    return f"{what} {_quoted(text)} is too large (at most {limit})"
