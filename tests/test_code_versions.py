"""Keys and code changes (``txcache._code_hash``, the ``code_version`` setting): a deployed
change of anything a cacheable function can reach in the application changes its keys; a
change elsewhere does not; the hash is the same in every process. Pure logic, no database:
modules are written into a temporary package and imported — in this process and reloaded,
or in subprocesses, as two deploys would run them."""

from __future__ import annotations

import importlib
import itertools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import txcache
import txcache._code_hash
import txcache._connect
from library_fixtures import LibraryStack
from txcache._code_hash import Scope, code_hash, code_units
from txcache._config import Settings, load_settings
from txcache._keys import CallKeys
from txcache._open_caches import OpenCaches
from txcache.errors import ConfigurationError

DSN = "postgresql:///app"
_names = itertools.count()

VIEWS = """
import txcache
from {pkg} import helpers

@txcache.cacheable
def view(x):
    return helpers.compute(x)

def unrelated_view(x):
    return helpers.unrelated(x)
"""

HELPERS = """
def compute(x):
    return x + 1

def unrelated(x):
    return x
"""


# --- a package on disk ---------------------------------------------------------------------


class Package:
    """A package of modules written into a temporary directory and imported in this process;
    :meth:`write` then :meth:`reload` is a deploy of a changed module."""

    def __init__(self, root: Path, files: dict[str, str]) -> None:
        self.name = f"app{next(_names)}"  # unique per test: nothing cached in sys.modules
        self.directory = root / self.name
        self.directory.mkdir()
        (self.directory / "__init__.py").write_text("")
        for module, source in files.items():
            self.write(module, source)

    def write(self, module: str, source: str) -> None:
        text = textwrap.dedent(source).replace("{pkg}", self.name)
        (self.directory / f"{module}.py").write_text(text)

    def module(self, module: str) -> ModuleType:
        return importlib.import_module(f"{self.name}.{module}")

    def reload(self, module: str) -> ModuleType:
        importlib.invalidate_caches()
        return importlib.reload(self.module(module))


MakePackage = Callable[[dict[str, str]], Package]
"""``package(files)``: see the fixture."""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakePackage]:
    """``package(files)`` writes and imports a fresh package; no bytecode is cached, so a
    rewritten module is recompiled however fast it is rewritten."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[Package] = []

    def make(files: dict[str, str]) -> Package:
        made.append(Package(tmp_path, files))
        return made[-1]

    yield make
    for name in [m for m in sys.modules if any(m.split(".")[0] == p.name for p in made)]:
        del sys.modules[name]


def fresh_hash(function: Callable[..., Any]) -> bytes:
    """The code hash a newly started process would compute (no per-function cache)."""
    return code_hash(getattr(function, "function", function))


def in_subprocess(directory: Path, script: str, seed: str = "0") -> str:
    """Run ``script`` with ``directory`` on the path, as a new deploy's process would."""
    environment = {
        **os.environ,
        "PYTHONHASHSEED": seed,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(directory), os.environ.get("PYTHONPATH", "")]),
    }
    environment.pop("TXCACHE_CODE_VERSION", None)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        cwd=directory,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def write_tree(directory: Path, files: dict[str, str]) -> Path:
    """``files`` (``"pkg/mod.py": source``) under ``directory``; the package ``shop``."""
    for path, source in files.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(source).replace("{pkg}", "shop"))
    return directory


KEY_SCRIPT = """
from shop import views
print(views.view.key(1).hex(), views.view.keys.code_hash().hex())
"""


# --- a changed helper changes the key; an unrelated change does not ------------------------


def test_a_changed_helper_body_changes_the_key_in_a_new_process(tmp_path: Path) -> None:
    """End to end: the real decorator's ``.key()`` in two deploys that differ only in a
    helper's body."""
    before = write_tree(
        tmp_path / "v1",
        {"shop/__init__.py": "", "shop/views.py": VIEWS, "shop/helpers.py": HELPERS},
    )
    after = write_tree(
        tmp_path / "v2",
        {
            "shop/__init__.py": "",
            "shop/views.py": VIEWS,
            "shop/helpers.py": HELPERS.replace("x + 1", "x + 2"),
        },
    )
    assert in_subprocess(before, KEY_SCRIPT) != in_subprocess(after, KEY_SCRIPT)


