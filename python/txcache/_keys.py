"""Cache keys of cacheable calls: the function, its code, its arguments, and the session
context the call's queries run in.

A key is the 16-byte BLAKE2b digest of the function's qualified name, a hash of the code it
can reach (``txcache._code_hash``: its own and the application's helpers, so a deployed
change never reads the old version's results), its ``version=``, the ``code_version``
setting (for what the hash cannot see) and a canonical encoding of the call's arguments
bound to the signature (``f(1)``, ``f(x=1)`` and a default are one call;
:mod:`txcache._arguments`), keyed (BLAKE2b's own key) with the digest of the session
context — database, role, search path, settings (:mod:`txcache._session`) — so that a
value stored under one context is never served under another (docs/library.md, "What a key
names").
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from txcache import _validate
from txcache._arguments import encode_argument
from txcache.errors import UnsupportedArgument

if TYPE_CHECKING:
    from txcache._config import Settings

__all__ = ["KEY_BYTES", "KEY_FORMAT", "CallKeys", "register_key_context"]

KEY_BYTES = 16

KEY_FORMAT = b"txcache-key/2"
"""Mixed into every key: a change to how keys are made changes it, so processes of two
releases never compute one key for two different calls."""

_NOT_YET = object()

log = logging.getLogger("txcache")

_warned_private: set[str] = set()
"""The functions whose own key space was logged (once per name: a factory makes many)."""

# Request-scoped state a framework registers (Django's active time zone and language), by
# name: read at every key, part of it unless the function declares itself independent.
_key_contexts: dict[str, Callable[[], Any]] = {}


def register_key_context(name: str, read: Callable[[], Any]) -> None:
    """Make ``read()`` — request-scoped state a cacheable function may depend on without
    taking it as an argument, such as a framework's active time zone — part of the key of
    every cacheable call, under ``name``; a function declared
    ``@cacheable(independent_of={name})`` leaves it out. ``read()`` runs at every call and
    must return a value with a canonical encoding (a ``str``, say). Registering a name again
    replaces its reader (docs/library.md, "What a key names")."""
    name, read = _validate.key_context(name, read)
    _key_contexts[name] = read


def key_context_names() -> frozenset[str]:
    """The names registered so far."""
    return frozenset(_key_contexts)


def undeclared_dependency(
    names: Iterable[tuple[str, frozenset[str]]], independent_of: frozenset[str]
) -> tuple[str, str] | None:
    """A key context a call depends on (every registered one not in ``independent_of``)
    that a function being computed around it (``names``: each one's name and declared
    independence) says its result does not depend on: ``(function, context)``, or
    ``None``. The outer result would depend on it through the call's."""
    if not _key_contexts:
        return None
    for function, declared in names:
        for context in declared.intersection(_key_contexts).difference(independent_of):
            return function, context
    return None


