"""Generate the library's sync drivers from their async sources.

The async modules of ``python/txcache/aio`` are the source of the read path; each sync twin
listed in :data:`GENERATED` is made from its source by a transform of the source *text*
at the places Python's own parser finds (so comments, blank lines and docstrings survive as
written):

- ``async def``, ``async with``, ``async for`` lose ``async``; ``await x`` becomes ``x``;
- names in :data:`RENAMES` — classes, functions, attributes, modules in imports, and the
  same words in docstrings and comments — become their sync counterparts;
- ``if ASYNC: <async code> else: <sync code>`` keeps only the sync branch (``ASYNC`` is
  ``txcache._drivers.ASYNC``, true in the async source): where the two truly differ
  (``asyncio.shield``, a task instead of a thread);
- the import of ``ASYNC`` goes, and a header says where the file came from.

The result is formatted by ``ruff`` (imports sorted, lines rewrapped). ``--check`` makes
nothing: it fails, printing a diff, when a committed sync file differs from what its source
generates (``make lint`` runs it, so the twins cannot drift).

    python tools/async_to_sync.py            # write every generated file
    python tools/async_to_sync.py --check    # compare, fail on a difference
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "txcache"

GENERATED: tuple[tuple[str, str], ...] = (
    ("aio/_cache.py", "_cache.py"),
    ("aio/_cursor.py", "_cursor.py"),
    ("aio/_read_only.py", "_read_only.py"),
    ("aio/_transaction.py", "_transaction.py"),
    ("aio/_nodes.py", "_nodes.py"),
    ("aio/_cacheable.py", "_cacheable.py"),
    ("aio/_audit.py", "_audit.py"),
    ("aio/_replica_connection.py", "_replica_connection.py"),
)
"""(async source, sync twin), relative to ``python/txcache``."""

RENAMES: dict[str, str] = {
    # the library's twins
    "AsyncCache": "Cache",
    "AsyncCacheDriver": "CacheDriver",
    "AsyncCacheNode": "CacheNode",
    "AsyncCacheableFunction": "CacheableFunction",
    "AsyncReadOnlyTransaction": "ReadOnlyTransaction",
    "AsyncReadWriteTransaction": "ReadWriteTransaction",
    "AsyncTransaction": "Transaction",
    "AsyncResultCursor": "ResultCursor",
    "AsyncWriteCursor": "WriteCursor",
    "AsyncAgentClient": "AgentClient",
    "AsyncAuditTransaction": "AuditTransaction",
    "AsyncEndpoint": "Endpoint",
    "AsyncRespConnection": "RespConnection",
    "AsyncReplicaConnection": "ReplicaConnection",
    "floor_async": "floor",
    # psycopg's
    "AsyncConnection": "Connection",
    "AsyncCursor": "Cursor",
    "AsyncCopy": "Copy",
    "AsyncRowFactory": "RowFactory",
    "AsyncConnectionPool": "ConnectionPool",
    # the standard library's
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    # the protocol
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "aclose": "close",
    "txcache.connect_async": "txcache.connect",
    "asyncio.sleep": "time.sleep",
    # modules
    "txcache.aio._cache": "txcache._cache",
    "txcache.aio._cursor": "txcache._cursor",
    "txcache.aio._read_only": "txcache._read_only",
    "txcache.aio._transaction": "txcache._transaction",
    "txcache.aio._nodes": "txcache._nodes",
    "txcache.aio._cacheable": "txcache._cacheable",
    "txcache.aio._audit": "txcache._audit",
    "txcache.aio._connect": "txcache._connect",
    "txcache.aio._agent": "txcache._agent",
    "txcache.aio._resp": "txcache._resp",
    "txcache.aio._replica_connection": "txcache._replica_connection",
}
"""Async names and their sync counterparts, applied to identifiers and to the same whole
words in comments and docstrings."""

SENTENCES: dict[str, str] = {
    "Its sync twin is generated from it": "It is generated from its async twin",
}
"""Whole phrases of docstrings that say which twin a module is."""

_WORD = re.compile(
    "|".join(rf"(?<!\w){re.escape(name)}(?!\w)" for name in sorted(RENAMES, key=len, reverse=True))
)


@dataclass(frozen=True, order=True)
class _Edit:
    """Replace the source text from ``start`` to ``end`` (line, column; lines from 1) with
    ``text``."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


def transform(source: str, origin: str) -> str:
    """The sync module generated from the async ``source`` (``origin``: its path, for the
    header), before formatting."""
    tree = ast.parse(source)
    edits = _Edits(source)
    edits.visit(tree)
    text = _apply(edits.lines, sorted(edits.found, reverse=True))
    for phrase, replacement in SENTENCES.items():
        text = text.replace(phrase, replacement)
    text = _WORD.sub(lambda match: RENAMES[match.group(0)], text)
    return _header(origin) + text