def test_a_changed_unrelated_function_keeps_the_key_in_a_new_process(tmp_path: Path) -> None:
    files = {"shop/__init__.py": "", "shop/views.py": VIEWS, "shop/helpers.py": HELPERS}
    before = write_tree(tmp_path / "v1", files)
    changed = HELPERS.replace("return x\n", "return -x\n") + "\ndef added():\n    return 3\n"
    after = write_tree(tmp_path / "v2", {**files, "shop/helpers.py": changed})
    views_changed = VIEWS + "\ndef another_view():\n    return 4\n"
    third = write_tree(tmp_path / "v3", {**files, "shop/views.py": views_changed})
    keys = {in_subprocess(d, KEY_SCRIPT) for d in (before, after, third)}
    assert len(keys) == 1


def test_a_changed_helper_body_changes_the_hash(package: MakePackage) -> None:
    app = package({"helpers": HELPERS, "views": VIEWS})
    views = app.module("views")
    before = fresh_hash(views.view)
    app.write("helpers", HELPERS.replace("x + 1", "x * 2"))
    app.reload("helpers")
    assert fresh_hash(views.view) != before


def test_a_changed_unrelated_function_keeps_the_hash(package: MakePackage) -> None:
    app = package({"helpers": HELPERS, "views": VIEWS})
    views = app.module("views")
    before = fresh_hash(views.view)
    app.write("helpers", HELPERS.replace("return x\n", "return x * 10\n"))
    app.reload("helpers")
    assert fresh_hash(views.view) == before
    assert fresh_hash(views.unrelated_view) != code_hash(views.view)


def test_a_helper_two_modules_away_is_covered(package: MakePackage) -> None:
    app = package(
        {
            "deep": "def leaf(x):\n    return x + 1\n",
            "middle": "from {pkg} import deep\n\ndef step(x):\n    return deep.leaf(x)\n",
            "top": "from {pkg}.middle import step\n\ndef f(x):\n    return step(x)\n",
        }
    )
    top = app.module("top")
    before = fresh_hash(top.f)
    app.write("deep", "def leaf(x):\n    return x + 2\n")
    app.reload("deep")
    assert fresh_hash(top.f) != before
    assert f"{app.name}.deep.leaf" in code_units(top.f)


CLASSES = """
class Item:
    TAX = 2

    def __init__(self, price):
        self.price = price

    def total(self):
        return self.price * self.TAX + self._fee()

    def _fee(self):
        return 1

    @classmethod
    def free(cls):
        return cls(0)


def f(x):
    return Item(x).total()


def g(x):
    return Item.free().price + x
"""


@pytest.mark.parametrize(
    ("old", "new"),
    [("return 1", "return 5"), ("TAX = 2", "TAX = 3"), ("cls(0)", "cls(1)")],
    ids=["method", "class-constant", "classmethod"],
)
def test_a_changed_class_the_code_names_changes_the_hash(
    package: MakePackage, old: str, new: str
) -> None:
    """Naming a class covers all its methods and attributes: ``self._fee()`` is reached
    through the class, not through the instance."""
    app = package({"models": CLASSES})
    models = app.module("models")
    before = fresh_hash(models.f), fresh_hash(models.g)
    app.write("models", CLASSES.replace(old, new))
    models = app.reload("models")
    after = fresh_hash(models.f), fresh_hash(models.g)
    assert before[0] != after[0]
    assert before[1] != after[1]


def test_an_attribute_chain_through_modules_and_classes_is_followed(package: MakePackage) -> None:
    app = package(
        {
            "models": "class Item:\n    def price(self):\n        return 1\n",
            "views": "from {pkg} import models\n\ndef f():\n    return models.Item.price\n",
        }
    )
    views = app.module("views")
    before = fresh_hash(views.f)
    app.write("models", "class Item:\n    def price(self):\n        return 2\n")
    app.reload("models")
    assert fresh_hash(views.f) != before
    assert f"{app.name}.views:models.Item.price" in code_units(views.f)


PRICES = """
RATE = 3
LIMITS = (1, 2)
NAMES = frozenset({"a", "b"})
RATES = {"eu": 1, "us": 0}

def f(x, region):
    return x * RATE * RATES[region] + LIMITS[0] + len(NAMES)
"""


