"""The code a cacheable function can reach, hashed: a deployed change of a helper changes the
keys of every cacheable function that calls it.

:func:`code_hash` digests a function's own code (bytecode, constants, names, nested code,
defaults, closure cells) and, transitively, every function and class of the application its
code names: global names, attribute chains on modules and classes (``helpers.compute``,
``models.Item.price``), names imported inside a function, the functions and classes that
defaults, closures, constants and class attributes hold, every method of a class reached and
its base classes. Each *unit* — a function, a class, or what one name in one module resolved
to — has a digest of its own; the digest of the whole is that of the sorted units, so the
order of the walk never matters, and the walk remembers what it has seen, so recursion and
cycles end.

Only the application's code is read (:class:`Scope`); the standard library, installed
packages and txcache itself are named, never read. Nothing that differs between processes
enters a digest: no ``id``, ``hash`` or ``repr`` of arbitrary objects, no file names or line
numbers, unordered collections in sorted order; and no state the application sets at run
time — a list, dict or set counts by the code it holds, not its data (a memo), a name its
module rebinds with ``global`` by its name only (a client made on first use), and in class
attributes and closure cells ``None`` and any object are one value. Bytecode differs between
Python versions, so keys change when Python does.
"""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import importlib
import importlib.util
import os
import site
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from txcache._arguments import encode_argument
from txcache.errors import UnsupportedArgument

__all__ = ["CODE_HASH_BYTES", "Scope", "code_hash", "code_units", "describe_classes"]

CODE_HASH_BYTES = 16

_MISSING: Any = object()
_STATE: Any = object()  # a module-level name that code of its module rebinds with `global`

_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
_ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_LOCAL_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF"})
_STORES = frozenset({"STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL"})
# `import a.b as c` shuffles the stack between its IMPORT_FROMs; the statement goes on.
_IMPORT_SHUFFLES = frozenset({"SWAP", "POP_TOP", "COPY"})
_CONSTANT_LOADS = frozenset({"LOAD_CONST", "LOAD_SMALL_INT"})
_GLOBAL_STORES = frozenset({dis.opmap["STORE_GLOBAL"], dis.opmap["DELETE_GLOBAL"]})

# Class attributes that say where a class was written, or that CPython and the standard
# library fill in lazily (``__slotnames__`` appears once an instance is copied): not code.
_CLASS_NOISE = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__module__",
        "__qualname__",
        "__doc__",
        "__firstlineno__",
        "__static_attributes__",
        "__slotnames__",
        "_abc_impl",
    }
)

_CODE_KINDS = (
    types.FunctionType,
    type,
    types.ModuleType,
    staticmethod,
    classmethod,
    property,
)
"""What :meth:`_Walk.value` names as code (a bound method is not: its instance is an
object)."""

