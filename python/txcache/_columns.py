"""Column sets of invalidation tags: the twin of ``ColumnSet`` in ``crates/model/src/tag.rs``.

A tag may name the columns of its rows after the table, ``schema.table#1c:column=value``,
as 64 bits in hexadecimal; without ``#`` it names every column. Bit 0 (:data:`ROWS`) is
which rows exist, which every read depends on; bit 1 (:data:`VERSION`) is the row's version,
which every update changes and only reads of system columns or whole rows depend on; each
column name owns one of the other 62 bits by a hash of its name (two names may share one,
which only costs hits). A read matches a commit only when their sets share a bit
(docs/sql-tags.md, "Columns").
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ALL",
    "ROWS",
    "VERSION",
    "column_bit",
    "merge_tags",
    "split_tag",
    "table_of",
    "with_columns",
]

ALL = (1 << 64) - 1
"""Every column, row existence and row versions included: a tag without ``#``."""
ROWS = 1
"""Which rows exist: every read depends on it."""
VERSION = 2
"""The row's version (``ctid``, ``xmin``, …): every update changes it."""

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def column_bit(name: str) -> int:
    """The bit of column ``name`` (the identifier, unescaped): bit 2 + the 64-bit FNV-1a
    hash of its UTF-8 bytes modulo 62, exactly as the agent computes it."""
    digest = _FNV_OFFSET
    for byte in name.encode():
        digest = ((digest ^ byte) * _FNV_PRIME) & ALL
    return 1 << (2 + digest % 62)


def with_columns(tag: str, columns: int) -> str:
    """``tag`` (without a column set) naming only ``columns`` of its rows."""
    if columns == ALL:
        return tag
    table, colon, rest = tag.partition(":")
    return f"{table}#{columns:x}{colon}{rest}"


def split_tag(tag: str) -> tuple[str, int]:
    """A tag's site (the tag without its column set) and its column set."""
    table, colon, rest = tag.partition(":")
    name, hash_, hexdigits = table.partition("#")
    return name + colon + rest, int(hexdigits, 16) if hash_ else ALL


def table_of(tag: str) -> str:
    """The table (escaped ``schema.name``) a tag names, without its column set."""
    return tag.partition(":")[0].partition("#")[0]


def merge_tags(tags: Iterable[str]) -> frozenset[str]:
    """One tag per site with the union of its sets; a table read through its wildcard keeps
    only the wildcard, naming every column any of its tags named."""
    sites: dict[str, int] = {}
    for tag in tags:
        site, columns = split_tag(tag)
        sites[site] = sites.get(site, 0) | columns
    for site, columns in list(sites.items()):
        table, colon, _ = site.partition(":")
        if colon and table in sites:
            sites[table] |= columns
            del sites[site]
    return frozenset(with_columns(site, columns) for site, columns in sites.items())