@pytest.mark.parametrize(
    ("old", "new"),
    [("RATE = 3", "RATE = 4"), ("(1, 2)", "(1, 3)"), ('"b"})', '"c"})')],
    ids=["number", "tuple", "frozenset"],
)
def test_a_changed_immutable_module_constant_changes_the_hash(
    package: MakePackage, old: str, new: str
) -> None:
    app = package({"prices": PRICES})
    before = fresh_hash(app.module("prices").f)
    app.write("prices", PRICES.replace(old, new))
    assert fresh_hash(app.reload("prices").f) != before


def test_a_mutable_module_container_is_hashed_by_the_code_it_holds_not_its_data(
    package: MakePackage,
) -> None:
    """A dict may be a memo filled at run time, differently in each process: its data is
    not hashed (a documented limit), so a key does not depend on when it was taken."""
    source = """
    _memo = {}
    RATES = {"eu": 1, "us": 0}

    def f(x):
        if x not in _memo:
            _memo[x] = x * RATES["eu"]
        return _memo[x]
    """
    app = package({"m": source})
    m = app.module("m")
    before = fresh_hash(m.f)
    for value in range(10):
        m.f(value)
    assert fresh_hash(m.f) == before
    app.write("m", source.replace('"eu": 1', '"eu": 2'))
    assert fresh_hash(app.reload("m").f) == before


LAZY = """
class Client:
    _shared = None

    @classmethod
    def shared(cls):
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def get(self, x):
        return x


_client = None
_ready = False


def client():
    global _client, _ready
    if _client is None:
        _client = Client()
        _ready = True
    return _client


def f(x):
    return client().get(x), _ready, Client.shared().get(x), _client
"""


def test_state_set_lazily_at_run_time_does_not_change_the_hash(package: MakePackage) -> None:
    """A client made on first use (``global``), an "initialized" flag, a class attribute set
    lazily: a process that has run them hashes as one that has not."""
    app = package({"m": LAZY})
    m = app.module("m")
    before = fresh_hash(m.f)
    m.f(1)
    assert (m._client, m._ready, m.Client._shared) != (None, False, None)
    assert fresh_hash(m.f) == before
    assert f"{app.name}.m.Client.get" in code_units(m.f), "the class is still read"


def test_a_changed_default_of_a_helper_changes_the_hash(package: MakePackage) -> None:
    source = """
    def helper(x, scale=2):
        return x * scale

    def f(x):
        return helper(x)
    """
    app = package({"m": source})
    before = fresh_hash(app.module("m").f)
    assert fresh_hash(app.reload("m").f) == before
    app.write("m", source.replace("scale=2", "scale=3"))
    assert fresh_hash(app.reload("m").f) != before


def test_a_helper_held_by_a_closure_or_a_dispatch_table_is_covered(package: MakePackage) -> None:
    source = """
    def _double(x):
        return x * 2

    HANDLERS = {"double": _double}

    def make():
        handler = _double

        def run(x):
            return handler(x)

        return run

    run = make()

    def dispatch(name, x):
        return HANDLERS[name](x)
    """
    app = package({"m": source})
    m = app.module("m")
    before = fresh_hash(m.run), fresh_hash(m.dispatch)
    app.write("m", source.replace("x * 2", "x + x + 0"))
    m = app.reload("m")
    after = fresh_hash(m.run), fresh_hash(m.dispatch)
    assert before[0] != after[0]
    assert before[1] != after[1]


def test_names_imported_inside_the_function_are_followed(package: MakePackage) -> None:
    app = package(
        {
            "helpers": "def compute(x):\n    return x + 1\n",
            "views": """
            def f(x):
                from .helpers import compute
                return compute(x)

            def g(x):
                import {pkg}.helpers as h
                return h.compute(x)
            """,
        }
    )
    views = app.module("views")
    before = fresh_hash(views.f), fresh_hash(views.g)
    app.write("helpers", "def compute(x):\n    return x + 2\n")
    app.reload("helpers")
    after = fresh_hash(views.f), fresh_hash(views.g)
    assert before[0] != after[0]
    assert before[1] != after[1]