_NATIVE_CALLABLES = (
    types.BuiltinFunctionType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


_describers: list[Callable[[type], object]] = []

# The frameworks whose class declarations are code: (the module whose presence says the
# framework is in use, and the module and name of txcache's reading of its classes). Read as
# soon as the framework is imported, whether or not txcache's integration is, so that every
# process of a release computes the same keys.
_FRAMEWORKS = (
    ("django.db.models", "txcache.django.declarations", "model_declaration"),
    ("sqlalchemy.orm", "txcache.sqlalchemy._declarations", "mapping_declaration"),
)
_frameworks_read: set[str] = set()


def describe_classes(describe: Callable[[type], object]) -> None:
    """Add a framework's reading of the classes it builds from declarations to their
    digests: ``describe(cls)`` returns what ``cls`` declares, as data the hash reads by
    value (tuples, strings, numbers; classes and functions by name, followed), or ``None``
    for a class it does not know. A Django model's fields, ordering and managers, or a
    SQLAlchemy mapping, live in objects the hash reads by class only: without this, a
    deploy that changes them would keep the keys of every function reading the class
    (Django's and SQLAlchemy's are added by themselves). Registering one again does
    nothing."""
    if describe not in _describers:
        _describers.append(describe)


def _read_frameworks() -> None:
    """Add the describers of the frameworks imported so far (:data:`_FRAMEWORKS`)."""
    for framework, module, name in _FRAMEWORKS:
        if framework in sys.modules and framework not in _frameworks_read:
            _frameworks_read.add(framework)
            describe_classes(getattr(importlib.import_module(module), name))


def code_hash(function: Callable[..., Any], *, packages: tuple[str, ...] | None = None) -> bytes:
    """The digest of ``function``'s code and of the application code it can reach.

    ``packages`` names the application's packages (the ``code_packages`` setting); ``None``
    decides by where modules live (:class:`Scope`)."""
    return _Walk.of(function, packages).digest()


def unnamed_cells(function: Callable[..., Any]) -> list[str]:
    """The closure variables of ``function`` whose values :func:`code_hash` names by their
    class only — a mutable container's data, an object's state — as ``name (type)``. Two
    functions one factory made over different such values hash alike."""
    code = getattr(function, "__code__", None)
    cells = getattr(function, "__closure__", None) or ()
    names = code.co_freevars if code is not None else ()
    unnamed = []
    for name, cell in zip(names, cells, strict=False):
        try:
            contents = cell.cell_contents
        except ValueError:  # not yet assigned
            continue
        if not _named_by_value(contents):
            unnamed.append(f"{name} ({type(contents).__name__})")
    return unnamed


def _named_by_value(obj: object) -> bool:
    """Whether :meth:`_Walk.value` names ``obj`` by what it is rather than by its class:
    ``None``, code (a function, class, module, descriptor, a wrapper of code), immutable
    data, and tuples and frozensets of these."""
    if obj is None or isinstance(obj, _CODE_KINDS) or _wrapped(obj) is not _MISSING:
        return True
    if isinstance(obj, _NATIVE_CALLABLES):  # len, math.floor — not a bound {}.get
        return isinstance(getattr(obj, "__self__", None), types.ModuleType | None)
    if isinstance(obj, functools.partial):
        return all(map(_named_by_value, (obj.func, obj.args, tuple(obj.keywords.values()))))
    if type(obj) in (tuple, frozenset):
        return all(_named_by_value(item) for item in obj)  # type: ignore[attr-defined]
    if isinstance(obj, list | dict | set | bytearray):  # their data may change: not named
        return False
    if isinstance(obj, enum.Enum):
        return True
    try:
        encode_argument(obj)
    except UnsupportedArgument:
        return False
    return True


def code_units(
    function: Callable[..., Any], *, packages: tuple[str, ...] | None = None
) -> list[str]:
    """The names of the units :func:`code_hash` covers, sorted: ``module.qualname`` for a
    function or class read, ``module:name.attr`` for what a name in a module resolved to.
    For tests and for seeing what a key depends on."""
    return sorted({name.decode() for name, _ in _Walk.of(function, packages).units})


# --- which code is the application's ---------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Which modules' functions and classes are followed, for a function of ``root_module``.

    In order: the root's own module is followed; txcache's other modules are not; with
    ``packages`` given, exactly the modules in those packages are; otherwise modules of the
    root's top-level package are (wherever installed — an application installed into
    site-packages still follows its own package), and any other module is unless it is in
    the standard library (by name, ``sys.stdlib_module_names``, or by file) or its file lies
    in a site-packages or dist-packages directory.
    """

    root_module: str
    packages: tuple[str, ...] | None = None

    def follows(self, module: str | None, filename: str | None = None) -> bool:
        """Whether code of ``module`` (whose file is ``filename`` if the module is not
        imported) is the application's."""
        if module is None:
            return False  # code exec'd without a module name: nothing to decide by
        if module == self.root_module:
            return True
        top = module.partition(".")[0]
        if top == "txcache":
            return False
        if self.packages is not None:
            return any(module == p or module.startswith(p + ".") for p in self.packages)
        if top == self.root_module.partition(".")[0]:
            return True
        return not _is_library_module(module, filename)


def _is_library_module(module: str, filename: str | None) -> bool:
    top = module.partition(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return True
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None) if loaded is not None else None
    path = path if isinstance(path, str) else filename
    return isinstance(path, str) and _is_library_path(path)


@functools.cache
def _is_library_path(path: str) -> bool:
    if path.startswith("<"):  # "<string>", "<stdin>": the application; "<frozen os>": not
        return path.startswith("<frozen")
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    return real.startswith(_library_directories())


