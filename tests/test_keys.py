"""Cache keys of cacheable calls (``txcache._keys``): one call, one key; different calls,
different keys; a value with no canonical form refused rather than guessed. Pure logic."""

from __future__ import annotations

import datetime
import enum
import functools
import os
import subprocess
import sys
import uuid
from collections import namedtuple
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import txcache
from txcache._arguments import encode_argument
from txcache._code_hash import code_hash
from txcache._keys import KEY_BYTES, CallKeys
from txcache.errors import TxcacheError, UnsupportedArgument


def one(x: Any) -> Any:
    return x


def key_of(value: Any) -> bytes:
    """The key of ``one(value)``."""
    return CallKeys(one).key((value,), {})


def define(source: str, name: str = "f", module: str = "app.models") -> Callable[..., Any]:
    """Compile ``source`` into a fresh namespace posing as ``module`` and return ``name``."""
    namespace: dict[str, Any] = {"__name__": module}
    exec(compile(source, f"<{module}>", "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    return function


Point = namedtuple("Point", "x y")


class Colour(enum.Enum):
    RED = 1
    GREEN = 2


class Shade(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


# --- shape of a key ------------------------------------------------------------------------


def test_a_key_is_key_bytes_long() -> None:
    assert KEY_BYTES == 16
    assert len(key_of(1)) == KEY_BYTES
    assert len(CallKeys(one).key((), {"x": [1, {"a": (2, 3)}]})) == KEY_BYTES


def test_keys_are_deterministic() -> None:
    assert key_of({"a": [1, 2], "b": None}) == key_of({"a": [1, 2], "b": None})
    assert CallKeys(one).key((5,), {}) == CallKeys(one).key((5,), {})


def test_the_name_is_the_qualified_name_of_the_function() -> None:
    assert CallKeys(one).name == f"{one.__module__}.one"
    assert CallKeys(define("def f(x):\n    return x\n")).name == "app.models.f"


# --- one call, one key ---------------------------------------------------------------------


def test_positional_keyword_and_defaulted_calls_are_one_call() -> None:
    def f(x: int, y: int = 2) -> int:
        return x + y

    keys = CallKeys(f)
    positional = keys.key((1, 2), {})
    assert keys.key((1,), {"y": 2}) == positional
    assert keys.key((), {"x": 1, "y": 2}) == positional
    assert keys.key((), {"y": 2, "x": 1}) == positional
    assert keys.key((1,), {}) == positional, "the default is part of the call"
    assert keys.key((1, 3), {}) != positional


def test_a_single_parameter_given_by_keyword_or_position_is_one_call() -> None:
    keys = CallKeys(one)
    assert keys.key((1,), {}) == keys.key((), {"x": 1})


def test_a_wrapper_is_keyed_by_its_own_signature_not_the_wrapped_one() -> None:
    """A ``functools.wraps`` wrapper that fills in a default of its own, or takes an
    argument the wrapped function does not: calls that compute different results differ."""

    def price(item: int, currency: str = "USD") -> tuple[int, str]:
        return item, currency

    @functools.wraps(price)
    def in_euros(*args: Any, **kwargs: Any) -> tuple[int, str]:
        kwargs.setdefault("currency", "EUR")
        return price(*args, **kwargs)

    keys = CallKeys(in_euros)
    assert keys.key((1,), {}) != keys.key((1,), {"currency": "USD"})

    @functools.wraps(price)
    def limited(*args: Any, limit: int = 10, **kwargs: Any) -> tuple[int, str]:
        return price(*args, **kwargs)

    keys = CallKeys(limited)
    assert keys.key((1,), {"limit": 5}) != keys.key((1,), {"limit": 6})


def test_a_function_without_parameters_has_one_key() -> None:
    def f() -> int:
        return 0

    assert CallKeys(f).key((), {}) == CallKeys(f).key((), {})


def test_a_call_that_does_not_fit_the_signature_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        CallKeys(one).key((1, 2), {})
    with pytest.raises(TypeError):
        CallKeys(one).key((), {"y": 1})


def test_arguments_are_not_interchangeable_between_parameters() -> None:
    def f(x: Any, y: Any) -> Any:
        return x - y

    keys = CallKeys(f)
    assert keys.key((1, 2), {}) != keys.key((2, 1), {})
    assert keys.key(("ab", ""), {}) != keys.key(("a", "b"), {})


def test_var_positional_calls_with_different_arguments_have_different_keys() -> None:
    def f(*args: Any) -> tuple[Any, ...]:
        return args

    keys = CallKeys(f)
    assert keys.key(((1, 2),), {}) != keys.key((1, 2), {})
    assert keys.key(((),), {}) != keys.key((), {})


def test_a_positional_argument_for_a_keyword_only_parameter_is_a_type_error() -> None:
    def h(x: int, *, y: int) -> int:
        return x + y

    with pytest.raises(TypeError):
        CallKeys(h).key((1, 2), {})


# --- different values, different keys -----------------------------------------------------


def test_values_equal_in_python_but_of_different_types_differ() -> None:
    values = [1, 1.0, True, "1", b"1", Decimal("1"), (1,), [1], {1}, Colour.RED, Level.LOW]
    keys = [key_of(value) for value in values]
    assert len(set(keys)) == len(values)


def test_zero_values_of_different_types_differ() -> None:
    values = [0, 0.0, False, "", b"", None, (), [], {}, set(), Decimal(0)]
    keys = [key_of(value) for value in values]
    assert len(set(keys)) == len(values)


def test_negative_zero_differs_from_zero() -> None:
    assert key_of(-0.0) != key_of(0.0)


def test_nans_are_keyed_by_their_bits() -> None:
    nan = float("nan")
    assert key_of(nan) == key_of(float("nan"))
    assert key_of(nan) != key_of(-nan), "copysign tells them apart"
    assert key_of(nan) != key_of(float("inf"))


def test_infinities_differ() -> None:
    assert key_of(float("inf")) != key_of(float("-inf"))


def test_floats_that_differ_in_the_last_bit_differ() -> None:
    assert key_of(0.1 + 0.2) != key_of(0.3)


def test_big_and_negative_integers_differ() -> None:
    assert key_of(2**70) != key_of(-(2**70))
    assert key_of(2**70) != key_of(2**70 + 1)
    assert key_of(-1) != key_of(1)


def test_str_bytes_and_bytearray_with_the_same_content_differ() -> None:
    assert key_of("abc") != key_of(b"abc")
    assert key_of(bytearray(b"abc")) != key_of(b"abc")
    assert key_of(bytearray(b"abc")) == key_of(bytearray(b"abc"))


def test_strings_with_lone_surrogates_have_keys() -> None:
    assert key_of("\ud800") != key_of("\ud801")


def test_decimals_are_keyed_by_their_exact_form() -> None:
    assert key_of(Decimal("1.0")) != key_of(Decimal("1.00"))
    assert key_of(Decimal("NaN")) == key_of(Decimal("NaN"))
    assert key_of(Decimal("NaN")) != key_of(Decimal("sNaN"))
    assert key_of(Decimal("-0")) != key_of(Decimal("0"))


# --- containers ----------------------------------------------------------------------------


def test_dict_insertion_order_is_part_of_the_key() -> None:
    # A function can build SQL from it (ORDER BY from sort.items()).
    assert key_of({"a": 1, "b": 2}) != key_of({"b": 2, "a": 1})
    assert key_of({"a": 1, "b": 2}) == key_of(dict([("a", 1), ("b", 2)]))


def test_dict_keys_and_values_are_not_interchangeable() -> None:
    assert key_of({"a": "b"}) != key_of({"b": "a"})
    assert key_of({"a": 1, "b": 2}) != key_of({"a": 2, "b": 1})


def test_set_order_does_not_matter_but_set_is_not_frozenset() -> None:
    many = [f"item {i}" for i in range(50)]
    assert key_of(set(many)) == key_of(set(reversed(many)))
    assert key_of(frozenset(many)) == key_of(frozenset(reversed(many)))
    assert key_of(set(many)) != key_of(frozenset(many))


def test_list_and_tuple_differ() -> None:
    assert key_of([1, 2]) != key_of((1, 2))
    assert key_of([]) != key_of(())


def test_sequence_order_matters() -> None:
    assert key_of([1, 2]) != key_of([2, 1])
    assert key_of((1, 2)) != key_of((2, 1))


def test_nested_containers_keep_their_structure() -> None:
    assert key_of([[1, 2], [3]]) != key_of([[1], [2, 3]])
    assert key_of([[1, 2], [3]]) != key_of([1, 2, 3])
    assert key_of(("a", "b")) != key_of(("ab",))
    assert key_of({"k": [1, (2, 3)]}) == key_of({"k": [1, (2, 3)]})
    assert key_of({"k": [1, (2, 3)]}) != key_of({"k": [1, [2, 3]]})
    assert key_of([{"x": {1, 2}}]) == key_of([{"x": {2, 1}}])


def test_a_dict_differs_from_its_items() -> None:
    assert key_of({"a": 1}) != key_of([("a", 1)])
    assert key_of({"a": 1}) != key_of({("a", 1)})


# --- dates, times, UUIDs, enums ------------------------------------------------------------


def test_datetime_with_and_without_a_time_zone_differ() -> None:
    naive = datetime.datetime(2024, 3, 1, 12, 0)
    aware = naive.replace(tzinfo=datetime.UTC)
    assert key_of(naive) != key_of(aware)


def test_datetimes_in_different_offsets_differ() -> None:
    a = datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.UTC)
    b = a.astimezone(datetime.timezone(datetime.timedelta(hours=1)))
    assert a == b
    assert key_of(a) != key_of(b)


def test_datetimes_in_different_zones_of_one_offset_differ() -> None:
    a = datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.UTC)
    b = a.astimezone(ZoneInfo("Europe/London"))
    assert a == b
    assert a.utcoffset() == b.utcoffset()
    assert key_of(a) != key_of(b), "the zone, not just the offset, is in the key"


def test_datetime_fold_is_part_of_the_key() -> None:
    a = datetime.datetime(2024, 10, 27, 2, 30)
    assert key_of(a) != key_of(a.replace(fold=1))


def test_date_datetime_and_time_differ() -> None:
    assert key_of(datetime.date(2024, 3, 1)) != key_of(datetime.datetime(2024, 3, 1))
    assert key_of(datetime.time(0, 0)) != key_of(datetime.datetime(2024, 3, 1))
    assert key_of(datetime.date(2024, 3, 1)) != key_of(datetime.date(2024, 3, 2))


def test_timedeltas_are_keyed_by_their_value() -> None:
    assert key_of(datetime.timedelta(days=1)) == key_of(datetime.timedelta(hours=24))
    assert key_of(datetime.timedelta(days=-1)) != key_of(datetime.timedelta(days=1))


def test_uuids_are_keyed_by_their_value() -> None:
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert key_of(u) == key_of(uuid.UUID(str(u)))
    assert key_of(u) != key_of(uuid.uuid4())
    assert key_of(u) != key_of(str(u))
    assert key_of(u) != key_of(u.bytes)


def test_enum_members_are_keyed_by_class_and_value() -> None:
    assert key_of(Colour.RED) == key_of(Colour(1))
    assert key_of(Colour.RED) != key_of(Colour.GREEN)
    assert key_of(Colour.RED) != key_of(Shade.RED), "same name and value, another enum"
    assert key_of(Colour.RED) != key_of(1)
    assert key_of(Level.LOW) != key_of(1), "an IntEnum is not its int"


def test_encode_argument_tags_by_type() -> None:
    assert encode_argument(1) != encode_argument(True)
    assert encode_argument(None) != encode_argument(b"")
    assert encode_argument("") != encode_argument(b"")


# --- values without a canonical form -------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        object(),
        lambda: None,
        Point(1, 2),
        type("Text", (str,), {})("a"),
        type("Number", (int,), {})(1),
        Path("data"),
        [1, object()],
        {"a": {object()}},
        (1, (2, [3, Exception()])),
        {object(): 1},
        Colour,
    ],
    ids=[
        "object",
        "lambda",
        "namedtuple",
        "str-subclass",
        "int-subclass",
        "path",
        "nested-in-list",
        "nested-in-set-in-dict",
        "deeply-nested",
        "dict-key",
        "enum-class",
    ],
)
def test_a_value_without_a_canonical_form_is_refused(value: Any) -> None:
    with pytest.raises(UnsupportedArgument):
        encode_argument(value)