def test_a_nested_cacheable_function_is_covered(package: MakePackage) -> None:
    source = """
    import txcache

    @txcache.cacheable
    def inner(x):
        return x + 1

    @txcache.cacheable
    def outer(x):
        return inner(x) * 2
    """
    app = package({"m": source})
    before = app.module("m").outer.key(1)
    app.write("m", source.replace("x + 1", "x + 2"))
    assert app.reload("m").outer.key(1) != before


def test_a_decorated_helper_is_covered_through_its_wrapper(package: MakePackage) -> None:
    source = """
    import functools

    @functools.lru_cache
    def cached(x):
        return x + 10

    def logged(function):
        @functools.wraps(function)
        def wrapper(*args):
            return function(*args)
        return wrapper

    @logged
    def wrapped(x):
        return x + 20

    def f(x):
        return cached(x) + wrapped(x)
    """
    app = package({"m": source})
    before = fresh_hash(app.module("m").f)
    app.write("m", source.replace("x + 10", "x + 11"))
    middle = fresh_hash(app.reload("m").f)
    app.write("m", source.replace("x + 20", "x + 21"))
    after = fresh_hash(app.reload("m").f)
    assert len({before, middle, after}) == 3


def test_a_singledispatch_implementation_is_covered(package: MakePackage) -> None:
    """An implementation registered for a type is code the generic function runs: its
    registry is a dispatch table, hashed by the code it holds."""
    source = """
    import functools

    @functools.singledispatch
    def render(x):
        return "generic"

    @render.register(int)
    def _(x):
        return "int-v1"

    def f(x):
        return render(x)
    """
    app = package({"m": source})
    before = fresh_hash(app.module("m").f)
    app.write("m", source.replace("int-v1", "int-v2"))
    assert fresh_hash(app.reload("m").f) != before


DJANGO_MODELS = """
from django.db import models

class CentsField(models.IntegerField):
    def from_db_value(self, value, expression, connection):
        return value * 1

class ActiveManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(active=True)

class ItemQuerySet(models.QuerySet):
    def cheap(self):
        return self.filter(price__lt=10)

class Item(models.Model):
    active = models.BooleanField(default=True)
    price = models.IntegerField(db_column="price")
    cents = CentsField(default=0)
    objects = ItemQuerySet.as_manager()
    actives = ActiveManager()

    class Meta:
        app_label = "shop"
        ordering = ["id"]
"""
DJANGO_VIEWS = """
import txcache
from shop.models import Item

@txcache.cacheable
def view(x):
    return list(Item.objects.cheap().values_list("id", "cents", flat=False))

@txcache.cacheable
def actives(x):
    return list(Item.actives.values_list("id", flat=True))
"""
DJANGO_KEYS = """
import json
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["txcache.django", "shop"],
    DATABASES={"default": {"ENGINE": "txcache.django.db", "NAME": "app"}},
)
django.setup()
from shop import views
print(json.dumps({name: getattr(views, name).keys.code_hash().hex()
                  for name in ("view", "actives")}))
"""
# What a model declares beside its methods, each changed alone: (the old text, the new).
MODEL_CHANGES = {
    "ordering": ('ordering = ["id"]', 'ordering = ["-id"]'),
    "manager": ("filter(active=True)", "filter(active=False)"),
    "queryset method": ("filter(price__lt=10)", "filter(price__lt=99)"),
    "field class": ("return value * 1", "return value * 100"),
    "db_column": ('db_column="price"', 'db_column="old_price"'),
    "field default": ("default=True", "default=False"),
}


def test_a_django_model_s_declarations_are_covered(tmp_path: Path) -> None:
    """A model's ordering, managers, queryset methods and fields (their classes, columns
    and defaults) are code the functions reading it depend on, whose change runs no SQL
    that would invalidate anything: each changes the keys of every function reading the
    model (``txcache.django`` reads the model's declarations into the hash); the keys are
    the same in every process."""

    def hashes(models: str) -> dict[str, str]:
        files = {"shop/__init__.py": "", "shop/models.py": models, "shop/views.py": DJANGO_VIEWS}
        found: dict[str, str] = json.loads(in_subprocess(write_tree(tmp_path, files), DJANGO_KEYS))
        return found

    before = hashes(DJANGO_MODELS)
    assert hashes(DJANGO_MODELS) == before
    for change, (old, new) in MODEL_CHANGES.items():
        after = hashes(DJANGO_MODELS.replace(old, new))
        assert after["view"] != before["view"], change
        assert after["actives"] != before["actives"], change


