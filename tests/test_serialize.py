"""Values in the cache (``txcache._serialize``): what is written reads back as the same value
of the same type; anything else is refused on writing (``UnsupportedValue``); bytes that
were not written by this serializer with this secret, or were changed, read as
``ForeignValue`` — never as another exception, never as a wrong value. Pure logic."""

from __future__ import annotations

import collections
import datetime
import math
import random
import subprocess
import sys
import textwrap
import uuid
import zoneinfo
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack
import pytest

from txcache._serialize import ForeignValue, SafeSerializer, keyed
from txcache.errors import TxcacheError, UnsupportedValue

UTC = datetime.UTC
PLUS_5_30 = datetime.timezone(datetime.timedelta(hours=5, minutes=30))


def assert_same(actual: Any, expected: Any) -> None:
    """``actual`` is ``expected``: equal, of the same exact type all the way down, NaNs
    where NaNs were, -0.0 and Decimal("-0.00") as written, the same offset and fold."""
    assert type(actual) is type(expected), f"{actual!r} is not of the type of {expected!r}"
    if isinstance(expected, float):
        if math.isnan(expected):
            assert math.isnan(actual)
        else:
            assert actual == expected
            assert math.copysign(1.0, actual) == math.copysign(1.0, expected)
    elif isinstance(expected, Decimal):
        assert str(actual) == str(expected)
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert {(type(k), k) for k in actual} == {(type(k), k) for k in expected}
        for k, e in expected.items():
            assert_same(actual[k], e)
    elif isinstance(expected, set | frozenset):
        assert {(type(x), x) for x in actual} == {(type(x), x) for x in expected}
    elif isinstance(expected, datetime.datetime | datetime.time):
        assert actual == expected
        assert actual.isoformat() == expected.isoformat()
        assert actual.utcoffset() == expected.utcoffset()
        assert actual.fold == expected.fold
    else:
        assert actual == expected


def round_trip(value: Any, serializer: SafeSerializer | None = None) -> Any:
    serializer = serializer or SafeSerializer()
    return serializer.loads(serializer.dumps(value))


# --- round trips ---------------------------------------------------------------------------


SCALARS = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "int": 42,
    "negative-int": -7,
    "int64-min": -(2**63),
    "below-int64": -(2**63) - 1,
    "uint64-max": 2**64 - 1,
    "above-uint64": 2**64,
    "big-int": 2**70,
    "big-negative-int": -(2**70),
    "huge-int": 10**300,
    "float": 3.25,
    "negative-zero": -0.0,
    "inf": float("inf"),
    "minus-inf": float("-inf"),
    "nan": float("nan"),
    "str": "héllo ✓",
    "empty-str": "",
    "bytes": b"\x00\xff\x01",
    "empty-bytes": b"",
    "decimal": Decimal("12.340"),
    "decimal-nan": Decimal("NaN"),
    "decimal-snan": Decimal("sNaN"),
    "decimal-negative-zero": Decimal("-0.00"),
    "decimal-infinity": Decimal("-Infinity"),
    "decimal-exponent": Decimal("1E+10"),
    "decimal-long": Decimal("3.14159265358979323846264338327950288419716939937510"),
    "date": datetime.date(2024, 2, 29),
    "date-min": datetime.date.min,
    "datetime-naive": datetime.datetime(2024, 2, 29, 23, 59, 59, 999999),
    "datetime-utc": datetime.datetime(2024, 1, 1, 12, tzinfo=UTC),
    "datetime-offset": datetime.datetime(2024, 1, 1, 12, 30, tzinfo=PLUS_5_30),
    "datetime-fold": datetime.datetime(2024, 10, 27, 2, 30, fold=1),
    "datetime-max": datetime.datetime.max,
    "time": datetime.time(23, 59, 1, 5),
    "time-tz": datetime.time(8, 15, tzinfo=PLUS_5_30),
    "time-fold": datetime.time(1, 30, fold=1),
    "timedelta": datetime.timedelta(days=3, seconds=5, microseconds=7),
    "timedelta-negative": datetime.timedelta(days=-1, seconds=3),
    "timedelta-min": datetime.timedelta.min,
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
}


@pytest.mark.parametrize("value", list(SCALARS.values()), ids=list(SCALARS))
def test_a_supported_value_reads_back_as_itself(value: Any) -> None:
    assert_same(round_trip(value), value)


