"""The session context as a value (pure logic): what its digest distinguishes, and the one
list of result settings the library and the agent share."""

from __future__ import annotations

import re
from pathlib import Path

from txcache._session import RESULT_SETTINGS, SessionContext

AGENT_SOURCE = Path(__file__).parent.parent / "crates/agent/src/shared_catalog.rs"


def context(**changes: object) -> SessionContext:
    fields: dict[str, object] = {
        "system_identifier": "7713038224405008813",
        "database_oid": 5,
        "database": "postgres",
        "role_oid": 10,
        "role": "postgres",
        "search_path": (11, 2200),
        "settings": tuple((name, "on") for name in RESULT_SETTINGS),
    }
    fields.update(changes)
    return SessionContext(**fields)  # type: ignore[arg-type]


def test_the_agent_watches_the_settings_the_library_keys_by() -> None:
    source = AGENT_SOURCE.read_text()
    listed = re.search(r"RESULT_SETTINGS: \[&str; \d+\] = \[(.*?)\];", source, re.S)
    assert listed is not None
    assert tuple(re.findall(r'"([^"]+)"', listed.group(1))) == RESULT_SETTINGS


def test_every_part_of_the_context_changes_the_digest() -> None:
    base = context()
    variants = [
        context(system_identifier="1"),
        context(database_oid=6),
        context(role_oid=11),
        context(search_path=(2200, 11)),
        context(search_path=(11,)),
        context(settings=(("search_path", "a"), *base.settings[1:])),
        context(settings=(("search_path", None), *base.settings[1:])),
        context(settings=(("search_path", ""), *base.settings[1:])),
    ]
    digests = {base.digest, *(variant.digest for variant in variants)}
    assert len(digests) == len(variants) + 1


def test_names_are_for_people_only() -> None:
    """A database or role renamed is the same object: its oid names it."""
    assert context(database="renamed", role="renamed").digest == context().digest


def test_differences_name_what_changed() -> None:
    changed = context(role_oid=11, settings=(("search_path", "x"), *context().settings[1:]))
    assert changed.differences(context()) == ["role", "search_path"]
