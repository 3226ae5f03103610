"""``txcache docs``: read the documentation that messages cite (``docs/agent.md, "High
availability"``) where txcache is installed. The wheel carries ``docs/*.md`` as
``txcache/docs``; a checkout reads its own ``docs/``.

``txcache docs`` lists the documents, ``txcache docs agent`` prints one, and ``txcache docs
agent "High availability"`` one section of it: the heading that names it down to the next
heading of its level or above. Messages also cite a paragraph by its bold label (``- **Several
hosts.**``): that prints down to the next label at its indentation or less, or a heading. The
words name a title exactly, else the one title starting with them, else the one containing
them (case and spacing aside).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Section",
    "add_parser",
    "docs_directory",
    "find_document",
    "find_section",
    "run",
    "sections",
]

_HERE = Path(__file__).resolve().parent
_CANDIDATES = (_HERE.parent / "docs", _HERE.parents[2] / "docs")  # the wheel's, a checkout's
_HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
_LABEL = re.compile(r"( *)(?:[-*] )?\*\*([^*]+?)[.:]?\*\*.*")
_LABEL_LEVEL = 7  # a bold label ranks below every heading, deeper the more it is indented
_FENCE = re.compile(r"\s*(```|~~~)")


def docs_directory() -> Path | None:
    """Where the documents are: the installed package's ``txcache/docs``, else the
    checkout's ``docs/``; ``None`` when neither holds them."""
    for directory in _CANDIDATES:
        if (directory / "library.md").is_file():
            return directory
    return None


def find_document(directory: Path, name: str) -> Path | None:
    """The document ``name`` names: ``agent``, ``agent.md`` or ``docs/agent.md``."""
    stem = Path(name).name.removesuffix(".md")
    path = directory / f"{stem}.md"
    return path if stem and path.is_file() else None


@dataclass(frozen=True)
class Section:
    """One heading of a document and the lines it spans (heading included)."""

    level: int
    title: str
    start: int
    end: int


def sections(lines: list[str]) -> list[Section]:
    """Every heading of a Markdown document (``#`` lines outside code blocks) and every bold
    label opening a line or a list item, each spanning the lines up to the next one of its
    level or above."""
    found: list[tuple[int, str, int]] = []
    fenced = False
    for number, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if heading := _HEADING.fullmatch(line):
            found.append((len(heading.group(1)), heading.group(2), number))
        elif label := _LABEL.fullmatch(line):
            found.append((_LABEL_LEVEL + len(label.group(1)), label.group(2), number))
    spans = []
    for index, (level, title, start) in enumerate(found):
        after = (s for lvl, _, s in found[index + 1 :] if lvl <= level)
        spans.append(Section(level, title, start, next(after, len(lines))))
    return spans


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = _HEADING.fullmatch(line)
        if heading:
            return heading.group(2)
    return ""


def find_section(found: list[Section], words: str) -> Section | list[Section]:
    """The section of ``found`` that ``words`` name, else the candidates: several that
    match, or none."""
    wanted = _words(words)
    titled = [(section, _words(section.title)) for section in found]
    exact = [section for section, title in titled if title == wanted]
    if exact:
        return exact[0]
    starting = [section for section, title in titled if title.startswith(wanted)]
    if len(starting) == 1:
        return starting[0]
    containing = [section for section, title in titled if wanted in title]
    return containing[0] if len(containing) == 1 else containing


def _words(text: str) -> str:
    return " ".join(text.strip().strip("\"'").casefold().split())


def add_parser(subparsers: Any) -> None:
    """Register ``docs`` and its arguments."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "docs",
        help="read the documentation that messages cite (docs/NAME.md, a section)",
        description=(
            "Print a document of txcache's docs/ (installed with the package), or one "
            "section of it. Without a NAME, list the documents."
        ),
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="agent, agent.md or docs/agent.md")
    parser.add_argument(
        "section", nargs="?", metavar="SECTION", help='a heading, e.g. "High availability"'
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print what was asked; 1 (and what there is, on stderr) for a name or section that
    does not exist. A reader that stops early (``| head``) ends it quietly."""
    try:
        return _print(args)
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at nothing, so no second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _print(args: argparse.Namespace) -> int:
    directory = docs_directory()
    if directory is None:
        print("txcache docs: error: this installation carries no docs/", file=sys.stderr)
        return 1
    if args.name is None:
        for listed in sorted(directory.glob("*.md")):
            print(f"{listed.stem:18} {_title(listed)}")
        return 0
    path = find_document(directory, args.name)
    if path is None:
        names = ", ".join(p.stem for p in sorted(directory.glob("*.md")))
        print(
            f"txcache docs: error: no document {args.name!r}; there are: {names}", file=sys.stderr
        )
        return 1
    lines = path.read_text(encoding="utf-8").splitlines()
    if args.section is None:
        print("\n".join(lines))
        return 0
    found = sections(lines)
    picked = find_section(found, args.section)
    if isinstance(picked, Section):
        print("\n".join(lines[picked.start : picked.end]).rstrip())
        return 0
    candidates = picked or [section for section in found if section.level == 2]
    which = "several sections match" if picked else "no section matches"
    among = "they are" if picked else "its chapters"
    titles = "; ".join(section.title for section in candidates)
    print(
        f"txcache docs: error: {which} {args.section!r} in {path.name}; {among}: {titles}",
        file=sys.stderr,
    )
    return 1