CONTAINERS = {
    "empty-list": [],
    "empty-tuple": (),
    "empty-dict": {},
    "empty-set": set(),
    "empty-frozenset": frozenset(),
    "list": [1, "a", None],
    "tuple": (1, "a", None),
    "set": {1, "a", b"b", None, (1, 2)},
    "frozenset": frozenset({1.5, Decimal("2"), uuid.UUID(int=1)}),
    "tuple-in-dict-in-list": [{"row": (1, Decimal("2.50"), "x")}, {"row": (2, None, "y")}],
    "nested-tuples": ((((1,),),), ()),
    "list-in-tuple": ([1, 2], [3]),
    "set-of-frozensets": {frozenset({1, 2}), frozenset()},
    "dict-keys": {1: "int", "1": "str", b"1": "bytes", None: "none", (1, 2): "tuple"},
    "frozenset-key": {frozenset({1}): [set()]},
    "bool-and-float-keys": {True: 1, 2.5: 2},
    "big-ints-inside": [2**70, (-(2**70),), {"n": 2**65}],
    "dates-inside": {
        "at": [datetime.datetime(2020, 5, 17, tzinfo=UTC), datetime.date(2020, 5, 17)]
    },
    "query-rows": [
        (1, "widget", Decimal("9.99"), datetime.datetime(2024, 1, 1, tzinfo=UTC), True),
        (2, "gadget", None, datetime.datetime(2024, 1, 2, tzinfo=UTC), False),
    ],
}


@pytest.mark.parametrize("value", list(CONTAINERS.values()), ids=list(CONTAINERS))
def test_containers_read_back_with_their_types_all_the_way_down(value: Any) -> None:
    assert_same(round_trip(value), value)


def test_a_tuple_stays_a_tuple_and_a_list_a_list() -> None:
    value = round_trip({"t": (1, 2), "l": [1, 2], "s": {1}, "f": frozenset({1})})
    assert type(value["t"]) is tuple
    assert type(value["l"]) is list
    assert type(value["s"]) is set
    assert type(value["f"]) is frozenset


def test_nan_reads_back_as_nan_inside_containers() -> None:
    value = round_trip([float("nan"), (Decimal("NaN"),)])
    assert math.isnan(value[0])
    assert value[1][0].is_nan()


def test_serializing_is_deterministic() -> None:
    value = {"a": [1, (2, 3)], "b": Decimal("1.5")}
    assert SafeSerializer().dumps(value) == SafeSerializer().dumps(value)


def test_a_secret_does_not_change_what_reads_back() -> None:
    serializer = SafeSerializer(b"secret")
    value = [(1, Decimal("2")), {"x": frozenset({3})}]
    assert_same(round_trip(value, serializer), value)


def test_a_datetime_in_a_named_zone_keeps_its_zone() -> None:
    try:
        paris = zoneinfo.ZoneInfo("Europe/Paris")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone database")
    value = datetime.datetime(2024, 7, 1, 12, tzinfo=paris)
    later = datetime.timedelta(days=180)
    assert (round_trip(value) + later).utcoffset() == (value + later).utcoffset()


# --- values that cannot be written ---------------------------------------------------------


Point = collections.namedtuple("Point", "x y")
Text = type("Text", (str,), {})
Number = type("Number", (int,), {})
Real = type("Real", (float,), {})
Rows = type("Rows", (list,), {})

UNSUPPORTED = {
    "namedtuple": Point(1, 2),
    "str-subclass": Text("a"),
    "int-subclass": Number(1),
    "float-subclass": Real(1.0),
    "list-subclass": Rows([1]),
    "ordered-dict": collections.OrderedDict(a=1),
    "object": object(),
    "complex": 1j,
    "path": Path("/tmp"),
    "function": len,
    "lone-surrogate": "\ud800",
    "int-too-long-for-str": 10**5000,
    "inside-a-list": [1, Point(1, 2)],
    "inside-a-tuple": (1, (2, object())),
    "inside-a-set": {Text("a")},
    "a-dict-key": {Point(1, 2): 1},
    "a-dict-value": {"a": [Number(1)]},
}


@pytest.mark.parametrize("value", list(UNSUPPORTED.values()), ids=list(UNSUPPORTED))
def test_an_unsupported_value_is_refused_on_writing(value: Any) -> None:
    with pytest.raises(UnsupportedValue):
        SafeSerializer().dumps(value)