SQLALCHEMY_MODELS = """
from sqlalchemy import ForeignKey, Integer, Numeric
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column, relationship

class Base(DeclarativeBase):
    pass

class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(primary_key=True)
    price: Mapped[int] = mapped_column("price")
    other = mapped_column(Integer, default=0)
    bumped = column_property(price + 1)
    tags = relationship("Tag", order_by=lambda: Tag.id)

class Tag(Base):
    __tablename__ = "tags"
    id: Mapped[int] = mapped_column(primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id"))
"""
SQLALCHEMY_VIEWS = """
import txcache
from sqlalchemy import select
from shop.models import Item

@txcache.cacheable
def view(x):
    return str(select(Item))
"""
SQLALCHEMY_KEYS = """
import txcache.sqlalchemy
from shop import views
print(views.view.keys.code_hash().hex())
"""
MAPPING_CHANGES = {
    "column name": ('mapped_column("price")', 'mapped_column("old_price")'),
    "column type": ("mapped_column(Integer, default=0)", "mapped_column(Numeric, default=0)"),
    "column_property": ("column_property(price + 1)", "column_property(price + 5)"),
    "relationship order": ("order_by=lambda: Tag.id", "order_by=lambda: Tag.id.desc()"),
}


def test_a_sqlalchemy_mapping_is_covered(tmp_path: Path) -> None:
    """A mapped class's columns (names, types), column properties (with their literal
    values) and relationships' order are code the functions reading it depend on: each
    change gives them new keys (``txcache.sqlalchemy`` reads mappings into the hash); the
    keys are the same in every process."""

    def digest(models: str) -> str:
        files = {
            "shop/__init__.py": "",
            "shop/models.py": models,
            "shop/views.py": SQLALCHEMY_VIEWS,
        }
        return in_subprocess(write_tree(tmp_path, files), SQLALCHEMY_KEYS)

    before = digest(SQLALCHEMY_MODELS)
    assert digest(SQLALCHEMY_MODELS) == before
    for change, (old, new) in MAPPING_CHANGES.items():
        assert digest(SQLALCHEMY_MODELS.replace(old, new)) != before, change


def test_a_helper_defined_after_the_decorated_function_is_seen() -> None:
    """The hash is computed at the first key, not when the decorator runs."""
    source = "def f(x):\n    return later(x)\n"
    namespace: dict[str, Any] = {"__name__": "app.lazy"}
    exec(compile(source, "<app.lazy>", "exec"), namespace)
    keys = CallKeys(namespace["f"])  # `later` is not defined yet
    exec(compile("def later(x):\n    return x + 1\n", "<app.lazy>", "exec"), namespace)
    first = keys.key((1,), {})
    exec(compile("def later(x):\n    return x + 2\n", "<app.lazy>", "exec"), namespace)
    assert CallKeys(namespace["f"]).key((1,), {}) != first
    assert "app.lazy.later" in code_units(namespace["f"])


def test_the_hash_is_computed_once_per_function(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Callable[..., Any]] = []
    real = txcache._code_hash.code_hash

    def counting(function: Callable[..., Any], *, packages: tuple[str, ...] | None = None) -> bytes:
        calls.append(function)
        return real(function, packages=packages)

    monkeypatch.setattr(txcache._code_hash, "code_hash", counting)

    @txcache.cacheable
    def f(x: int) -> int:
        return x

    assert calls == []
    for value in range(5):
        f.key(value)
    assert len(calls) == 1


# --- cycles, the standard library, installed packages ---------------------------------------


def test_recursion_and_mutual_recursion_terminate(package: MakePackage) -> None:
    app = package(
        {
            "m": """
            def fact(n):
                return 1 if n < 2 else n * fact(n - 1)

            def even(n):
                return True if n == 0 else odd(n - 1)

            def odd(n):
                return False if n == 0 else even(n - 1)

            class Node:
                def children(self):
                    return [Node()]

            LOOP = []
            LOOP.append(LOOP)

            def uses_loop():
                return LOOP, Node
            """,
            "ping": "from {pkg} import pong\n\ndef ping(n):\n    return pong.pong(n - 1)\n",
            "pong": "from {pkg} import ping\n\ndef pong(n):\n    return ping.ping(n - 1)\n",
        }
    )
    m = app.module("m")
    app.module("pong")
    for function in (m.fact, m.even, m.uses_loop, app.module("ping").ping):
        assert len(code_hash(function)) == 16
    assert {f"{app.name}.m.even", f"{app.name}.m.odd"} <= set(code_units(m.even))
    assert f"{app.name}.pong.pong" in code_units(app.module("ping").ping)