def test_unsupported_argument_names_the_function_and_the_parameter() -> None:
    def lookup(user: Any, options: Any) -> tuple[Any, Any]:
        return user, options

    with pytest.raises(UnsupportedArgument) as raised:
        CallKeys(lookup).key((1,), {"options": object()})
    message = str(raised.value)
    assert f"{lookup.__module__}.{lookup.__qualname__}" in message
    assert "'options'" in message
    assert "object" in message


def test_unsupported_argument_is_a_txcache_error_and_a_type_error() -> None:
    with pytest.raises(TxcacheError):
        key_of(object())
    with pytest.raises(TypeError):
        key_of(object())


def test_unsupported_argument_names_the_namedtuple_type() -> None:
    with pytest.raises(UnsupportedArgument, match="Point"):
        key_of(Point(1, 2))


def test_an_int_too_long_for_str_still_has_a_canonical_encoding() -> None:
    assert encode_argument(10**5000) == encode_argument(10**5000)
    assert encode_argument(10**5000) != encode_argument(10**5000 + 1)
    assert encode_argument(-(10**5000)) != encode_argument(10**5000)


# --- the function's code and version -------------------------------------------------------


SOURCE = """
LIMIT = 10

def f(x):
    return [x * 2, "total"]
"""


def test_functions_with_the_same_name_but_different_code_differ() -> None:
    f1 = define("def f(x):\n    return x + 1\n")
    f2 = define("def f(x):\n    return x - 1\n")
    assert CallKeys(f1).name == CallKeys(f2).name
    assert CallKeys(f1).key((1,), {}) != CallKeys(f2).key((1,), {})