def test_unsupported_value_names_the_type() -> None:
    with pytest.raises(UnsupportedValue, match="Point"):
        SafeSerializer().dumps([Point(1, 2)])


def test_unsupported_value_is_a_txcache_error_and_a_type_error() -> None:
    assert issubclass(UnsupportedValue, TxcacheError)
    assert issubclass(UnsupportedValue, TypeError)


@pytest.mark.parametrize(
    "value", [bytearray(b"ab"), memoryview(b"ab")], ids=["bytearray", "memoryview"]
)
def test_a_bytes_like_value_is_refused_rather_than_read_back_as_bytes(value: Any) -> None:
    with pytest.raises(UnsupportedValue):
        SafeSerializer().dumps(value)


# --- bytes that are not ours ---------------------------------------------------------------


SAMPLE = [
    {"id": 7, "name": "widget", "tags": ("a", "b"), "seen": {1, 2}},
    (Decimal("9.99"), datetime.datetime(2024, 1, 1, 12, tzinfo=UTC), uuid.UUID(int=5)),
    [2**70, -1.5, None, True, b"\x00\x01"],
]


def test_foreign_value_is_a_value_error() -> None:
    assert issubclass(ForeignValue, ValueError)


def test_every_single_byte_corruption_is_foreign() -> None:
    serializer = SafeSerializer()
    data = serializer.dumps(SAMPLE)
    for position in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            corrupted = bytearray(data)
            corrupted[position] ^= mask
            with pytest.raises(ForeignValue):
                serializer.loads(bytes(corrupted))


def test_every_truncation_is_foreign() -> None:
    serializer = SafeSerializer()
    data = serializer.dumps(SAMPLE)
    for length in range(len(data)):
        with pytest.raises(ForeignValue):
            serializer.loads(data[:length])


def test_trailing_bytes_are_foreign() -> None:
    serializer = SafeSerializer()
    data = serializer.dumps(SAMPLE)
    for extra in (b"\x00", b"\xc0", data):
        with pytest.raises(ForeignValue):
            serializer.loads(data + extra)


def test_a_value_written_with_a_secret_is_foreign_to_other_readers() -> None:
    data = SafeSerializer(b"a").dumps(SAMPLE)
    assert_same(SafeSerializer(b"a").loads(data), SAMPLE)
    for reader in (SafeSerializer(b"b"), SafeSerializer(), SafeSerializer(b"a" * 2)):
        with pytest.raises(ForeignValue):
            reader.loads(data)


def test_a_value_is_bound_to_the_key_it_was_written_for() -> None:
    """A client of the nodes that copies a genuine value to another key (or a node that
    answers with another key's value) is refused: the tag covers the key."""
    serializer = SafeSerializer(b"secret")
    data = serializer.dumps(SAMPLE, key=b"account 1")
    assert_same(serializer.loads(data, key=b"account 1"), SAMPLE)
    for other in (b"account 2", b"", b"account 1\x00"):
        with pytest.raises(ForeignValue, match="another key"):
            serializer.loads(data, key=other)


class OldSerializer:
    """A serializer of the protocol before ``key=``."""

    def dumps(self, value: Any) -> bytes:
        return repr(value).encode()

    def loads(self, data: bytes) -> Any:
        return data.decode()


def test_a_serializer_without_key_is_adapted_and_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="txcache"):
        adapted = keyed(OldSerializer())
    assert adapted.loads(adapted.dumps(7, key=b"k"), key=b"k") == "7"
    assert "bound to no cache key" in caplog.text
    safe = SafeSerializer()
    assert keyed(safe) is safe


def test_a_value_written_without_a_secret_is_foreign_to_a_reader_with_one() -> None:
    data = SafeSerializer().dumps(SAMPLE)
    with pytest.raises(ForeignValue):
        SafeSerializer(b"a").loads(data)
    assert_same(SafeSerializer(b"").loads(data), SAMPLE)  # an empty secret is no secret


def test_random_garbage_is_foreign() -> None:
    serializer = SafeSerializer()
    version = serializer.dumps(None)[:1]
    rng = random.Random(20240229)
    for _ in range(3000):
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 48)))
        if rng.random() < 0.5:
            garbage = version + garbage  # get past the version check to the tag
        with pytest.raises(ForeignValue):
            serializer.loads(garbage)