class _Edits(ast.NodeVisitor):
    """Collects the edits that make an async module sync."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.found: list[_Edit] = []

    def _drop_async_keyword(self, node: ast.stmt) -> None:
        line = self.lines[node.lineno - 1]
        column = node.col_offset
        assert line[column:].startswith("async "), f"line {node.lineno}: no async keyword"
        self.found.append(_Edit((node.lineno, column), (node.lineno, column + 6), ""))

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        # Decorators come first: the keyword is on the line of ``async def``.
        self.found.append(self._keyword_edit(node))
        self.generic_visit(node)

    def _keyword_edit(self, node: ast.AsyncFunctionDef) -> _Edit:
        for number in range(node.lineno, node.end_lineno or node.lineno + 1):
            line = self.lines[number - 1]
            column = line.find("async def ")
            if column >= 0:
                return _Edit((number, column), (number, column + 6), "")
        raise AssertionError(f"line {node.lineno}: no 'async def'")

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self._drop_async_keyword(node)
        self.generic_visit(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._drop_async_keyword(node)
        self.generic_visit(node)

    def visit_Await(self, node: ast.Await) -> None:
        value = node.value
        self.found.append(
            _Edit((node.lineno, node.col_offset), (value.lineno, value.col_offset), "")
        )
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        if not (isinstance(node.test, ast.Name) and node.test.id == "ASYNC"):
            self.generic_visit(node)
            return
        start = (node.lineno, node.col_offset)
        end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
        if node.orelse:
            self.found.append(_Edit(start, end, self._dedented(node.orelse, node.col_offset)))
        else:  # async only: nothing of it in the sync module (the whole lines go)
            end = (node.end_lineno or node.lineno, len(self.lines[(node.end_lineno or 1) - 1]))
            self.found.append(_Edit((node.lineno, 0), end, ""))
        # The sync branch may hold awaits of its own (it should not) — not visited: kept.

    def _dedented(self, statements: list[ast.stmt], indent: int) -> str:
        """The source of ``statements`` moved to column ``indent``."""
        first, last = statements[0], statements[-1]
        decorators = getattr(first, "decorator_list", [])
        start = min([first.lineno, *(d.lineno for d in decorators)])
        chunk = self.lines[start - 1 : last.end_lineno]
        step = first.col_offset - indent
        text = "".join(line[step:] if line[:step].isspace() else line for line in chunk)
        return text[indent:].rstrip("\n")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "ASYNC":  # a value elsewhere than an ``if`` test: false in sync code
            self._replace(node, "False")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        # ``Coroutine[Any, Any, T]`` — what a method returns for its caller to await — is T.
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
        if isinstance(node.value, ast.Name) and node.value.id == "Coroutine" and len(elements) == 3:
            self._replace(node, ast.get_source_segment(self.source, elements[2]) or "")
            return
        self.generic_visit(node)

    def _replace(self, node: ast.expr, text: str) -> None:
        start = (node.lineno, node.col_offset)
        end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
        self.found.append(_Edit(start, end, text))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "txcache._drivers" and [a.name for a in node.names] == ["ASYNC"]:
            end = (node.end_lineno or node.lineno, len(self.lines[(node.end_lineno or 1) - 1]))
            self.found.append(_Edit((node.lineno, 0), end, ""))


def _apply(lines: list[str], edits: list[_Edit]) -> str:
    """``lines`` with ``edits`` applied, last first (so earlier positions stay valid)."""
    text = list(lines)
    for edit in edits:
        (first, first_column), (last, last_column) = edit.start, edit.end
        head = text[first - 1][:first_column]
        tail = text[last - 1][last_column:]
        text[first - 1 : last] = [head + edit.text + tail]
    return "".join(text)


def _header(origin: str) -> str:
    return (
        f"# Generated from {origin} by tools/async_to_sync.py. Do not edit:\n"
        "# change the source and run `make generate` (`make lint` fails if this file differs).\n"
    )


def formatted(text: str, target: Path) -> str:
    """``text`` as ``ruff`` leaves it (imports sorted, unused ones dropped, formatted), as
    if it were ``target`` (whose directory decides ruff's settings)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        raise SystemExit("ruff is not installed: run `make venv` and use .venv/bin/python")
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=target.parent, delete=False) as tmp:
        tmp.write(text)
    path = Path(tmp.name)
    try:
        fixes = ("--select", "I,F401", "--fix", "--quiet", "--exit-zero")
        subprocess.run([ruff, "check", *fixes, str(path)], check=True)
        subprocess.run([ruff, "format", "--quiet", str(path)], check=True)
        return path.read_text()
    finally:
        path.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare; fail on a difference")
    args = parser.parse_args()
    stale = 0
    for source_name, target_name in GENERATED:
        source, target = PACKAGE / source_name, PACKAGE / target_name
        origin = f"python/txcache/{source_name}"
        generated = formatted(transform(source.read_text(), origin), target)
        current = target.read_text() if target.exists() else ""
        if generated == current:
            continue
        if args.check:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    generated.splitlines(keepends=True),
                    f"python/txcache/{target_name} (committed)",
                    f"python/txcache/{target_name} (generated from {origin})",
                )
            )
        else:
            target.write_text(generated)
            print(f"wrote python/txcache/{target_name} from {origin}")
    if stale:
        print(f"{stale} generated file(s) differ from their source: run `make generate`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