@functools.cache
def _library_directories() -> tuple[str, ...]:
    """The standard library's and the installation schemes' package directories, of this
    environment and of the interpreter it was made from (a virtualenv's standard library
    lives in the base). Not the prefixes themselves: an application may live under one."""
    found: set[str] = set()
    prefixes = {(sys.prefix, sys.exec_prefix), (sys.base_prefix, sys.base_exec_prefix)}
    for base, platbase in sorted(prefixes):
        paths = sysconfig.get_paths(
            vars={
                "base": base,
                "platbase": platbase,
                "installed_base": base,
                "installed_platbase": platbase,
            }
        )
        found.update(paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib"))
    found.update(getattr(site, "getsitepackages", list)())
    user = site.getusersitepackages() if site.ENABLE_USER_SITE is not False else None
    if user:
        found.add(user)
    return tuple(sorted(os.path.join(os.path.realpath(d), "") for d in found if d))


# --- names in bytecode -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Chain:
    """A name and the attributes read from it: ``helpers.compute`` is ``("global",
    "helpers")`` then ``("compute",)``; an import inside a function starts at the module."""

    kind: str  # "global", or "import" (of module ``name``), or "import-top" (binds the top)
    name: str
    attributes: tuple[str, ...] = ()

    def attribute(self, name: str) -> _Chain:
        return _Chain(self.kind, self.name, (*self.attributes, name))


def _chains(code: types.CodeType, namespace: Mapping[str, Any]) -> list[_Chain]:
    """Every chain of names ``code`` (not its nested code) reads, in order."""
    found: list[_Chain] = []
    aliases: dict[str, _Chain] = {}
    chain: _Chain | None = None
    importing: _Chain | None = None  # the module of the import statement being read
    plain_import = False
    constants: tuple[Any, Any] = (None, None)
    for instruction in dis.get_instructions(code):
        op, argument = instruction.opname, instruction.argval
        if chain is not None and op in _ATTRIBUTE_LOADS:
            chain = chain.attribute(argument)
            continue
        if importing is not None and op in _IMPORT_SHUFFLES:
            continue
        if importing is not None and op == "IMPORT_FROM":
            # `from m import a` reads m.a; `import a.b.c as d` reads a.b, then that .c.
            base = chain if plain_import and chain is not None else importing
            chain = base.attribute(argument)
            continue
        if chain is not None:
            found.append(chain)
            if op in _STORES:
                aliases[argument] = chain
            chain = None
        if op not in _STORES:
            importing = None
        if op in _GLOBAL_LOADS:
            chain = _Chain("global", argument)
        elif op in _LOCAL_LOADS and argument in aliases:
            chain = aliases[argument]
        elif op == "IMPORT_NAME":
            level, fromlist = constants
            chain = importing = _import_chain(argument, level, fromlist, namespace)
            plain_import = fromlist is None
        if op in _CONSTANT_LOADS:
            constants = (constants[1], argument)
    if chain is not None:
        found.append(chain)
    return found


def _import_chain(
    name: str, level: object, fromlist: object, namespace: Mapping[str, Any]
) -> _Chain | None:
    """The chain an ``import`` statement starts: ``import a.b`` binds ``a``, ``from a.b
    import c`` reads ``a.b``; a relative import is resolved against the code's package."""
    if isinstance(level, int) and level > 0:
        package = namespace.get("__package__")
        if not isinstance(package, str):
            module = str(namespace.get("__name__", ""))
            package = module if "__path__" in namespace else module.rpartition(".")[0]
        try:
            name = importlib.util.resolve_name("." * level + name, package)
        except (ImportError, ValueError):
            return None
    return _Chain("import-top" if fromlist is None else "import", name)


# --- the walk ------------------------------------------------------------------------------


class _Walk:
    """One hashing of one root: the units found, and what is still to be read."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.root = b""
        self.units: set[tuple[bytes, bytes]] = set()
        self._seen: dict[int, object] = {}  # keeps what it saw alive, so no id is reused
        self._queue: list[types.FunctionType | type] = []
        self._open: set[int] = set()  # containers being encoded: one that holds itself ends
        self._rebound_names: dict[int, tuple[Mapping[str, Any], frozenset[str]]] = {}

    @classmethod
    def of(cls, function: Callable[..., Any], packages: tuple[str, ...] | None) -> _Walk:
        """The finished walk from ``function``, which is always read whatever its module."""
        module = getattr(function, "__module__", None)
        walk = cls(Scope(module if isinstance(module, str) else "", packages))
        if isinstance(function, types.FunctionType):
            walk._seen[id(function)] = function
            walk._queue.append(function)
        walk.root = walk.value(function)
        while walk._queue:
            walk._read(walk._queue.pop())
        return walk

    def digest(self) -> bytes:
        digest = hashlib.blake2b(_sized(self.root), digest_size=CODE_HASH_BYTES)
        for name, unit in sorted(self.units):
            digest.update(_sized(name))
            digest.update(_sized(unit))
        return digest.digest()

    def _read(self, target: types.FunctionType | type) -> None:
        if isinstance(target, types.FunctionType):
            body = self._function(target)
        else:
            body = self._class(target)
        unit = hashlib.blake2b(body, digest_size=CODE_HASH_BYTES).digest()
        self.units.add((_qualified_name(target).encode(), unit))

    def _follow(self, target: types.FunctionType | type) -> None:
        if id(target) in self._seen:
            return
        self._seen[id(target)] = target
        module = target.__module__ if isinstance(target.__module__, str) else None
        if isinstance(target, types.FunctionType):
            followed = self.scope.follows(module, target.__code__.co_filename)
        else:
            followed = self.scope.follows(module)
        if followed:
            self._queue.append(target)

    # -- functions and classes

    def _function(self, function: types.FunctionType) -> bytes:
        parts = [b"F", self._code(function.__code__, function.__globals__)]
        parts.append(self.value(function.__defaults__))
        parts.append(self.value(function.__kwdefaults__))
        parts.append(_sized(b"".join(_sized(self._cell(c)) for c in function.__closure__ or ())))
        wrapped = function.__dict__.get("__wrapped__", _MISSING)
        if wrapped is not _MISSING:  # a functools.wraps wrapper: the code it wraps
            parts.append(self.value(wrapped))
        registry = function.__dict__.get("registry", _MISSING)
        if isinstance(registry, types.MappingProxyType):  # functools.singledispatch's
            parts.append(self.value(dict(registry)))  # a dispatch table: its code
        return b"".join(parts)

    def _cell(self, cell: types.CellType) -> bytes:
        try:
            contents = cell.cell_contents
        except ValueError:  # not yet assigned: as state that is still None
            return self.value(None, state=True)
        return self.value(contents, state=True)

    def _code(self, code: types.CodeType, namespace: Mapping[str, Any]) -> bytes:
        """Bytecode, names and constants of ``code`` and its nested code — never line
        numbers or the file name, so moving a function keeps its key — and the units of the
        names it reads."""
        for chain in _chains(code, namespace):
            self._bind(chain, namespace)
        shape = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)
        parts = [b"K", _sized(code.co_code), _ints((*shape, code.co_flags))]
        for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
            parts.append(_sized(b"".join(_sized(name.encode()) for name in names)))
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                parts.append(_sized(self._code(constant, namespace)))
            else:
                parts.append(_sized(self.value(constant)))
        return b"".join(parts)

    def _class(self, cls: type) -> bytes:
        """Bases, metaclass and every attribute by name: methods are followed as units of
        their own; constants are in the class's digest."""
        parts = [b"C", *(self.value(base) for base in cls.__bases__)]
        if type(cls) is not type:
            parts.append(self.value(type(cls)))
        attributes = vars(cls)
        for name in sorted(n for n in attributes if isinstance(n, str)):
            if name not in _CLASS_NOISE:
                value = self.value(attributes[name], state=True)
                parts.append(_sized(name.encode()) + _sized(value))
        _read_frameworks()
        for describe in _describers:
            try:
                declared = describe(cls)
            except Exception as error:  # a class the framework cannot read: by class only
                declared = ("unreadable", type(error).__name__)
            if declared is not None:
                parts.append(b"D" + self.value(declared))
        return b"".join(parts)

    # -- what a name resolves to

    def _bind(self, chain: _Chain, namespace: Mapping[str, Any]) -> None:
        """Record what ``chain`` resolves to in ``namespace``'s module, as far as it can be
        resolved without running code: through modules and classes only."""
        context = namespace.get("__name__")
        context = context if isinstance(context, str) else ""
        label = {
            "global": chain.name,
            "import": f"import {chain.name}",
            "import-top": f"import {chain.name.partition('.')[0]}",
        }[chain.kind]
        found, owned = self._head(chain, namespace, context)
        walked = [label]
        if found is not _MISSING and found is not _STATE:
            for name in chain.attributes:
                step, step_owned = self._attribute(found, name, importing=chain.kind != "global")
                if step is _MISSING:
                    break
                if isinstance(found, type):
                    self.value(found)  # a class the code names: all its methods are read
                found, owned = step, step_owned
                walked.append(name)
                if found is _STATE:
                    break
        self.units.add((f"{context}:{'.'.join(walked)}".encode(), self._bound(found, owned)))

    def _bound(self, found: object, owned: bool) -> bytes:
        if found is _MISSING:
            return b"?"  # not defined (yet): the call would fail, or defines it first
        if found is _STATE:
            return b"g"  # its value depends on what ran before: by name only
        return self.value(found) if owned else self._name(found)

    def _rebound(self, namespace: Mapping[str, Any]) -> frozenset[str]:
        """The names that a function or method of ``namespace``'s module assigns with
        ``global``: state set at run time (a client made lazily, an "initialized" flag),
        whose value at the first call differs between processes."""
        known = self._rebound_names.get(id(namespace))
        if known is None:
            known = self._rebound_names[id(namespace)] = (namespace, _global_stores(namespace))
        return known[1]

    def _head(self, chain: _Chain, namespace: Mapping[str, Any], context: str) -> tuple[Any, bool]:
        """The object a chain starts at, and whether the application owns its value."""
        if chain.kind == "global":
            if chain.name in namespace:
                owned = self.scope.follows(context)
                if owned and chain.name in self._rebound(namespace):
                    return _STATE, owned
                return namespace[chain.name], owned
            builtins = namespace.get("__builtins__")
            table = vars(builtins) if isinstance(builtins, types.ModuleType) else builtins
            if isinstance(table, Mapping) and chain.name in table:
                return table[chain.name], False
            return _MISSING, False
        module = _import(chain.name)
        if module is not None and chain.kind == "import-top":
            module = sys.modules.get(chain.name.partition(".")[0])
        return (_MISSING if module is None else module), False

    def _attribute(self, owner: object, name: str, *, importing: bool) -> tuple[Any, bool]:
        """``owner.name`` looked up statically (no descriptor, no module ``__getattr__``
        runs), and whether the application owns it; ``_MISSING`` past anything but a module
        or a class. A submodule not yet imported is imported only for an import statement,
        which imports it when it runs."""
        if isinstance(owner, types.ModuleType):
            module_name = getattr(owner, "__name__", None)
            attributes = vars(owner)
            if name in attributes:
                file = getattr(owner, "__file__", None)
                owned = self.scope.follows(
                    module_name if isinstance(module_name, str) else None,
                    file if isinstance(file, str) else None,
                )
                if owned and name in self._rebound(attributes):
                    return _STATE, owned
                return attributes[name], owned
            if isinstance(module_name, str):
                full = f"{module_name}.{name}"
                submodule = sys.modules.get(full) or (_import(full) if importing else None)
                if submodule is not None:
                    return submodule, False
            return _MISSING, False
        if isinstance(owner, type):
            for klass in owner.__mro__:
                if name in vars(klass):
                    module = klass.__module__ if isinstance(klass.__module__, str) else None
                    return vars(klass)[name], self.scope.follows(module)
        return _MISSING, False

    # -- values

    def value(self, obj: object, *, state: bool = False) -> bytes:
        """Canonical bytes of ``obj``: a function, class or module by name (and followed, if
        it is the application's), immutable data by value, a mutable container by the code
        it holds, any other object by its class only. With ``state`` (a class attribute, a
        closure cell: what code may set lazily) ``None`` and any object are one value."""
        if state and obj is None:
            return b"o"
        reference = self._reference(obj)
        if reference is not None:
            return reference
        kind = type(obj)
        if kind in (tuple, frozenset):
            return self._container(obj)
        if kind in (list, dict, set, bytearray):
            return self._mutable(obj)
        if isinstance(obj, enum.Enum):  # its class, name and value (which may be anything)
            member = _sized(obj.name.encode()) + self.value(getattr(obj, "_value_", None))
            return b"E" + self.value(kind) + member
        if kind is complex or obj is Ellipsis:  # constants encode_argument has no form for
            return b"c" + repr(obj).encode()
        try:
            return encode_argument(obj)
        except UnsupportedArgument:
            return b"o" if state else b"I" + self.value(kind)  # its class, never its state

    def _container(self, obj: Any) -> bytes:
        if id(obj) in self._open:
            return b"<cycle>"
        self._open.add(id(obj))
        try:
            items = [_sized(self.value(item)) for item in obj]
        finally:
            self._open.discard(id(obj))
        if isinstance(obj, frozenset):
            return _sized(b"".join(sorted(items)), b"{")
        return _sized(b"".join(items), b"(")

    def _mutable(self, obj: Any) -> bytes:
        """A list, dict, set or bytearray by the functions and classes it holds (a dispatch
        table), never by its data: it may be filled at run time — a memo, a registry —
        differently in each process, and a key must not depend on when it was hashed."""
        references = sorted(set(self._references_in(obj)))
        return _sized(b"".join(_sized(r) for r in references), b"~" + type(obj).__name__.encode())

    def _references_in(self, obj: Any) -> Iterator[bytes]:
        if id(obj) in self._open or isinstance(obj, bytearray):
            return
        self._open.add(id(obj))
        try:
            # A copy first: another thread may be filling it.
            items = tuple(obj.items()) if isinstance(obj, dict) else tuple(obj)
            for item in items:
                reference = self._reference(item)
                if reference is not None:
                    yield reference
                elif type(item) in (tuple, list, dict, set, frozenset):
                    yield from self._references_in(item)
        finally:
            self._open.discard(id(obj))

    def _reference(self, obj: object) -> bytes | None:
        """The bytes of a callable, class, module or descriptor; ``None`` for data."""
        if isinstance(obj, types.FunctionType | type):
            self._follow(obj)
            return b"R" + _sized(_qualified_name(obj).encode())
        if isinstance(obj, types.ModuleType):
            return b"m" + _sized(str(getattr(obj, "__name__", "")).encode())
        if isinstance(obj, types.MethodType):
            return b"B" + self.value(obj.__func__) + self.value(obj.__self__)
        if isinstance(obj, staticmethod | classmethod):
            return (b"S" if isinstance(obj, staticmethod) else b"K") + self.value(obj.__func__)
        if isinstance(obj, property):
            return b"P" + b"".join(self.value(f) for f in (obj.fget, obj.fset, obj.fdel))
        if isinstance(obj, functools.partial):
            return b"p" + b"".join(self.value(v) for v in (obj.func, obj.args, obj.keywords))
        if isinstance(obj, _NATIVE_CALLABLES):
            return b"n" + _sized(_native_name(obj).encode())
        wrapped = _wrapped(obj)
        if wrapped is not _MISSING:  # a cacheable function, an lru_cache: the code inside
            return b"W" + self.value(type(obj)) + self.value(wrapped)
        return None

    def _name(self, obj: object) -> bytes:
        """What a name outside the application resolves to, without its value: library data
        (``sys.argv``, a registry) may differ between processes."""
        if isinstance(obj, (types.FunctionType, type, types.ModuleType, *_NATIVE_CALLABLES)):
            return self.value(obj)
        return b"x" + _sized(_qualified_name(type(obj)).encode())


# --- helpers -------------------------------------------------------------------------------


def _qualified_name(obj: types.FunctionType | type) -> str:
    module = obj.__module__
    return f"{module if isinstance(module, str) else ''}.{obj.__qualname__}"


def _native_name(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "")
    return f"{module if isinstance(module, str) else ''}.{name}"


def _wrapped(obj: object) -> Any:
    """``obj.__wrapped__`` if set on the instance itself (as ``functools.update_wrapper``
    does), else ``_MISSING``: no class attribute, no ``__getattr__``."""
    try:
        attributes = vars(obj)
    except TypeError:
        return _MISSING
    return attributes.get("__wrapped__", _MISSING) if isinstance(attributes, dict) else _MISSING


def _global_stores(namespace: Mapping[str, Any]) -> frozenset[str]:
    """The names ``global`` statements in the functions and methods defined in
    ``namespace`` (a module's globals) assign or delete."""
    module = namespace.get("__name__")
    codes: list[types.CodeType] = []
    for value in list(namespace.values()):  # a copy: another thread may add a global
        if isinstance(value, type) and value.__module__ != module:
            continue  # imported from elsewhere
        for member in list(vars(value).values()) if isinstance(value, type) else [value]:
            if isinstance(member, staticmethod | classmethod):
                member = member.__func__
            if isinstance(member, types.FunctionType) and member.__globals__ is namespace:
                codes.append(member.__code__)
    names: set[str] = set()
    while codes:
        code = codes.pop()
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        if not _GLOBAL_STORES.isdisjoint(code.co_code[::2]):  # opcodes are the even bytes
            names.update(i.argval for i in dis.get_instructions(code) if i.opcode in _GLOBAL_STORES)
    return frozenset(names)


def _import(name: str) -> types.ModuleType | None:
    """The module ``name``, imported if need be (the code that names it would import it when
    it runs); ``None`` if it cannot be."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except Exception:  # whatever the module raises, the call will raise: not the hash's
        return None


def _sized(body: bytes, tag: bytes = b"") -> bytes:
    return tag + len(body).to_bytes(4, "little") + body


def _ints(values: Iterable[int]) -> bytes:
    return b"".join(value.to_bytes(8, "little", signed=True) for value in values)
