"""The library's modules import each other without circles (docs/architecture.md, "The
import graph"): the sync and async drivers never import each other, shared modules
import no driver. Module-level imports only; ``TYPE_CHECKING`` blocks are for types, and
imports inside functions are the documented exceptions."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "python" / "txcache"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def module_level_imports(tree: ast.Module, known: dict[str, Path]) -> Iterator[str]:
    """The package's modules ``tree`` imports when it is imported."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            inside = [f"{node.module}.{alias.name}" for alias in node.names]
            submodules = [name for name in inside if name in known]
            yield from submodules
            if len(submodules) < len(inside) and node.module in known:
                yield node.module
        elif isinstance(node, ast.If | ast.Try | ast.ClassDef):
            pending.extend(ast.iter_child_nodes(node))  # not functions: they run later


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: set(module_level_imports(ast.parse(path.read_text()), known)) - {name}
        for name, path in known.items()
    }


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert circles(graph()) == []


def test_the_drivers_never_import_each_other() -> None:
    edges = graph()
    sync = {"txcache._transaction", "txcache._read_only", "txcache._cache", "txcache._nodes"}
    sync |= {"txcache._cacheable", "txcache._cursor", "txcache._connect", "txcache._agent"}
    for name, imported in edges.items():
        if name.startswith("txcache.aio."):
            assert not imported & sync, f"{name} imports the sync driver: {imported & sync}"
        if name in sync:
            aio = {each for each in imported if each.startswith("txcache.aio")}
            assert not aio, f"{name} imports the async driver: {aio}"
