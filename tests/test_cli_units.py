"""``txcache up`` checks ``--max-memory`` and ``--max-staleness`` itself (:mod:`txcache.cli._units`)
before it hands them to the nodes and the agent: it must accept exactly what they accept, with
their values and their messages (crates/model/src/units.rs, whose cases these are)."""

from __future__ import annotations

import subprocess

import pytest

from txcache.cli._units import UnitError, parse_duration, parse_size
from txcache.stack import find_binary

MS, S = 1_000_000, 1_000_000_000

DURATIONS = [
    ("200ms", 200 * MS),
    ("0ms", 0),
    ("120s", 120 * S),
    ("2m", 120 * S),
    ("1h", 3600 * S),
    ("30", 30 * S),
    ("1MS", MS),
    (" 30 s ", 30 * S),
    ("0.5s", 500 * MS),
    ("2.5", 2500 * MS),
    ("7ns", 7),
    ("7us", 7_000),
    ("7µs", 7_000),
    ("7μs", 7_000),
    ("1.5ns", 1),
    ("0.30000000000000004s", 300 * MS),
    ("0.1234567891234567891234567s", 123_456_789),
    ("007s", 7 * S),
    ("18446744073709551615", (2**64 - 1) * S),
]

SIZES = [
    ("64mb", 64 << 20),
    ("1GB", 1 << 30),
    ("33554432", 32 << 20),
    ("0", 0),
    ("10b", 10),
    ("8k", 8 << 10),
    (" 64 mb ", 64 << 20),
    ("64MiB", 64 << 20),
    ("1.5gb", 3 << 29),
    ("1.3kb", 1331),
    ("1.9", 1),
    ("18446744073709551615", 2**64 - 1),
]

BAD_DURATIONS = [
    *(" ", "s", "-1s", "+1s", ".5s", "5.s", "5..5s", "1.2.3s", "inf", "NaN", "1 000ms"),
    *("1y", "1sec", "1m30s", "3 mins", "10mb", "1e3s", "1_000ms", "0x10s", "10x"),
    *("18446744073709551616", "5124095576030432h", "99999999999999999999999999999999999999999ns"),
]

BAD_SIZES = [
    *("mb", "etc", "-1mb", "+64mb", ".5gb", "1.gb", "1 000", "1.5.5gb"),
    *("5tb", "64 megabytes", "1kbit", "10ms", "1e6", "64_000", "10x"),
    *("18446744073709551616", "99999999999999999999gb"),
]

EVERY_DURATION = [*dict(DURATIONS), *BAD_DURATIONS]


@pytest.mark.parametrize(("text", "nanos"), DURATIONS)
def test_durations_read_as_the_nodes_and_the_agent_read_them(text: str, nanos: int) -> None:
    assert parse_duration(text) == nanos


@pytest.mark.parametrize(("text", "size"), SIZES)
def test_sizes_read_as_the_nodes_read_them(text: str, size: int) -> None:
    assert parse_size(text) == size


def first_error(binary: str, flag: str, text: str) -> str | None:
    """What ``binary`` says of ``flag=text`` (``None``: it accepts it). ``--version`` after
    the value ends the run once clap has parsed the value, so nothing starts."""
    result = subprocess.run(
        [str(find_binary(binary)), f"{flag}={text}", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if result.returncode == 0:
        return None
    assert result.returncode == 2, result.stderr
    return result.stderr.splitlines()[0]


def refusal(parse: object, text: str) -> str | None:
    assert callable(parse)
    try:
        parse(text)
    except UnitError as error:
        return str(error)
    return None


@pytest.mark.parametrize(
    ("binary", "flag", "metavar", "parse", "texts"),
    [
        ("txcached", "--max-memory", "SIZE", parse_size, [*dict(SIZES), *BAD_SIZES]),
        ("txcached", "--max-staleness", "DURATION", parse_duration, EVERY_DURATION),
        ("txcache-agent", "--max-staleness", "DURATION", parse_duration, ["120s", "10x", "1e3s"]),
    ],
)
def test_the_binaries_accept_and_refuse_the_same_values_with_the_same_message(
    binary: str, flag: str, metavar: str, parse: object, texts: list[str]
) -> None:
    for text in texts:
        ours, theirs = refusal(parse, text), first_error(binary, flag, text)
        if ours is None:
            assert theirs is None, f"{binary} {flag}={text!r}: {theirs}"
        else:
            assert theirs == f"error: invalid value '{text}' for '{flag} <{metavar}>': {ours}"