def test_the_same_function_moved_in_its_file_keeps_its_key() -> None:
    f1 = define(SOURCE)
    f2 = define("\n\n\n\n\n# moved down\n\n" + SOURCE)
    assert f1.__code__.co_firstlineno != f2.__code__.co_firstlineno
    assert code_hash(f1) == code_hash(f2)
    assert CallKeys(f1).key((3,), {}) == CallKeys(f2).key((3,), {})


def test_the_same_function_in_another_file_keeps_its_key() -> None:
    f1 = define(SOURCE)
    namespace: dict[str, Any] = {"__name__": "app.models"}
    exec(compile(SOURCE, "elsewhere/models.py", "exec"), namespace)
    assert CallKeys(f1).key((3,), {}) == CallKeys(namespace["f"]).key((3,), {})


def test_a_changed_constant_changes_the_key() -> None:
    f1 = define(SOURCE)
    f2 = define(SOURCE.replace('"total"', '"sum"'))
    f3 = define(SOURCE.replace("x * 2", "x * 3"))
    assert len({CallKeys(f).key((3,), {}) for f in (f1, f2, f3)}) == 3


def test_a_changed_nested_function_changes_the_key() -> None:
    outer = "def f(x):\n    def inner(y):\n        return y + {n}\n    return inner(x)\n"
    f1 = define(outer.format(n=1))
    f2 = define(outer.format(n=2))
    assert code_hash(f1) != code_hash(f2)


