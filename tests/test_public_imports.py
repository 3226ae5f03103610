"""The benchmarks, RUBiS and the examples use txcache as any application or tool would: they
import public modules only (``txcache``, ``txcache.stack``, ``txcache.protocol``, …), never
one whose name starts with an underscore (docs/architecture.md, ``bench/``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
USERS = ("bench", "rubis", "examples")


def imported_modules(tree: ast.Module) -> Iterator[str]:
    """Every module ``tree`` imports, anywhere in it, by its full name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def private_txcache_imports(path: Path) -> list[str]:
    modules = imported_modules(ast.parse(path.read_text()))
    return sorted(
        name
        for name in set(modules)
        if name.split(".")[0] == "txcache" and any(part.startswith("_") for part in name.split("."))
    )


@pytest.mark.parametrize("user", USERS)
def test_the_checkouts_own_users_import_no_private_module(user: str) -> None:
    found = {
        str(path.relative_to(CHECKOUT)): names
        for path in sorted((CHECKOUT / user).rglob("*.py"))
        if (names := private_txcache_imports(path))
    }
    assert found == {}


def test_a_private_import_is_seen() -> None:
    tree = ast.parse("from txcache._resp import RespConnection\nimport txcache.aio._resp\n")
    assert "txcache._resp" in set(imported_modules(tree))
    assert "txcache.aio._resp" in set(imported_modules(tree))
