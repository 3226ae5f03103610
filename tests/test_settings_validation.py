"""Every public setting and argument is checked once, where it is given, and refused in one
format — ``<what> must be <allowed>, not <value>`` — naming the parameter, the value and
what is allowed (docs/settings.md, "What each accepts"): settings with
``ConfigurationError``; call arguments with ``TypeError`` for a wrong type and
``ValueError`` for a wrong value. Per setting and per argument: good values accepted, each
kind of bad value refused with its message."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import re
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import psycopg
import pytest

import txcache
from postgres_fixtures import fresh_database
from txcache import _keys, _validate
from txcache._cache_core import CacheCore
from txcache._config import _CHECKS, Settings, load_settings
from txcache.errors import ConfigurationError
from txcache.stack import EmbeddedPostgres

DSN = "postgresql:///app"
NAN, INF = math.nan, math.inf

ALLOWED = {
    "dsn": "a PostgreSQL connection string",
    "nodes": "host:port addresses",
    "agent": "host:port (port 1 to 65535",
    "password": "a non-empty string",
    "tls_ca": "the path of a readable file",
    "secret": "a non-empty string",
    "mode": "one of 'consistent', 'no_consistency', 'bypass'",
    "staleness": "a number of seconds, finite and >= 0",
    "fresh_pin_age": "a number of seconds, finite and >= 0",
    "pool_size": "a whole number >= 1",
    "pool_timeout": "a number of seconds, > 0 and at most 86400",
    "node_timeout": "a number of seconds, > 0 and at most 86400",
    "agent_timeout": "a number of seconds, > 0 and at most 86400",
    "replica_timeout": "a number of seconds, > 0 and at most 86400",
    "refresh_interval": "a number of seconds, > 0 and at most 86400",
    "lease": "a number of seconds from 0 to 60",
    "snapshot_hold": "a number of seconds, finite and >= 0",
    "code_version": "a string without control characters",
    "code_packages": "module names",
    "audit_rate": "a number from 0 to 1",
    "audit_invalidate": "True or False",
    "replicas": "standbys as {name: connection string}",
}
"""What each setting's message says is allowed (the start of it)."""

HIDDEN = {"dsn", "password", "secret", "replicas"}


@pytest.fixture(autouse=True)
def empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No stray txcache.toml, no TXCACHE_* of the process."""
    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith("TXCACHE_")]:
        monkeypatch.delenv(name)
    return tmp_path


def refusal(message: str) -> re.Match[str]:
    """The parts of a setting's refusal; fails unless it has the one format."""
    found = re.fullmatch(r"setting (\w+) \((.+?)\) must be (.+), not (.+)", message, re.S)
    assert found is not None, message
    return found


def assert_refused(error: BaseException, name: str, source: str, value: Any) -> None:
    parts = refusal(str(error))
    assert parts[1] == name
    assert parts[2] == source
    assert parts[3].startswith(ALLOWED[name]), parts[3]
    shown = parts[4].split(": ", 1)[0]  # then a detail, if any
    if name in HIDDEN and value not in ("", None):
        assert "hidden" in shown
        assert repr(value) not in str(error)
    else:
        assert shown == repr(value)


def test_every_setting_has_a_check_and_a_documented_rule() -> None:
    names = [field.name for field in dataclasses.fields(Settings)]
    assert list(_CHECKS) == names
    assert set(ALLOWED) == set(names) == set(GOOD) == set(BAD)
    reference = (Path(__file__).parents[1] / "docs" / "settings.md").read_text()
    accepts = reference.split("## What each accepts", 1)[1]
    for name in names:
        assert f"| `{name}` |" in accepts, name


# --- settings given as arguments -----------------------------------------------------------

