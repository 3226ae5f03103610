"""Django's request-scoped state in cacheable calls' keys (docs/django.md, "Time zones,
languages and other request state").

Three things Django code reads without an argument carrying them change what a function
computes:

- ``"timezone"``: the active time zone's name (``timezone.activate()``/``override()``, a
  middleware that sets the user's). ``__date``, ``__hour``, ``Trunc*`` and ``Extract*`` of a
  ``DateTimeField`` convert to it when no ``tzinfo=`` is given, and ``localtime()`` uses it;
- ``"language"``: the active language (``translation.override()``, ``LocaleMiddleware``),
  which ``gettext`` and localized formatting read;
- ``"use_tz"``: ``settings.USE_TZ``, which decides whether the ORM loads a ``timestamptz``
  aware or naive. The connection's time zone is in every key already (a session setting),
  but under ``TIME_ZONE = "UTC"`` it is ``UTC`` either way.

:func:`register` (the app does it when ready) makes all three key contexts of the library
(``txcache.register_key_context``): part of every cacheable call's key, so a result
computed for Tokyo is never served to Los Angeles, nor one loaded aware to a process that
loads naive. A function whose result depends on none says so —
``@txcache.cacheable(independent_of={"timezone", "language", "use_tz"})`` — and shares its
values across them.

A declaration the ORM can prove wrong is refused (:func:`refuse_undeclared`): a query,
compiled while a function declared independent of ``"timezone"`` is being computed, that
converts to the active time zone raises :class:`~txcache.UncacheableQuery` — its result
would be stored under a key without the zone and served in every other. Nothing else is
detectable here: the language reaches no query Django compiles, and Python code that reads
either (``localtime()``, ``gettext``) leaves no trace in SQL. (A cacheable call whose key
names a context, made inside a function declared independent of it, the library refuses
itself.)
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import DateTimeField
from django.db.models.functions.datetime import TimezoneMixin
from django.utils import timezone, translation

import txcache
from txcache import UncacheableQuery, current_transaction
from txcache.integration import ReadOnlyCore

__all__ = ["LANGUAGE", "TIMEZONE", "USE_TZ", "refuse_undeclared", "register"]

TIMEZONE = "timezone"
"""The key context of the active time zone (its name)."""
LANGUAGE = "language"
"""The key context of the active language (its code)."""
USE_TZ = "use_tz"
"""The key context of ``settings.USE_TZ`` (how the ORM loads a ``timestamptz``)."""


def register() -> None:
    """Make the active time zone, the language and ``USE_TZ`` part of every cacheable
    call's key."""
    txcache.register_key_context(TIMEZONE, timezone.get_current_timezone_name)
    txcache.register_key_context(LANGUAGE, translation.get_language)
    txcache.register_key_context(USE_TZ, _use_tz)


def _use_tz() -> bool:
    return bool(settings.USE_TZ)  # read at each call: override_settings changes it


def refuse_undeclared(node: Any) -> None:
    """``node``, an expression being compiled, may read the active time zone: refuse it
    while a function declared independent of ``"timezone"`` is being computed."""
    if not _converts_to_active_zone(node):
        return
    current = current_transaction()
    if not isinstance(current, ReadOnlyCore) or not current.frames:
        return  # no result being computed: nothing stored under a key
    for frame in current.frames:
        if TIMEZONE in frame.independent_of:
            raise UncacheableQuery(
                f"{frame.function} is declared independent of the key context "
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
