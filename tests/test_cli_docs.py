"""``txcache docs``: every document and section a message cites is one it prints, and the
sections of a Markdown document are found as a reader would find them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from txcache.cli import docs, main

CHECKOUT = Path(__file__).resolve().parent.parent

# Source lines a string or comment continues on: joined, so that a citation reads whole.
_CONTINUED = re.compile(r"""["']\s*\n\s*(?:f|b|r|rb)?["']|\n\s*(?:///|//!|//|#)?\s*""")
_CITATION = re.compile(r'docs/([a-z_-]+)\.md(?:, \\?"([^"\\\n]{1,80})\\?")?')

DOCUMENT = """\
# Title

## First

**A label.** text
- **Bulleted**: more
  - **Nested.** deeper
- **Next.** after

```
# not a heading
```

### Inner

## Second
"""


def citations() -> list[tuple[str, str, str | None]]:
    """Each ``docs/NAME.md`` (with the ``"Section"`` after it, if any) the library's and the
    binaries' sources cite: where, the document, the section."""
    sources = [*CHECKOUT.glob("python/txcache/**/*.py"), *CHECKOUT.glob("crates/*/src/**/*.rs")]
    found = []
    for path in sources:
        text = _CONTINUED.sub(" ", path.read_text(encoding="utf-8"))
        where = str(path.relative_to(CHECKOUT))
        found += [(where, cited[1], cited[2]) for cited in _CITATION.finditer(text)]
    return found


def test_every_document_and_section_cited_is_one_txcache_docs_prints() -> None:
    directory = docs.docs_directory()
    assert directory == CHECKOUT / "docs"
    cited = citations()
    assert len(cited) > 100, "the scan should find the citations"
    unresolved = []
    for where, name, section in cited:
        document = docs.find_document(directory, name)
        if document is None:
            unresolved.append(f"{where}: docs/{name}.md does not exist")
        elif section is not None:
            found = docs.sections(document.read_text(encoding="utf-8").splitlines())
            if not isinstance(docs.find_section(found, section), docs.Section):
                unresolved.append(f"{where}: docs/{name}.md has no one section {section!r}")
    assert not unresolved, "\n".join(unresolved)


def test_sections_are_headings_and_bold_labels_outside_code() -> None:
    lines = DOCUMENT.splitlines()
    found = {section.title: lines[section.start : section.end] for section in docs.sections(lines)}
    assert list(found) == [
        "Title",
        "First",
        "A label",
        "Bulleted",
        "Nested",
        "Next",
        "Inner",
        "Second",
    ]
    assert found["Title"] == lines, "the document's title spans all of it"
    assert found["First"][-1] == "", "down to the next heading of its level"
    assert found["Bulleted"] == ["- **Bulleted**: more", "  - **Nested.** deeper"]
    assert "# not a heading" in found["Next"], "a code block belongs to the paragraph before"
    assert found["Inner"] == ["### Inner", ""]


def test_a_section_is_named_exactly_or_by_its_start_or_by_words_only_it_contains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "library.md").write_text(DOCUMENT + "\n## Second thoughts\n", encoding="utf-8")
    monkeypatch.setattr(docs, "_CANDIDATES", (tmp_path,))
    assert main(["docs", "docs/library.md", "  SECOND "]) == 0
    assert capsys.readouterr().out == "## Second\n", "exact, case and spacing aside"
    assert main(["docs", "library", "nest"]) == 0
    assert capsys.readouterr().out == "  - **Nested.** deeper\n"
    assert main(["docs", "library.md", "sec"]) == 1
    assert "several sections match 'sec' in library.md; they are: Second; Second thoughts\n" in (
        capsys.readouterr().err
    )
    assert main(["docs", "library", "nothing"]) == 1
    assert "its chapters: First; Second; Second thoughts" in capsys.readouterr().err
    assert main(["docs", "agent"]) == 1
    assert "no document 'agent'; there are: library" in capsys.readouterr().err
    assert main(["docs"]) == 0
    assert capsys.readouterr().out.split() == ["library", "Title"]
