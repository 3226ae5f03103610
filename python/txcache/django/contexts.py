"""Django's request-scoped state in cacheable calls' keys (docs/django.md, "Time zones,
languages and other request state").

Two things Django code reads without an argument carrying them change what a function
computes:

- ``"timezone"``: the active time zone's name (``timezone.activate()``/``override()``, a
  middleware that sets the user's). ``__date``, ``__hour``, ``Trunc*`` and ``Extract*`` of a
  ``DateTimeField`` convert to it when no ``tzinfo=`` is given, and ``localtime()`` uses it;
- ``"language"``: the active language (``translation.override()``, ``LocaleMiddleware``),
  which ``gettext`` and localized formatting read.

:func:`register` (the app does it when ready) makes both key contexts of the library
(``txcache.register_key_context``): part of every cacheable call's key, so a result
computed for Tokyo is never served to Los Angeles. A function whose result depends on
neither says so — ``@txcache.cacheable(independent_of={"timezone", "language"})`` — and
shares its values across them.

A declaration the ORM can prove wrong is refused (:func:`refuse_undeclared`): a query,
compiled while a function declared independent of ``"timezone"`` is being computed, that
converts to the active time zone raises :class:`~txcache.UncacheableQuery` — its result
would be stored under a key without the zone and served in every other. Nothing else is
detectable: the language reaches no query Django compiles, and Python code that reads
either (``localtime()``, ``gettext``) leaves no trace in SQL.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

from django.conf import settings
from django.db.models import DateTimeField
from django.db.models.functions.datetime import TimezoneMixin
from django.utils import timezone, translation

import txcache
from txcache._cacheable import CacheableFunction
from txcache._read_only_core import ReadOnlyCore
from txcache._sql import UncacheableQuery
from txcache._transaction import current_transaction

__all__ = ["LANGUAGE", "TIMEZONE", "refuse_undeclared", "register"]

TIMEZONE = "timezone"
"""The key context of the active time zone (its name)."""
LANGUAGE = "language"
"""The key context of the active language (its code)."""

# The library's method that computes a miss, whose frame on the stack holds the function:
# how the functions being computed are found (until the library's frames name them).
_COMPUTING = CacheableFunction._run.__code__


def register() -> None:
    """Make the active time zone and language part of every cacheable call's key."""
    txcache.register_key_context(TIMEZONE, timezone.get_current_timezone_name)
    txcache.register_key_context(LANGUAGE, translation.get_language)


def refuse_undeclared(node: Any) -> None:
    """``node``, an expression being compiled, may read the active time zone: refuse it
    while a function declared independent of ``"timezone"`` is being computed."""
    if not _converts_to_active_zone(node):
        return
    current = current_transaction()
    if not isinstance(current, ReadOnlyCore) or not current.frames:
        return  # no result being computed: nothing stored under a key
    for function in _computing():
        if TIMEZONE in function.keys._independent_of:
            raise UncacheableQuery(
                f"{function.keys.name} is declared independent of the key context "
                f"'{TIMEZONE}', but its query converts to the active time zone "
                f"({timezone.get_current_timezone_name()}): {type(node).__name__} of a "
                "DateTimeField without tzinfo= (a __date, __hour … lookup, Trunc, Extract) "
                "reads it. Leave 'timezone' out of independent_of (its results are then "
                "kept per time zone), or give the expression a tzinfo="
            )


def _converts_to_active_zone(node: Any) -> bool:
    """Whether compiling ``node`` converts a ``DateTimeField`` to the active time zone, as
    Django's date/time transforms do without ``tzinfo=`` (``TimezoneMixin.get_tzname``)."""
    if not isinstance(node, TimezoneMixin) or node.tzinfo is not None or not settings.USE_TZ:
        return False
    source = getattr(node, "lhs", None)
    return isinstance(getattr(source, "output_field", None), DateTimeField)


def _computing() -> Iterator[CacheableFunction[Any, Any]]:
    """The cacheable functions being computed in this thread, innermost first: a query's
    result reaches every one of them."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _COMPUTING:
            yield frame.f_locals["self"]
        frame = frame.f_back
