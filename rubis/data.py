"""The data files of the RUBiS distribution, shipped in ``rubis/data/``.

- ``ebay_simple_categories.txt``: one category a line, ``Name (count)`` — the count is the
  number of active items of that category in RUBiS's standard database (32,667 in all);
- ``ebay_regions.txt``: one region a line;
- ``default_transitions.txt``, ``browse_only_transitions.txt``: the client emulator's
  transition tables (parsed by ``rubis.transitions``).

Ids are 1-based in file order, as the tables number them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Category", "categories", "read_text", "regions"]

_CATEGORY_LINE = re.compile(r"^(?P<name>.*\S)\s*\((?P<count>\d+)\)\s*$")


@dataclass(frozen=True, slots=True)
class Category:
    """A category: its 1-based id, name and RUBiS's count of active items in it."""

    id: int
    name: str
    count: int


def read_text(name: str) -> str:
    """The text of data file ``name``."""
    return resources.files("rubis").joinpath("data", name).read_text(encoding="utf-8")


def categories() -> list[Category]:
    """The 20 categories of ``ebay_simple_categories.txt``."""
    result: list[Category] = []
    for line in read_text("ebay_simple_categories.txt").splitlines():
        if not line.strip():
            continue
        match = _CATEGORY_LINE.match(line)
        if match is None:
            raise ValueError(f"bad category line: {line!r}")
        result.append(Category(len(result) + 1, match["name"], int(match["count"])))
    return result


def regions() -> list[str]:
    """The 62 region names of ``ebay_regions.txt``; region ``i`` is ``regions()[i - 1]``."""
    return [line.strip() for line in read_text("ebay_regions.txt").splitlines() if line.strip()]