class CallKeys:
    """Turns calls of one function into keys."""

    __slots__ = (
        "_code_hashes",
        "_function",
        "_independent_of",
        "_last",
        "_parameters",
        "_positional_only_call",
        "_prefixes",
        "_private",
        "_signature",
        "_version",
        "name",
    )

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        version: str = "",
        independent_of: frozenset[str] = frozenset(),
    ) -> None:
        """Keys for ``function``; ``version`` (optional) is mixed in as the code hash is;
        the key contexts named in ``independent_of`` are left out of its keys."""
        self.name = f"{function.__module__}.{function.__qualname__}"
        self._function = function
        self._version = version
        self._independent_of = independent_of
        # The signature calls go through: a functools.wraps wrapper's own, not the wrapped
        # function's — a wrapper that fills in its own defaults or takes arguments of its
        # own would otherwise give calls that differ one key.
        self._signature = inspect.signature(function, follow_wrapped=False)
        self._parameters = tuple(self._signature.parameters)
        # Binding can be skipped only when positional arguments map one to one onto
        # parameters: no *args, **kwargs or keyword-only parameter may reinterpret them.
        plain = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY
        self._positional_only_call = all(
            p.kind in plain for p in self._signature.parameters.values()
        )
        # The code is hashed at the first key, not here: helpers defined after the decorated
        # function (further down its module, in modules imported later) are seen.
        self._code_hashes: dict[tuple[str, ...] | None, bytes] = {}
        self._prefixes: dict[tuple[str, tuple[str, ...] | None], bytes] = {}
        self._last: tuple[object, bytes] = (_NOT_YET, b"")  # (settings, prefix), one object
        self._private: bytes | None = None

    @property
    def independent_of(self) -> frozenset[str]:
        """The key contexts this function's keys leave out."""
        return self._independent_of

    def prefix(self, settings: Settings | None = None) -> bytes:
        """What every key of this function starts from under ``settings`` (``None``: no
        code version, code packages by location): the name, the hash of the code it can
        reach, ``version`` and the ``code_version`` setting."""
        last = self._last
        if last[0] is settings:  # the common case: the same cache as the call before
            return last[1]
        code = ("", None) if settings is None else (settings.code_version, settings.code_packages)
        prefix = self._prefixes.get(code)
        if prefix is None:
            prefix = self._prefixes[code] = self._build_prefix(*code)
        self._last = (settings, prefix)
        return prefix

    def code_hash(self, packages: tuple[str, ...] | None = None) -> bytes:
        """The hash of the code this function can reach (computed once per ``packages``)."""
        digest = self._code_hashes.get(packages)
        if digest is None:
            from txcache._code_hash import code_hash  # it imports this module

            digest = self._code_hashes[packages] = code_hash(self._function, packages=packages)
        return digest

    def _build_prefix(self, code_version: str, packages: tuple[str, ...] | None) -> bytes:
        code = self.code_hash(packages)
        parts = (KEY_FORMAT, self.name, code, self._version, code_version, self._own_space())
        return b"".join(_sized(b"", p if isinstance(p, bytes) else p.encode()) for p in parts)

    def _own_space(self) -> bytes:
        """Empty, or — when the function closes over values its code hash names by class
        only (a factory's dict, a request object) — random bytes of this function object's
        own: another function the factory made over other values would share its keys."""
        if self._private is None:
            from txcache._code_hash import unnamed_cells  # it imports this module

            unnamed = unnamed_cells(self._function)
            self._private = os.urandom(16) if unnamed else b""
            if unnamed and self.name not in _warned_private:
                _warned_private.add(self.name)
                log.warning(
                    "%s closes over %s, which its key cannot name (a container's data, an "
                    "object's state): its results are kept for this function object alone, "
                    "shared with no other process and no other function its factory makes. "
                    "Pass what it reads as arguments, or make it immutable data (a str, a "
                    "tuple), to share them",
                    self.name,
                    ", ".join(unnamed),
                )
        return self._private

    def key(
        self,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        settings: Settings | None = None,
        context: bytes = b"",
    ) -> bytes:
        """The key of the call ``function(*args, **kwargs)`` under ``settings`` (those of
        the cache the call reads; see :meth:`prefix`) in the session ``context`` (a
        :attr:`~txcache._session.SessionContext.digest`) and the registered key contexts
        (:func:`register_key_context`)."""
        return self._digest(args, kwargs, settings, context, with_key_contexts=True)

    def invalidation_key(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], settings: Settings | None = None
    ) -> bytes:
        """The call in every session and key context: what a manual invalidation names."""
        return self._digest(args, kwargs, settings, b"", with_key_contexts=False)

    def check_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Raises :class:`UnsupportedArgument` for an argument a key cannot hold, as
        :meth:`key` would, without building a key (no code hash, no digest): for a call that
        runs uncached. A call its signature does not take passes, for the call itself to
        report in Python's words."""
        try:
            named = self._named_arguments(args, kwargs)
        except TypeError:
            return
        for name, value in named:
            self._encoded(name, value)

    def _named_arguments(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Iterable[tuple[str, Any]]:
        """Each parameter's name and value in this call, defaults applied; ``TypeError``
        for a call the signature does not take."""
        if self._positional_only_call and not kwargs and len(args) == len(self._parameters):
            # The common case: every parameter given positionally, no binding needed.
            return zip(self._parameters, args, strict=True)
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments.items()

    def _digest(
        self,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        settings: Settings | None,
        context: bytes,
        *,
        with_key_contexts: bool,
    ) -> bytes:
        last = self._last  # prefix()'s fast path, without the call: this runs on every hit
        prefix = last[1] if last[0] is settings else self.prefix(settings)
        digest = hashlib.blake2b(prefix, digest_size=KEY_BYTES, key=context)
        for name, value in self._named_arguments(args, kwargs):
            self._add(digest, name, value)
        if with_key_contexts and _key_contexts:  # none, and no cost, without a framework's
            self._add_key_contexts(digest)
        return digest.digest()

    def _add_key_contexts(self, digest: Any) -> None:
        """The registered key contexts this function depends on, after its arguments."""
        for name, read in _key_contexts.items():
            if name not in self._independent_of:
                digest.update(b"\0context\0" + name.encode())
                self._add(digest, f"<{name}>", read())

    def _add(self, digest: Any, name: str, value: Any) -> None:
        encoded = self._encoded(name, value)
        digest.update(struct.pack("<I", len(encoded)))
        digest.update(encoded)

    def _encoded(self, name: str, value: Any) -> bytes:
        """``value``'s canonical encoding, or the refusal naming this function and ``name``."""
        try:
            return encode_argument(value)
        except UnsupportedArgument as error:
            raise UnsupportedArgument(
                f"{self.name}(): argument {name!r}: {error} — cacheable functions take "
                "values of exact types with a canonical form (None, bool, int, float, str, "
                "bytes, bytearray, Decimal, date/time with ZoneInfo or timezone zones, UUID, "
                "Enum, and tuples, lists, dicts, sets, frozensets of them; no subclasses)"
                f"{self._method_advice(name)}"
            ) from None

    def _method_advice(self, name: str) -> str:
        """For a method called through its class (``C.f(C(), 1)``), whose first parameter
        is the instance: what to make it instead."""
        if name not in ("self", "cls") or self._parameters[:1] != (name,):
            return ""
        return (
            f"; a first parameter named {name!r} says a method called through its class: make "
            "it a function, or a @staticmethod, and pass it what it reads from the "
            f"{'instance' if name == 'self' else 'class'}"
        )


def _sized(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("<I", len(body)) + body
