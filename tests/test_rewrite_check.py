"""Which rewrite check a statement runs, and what the by-oid one's rows mean (pure logic;
the checks themselves against PostgreSQL are test_read_only_safety.py's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from txcache._read_only_core import ReadOnlyCore, _plain_table
from txcache._schema import Relation


def relation(kind: str = "r", *, children: tuple[int, ...] = (), rls: bool = False) -> Relation:
    return Relation(7, "public", "t", kind, "p", None, rls, None, children=children)


def test_only_a_table_whose_reading_reads_nothing_else_is_checked_by_oid() -> None:
    assert _plain_table(relation("r"))
    assert _plain_table(relation("m"))
    assert not _plain_table(relation("p")), "a partitioned table reads its partitions"
    assert not _plain_table(relation("r", children=(8,))), "inheritance children are read too"
    assert not _plain_table(relation("r", rls=True)), "its policies may read other tables"
    assert not _plain_table(relation("v"))
    assert not _plain_table(relation("f"))


def rewritten(tables: dict[int, str], rows: list[Any]) -> tuple[list[str], set[str]]:
    """What ``_rewritten_tables`` returns for ``rows``, and what it records as verified."""
    core = SimpleNamespace(_verified=set())
    found = ReadOnlyCore._rewritten_tables(core, tables, rows)  # type: ignore[arg-type]
    return found, core._verified


def test_a_table_rewritten_or_unknown_to_the_snapshot_is_rewritten() -> None:
    tables = {7: "public.a", 8: "public.b"}
    assert rewritten(tables, [(7, False), (8, False)]) == ([], {"public.a", "public.b"})
    assert rewritten(tables, [(7, False), (8, True)]) == (["public.b"], set())
    assert rewritten(tables, [(7, False)]) == (["public.b"], set()), "created since"
