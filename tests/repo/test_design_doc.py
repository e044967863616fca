"""docs/design.md stays whole and citable: its sections are numbered in order, each carries a
named anchor that the code and the docs cite (``docs/design.md#<name>``, which survives a
renumbering), every citation resolves, and the parts a reader of the code needs are there."""

from __future__ import annotations

import itertools
import re

from tests.conftest import ROOT

DESIGN = ROOT / "docs" / "design.md"
CITING = ("shared", "functions", "tests", "docs", "bench", "infra", "workflows", "README.md", "Makefile")
CITATION = re.compile(r"design\.md#([a-z0-9-]+)")
ANCHOR = re.compile(r'^<a id="([a-z0-9-]+)"></a>$')
HEADING = re.compile(r"^(##|###) (\d+)\.(\d*) (.+)$")


def _sections() -> list[tuple[str, int, int | None, str]]:
    """(anchor, major, minor or None, title) of every numbered heading, in order."""
    lines = DESIGN.read_text().splitlines()
    found = []
    for before, line in itertools.pairwise(lines):
        heading = HEADING.match(line)
        if line.startswith("## ") or line.startswith("### "):
            assert heading, f"unnumbered section: {line!r}"
            anchor = ANCHOR.match(before)
            assert anchor, f"section without its named anchor on the line before: {line!r}"
            level, major, minor, title = heading.groups()
            assert (level == "##") == (minor == ""), f"a section's number does not match its level: {line!r}"
            found.append((anchor.group(1), int(major), int(minor) if minor else None, title))
    return found


def _cited() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    for top in CITING:
        root = ROOT / top
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            if path.suffix not in {".py", ".md", ".yaml", ".tf", ".sh", ""} or "__pycache__" in path.parts:
                continue
            for name in CITATION.findall(path.read_text(errors="replace")):
                cited.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return cited


def test_the_sections_are_numbered_in_order() -> None:
    expected_major, expected_minor = 0, 0
    for _, major, minor, title in _sections():
        if minor is None:
            expected_major, expected_minor = expected_major + 1, 0
            assert major == expected_major, title
        else:
            expected_minor += 1
            assert (major, minor) == (expected_major, expected_minor), title


def test_every_citation_of_the_design_resolves_to_a_named_section() -> None:
    anchors = {anchor for anchor, *_ in _sections()}
    cited = _cited()
    assert cited, "the code cites the design by name"
    missing = {name: sorted(where) for name, where in cited.items() if name not in anchors}
    assert not missing, f"citations of sections design.md does not have: {missing}"


def test_the_design_covers_what_a_reader_of_the_code_needs() -> None:
    titles = " | ".join(title.lower() for *_, title in _sections())
    for part in ("teams", "run policies", "the workflow and the stage function", "stand-ins", "admission"):
        assert part in titles, part
