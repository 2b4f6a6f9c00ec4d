"""Every relative link in the README and the docs points at a file that exists and, where it
names a heading, at a heading that exists (GitHub's anchors: lower case, punctuation dropped,
spaces as hyphens, ``-1``, ``-2`` for repeats)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(markdown: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", markdown.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(markdown: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(FENCE.sub("", markdown.read_text()))
        if not re.match(r"[a-z]+:", target)
    ]


@pytest.mark.parametrize("markdown", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_relative_link_reaches_its_file_and_heading(markdown):
    broken = []
    for target in links(markdown):
        path, _, anchor = target.partition("#")
        file = (markdown.parent / path).resolve() if path else markdown
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, broken


def test_anchors_follow_githubs_rule(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# The map through tune (issue #36)\n## A `code` head, twice\n## A `code` head, twice\n"
    )
    assert anchors(page) == {
        "the-map-through-tune-issue-36",
        "a-code-head-twice",
        "a-code-head-twice-1",
    }