GOOD: dict[str, list[tuple[Any, Any]]] = {
    "dsn": [(DSN, DSN), ("dbname=app user=me", "dbname=app user=me")],
    "nodes": [
        ("a:1", ("a:1",)),
        (" a:1 , b:2,", ("a:1", "b:2")),
        (["a:1", "[::1]:2"], ("a:1", "[::1]:2")),
        (["rediss://a:1", "redis://b:2"], ("rediss://a:1", "redis://b:2")),
        ((), ()),
    ],
    "agent": [
        ("127.0.0.1:7100", "127.0.0.1:7100"),
        (" [::1]:7100 ", "[::1]:7100"),
        ("rediss://[::1]:7100", "rediss://[::1]:7100"),
        ("a:1,b:2", "a:1,b:2"),
        (" a:1 , rediss://b:2,", "a:1,rediss://b:2"),
        (["a:1"], "a:1"),
        (("a:1", "[::1]:2"), "a:1,[::1]:2"),
    ],
    "password": [("pw", "pw")],
    "tls_ca": [(__file__, __file__)],
    "secret": [("s3cret", "s3cret")],
    "mode": [("consistent", "consistent"), ("no_consistency", "no_consistency")],
    "staleness": [(0, 0.0), (30, 30.0), (0.5, 0.5), (Fraction(1, 4), 0.25), (1e6, 1e6)],
    "fresh_pin_age": [(0, 0.0), (5, 5.0)],
    "pool_size": [(1, 1), (20, 20), (2.0, 2)],
    "pool_timeout": [(30, 30.0), (86400, 86400.0)],
    "node_timeout": [(0.3, 0.3), (1e-3, 1e-3)],
    "agent_timeout": [(2, 2.0), (0.5, 0.5)],
    "replica_timeout": [(5, 5.0), (0.25, 0.25)],
    "refresh_interval": [(0.05, 0.05), (3600, 3600.0)],
    "lease": [(0, 0.0), (1, 1.0), (0.0004, 0.0), (60, 60.0)],
    "snapshot_hold": [(0, 0.0), (0.25, 0.25)],
    "code_version": [(" 4f2a9c1\n", "4f2a9c1"), ("", "")],
    "code_packages": [("shop, shared.util", ("shared.util", "shop")), (["b", "a"], ("a", "b"))],
    "audit_rate": [(0, 0.0), (0.001, 0.001), (1, 1.0), (Fraction(1, 100), 0.01)],
    "audit_invalidate": [(True, True), (False, False)],
    "replicas": [
        ({"east-1": "host=e1", "w.2": DSN}, (("east-1", "host=e1"), ("w.2", DSN))),
        (["a=host=a port=5433", " b = dbname=x "], (("a", "host=a port=5433"), ("b", "dbname=x"))),
        ({}, ()),
    ],
}

BAD: dict[str, list[Any]] = {
    "dsn": [5, "", "   ", "from-env", "x=1", "postgresql://u:pw@[::1", b"dbname=app"],
    "nodes": [5, "a", "a:0", "a:65536", "a:1,a:1", ["a:1,b:2"], [1], "::1:80", b"a:1"],
    "agent": [5, "", "agent", "a:port", "http://a:1", "rediss://a", "a:1,a:1", "a:1,b", [], ","],
    "password": [1234, "", True],
    "tls_ca": ["", "/no/such/ca.pem", 5],
    "secret": [b"s3cret", "", 5],
    "mode": ["Consistent", "", "fast", 1, True],
    "staleness": [NAN, INF, -INF, -1, True, "5", [1], Decimal("5")],
    "fresh_pin_age": [NAN, -0.5, False, "5"],
    "pool_size": [0, -1, 1.5, True, "10", NAN, INF],
    "pool_timeout": [0, -1, NAN, INF, 86401, True, "30"],
    "node_timeout": [0, -0.1, NAN, INF, 1e12, False],
    "agent_timeout": [0, NAN, INF, True, "2"],
    "replica_timeout": [0, -1, NAN, True, "5"],
    "refresh_interval": [0, NAN, INF, 86400.5, True, "0.25"],
    "lease": [NAN, INF, -1, 61, True, "1"],
    "snapshot_hold": [NAN, INF, -1, True, "0.25"],
    "code_version": [3, ["a"], "a\x00b", True],
    "code_packages": [5, "shop-app", ["shop", 3], "a..b"],
    "audit_rate": [NAN, INF, -0.1, 1.5, True, "0.01", Decimal("0.01")],
    "audit_invalidate": [1, 0, "yes", "False"],
    "replicas": [5, {"a b": DSN}, {"a": "x=1"}, ["a"], ["a=host=x", "a=host=y"], {"": DSN}],
}