def test_standard_library_and_installed_callees_are_named_not_read(package: MakePackage) -> None:
    app = package(
        {
            "m": """
            import json
            import os.path
            import msgpack
            import txcache

            def f(x):
                return json.dumps(x), os.path.join("a", "b"), msgpack.packb(x), txcache.query
            """
        }
    )
    units = code_units(app.module("m").f)
    read = [u for u in units if ":" not in u]  # units whose code was read
    assert read == [f"{app.name}.m.f"]
    assert f"{app.name}.m:json.dumps" in units, "what the name is stays in the hash"


def test_a_library_callee_does_not_make_the_key_unstable(package: MakePackage) -> None:
    """Library data reached by name (a list another module may change) is named, not
    hashed: the key stays the same."""
    app = package({"m": "import sys\n\ndef f():\n    return sys.argv, sys.path\n"})
    f = app.module("m").f
    before = code_hash(f)
    sys.path.append("an entry only this moment has")
    try:
        assert code_hash(f) == before
    finally:
        sys.path.pop()


HASHES_SCRIPT = """
import json, os.path, msgpack
from shop import views, models
from txcache._code_hash import code_hash
print(views.view.key(1).hex(), code_hash(models.everything).hex())
"""

MODELS = """
import enum, datetime, decimal, json, os.path, msgpack

NAMES = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
TABLE = {"x": frozenset({"a", "b", "c"}), "y": (1.5, None, b"z")}
WHEN = datetime.date(2024, 1, 1)
PRICE = decimal.Decimal("1.10")
SENTINEL = object()

class Colour(enum.Enum):
    RED = "r"
    BLUE = "b"

class Base:
    KINDS = {"a", "b", "c"}
    def describe(self):
        return self.KINDS

class Item(Base):
    __slots__ = ("name",)
    def describe(self):
        return super().describe() | NAMES

def everything(x):
    return (x in NAMES, TABLE, WHEN, PRICE, SENTINEL, Colour.RED, Item().describe(),
            json.dumps(x), os.path.join("a"), msgpack.packb(x), {1: {"k"}}, lambda y: y)
"""


def test_keys_are_the_same_in_processes_with_different_hash_seeds(tmp_path: Path) -> None:
    files = {
        "shop/__init__.py": "",
        "shop/views.py": VIEWS.replace("helpers.compute(x)", "models.everything(x)").replace(
            "from shop import helpers", "from shop import helpers, models"
        ),
        "shop/helpers.py": HELPERS,
        "shop/models.py": MODELS,
    }
    directory = write_tree(tmp_path, files)
    outputs = {in_subprocess(directory, HASHES_SCRIPT, seed) for seed in ("1", "2", "3")}
    assert len(outputs) == 1, outputs


# --- what is the application's ------------------------------------------------------------


def test_the_scope_follows_the_application_and_not_libraries() -> None:
    site_packages = os.path.join(sys.prefix, "lib", "site-packages", "lib1", "x.py")
    scope = Scope("shop.views")
    assert scope.follows("shop.views")
    assert scope.follows("shop.helpers"), "the root's own top-level package"
    assert scope.follows("other_app.x", str(Path(__file__).parent / "other_app" / "x.py"))
    assert not scope.follows("json")
    assert not scope.follows("os.path")
    assert not scope.follows("txcache._transaction")
    assert not scope.follows("lib1.x", site_packages)
    assert not scope.follows("lib1.x", os.path.join("usr", "lib", "dist-packages", "lib1.py"))
    assert not scope.follows(None)
    assert not scope.follows("posixpath", "<frozen posixpath>")
    assert scope.follows("scratch", "<string>"), "code exec'd by the application"


