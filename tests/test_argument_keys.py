"""Exact argument keys (``txcache._arguments``): two arguments share an encoding only if a
function cannot tell them apart, and every encoding decodes to its value. Pure logic; the
properties are checked on generated nested arguments of every supported type."""

from __future__ import annotations

import collections
import datetime
import enum
import functools
import re
import struct
import uuid
import zoneinfo
from collections.abc import Callable
from datetime import UTC, timedelta, timezone
from decimal import Decimal, localcontext
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txcache._arguments import decode_argument, encode_argument
from txcache.errors import UnsupportedArgument

London = zoneinfo.ZoneInfo("Europe/London")
ETC_UTC = zoneinfo.ZoneInfo("Etc/UTC")
ZERO, HOUR = timedelta(0), timedelta(hours=1)


class Colour(enum.Enum):
    RED = 1
    GREEN = (2, "green")


class Shade(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


class Mode(enum.StrEnum):
    FAST = "fast"


MEMBERS = [*Colour, *Shade, *Level, *Perm, Perm.R | Perm.W, Perm(0), *Mode]


# --- what a function can tell apart --------------------------------------------------------


def indistinguishable(a: Any, b: Any) -> bool:
    """Whether a function given ``a`` or ``b`` cannot tell which: one type, one structure,
    dict order, float bits, Decimal digits and exponent, zone identity and fold, UUID safety.
    Sets compare by their members (their order is no part of their value)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, enum.Enum):
        return a is b
    compare = _COMPARE.get(type(a))
    return compare(a, b) if compare is not None else bool(a == b)


def _pairwise(a: Any, b: Any) -> bool:
    return len(a) == len(b) and all(map(indistinguishable, a, b))


def _same_members(a: Any, b: Any) -> bool:
    remaining = list(b)
    for item in a:
        match = next((i for i, y in enumerate(remaining) if indistinguishable(item, y)), None)
        if match is None:
            return False
        del remaining[match]
    return not remaining


def same_zone(a: datetime.tzinfo | None, b: datetime.tzinfo | None) -> bool:
    if a is b:
        return True
    fixed = type(a) is type(b) is timezone
    return fixed and a.__getinitargs__() == b.__getinitargs__()  # type: ignore[union-attr]


def _clock(t: Any) -> tuple[Any, ...]:
    return (t.hour, t.minute, t.second, t.microsecond, t.fold)


_COMPARE = {
    float: lambda a, b: struct.pack("<d", a) == struct.pack("<d", b),
    Decimal: lambda a, b: a.as_tuple() == b.as_tuple(),
    tuple: _pairwise,
    list: _pairwise,
    dict: lambda a, b: (
        _pairwise(list(a), list(b)) and _pairwise(list(a.values()), list(b.values()))
    ),
    set: _same_members,
    frozenset: _same_members,
    datetime.datetime: lambda a, b: (
        a.date() == b.date() and _clock(a) == _clock(b) and same_zone(a.tzinfo, b.tzinfo)
    ),
    datetime.time: lambda a, b: _clock(a) == _clock(b) and same_zone(a.tzinfo, b.tzinfo),
    uuid.UUID: lambda a, b: a.int == b.int and a.is_safe is b.is_safe,
    zoneinfo.ZoneInfo: same_zone,
    timezone: same_zone,
}


# --- generated arguments -------------------------------------------------------------------

ZONE_NAMES = sorted(zoneinfo.available_timezones())
MICROSECOND = timedelta(microseconds=1)

text = st.text(st.characters(codec=None) | st.characters(categories=["Cs"]), max_size=6)
offsets = st.timedeltas(-timedelta(hours=24) + MICROSECOND, timedelta(hours=24) - MICROSECOND)


def nth_zone(n: int) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(ZONE_NAMES[n])


named_zones = st.integers(0, len(ZONE_NAMES) - 1).map(nth_zone)  # sampled_from: a long repr
fixed_zones = st.just(UTC) | offsets.map(timezone) | st.builds(timezone, offsets, text)
zones = named_zones | fixed_zones
folds = st.integers(0, 1)
datetimes = st.builds(
    lambda d, tz, fold: d.replace(tzinfo=tz, fold=fold), st.datetimes(), st.none() | zones, folds
)
times = st.builds(
    lambda t, tz, fold: t.replace(tzinfo=tz, fold=fold), st.times(), st.none() | zones, folds
)


def from_bits(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


def bits_of(value: float) -> int:
    bits: int = struct.unpack("<Q", struct.pack("<d", value))[0]
    return bits


floats = (
    st.floats()
    | st.sampled_from([0.0, -0.0, float("nan"), -float("nan")])
    | st.integers(0, 2**64 - 1).map(from_bits)  # NaNs of every sign and payload among them
)
SPECIAL = ["NaN", "-NaN", "NaN123", "Infinity", "-Infinity", "0", "-0", "0E-3", "1E+2"]
finite_decimals = st.builds(
    lambda sign, digits, exponent: Decimal((sign, tuple(digits), exponent)),
    st.integers(0, 1),
    st.lists(st.integers(0, 9), min_size=1, max_size=8),
    st.integers(-12, 12),
)
hashable_decimals = finite_decimals | st.sampled_from([Decimal(s) for s in SPECIAL])
decimals = hashable_decimals | st.sampled_from([Decimal("sNaN"), Decimal("-sNaN2")])
uuids = st.builds(
    lambda u, safety: uuid.UUID(int=u.int, is_safe=safety),
    st.uuids(),
    st.sampled_from(list(uuid.SafeUUID)),
)
hashable_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-(2**80), 2**80)
    | floats
    | text
    | st.binary(max_size=6)
    | hashable_decimals
    | st.dates()
    | datetimes
    | times
    | st.timedeltas()
    | uuids
    | zones
    | st.sampled_from(MEMBERS)
)
WINTER = datetime.datetime(2024, 1, 15, 12, tzinfo=UTC)  # London is on UTC's offset
TRICKY: list[Any] = [
    *(0.0, -0.0, float("nan"), -float("nan"), 1, 1.0, True, Decimal("1.0"), Decimal("-0")),
    *(Decimal("NaN"), "1", b"1", WINTER, WINTER.astimezone(London), WINTER.replace(tzinfo=None)),
    *(datetime.time(12, tzinfo=UTC), Colour.RED, Level.LOW, uuid.UUID(int=1), UTC, London),
    datetime.datetime(2024, 10, 27, 1, 30, tzinfo=London),  # twice that day: fold 0 and 1
]


def often(tricky: list[Any], others: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """One of the ``tricky`` values half of the time (with their twins they are the
    collisions to catch), one of ``others`` the other half."""
    return st.booleans().flatmap(lambda pick: st.sampled_from(tricky) if pick else others)


scalars = hashable_scalars | st.binary(max_size=6).map(bytearray) | decimals
hashable_leaves = often(TRICKY, hashable_scalars)
leaves = often([*TRICKY, bytearray(b"1"), Decimal("sNaN")], scalars)
hashables = st.recursive(
    hashable_leaves,
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
arguments = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(hashables, inner, max_size=4)
        | st.sets(hashables, max_size=4)
        | st.frozensets(hashables, max_size=4)
    ),
    max_leaves=12,
)


# --- twins: values a careless key would merge with a given one -----------------------------


def twins(value: Any, hashable: bool = False) -> st.SearchStrategy[Any]:
    """``value``, or one equal to it by ``==`` (or nearly) but for one change at any depth:
    another type, order, zone, exponent, sign or fold. Only hashable ones for ``hashable``
    (a dict key, a set member)."""
    container = _CONTAINER_TWINS.get(type(value))
    if container is not None:
        return container(value, hashable)
    twin = st.sampled_from(near(value, hashable))
    if isinstance(value, datetime.datetime | datetime.time) and value.tzinfo is not None:
        twin |= zones.map(lambda zone: value.replace(tzinfo=zone))
    if type(value) is datetime.datetime:
        twin |= zones.map(lambda zone: moved(value, zone))
    return twin


def near(value: Any, hashable: bool = False) -> list[Any]:
    """``value`` and the scalars a careless key would merge with it."""
    if isinstance(value, enum.Enum):
        kind = type(value.value)
        return [
            value,
            value.value,
            *(m for m in MEMBERS if m.value == value.value and type(m.value) is kind),
        ]
    make = _NEAR.get(type(value))
    return [value] if make is None else make(value, hashable)


def _near_number(value: Any, _: bool) -> list[Any]:
    candidates = [value, Decimal(value), -value]
    if type(value) is float:
        candidates.append(from_bits(bits_of(value) ^ 1))  # another NaN, for a NaN
    if value == value and abs(value) < 2**53 and value == int(value):
        candidates += [int(value), float(value)]
    candidates += [bool(value)] if value in (0, 1) else []
    return candidates + [m for m in MEMBERS if type(m.value) is int and m.value == value]


def _near_decimal(value: Decimal, hashable: bool) -> list[Any]:
    sign, digits, exponent = value.as_tuple()
    candidates: list[Any] = [value, value.copy_negate(), Decimal("NaN")]
    if isinstance(exponent, int):  # finite: one more digit, the same number
        candidates += [Decimal((sign, (*digits, 0), exponent - 1)), float(value)]
    return candidates if hashable else [*candidates, Decimal("sNaN")]


def near_zones(
    zone: datetime.tzinfo | None, offset: timedelta | None, name: str | None
) -> list[Any]:
    """``zone``, fixed zones of its ``offset`` (and ``name``), and zones of UTC's offset."""
    if zone is None:
        return [None, UTC]
    candidates = [zone, UTC, zoneinfo.ZoneInfo("UTC"), ETC_UTC, London, timezone(ZERO, "UTC")]
    if offset is None:
        return candidates
    return [*candidates, timezone(offset), timezone(offset, name or "")]


def moved(value: Any, zone: datetime.tzinfo) -> Any:
    """``value`` at the same instant in ``zone`` (itself where that is out of range)."""
    try:
        return value.astimezone(zone)
    except (OverflowError, OSError, ValueError):
        return value


def _near_clock(value: Any, _: bool) -> list[Any]:
    candidates = [value, value.replace(fold=1 - value.fold), value.replace(tzinfo=None)]
    if type(value) is datetime.datetime:
        candidates += [moved(value, UTC), moved(value, London)]
    zones_near = near_zones(value.tzinfo, value.utcoffset(), value.tzname())
    return candidates + [value.replace(tzinfo=zone) for zone in zones_near]


_NEAR: dict[type, Callable[[Any, bool], list[Any]]] = {
    bool: _near_number,
    int: _near_number,
    float: _near_number,
    Decimal: _near_decimal,
    str: lambda v, _: [v, v.encode("utf-8", "surrogatepass")],
    bytes: lambda v, h: [v, v.decode("latin-1"), *([] if h else [bytearray(v)])],
    bytearray: lambda v, _: [v, bytes(v)],
    datetime.date: lambda v, _: [v, datetime.datetime(v.year, v.month, v.day)],
    datetime.datetime: _near_clock,
    datetime.time: _near_clock,
    datetime.timedelta: lambda v, _: [v, v.total_seconds()],
    uuid.UUID: lambda v, _: [uuid.UUID(int=v.int, is_safe=s) for s in uuid.SafeUUID],
    zoneinfo.ZoneInfo: lambda v, _: near_zones(v, v.utcoffset(None), v.tzname(None)),
    timezone: lambda v, _: near_zones(v, v.utcoffset(None), v.tzname(None)),
}


def _one_changed(items: list[Any], hashable: bool) -> st.SearchStrategy[list[Any]]:
    """``items`` with one of them replaced by one of its twins."""
    if not items:
        return st.just(items)

    def change(i: int) -> st.SearchStrategy[list[Any]]:
        return twins(items[i], hashable).map(lambda twin: [*items[:i], twin, *items[i + 1 :]])

    return st.integers(0, len(items) - 1).flatmap(change)


def _sequence_twins(value: Any, hashable: bool) -> st.SearchStrategy[Any]:
    kinds = [tuple] if hashable else [tuple, list]
    retyped = st.sampled_from(kinds).map(lambda kind: kind(value))
    return retyped | _one_changed(list(value), hashable).map(type(value))


def _set_twins(value: Any, hashable: bool) -> st.SearchStrategy[Any]:
    # In the order of the encodings: a strategy must not depend on hashes (a NaN's is its id).
    members = sorted(value, key=encode_argument)
    kinds = [frozenset] if hashable else [frozenset, set]
    retyped = st.sampled_from(kinds).map(lambda kind: kind(value))
    return retyped | _one_changed(members, True).map(type(value))


def _dict_twins(value: dict[Any, Any], _: bool) -> st.SearchStrategy[Any]:
    reordered = st.permutations(list(value.items())).map(dict)
    keys = _one_changed(list(value), True).map(
        lambda keys: dict(zip(keys, value.values(), strict=True))
    )
    values = _one_changed(list(value.values()), False).map(
        lambda v: dict(zip(value, v, strict=True))
    )
    return reordered | keys | values


_CONTAINER_TWINS: dict[type, Callable[[Any, bool], st.SearchStrategy[Any]]] = {
    tuple: _sequence_twins,
    list: _sequence_twins,
    dict: _dict_twins,
    set: _set_twins,
    frozenset: _set_twins,
}

exhaustive = settings(max_examples=200, deadline=None, database=None)


# --- properties ----------------------------------------------------------------------------


@exhaustive
@given(arguments)
def test_every_encoding_decodes_to_an_indistinguishable_value(value: Any) -> None:
    encoded = encode_argument(value)
    decoded = decode_argument(encoded)
    assert indistinguishable(decoded, value)
    assert encode_argument(decoded) == encoded


@settings(exhaustive, max_examples=500)  # a collision needs a tricky leaf and its twin
@given(st.data())
def test_values_share_an_encoding_exactly_when_indistinguishable(data: st.DataObject) -> None:
    a = data.draw(arguments, label="a")
    b = data.draw(twins(a), label="b")
    assert (encode_argument(a) == encode_argument(b)) == indistinguishable(a, b)


@exhaustive
@given(arguments, arguments)
def test_independent_values_share_an_encoding_only_when_indistinguishable(a: Any, b: Any) -> None:
    assert (encode_argument(a) == encode_argument(b)) == indistinguishable(a, b)


NESTINGS: dict[str, Callable[[Any], Any]] = {
    "alone": lambda x: x,
    "in a list": lambda x: [1, x],
    "in a tuple": lambda x: (x,),
    "as a dict value": lambda x: {"k": x},
    "as a dict key": lambda x: {x: 1},
    "in a frozenset": lambda x: frozenset({x}),
}


@pytest.mark.parametrize("nest", NESTINGS.values(), ids=NESTINGS.keys())
def test_tricky_values_share_an_encoding_with_near_ones_exactly_when_indistinguishable(
    nest: Callable[[Any], Any],
) -> None:
    for a in [*TRICKY, bytearray(b"1"), Decimal("sNaN")]:
        for b in near(a):
            try:
                x, y = nest(a), nest(b)
            except TypeError:  # unhashable, as a dict key or a set member
                continue
            assert (encode_argument(x) == encode_argument(y)) == indistinguishable(x, y), (a, b)


# --- equal by ==, told apart by a function -------------------------------------------------


EQUAL_BUT_DISTINGUISHABLE = {
    "dict order": ({"price": "asc", "name": "desc"}, {"name": "desc", "price": "asc"}),
    "London and UTC": (WINTER.astimezone(London), WINTER),
    "zone and its offset": (WINTER.astimezone(London), WINTER.replace(tzinfo=timezone(ZERO))),
    "UTC and Etc/UTC": (WINTER.astimezone(zoneinfo.ZoneInfo("UTC")), WINTER.astimezone(ETC_UTC)),
    "fixed offset named": (timezone(HOUR), timezone(HOUR, "UTC+01:00")),
    "time zones": (datetime.time(12, tzinfo=London), datetime.time(12, tzinfo=UTC)),
    "fold": (datetime.time(1, 30), datetime.time(1, 30, fold=1)),
    "fold in a zone": (TRICKY[-1], TRICKY[-1].replace(fold=1)),
    "Decimal exponent": (Decimal("1.0"), Decimal("1.00")),
    "Decimal sign of zero": (Decimal("0"), Decimal("-0")),
    "Decimal NaN and sNaN": (Decimal("NaN"), Decimal("sNaN")),
    "Decimal NaN payload": (Decimal("NaN"), Decimal("NaN1")),
    "float sign of zero": (0.0, -0.0),
    "float NaN sign": (float("nan"), -float("nan")),
    "nested Decimal": ([(Decimal("1.0"),)], [(Decimal("1.00"),)]),
    "nested zero in a set": ({(0.0, 1)}, {(-0.0, 1)}),
    "dict key": ({Decimal("1.0"): 1}, {Decimal("1.00"): 1}),
    "dict value": ({"x": -0.0}, {"x": 0.0}),
    "frozenset member": (frozenset({Decimal("0")}), frozenset({Decimal("-0")})),
    "Enum value": (Colour.GREEN, (2, "green")),
    "Enum classes with equal values": (Colour.RED, Shade.RED),
    "IntEnum and int": (Level.LOW, 1),
    "StrEnum and str": (Mode.FAST, "fast"),
    "bytes and bytearray": (b"x", bytearray(b"x")),
    "set and frozenset": ({1}, frozenset({1})),
    "tuple and list": ((1, 2), [1, 2]),
    "int and float": (1, 1.0),
    "bool and int": (True, 1),
    "date and midnight": (datetime.date(2024, 3, 1), datetime.datetime(2024, 3, 1)),
    "UUID safety": (uuid.UUID(int=1), uuid.UUID(int=1, is_safe=uuid.SafeUUID.safe)),
}


@pytest.mark.parametrize(
    ("a", "b"), EQUAL_BUT_DISTINGUISHABLE.values(), ids=EQUAL_BUT_DISTINGUISHABLE.keys()
)
def test_arguments_equal_by_eq_but_distinguishable_have_different_encodings(a: Any, b: Any) -> None:
    assert not indistinguishable(a, b)
    assert encode_argument(a) != encode_argument(b)


def test_one_instant_in_london_and_in_utc_counts_different_days() -> None:
    # The bug this guards: a one-day window from one instant, across the start of summer
    # time, is 23 hours in London and 24 in UTC, and the two calls shared a key.
    utc = datetime.datetime(2024, 3, 30, 12, tzinfo=UTC)
    london = utc.astimezone(London)
    assert london == utc
    assert london.utcoffset() == utc.utcoffset()
    assert (london + timedelta(days=1)) - utc == timedelta(hours=23)
    assert encode_argument(london) != encode_argument(utc)


def test_a_dict_is_keyed_in_its_insertion_order() -> None:
    # The bug this guards: an ORDER BY built from sort.items() shared one key across orders.
    assert encode_argument({"a": 1, "b": 2}) != encode_argument({"b": 2, "a": 1})
    assert encode_argument({"a": 1, "b": 2}) == encode_argument(dict([("a", 1), ("b", 2)]))


def test_a_set_is_keyed_by_its_members_whatever_its_order() -> None:
    many = [f"item {i}" for i in range(50)]
    assert encode_argument(set(many)) == encode_argument(set(reversed(many)))
    assert encode_argument({1, 9}) == encode_argument({9, 1})  # iterate in different orders


def test_a_decimal_keeps_its_key_in_a_context_that_writes_lowercase_exponents() -> None:
    expected = encode_argument(Decimal("1E+2"))
    with localcontext() as context:
        context.capitals = 0
        assert str(Decimal("1E+2")) == "1e+2"
        assert encode_argument(Decimal("1E+2")) == expected


def test_a_zone_as_an_argument_is_keyed_by_its_identity() -> None:
    assert decode_argument(encode_argument(London)) is London
    assert encode_argument(London) != encode_argument(zoneinfo.ZoneInfo("GB"))
    assert encode_argument(UTC) != encode_argument(timezone(ZERO, "UTC"))
    assert encode_argument(UTC) == encode_argument(timezone(ZERO))


# --- refused -------------------------------------------------------------------------------


class Fixed(datetime.tzinfo):
    def utcoffset(self, dt: datetime.datetime | None) -> timedelta:
        return HOUR

    def dst(self, dt: datetime.datetime | None) -> timedelta:
        return ZERO

    def tzname(self, dt: datetime.datetime | None) -> str:
        return "F"


def lonely_london() -> datetime.tzinfo:
    """A ZoneInfo that is not the one ZoneInfo("Europe/London") returns."""
    return zoneinfo.ZoneInfo.no_cache("Europe/London")


def from_file() -> datetime.tzinfo:
    """Europe/London read from its TZif file, with no key."""
    paths = [Path(directory, "Europe", "London") for directory in zoneinfo.TZPATH]
    path: Path | Traversable | None = next((p for p in paths if p.is_file()), None)
    if path is None:  # no system tz database: the tzdata package's copy
        path = resources.files(pytest.importorskip("tzdata")) / "zoneinfo/Europe/London"
    with path.open("rb") as file:
        return zoneinfo.ZoneInfo.from_file(file)


def dateutil_london() -> datetime.tzinfo:
    tz = pytest.importorskip("dateutil.tz")
    zone: datetime.tzinfo = tz.gettz("Europe/London")
    return zone


ZONES_WITHOUT_A_NAME = {
    "custom tzinfo": (Fixed, "Fixed has no canonical name"),
    "ZoneInfo from a file": (from_file, "read from a file"),
    "ZoneInfo.no_cache": (lonely_london, "pass ZoneInfo('Europe/London')"),
    "dateutil": (dateutil_london, "tzfile has no canonical name"),
}


@pytest.mark.parametrize(
    ("make", "message"), ZONES_WITHOUT_A_NAME.values(), ids=ZONES_WITHOUT_A_NAME.keys()
)
@pytest.mark.parametrize("clock", ["datetime", "time", "nested", "zone"])
def test_a_zone_without_a_canonical_name_is_refused_with_advice(
    make: Callable[[], datetime.tzinfo], message: str, clock: str
) -> None:
    zone = make()
    value = {
        "datetime": datetime.datetime(2024, 3, 1, tzinfo=zone),
        "time": datetime.time(12, tzinfo=zone),
        "nested": {"window": (WINTER, datetime.datetime(2024, 3, 1, tzinfo=zone))},
        "zone": zone,
    }[clock]
    with pytest.raises(UnsupportedArgument, match=re.escape(message)) as raised:
        encode_argument(value)
    assert "ZoneInfo(" in str(raised.value)


class Day(datetime.date):
    pass


class Moment(datetime.datetime):
    pass


Point = collections.namedtuple("Point", "x y")


def local_enum_member() -> enum.Enum:
    class Local(enum.Enum):
        ONE = 1

    return Local.ONE


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (Day(2024, 3, 1), "subclass of date"),
        (Moment(2024, 3, 1), "subclass of datetime"),
        (collections.OrderedDict(a=1), "subclass of dict"),
        (collections.Counter("ab"), "subclass of dict"),
        (Point(1, 2), "Point"),
        (type("Ratio", (float,), {})(0.5), "subclass of float"),
        (type("Blob", (bytes,), {})(b"x"), "subclass of bytes"),
        (local_enum_member(), "define it at the top level"),
        (uuid.UUID(int=1, is_safe="maybe"), "is_safe"),  # type: ignore[arg-type]  # on purpose
        (1j, "complex"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else None,
)
def test_a_value_a_key_cannot_name_exactly_is_refused(value: Any, message: str) -> None:
    with pytest.raises(UnsupportedArgument, match=re.escape(message)):
        encode_argument(value)


def test_a_value_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(UnsupportedArgument, match="contains itself"):
        encode_argument(loop)


# --- decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encoded",
    [
        b"",
        b"Q",
        b"n!",
        b"?2",
        b"I012",
        b"I1 ",
        b"F\x00",
        b"Mxyz",
        b")\x05\x00\x00\x00n",
        b"}\x01\x00\x00\x00n",
        b"Zz",
        b"e\x01\x00\x00\x00x\x01\x00\x00\x00Yn",
        b"U" + bytes(16),
        functools.reduce(
            lambda inner, _: b"]" + len(inner).to_bytes(4, "little") + inner, range(5000), b"n"
        ),  # deeper than the interpreter's stack
    ],
)
def test_decoding_refuses_what_is_no_canonical_encoding(encoded: bytes) -> None:
    with pytest.raises(ValueError, match="not an argument's encoding"):
        decode_argument(encoded)


def test_an_enum_member_decodes_to_itself() -> None:
    for member in MEMBERS:
        assert decode_argument(encode_argument(member)) is member
