"""docs/decisions/: one short record per decision (Context · Decision · Consequence), every
one listed once in the index, every link between them pointing at a record that exists."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.reader import ROOT

DECISIONS = ROOT / "docs" / "decisions"
INDEX = DECISIONS / "README.md"
RECORDS = sorted(path for path in DECISIONS.glob("*.md") if path != INDEX)
SECTIONS = ["Context", "Decision", "Consequence"]
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts), 2)}


def test_there_are_records_and_no_diary_beside_them():
    assert len(RECORDS) > 200
    assert not (ROOT / "docs" / "decisions.md").exists(), "the diary was split into records"


def problems_of(record: Path) -> list[str]:
    text = record.read_text(encoding="utf-8")
    found = sections(text)
    checks = {
        "starts with its title": re.match(r"# \S", text),
        "says which area it belongs to": re.search(r"^Area: \S", text, re.M),
        "has Context, Decision and Consequence, in that order": list(found) == SECTIONS,
        "has no empty section": all(found.values()),
        "is named by a short kebab-case slug": re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", record.stem),
    }
    return [f"{record.name} {rule}" for rule, ok in checks.items() if not ok]


def test_every_record_has_a_title_an_area_and_three_sections():
    assert [problem for record in RECORDS for problem in problems_of(record)] == []


def test_problems_of_a_record_are_found(tmp_path):
    bad = tmp_path / "Bad_Name.md"
    bad.write_text("no title\n\n## Decision\n\nx\n\n## Context\n\n\n")
    assert len(problems_of(bad)) == 5


def test_the_index_lists_every_record_once():
    linked = LINK.findall(INDEX.read_text(encoding="utf-8"))
    assert sorted(linked) == sorted(path.name for path in RECORDS)


def test_links_between_records_resolve():
    broken = [
        f"{document.name} -> {target}"
        for document in [INDEX, *RECORDS]
        for target in LINK.findall(document.read_text(encoding="utf-8"))
        if not (document.parent / target).is_file()
    ]
    assert broken == []


def test_links_to_the_decisions_point_at_the_records():
    """Nothing in the docs or the README still links the diary the records replaced."""
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert "decisions.md" not in doc.read_text(encoding="utf-8"), doc.name