def test_the_scope_of_an_application_installed_into_site_packages() -> None:
    """Its own package is followed wherever it is installed; other installed packages not."""
    scope = Scope("shop.views")
    inside = os.path.join(sys.prefix, "lib", "site-packages", "shop", "helpers.py")
    assert scope.follows("shop.helpers", inside)
    assert not scope.follows("lib1", os.path.join(sys.prefix, "lib", "site-packages", "lib1.py"))


def test_the_functions_own_module_is_followed_even_in_txcache() -> None:
    assert Scope("txcache.check.workload").follows("txcache.check.workload")
    assert not Scope("txcache.check.workload").follows("txcache._transaction")


def test_code_packages_names_exactly_the_packages_followed() -> None:
    scope = Scope("shop.views", packages=("shop", "shared.util"))
    assert scope.follows("shop.helpers")
    assert scope.follows("shared.util.text")
    assert not scope.follows("shared.other")
    assert not scope.follows("sharedutil")
    assert Scope("shop.views", packages=()).follows("shop.views"), "the root's own module"
    assert not Scope("shop.views", packages=()).follows("shop.helpers")


def test_code_packages_decides_what_the_hash_reads(package: MakePackage) -> None:
    app = package({"helpers": HELPERS, "views": VIEWS})
    views = app.module("views")
    helpers = f"{app.name}.helpers.compute"
    assert helpers in code_units(views.view.function)
    assert helpers not in code_units(views.view.function, packages=(f"{app.name}.views",))
    assert helpers in code_units(views.view.function, packages=(app.name,))
    settings = load_settings({"dsn": DSN, "code_packages": f"{app.name}.views"}, {})
    assert views.view.keys.key((1,), {}, settings) != views.view.keys.key((1,), {})


def test_what_the_hash_cannot_see_needs_a_version(package: MakePackage) -> None:
    """A documented limit: a helper reached through getattr with a computed name is not
    read, so changing it keeps the hash; ``version=`` or ``code_version`` must change."""
    source = """
    from {pkg} import helpers

    def f(x):
        return getattr(helpers, "comp" + "ute")(x)
    """
    app = package({"helpers": HELPERS, "views": source})
    views = app.module("views")
    before = fresh_hash(views.f)
    app.write("helpers", HELPERS.replace("x + 1", "x + 2"))
    app.reload("helpers")
    assert fresh_hash(views.f) == before
    keys, settings = CallKeys(views.f), load_settings({"dsn": DSN, "code_version": "b"}, {})
    assert keys.key((1,), {}, settings) != keys.key((1,), {})


# --- the code_version setting ---------------------------------------------------------------


def one(x: int) -> int:
    return x


def two(x: int, y: int = 0) -> int:
    return x + y


def test_code_version_changes_every_key() -> None:
    plain = Settings(dsn=DSN)
    release_a = Settings(dsn=DSN, code_version="4f2a9c1")
    release_b = Settings(dsn=DSN, code_version="9e0d771")
    for function, args in ((one, (1,)), (two, (1, 2)), (two, (3,))):
        keys = CallKeys(function)
        found = [keys.key(args, {}, s) for s in (None, plain, release_a, release_b)]
        assert found[0] == found[1], "no code_version is the empty one"
        assert len(set(found[1:])) == 3
        assert CallKeys(function).key(args, {}, Settings(DSN, code_version="4f2a9c1")) == found[2]


def test_code_version_and_version_are_not_interchangeable() -> None:
    in_setting = CallKeys(one).key((1,), {}, Settings(dsn=DSN, code_version="2"))
    in_decorator = CallKeys(one, version="2").key((1,), {})
    assert in_setting != in_decorator


def test_a_cacheable_functions_key_uses_the_default_caches_code_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @txcache.cacheable
    def f(x: int) -> int:
        return x

    unversioned = f.key(1)
    settings = load_settings({"dsn": DSN, "code_version": "release-7"}, {})
    default = SimpleNamespace(settings=settings, last_context=lambda: None)  # no reading yet
    open_caches: OpenCaches[object] = OpenCaches()
    open_caches.opened(default)
    monkeypatch.setattr(txcache._connect, "_open", open_caches)
    versioned = f.key(1)
    assert versioned != unversioned
    assert versioned == f.keys.key((1,), {}, Settings(dsn=DSN, code_version="release-7"))


runs: list[int] = []