def test_a_renamed_global_changes_the_key() -> None:
    f1 = define("def f(x):\n    return len(x)\n")
    f2 = define("def f(x):\n    return abs(x)\n")
    assert code_hash(f1) != code_hash(f2)


def test_a_function_in_another_module_differs() -> None:
    f1 = define(SOURCE, module="app.models")
    f2 = define(SOURCE, module="app.views")
    assert CallKeys(f1).key((3,), {}) != CallKeys(f2).key((3,), {})


def test_version_changes_the_key() -> None:
    default = CallKeys(one).key((1,), {})
    v1 = CallKeys(one, version="1").key((1,), {})
    v2 = CallKeys(one, version="2").key((1,), {})
    assert len({default, v1, v2}) == 3
    assert CallKeys(one, version="1").key((1,), {}) == v1


def test_code_hash_of_a_callable_without_code_is_still_a_digest() -> None:
    assert len(code_hash(len)) == 16
    assert code_hash(len) != code_hash(abs)


def test_code_hash_is_the_same_in_every_process() -> None:
    script = (
        "from txcache._code_hash import code_hash\n"
        "def f(x):\n"
        "    return x in {'alpha', 'beta', 'gamma', 'delta', 'epsilon'}\n"
        "print(code_hash(f).hex())\n"
    )
    hashes = set()
    for seed in ("1", "2"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", script],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        )
        hashes.add(result.stdout.strip())
    assert len(hashes) == 1


# --- functions a factory makes, methods ------------------------------------------------------


def over(value: Any) -> Callable[[int], Any]:
    """A function a factory makes, closing over ``value``."""

    def read(item_id: int) -> Any:
        return value, item_id

    return read


def test_functions_a_factory_made_over_different_data_never_share_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A dict (a tenant's settings) is named by the code it holds, never by its data: each
    such function gets keys of its own, and the log says why once."""
    tenant_a, tenant_b = CallKeys(over({"schema": "a"})), CallKeys(over({"schema": "b"}))
    with caplog.at_level("WARNING", logger="txcache"):
        assert tenant_a.key((1,), {}) != tenant_b.key((1,), {})
        assert tenant_a.key((1,), {}) == tenant_a.key((1,), {})
    assert [r.getMessage() for r in caplog.records if "closes over value (dict)" in r.getMessage()]
    assert len(caplog.records) == 1, "once per function name"
    # Immutable data is in the code hash: two functions over one string share keys.
    assert CallKeys(over("a")).key((1,), {}) == CallKeys(over("a")).key((1,), {})
    assert CallKeys(over("a")).key((1,), {}) != CallKeys(over("b")).key((1,), {})


def test_a_cacheable_method_or_a_partial_is_refused_saying_what_to_do() -> None:
    class Repository:
        @txcache.cacheable
        def get(self, item_id: int) -> int:
            return item_id

        @staticmethod
        @txcache.cacheable
        def find(item_id: int) -> int:
            return item_id

        @classmethod
        @txcache.cacheable
        def named(cls, item_id: int) -> int:
            return item_id

    with pytest.raises(UnsupportedArgument, match="called as a method of a Repository object"):
        Repository().get(1)
    if sys.version_info < (3, 13):  # 3.13 no longer chains classmethod to __get__
        with pytest.raises(
            UnsupportedArgument, match="bound to the class Repository by @classmethod: the class"
        ):
            Repository.named(1)
    assert isinstance(Repository.get, txcache.CacheableFunction)
    # Through its class the instance is an argument: refused as such, with no cache
    # connected too (uncached calls encode their arguments as cached ones would).
    with pytest.raises(UnsupportedArgument, match="called through its class: make it a function"):
        Repository.get(Repository(), 1)
    with pytest.raises(TypeError, match=r"get\(\) takes 2 positional arguments but 3"):
        Repository.get(1, 2, 3)  # Python's own words
    assert isinstance(Repository().find, txcache.CacheableFunction)
    with pytest.raises(TypeError, match=r"takes a function .* not a partial"):
        txcache.cacheable(functools.partial(one, 1))
    # The advice for each names what works.
    with pytest.raises(TypeError, match="Put @staticmethod above @cacheable"):
        txcache.cacheable(staticmethod(one))
    with pytest.raises(TypeError, match="make it a @staticmethod"):
        txcache.cacheable(classmethod(one))  # type: ignore[call-overload]