def cases(table: dict[str, list[Any]]) -> list[Any]:
    return [
        pytest.param(name, value, id=f"{name}={value!r}")
        for name, values in table.items()
        for value in values
    ]


@pytest.mark.parametrize(("name", "value"), cases(GOOD))
def test_a_good_setting_is_accepted_and_converted(name: str, value: tuple[Any, Any]) -> None:
    given, expected = value
    settings = load_settings({"dsn": DSN, name: given}, {})
    assert getattr(settings, name) == expected


@pytest.mark.parametrize(("name", "value"), cases(BAD))
def test_a_bad_setting_argument_is_refused_naming_it(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings({"dsn": DSN, name: value}, {})
    assert_refused(raised.value, name, f"given as the argument {name}=", value)


def test_a_dsn_s_password_stays_out_of_the_message() -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings({"dsn": "postgresql://app:hunter2@[::1"}, {})
    assert "hunter2" not in str(raised.value)
    assert "IPv6" in str(raised.value), "libpq's reason is kept"


# --- settings from the environment ---------------------------------------------------------

GOOD_TEXT: dict[str, list[Any]] = {
    "staleness": [(" 0.5 ", 0.5), ("1e-1", 0.1), ("2", 2.0)],
    "pool_size": [("20", 20), (" 4 ", 4)],
    "node_timeout": [("3.5", 3.5)],
    "mode": [(" bypass ", "bypass")],
    "nodes": [("n1:7000,n2:7001", ("n1:7000", "n2:7001"))],
    "agent": [("a1:6390, a2:6390", "a1:6390,a2:6390")],
    "audit_rate": [(" 0.01 ", 0.01), ("1", 1.0), ("0", 0.0)],
    "audit_invalidate": [("true", True), (" Off ", False), ("1", True), ("NO", False)],
    "replicas": [
        ("s1=host=a,b port=1,2; s2=dbname=x", (("s1", "host=a,b port=1,2"), ("s2", "dbname=x")))
    ],
}

BAD_TEXT: dict[str, list[Any]] = {
    "dsn": ["from-env"],
    "nodes": ["a:1,b", "a:1;b:2"],
    "agent": ["agent", "a:1,b"],
    "mode": ["fast", "CONSISTENT"],
    "staleness": ["nan", "inf", "-1", "5s", "true", "1,5"],
    "fresh_pin_age": ["-inf"],
    "pool_size": ["ten", "1.5", "0", "0x10", "-3"],
    "pool_timeout": ["infinity", "0"],
    "node_timeout": ["0", "1e400", "86401"],
    "refresh_interval": ["--1", "NaN"],
    "lease": ["-1", "61"],
    "snapshot_hold": ["-0.5", "inf"],
    "code_version": ["a\x01b"],
    "code_packages": ["shop-app"],
    "audit_rate": ["2", "1%", "nan"],
    "audit_invalidate": ["maybe", "2"],
    "replicas": ["host=a", "s1=host=a;s1=host=b", "=host=a"],
}


@pytest.mark.parametrize(("name", "value"), cases(GOOD_TEXT))
def test_environment_text_is_parsed(name: str, value: tuple[str, Any]) -> None:
    text, expected = value
    environ = {"TXCACHE_DSN": DSN, f"TXCACHE_{name.upper()}": text}
    assert getattr(load_settings({}, environ), name) == expected


@pytest.mark.parametrize(("name", "text"), cases(BAD_TEXT))
def test_bad_environment_text_is_refused_naming_the_variable(name: str, text: str) -> None:
    variable = f"TXCACHE_{name.upper()}"
    with pytest.raises(ConfigurationError) as raised:
        load_settings({}, {"TXCACHE_DSN": DSN, variable: text})
    assert_refused(raised.value, name, f"from {variable}", text)


@pytest.mark.parametrize(
    "given", [["host=127.0.0.1 port=5433"], ["postgresql://standby/app"], "dbname=app"]
)
def test_a_standby_given_without_its_name_is_refused_saying_so(given: Any) -> None:
    """A bare connection string where a named standby is expected (``replicas=[dsn]``)."""
    with pytest.raises(ConfigurationError, match="a connection string without a name"):
        load_settings({"dsn": DSN, "replicas": given}, {})


@pytest.mark.parametrize("name", ["password", "secret", "staleness"])
def test_an_empty_environment_variable_is_unset_not_refused(name: str) -> None:
    settings = load_settings({}, {"TXCACHE_DSN": DSN, f"TXCACHE_{name.upper()}": ""})
    assert getattr(settings, name) == getattr(Settings(dsn=DSN), name)


# --- settings from txcache.toml ------------------------------------------------------------

BAD_TOML = [
    ("staleness", "nan", NAN),
    ("staleness", "inf", INF),
    ("staleness", "true", True),
    ("staleness", '"5"', "5"),
    ("pool_size", "1.5", 1.5),
    ("pool_size", "0", 0),
    ("node_timeout", "0", 0),
    ("mode", "1", 1),
    ("nodes", "5", 5),
    ("nodes", "[1]", [1]),
    ("agent", '"agent"', "agent"),
    ("dsn", "5", 5),
    ("password", "1234", 1234),
    ("code_version", "3", 3),
]


@pytest.mark.parametrize(("name", "literal", "value"), BAD_TOML)
def test_a_bad_value_in_the_file_is_refused_naming_the_file(
    name: str, literal: str, value: Any
) -> None:
    dsn = "" if name == "dsn" else f'dsn = "{DSN}"\n'
    Path("txcache.toml").write_text(f"{dsn}{name} = {literal}\n")
    with pytest.raises(ConfigurationError) as raised:
        load_settings({}, {})
    assert_refused(raised.value, name, "from txcache.toml", value)


def test_an_unknown_setting_suggests_the_known_one() -> None:
    with pytest.raises(ConfigurationError, match=r"poolsize .*did you mean pool_size\?"):
        load_settings({"dsn": DSN, "poolsize": 3}, {})


# --- connect() and connect_async() ---------------------------------------------------------


@pytest.mark.parametrize("value", [NAN, True, "5"])
def test_connect_and_connect_async_refuse_a_setting_before_connecting(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="setting staleness"):
        txcache.connect("dbname=nowhere", staleness=value)
    with pytest.raises(ConfigurationError, match="setting staleness"):
        asyncio.run(txcache.connect_async("dbname=nowhere", staleness=value))


SAFE_FUNCTIONS_GOOD = [
    ("lower", {"lower"}),
    (" lower , public.f ", {"lower", "public.f"}),
    (["lower"], {"lower"}),
    ((), set()),
]

CONNECT_OPTIONS_BAD = [
    ("safe_functions", 5),
    ("safe_functions", ["a.b.c"]),
    ("safe_functions", [1]),
    ("serializer", 5),
    ("serializer", "json"),
    ("pin_policy", "newest"),
]


@pytest.mark.parametrize(("value", "names"), SAFE_FUNCTIONS_GOOD)
def test_safe_functions_are_names_in_a_string_or_a_list(value: Any, names: set[str]) -> None:
    assert CacheCore(Settings(dsn=DSN, mode="bypass"), safe_functions=value).safe_functions == names


def test_a_serializer_and_a_pin_policy_are_accepted() -> None:
    serializer, policy = txcache.SafeSerializer(), txcache.newest_or_fresh(1.0)
    core = CacheCore(Settings(dsn=DSN, mode="bypass"), serializer=serializer, pin_policy=policy)
    assert (core.serializer, core.policy) == (serializer, policy)


@pytest.mark.parametrize(("name", "value"), CONNECT_OPTIONS_BAD)
def test_bad_connect_options_are_refused_before_connecting(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        txcache.connect("dbname=nowhere", mode="bypass", **{name: value})
    assert str(raised.value).startswith(f"connect(): {name} must be ")
    assert f", not {value!r}" in str(raised.value)


# --- arguments of transactions -------------------------------------------------------------


@pytest.fixture(scope="module")
def cache(postgres: EmbeddedPostgres) -> Iterator[txcache.Cache]:
    """A cache that never caches: its transactions' arguments are what is tested."""
    databases = fresh_database(postgres)
    try:
        with txcache.connect(next(databases), mode="bypass", pool_size=1) as made:
            yield made
    finally:
        next(databases, None)  # drops the database


def assert_argument_refused(error: BaseException, what: str, value: Any, allowed: str) -> None:
    assert str(error).startswith(f"{what} must be {allowed}"), str(error)
    assert str(error).endswith(f", not {value!r}"), str(error)


STALENESS_BAD = [
    (NAN, ValueError),
    (INF, ValueError),
    (-INF, ValueError),
    (-1, ValueError),
    (True, TypeError),
    ("5", TypeError),
    ([30], TypeError),
    (Decimal("5"), TypeError),
]
TOKEN_BAD = [
    (-1, ValueError),
    (2**64, ValueError),
    (1.5, TypeError),
    ("0/16B3748", TypeError),
    (True, TypeError),
]
ISOLATION_BAD = [
    ("READ UNCOMMITTED", ValueError),
    ("", ValueError),
    ("snapshot", ValueError),
    (1, TypeError),
    (psycopg.IsolationLevel.SERIALIZABLE, TypeError),
]


@pytest.mark.parametrize("staleness", [None, 0, 30, 0.5, 1e6])
def test_read_only_takes_a_staleness_in_seconds(cache: txcache.Cache, staleness: Any) -> None:
    expected = cache.settings.staleness if staleness is None else float(staleness)
    assert cache.read_only(staleness).staleness == expected


@pytest.mark.parametrize(("staleness", "error"), STALENESS_BAD)
def test_read_only_refuses_a_staleness_that_is_not_seconds(
    cache: txcache.Cache, staleness: Any, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        cache.read_only(staleness)
    assert type(raised.value) is error
    allowed = "a number of seconds, finite and >= 0"
    assert_argument_refused(raised.value, "read_only(): staleness", staleness, allowed)


@pytest.mark.parametrize("token", [0, 123, 2**64 - 1])
def test_read_only_and_request_scope_take_a_token(cache: txcache.Cache, token: int) -> None:
    assert cache.read_only(not_before=token).not_before == token
    with cache.request_scope(not_before=token):
        pass


@pytest.mark.parametrize(("token", "error"), TOKEN_BAD)
def test_read_only_and_request_scope_refuse_what_is_not_a_token(
    cache: txcache.Cache, token: Any, error: type[Exception]
) -> None:
    for function, call in (
        ("read_only()", lambda: cache.read_only(not_before=token)),
        ("request_scope()", lambda: cache.request_scope(not_before=token).__enter__()),
    ):
        with pytest.raises(error) as raised:
            call()
        assert type(raised.value) is error
        assert_argument_refused(raised.value, f"{function}: not_before", token, "a token")


@pytest.mark.parametrize("level", [None, "read committed", "REPEATABLE READ", "Serializable"])
def test_read_write_takes_an_isolation_level_in_any_case(cache: txcache.Cache, level: Any) -> None:
    cache.read_write(isolation=level)


@pytest.mark.parametrize(("level", "error"), ISOLATION_BAD)
def test_read_write_refuses_another_isolation_level(
    cache: txcache.Cache, level: Any, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        cache.read_write(isolation=level)
    assert type(raised.value) is error
    allowed = "one of 'READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE'"
    assert_argument_refused(raised.value, "read_write(): isolation", level, allowed)


def test_the_async_cache_checks_its_arguments_as_the_sync_one(cache: txcache.Cache) -> None:
    dsn = cache.settings.dsn

    async def body() -> None:
        async with await txcache.connect_async(dsn, mode="bypass", pool_size=1) as acache:
            with pytest.raises(ValueError, match=r"read_only\(\): staleness must be"):
                acache.read_only(NAN)
            with pytest.raises(TypeError, match=r"read_only\(\): not_before must be"):
                acache.read_only(not_before="1")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"read_write\(\): isolation must be"):
                acache.read_write(isolation=1)  # type: ignore[arg-type]

    asyncio.run(body())


# --- @cacheable and register_key_context ---------------------------------------------------

CACHEABLE_BAD = [
    ("version", 2, TypeError),
    ("version", None, TypeError),
    ("version", "2\n", ValueError),
    ("manual_invalidation", "no", TypeError),
    ("manual_invalidation", 1, TypeError),
    ("independent_of", 5, TypeError),
    ("independent_of", [""], ValueError),
    ("independent_of", ["language", 3], TypeError),
]


def test_cacheable_options_checked() -> None:
    one = _validate.cacheable_options("2", True, "language")
    assert one == ("2", True, frozenset({"language"})), "a string is one name"
    assert _validate.cacheable_options("", False, ["a", "b"])[2] == frozenset({"a", "b"})


@pytest.mark.parametrize(("name", "value", "error"), CACHEABLE_BAD)
def test_cacheable_options_refused(name: str, value: Any, error: type[Exception]) -> None:
    options: dict[str, Any] = {"version": "", "manual_invalidation": False, "independent_of": ()}
    with pytest.raises(error) as raised:
        _validate.cacheable_options(**{**options, name: value})
    assert type(raised.value) is error
    assert str(raised.value).startswith(f"@cacheable: {name} must be ")
    assert f", not {value!r}" in str(raised.value)


@pytest.mark.parametrize(("name", "value", "error"), CACHEABLE_BAD)
def test_cacheable_refuses_a_bad_option_at_decoration(
    name: str, value: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match=f"@cacheable: {name} must be"):
        txcache.cacheable(**{name: value})(lambda: None)


KEY_CONTEXT_BAD = [
    ("name", 5, TypeError),
    ("name", "", ValueError),
    ("name", "zone\x00", ValueError),
    ("read", "timezone", TypeError),
]


def test_a_key_context_checked() -> None:
    assert _validate.key_context("timezone", str) == ("timezone", str)


@pytest.mark.parametrize(("name", "value", "error"), KEY_CONTEXT_BAD)
def test_a_bad_key_context_is_refused(name: str, value: Any, error: type[Exception]) -> None:
    arguments: dict[str, Any] = {"name": "timezone", "read": str, name: value}
    with pytest.raises(error) as raised:
        _validate.key_context(**arguments)
    assert type(raised.value) is error
    assert str(raised.value).startswith(f"register_key_context(): {name} must be ")


def test_register_key_context_refuses_a_bad_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_keys, "_key_contexts", {})  # a name registered here goes afterwards
    with pytest.raises(TypeError, match=r"register_key_context\(\): name must be"):
        txcache.register_key_context(5, str)  # type: ignore[arg-type]


# --- Django's TXCACHE ----------------------------------------------------------------------

DJANGO_BAD = [
    ("DATABASE", "", "a non-empty string"),
    ("DATABASE", 1, "a non-empty string"),
    ("SAFE_FUNCTIONS", 5, "SQL function names"),
    ("SAFE_FUNCTIONS", ["a.b.c"], "SQL function names"),
    ("TOKEN_COOKIE", "my token", "a cookie name"),
    ("TOKEN_COOKIE", "", "a cookie name"),
    ("TOKEN_HEADER", "X-Token:", "a header name"),
    ("TOKEN_MAX_AGE", 0, "a number of seconds, finite and > 0"),
    ("TOKEN_MAX_AGE", INF, "a number of seconds, finite and > 0"),
    ("TOKEN_MAX_AGE", NAN, "a number of seconds, finite and > 0"),
    ("TOKEN_MAX_AGE", True, "a number of seconds, finite and > 0"),
]

DJANGO_LIBRARY_BAD = [
    ("STALENESS", NAN, "staleness"),
    ("STALENESS", "5", "staleness"),
    ("NODES", "nowhere", "nodes"),
    ("NODES", 5, "nodes"),
    ("DSN", "not a dsn", "dsn"),
    ("POOL_SIZE", True, "pool_size"),
]


@pytest.fixture
def django_settings() -> Any:
    """Django configured as the Django tests configure it (no stack is started)."""
    from django.test import override_settings

    import django_fixtures  # noqa: F401  # configures Django once per process

    return override_settings


def txcache_messages(**changes: Any) -> list[tuple[str, str]]:
    from django.core.checks import run_checks

    return [
        (m.id, m.msg)
        for m in run_checks(tags=["txcache"])
        if m.id in {"txcache.E001", "txcache.E008"}
    ]


def test_good_django_settings_are_accepted(django_settings: Any) -> None:
    from txcache.django import conf

    given = {"TOKEN_COOKIE": "rw", "TOKEN_HEADER": "X-RW", "TOKEN_MAX_AGE": 60,
             "SAFE_FUNCTIONS": "lower, public.f", "STALENESS": 30, "NODES": ["a:1"]}  # fmt: skip
    with django_settings(TXCACHE=given):
        chosen = conf.txcache_settings()
        assert (chosen.token_cookie, chosen.token_header) == ("rw", "X-RW")
        assert (chosen.token_max_age, chosen.safe_functions) == (60.0, ("lower", "public.f"))
        assert conf.library_settings(chosen).nodes == ("a:1",)


@pytest.mark.parametrize(("key", "value", "allowed"), DJANGO_BAD)
def test_a_bad_django_key_is_refused_and_reported_by_the_checks(
    django_settings: Any, key: str, value: Any, allowed: str
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from txcache.django import conf

    with django_settings(TXCACHE={key: value}):
        with pytest.raises(ConfigurationError) as raised:
            conf.txcache_settings()
        assert isinstance(raised.value, ImproperlyConfigured)
        assert str(raised.value).startswith(f"TXCACHE[{key!r}] must be {allowed}")
        assert f", not {value!r}" in str(raised.value)
        assert txcache_messages() == [("txcache.E001", str(raised.value))]


@pytest.mark.parametrize(("key", "value", "name"), DJANGO_LIBRARY_BAD)
def test_a_bad_library_key_is_refused_and_reported_by_the_checks(
    django_settings: Any, key: str, value: Any, name: str
) -> None:
    from txcache.django import conf

    with django_settings(TXCACHE={key: value}):
        with pytest.raises(ConfigurationError) as raised:
            conf.library_settings(conf.txcache_settings())
        assert_refused(raised.value, name, f"from TXCACHE[{key!r}]", value)
        assert txcache_messages() == [("txcache.E008", str(raised.value))]


# --- SQLAlchemy engines --------------------------------------------------------------------


def test_an_engine_takes_the_isolation_levels_txcache_runs(cache: txcache.Cache) -> None:
    from txcache import sqlalchemy as txsa

    for options in ({"isolation_level": "REPEATABLE_READ"},
                    {"execution_options": {"isolation_level": "serializable"}}):  # fmt: skip
        txsa.create_engine(cache, **options).dispose()


@pytest.mark.parametrize(
    ("options", "what", "error"),
    [
        ({"isolation_level": "AUTOCOMMIT"}, "isolation_level", ValueError),
        ({"isolation_level": "READ UNCOMMITTED"}, "isolation_level", ValueError),
        ({"isolation_level": 3}, "isolation_level", TypeError),
        (
            {"execution_options": {"isolation_level": "AUTOCOMMIT"}},
            "execution_options['isolation_level']",
            ValueError,
        ),
    ],
)
def test_an_engine_refuses_another_isolation_level(
    options: dict[str, Any], what: str, error: type[Exception]
) -> None:
    from txcache import sqlalchemy as txsa

    for function, create in (("create_engine()", txsa.create_engine),
                             ("create_async_engine()", txsa.create_async_engine)):  # fmt: skip
        with pytest.raises(error) as raised:
            create(None, **options)  # type: ignore[arg-type]
        assert type(raised.value) is error
        assert str(raised.value).startswith(f"{function}: {what} must be one of")


def test_an_engine_refuses_the_other_driver_s_cache(cache: txcache.Cache) -> None:
    from txcache import sqlalchemy as txsa

    with pytest.raises(TypeError, match=r"create_async_engine\(\): cache must be a txcache\.Asy"):
        txsa.create_async_engine(cache)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"create_engine\(\): cache must be a txcache\.Cache"):
        txsa.create_engine("postgresql:///app")  # type: ignore[arg-type]