@txcache.cacheable
def item_name(item_id: int) -> str:
    runs.append(item_id)
    row = txcache.query_one("SELECT name FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return str(row[0])


def test_a_new_code_version_misses_what_the_old_one_stored(lib: LibraryStack) -> None:
    """End to end against the real stack: two caches that differ only in ``code_version``
    (two releases sharing nodes) never read each other's results."""
    lib.caught_up()
    lib.fresh_pins()
    runs.clear()
    for _ in range(2):
        with lib.cache.read_only(staleness=60):
            assert item_name(3) == "item 3"
    assert runs == [3], "the first release: a miss, then a hit"
    next_release = txcache.connect(
        lib.dsn,
        nodes=[node.address for node in lib.nodes],
        agent=lib.agent_address,
        code_version="next-release",
    )
    try:
        for _ in range(2):
            with next_release.read_only(staleness=60):
                assert item_name(3) == "item 3"
    finally:
        next_release.close()
    assert runs == [3, 3], "the next release: its own miss, then its own hit"
    with lib.cache.read_only(staleness=60):
        item_name(3)
    assert runs == [3, 3], "the first release's value is still there for it"


@pytest.fixture
def empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No stray txcache.toml is read."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_code_version_comes_from_the_environment(empty_directory: Path) -> None:
    environ = {"TXCACHE_DSN": DSN, "TXCACHE_CODE_VERSION": "4f2a9c1\n"}
    assert load_settings({}, environ).code_version == "4f2a9c1"
    assert load_settings({}, {"TXCACHE_DSN": DSN}).code_version == ""


def test_code_version_comes_from_the_file_and_arguments_win(empty_directory: Path) -> None:
    Path("txcache.toml").write_text(f'dsn = "{DSN}"\ncode_version = "from-file"\n')
    assert load_settings({}, {}).code_version == "from-file"
    environ = {"TXCACHE_CODE_VERSION": "from-env"}
    assert load_settings({}, environ).code_version == "from-env"
    assert load_settings({"code_version": "from-arg"}, environ).code_version == "from-arg"


@pytest.mark.parametrize("value", ["3", "42", "[1]", "true"], ids=["int", "int2", "list", "bool"])
def test_a_code_version_that_is_not_a_string_in_the_file_is_named(
    empty_directory: Path, value: str
) -> None:
    Path("txcache.toml").write_text(f'dsn = "{DSN}"\ncode_version = {value}\n')
    with pytest.raises(ConfigurationError) as raised:
        load_settings({}, {})
    assert "code_version" in str(raised.value)
    assert "string" in str(raised.value)


def test_a_code_version_with_control_characters_is_malformed(empty_directory: Path) -> None:
    with pytest.raises(ConfigurationError, match="code_version"):
        load_settings({"dsn": DSN, "code_version": "abc\x00def"}, {})


def test_connect_passes_code_version_through_to_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``connect(code_version=...)`` needs no keyword of its own: it reaches
    ``load_settings`` with the other settings."""
    seen: dict[str, Settings] = {}

    class FakeCache:
        def __init__(self, settings: Settings, **options: Any) -> None:
            seen["settings"] = settings

    monkeypatch.setattr(txcache._connect, "Cache", FakeCache)
    monkeypatch.delenv("TXCACHE_CONFIG", raising=False)
    txcache.connect(DSN, code_version="4f2a9c1", code_packages=["shop"])
    assert seen["settings"].code_version == "4f2a9c1"
    assert seen["settings"].code_packages == ("shop",)


def test_code_packages_from_the_environment_and_the_file(empty_directory: Path) -> None:
    environ = {"TXCACHE_DSN": DSN, "TXCACHE_CODE_PACKAGES": " shop , shared.util,"}
    assert load_settings({}, environ).code_packages == ("shared.util", "shop")
    Path("txcache.toml").write_text(f'dsn = "{DSN}"\ncode_packages = ["shop"]\n')
    assert load_settings({}, {}).code_packages == ("shop",)
    assert load_settings({}, {}).code_version == ""
    assert Settings(dsn=DSN).code_packages is None


@pytest.mark.parametrize("value", ["shop-app", "1shop", "shop..x", [1]])
def test_a_malformed_code_package_is_named(empty_directory: Path, value: list[int] | str) -> None:
    with pytest.raises(ConfigurationError, match="code_packages"):
        load_settings({"dsn": DSN, "code_packages": value}, {})