def test_plain_msgpack_and_pickle_are_foreign() -> None:
    import pickle

    serializer = SafeSerializer()
    for data in (msgpack.packb([1, 2]), pickle.dumps([1, 2]), b"", b"\x01"):
        with pytest.raises(ForeignValue):
            serializer.loads(data)


# --- validly tagged bodies that this serializer never writes --------------------------------
# Without a secret anyone who can write to the cache can produce these.


def tagged(body: bytes, serializer: SafeSerializer | None = None) -> bytes:
    serializer = serializer or SafeSerializer()
    return serializer.dumps(None)[:1] + serializer._tag(b"", body) + body


def ext(code: int, data: bytes) -> bytes:
    packed: bytes = msgpack.packb(msgpack.ExtType(code, data))
    return packed


def test_an_unknown_extension_code_is_foreign() -> None:
    with pytest.raises(ForeignValue):
        SafeSerializer().loads(tagged(msgpack.packb(msgpack.ExtType(99, b"x"))))


def test_an_unknown_extension_code_nested_in_a_tuple_is_foreign() -> None:
    with pytest.raises(ForeignValue):
        SafeSerializer().loads(tagged(ext(1, msgpack.packb([msgpack.ExtType(99, b"x")]))))


MALFORMED = {
    "not-msgpack": b"\xc1",
    "unhashable-map-key": b"\x81\x91\x01\x02",
    "deep-arrays": b"\x91" * 100_000 + b"\x01",
    "tuple-of-int": ext(1, msgpack.packb(5)),
    "tuple-of-garbage": ext(1, b"\xc1"),
    "set-of-lists": ext(2, msgpack.packb([[1]])),
    "frozenset-of-dicts": ext(3, msgpack.packb([{}])),
    "decimal-not-utf8": ext(4, b"\xff"),
    "datetime-without-fold": ext(5, b"2024-01-01T00:00:00"),
    "datetime-bad-fold": ext(5, b"2024-01-01T00:00:00|2"),
    "datetime-not-iso": ext(5, b"yesterday|0"),
    "date-not-iso": ext(6, b"2024-13-01"),
    "time-out-of-range": ext(7, b"25:00|0"),
    "timedelta-two-fields": ext(8, msgpack.packb([1, 2])),
    "timedelta-of-strings": ext(8, msgpack.packb(["a", "b", "c"])),
    "timedelta-not-msgpack": ext(8, b"\xc1"),
    "uuid-too-short": ext(9, b"short"),
    "bigint-not-a-number": ext(10, b"1e5"),
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_validly_tagged_malformed_body_is_foreign(body: bytes) -> None:
    with pytest.raises(ForeignValue):
        SafeSerializer().loads(tagged(body))


@pytest.mark.parametrize(
    "body",
    [ext(4, b"abc"), ext(8, msgpack.packb([10**10, 0, 0]))],
    ids=["decimal-not-a-number", "timedelta-overflow"],
)
def test_a_validly_tagged_body_with_out_of_range_fields_is_foreign(body: bytes) -> None:
    with pytest.raises(ForeignValue):
        SafeSerializer().loads(tagged(body))


# --- deep nesting (in a child process: a failure may be a crash) ----------------------------


def run_child(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_deeply_nested_tuples_are_refused_or_read_back_never_a_crash() -> None:
    child = run_child(
        """
        from txcache._serialize import ForeignValue, SafeSerializer
        from txcache.errors import UnsupportedValue
        value = []
        for _ in range(250):
            value = (value,)
        serializer = SafeSerializer()
        try:
            data = serializer.dumps(value)
        except UnsupportedValue:
            print("refused")
        else:
            try:
                print("read back" if serializer.loads(data) == value else "wrong value")
            except ForeignValue:
                print("foreign")
        """
    )
    assert child.returncode == 0, f"the reader died: {child.returncode} {child.stderr[-500:]}"
    assert child.stdout.strip() in ("refused", "read back")


def test_too_deeply_nested_tuples_are_an_unsupported_value() -> None:
    child = run_child(
        """
        from txcache._serialize import SafeSerializer
        from txcache.errors import UnsupportedValue
        value = []
        for _ in range(2000):
            value = (value,)
        try:
            SafeSerializer().dumps(value)
        except UnsupportedValue:
            print("refused")
        except RecursionError:
            print("RecursionError")
        else:
            print("written")
        """
    )
    assert child.returncode == 0, child.stderr[-500:]
    assert child.stdout.strip() in ("refused", "written")
