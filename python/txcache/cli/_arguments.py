"""The arguments several ``txcache`` commands share, defined once: the database (``--dsn``)
and the agents' replication slot (``--slot``), each defaulting to the environment variable
the library and the agent read; and the argparse ``type`` adaptors that check a value as the
library (:mod:`txcache._validate`) or the nodes and the agent (:mod:`txcache.cli._units`)
would, so that a bad value is a usage error (exit status 2) before anything starts."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, TypeVar

from txcache import _validate as validate
from txcache.cli import _units as units

__all__ = [
    "add_dsn",
    "add_slot",
    "checked",
    "duration_text",
    "share",
    "size_text",
    "wait_seconds",
]

T = TypeVar("T")


def add_dsn(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """``--dsn``: the database (default: ``$TXCACHE_DSN``, else libpq's ``PG*`` variables).
    ``inherited``: on a sub-command's parser, whose parent has it too; given to neither,
    the parent's default stands."""
    parser.add_argument(
        "--dsn",
        default=argparse.SUPPRESS if inherited else os.environ.get("TXCACHE_DSN", ""),
        help="libpq connection string or URI (default: $TXCACHE_DSN, else libpq's PG* "
        "environment variables)",
    )


def add_slot(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """``--slot``: the agents' logical replication slot (default: ``$TXCACHE_SLOT``, else
    ``txcache``, as the agent's own default); ``inherited`` as for :func:`add_dsn`."""
    parser.add_argument(
        "--slot",
        default=argparse.SUPPRESS if inherited else os.environ.get("TXCACHE_SLOT", "txcache"),
        help="the agents' logical replication slot (default: $TXCACHE_SLOT, else txcache)",
    )


def checked(
    check: Callable[[Any], T], *, hidden: bool = False, empty: bool = False
) -> Callable[[str], T | str]:
    """An argparse ``type`` made of one of :mod:`txcache._validate`'s checks: the value as
    the check converts it, or argparse's usage error with the check's refusal (a ``hidden``
    value, which may hold a password, is not shown). With ``empty``, an empty value is
    kept as the empty string, unchecked: the option given as ``''`` means none, as an empty
    ``TXCACHE_*`` variable does. argparse applies it to a default read from the environment
    too, so a bad ``TXCACHE_*`` variable is refused alike."""

    def convert(text: str) -> T | str:
        if empty and not text.strip():
            return ""
        try:
            return check(text)
        except validate.Refused as refused:
            message = refused.message("the value", text, hidden=hidden)
            raise argparse.ArgumentTypeError(message) from None

    return convert


def _seconds_to_wait(text: Any) -> float:
    return validate.wait(validate.number_text(text))


wait_seconds = checked(_seconds_to_wait)
"""A timeout: seconds, > 0 and at most :data:`txcache._validate.MAX_WAIT` (one day), as the
library's timeouts: ``inf``, ``nan``, ``0`` or ``-1`` are usage errors, not an endpoint
reported unreachable."""


def share(text: str) -> float:
    """A fraction, 0 to 1 (``0.05``); argparse's usage error otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text}")
    return value


def _unit_text(parse: Callable[[str], int]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        try:
            parse(text)
        except units.UnitError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return text  # handed on as written: the node or the agent reads it the same way

    return convert


duration_text = _unit_text(units.parse_duration)
"""A duration for a node or the agent (``120s``), checked, kept as written."""

size_text = _unit_text(units.parse_size)
"""A byte size for a node (``256mb``), checked, kept as written."""
