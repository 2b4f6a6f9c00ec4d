"""Every stored verdict says one of the four words (win, loss, equivalent, inconclusive) beside
the interval it is read from: no report, table or page that the repository holds writes "tie"
or "level" for a gap not shown different, whichever rule of its day first wrote it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark_scripts import tracked

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"win", "loss", "equivalent", "inconclusive"}
# a verdict written as a word of no rule: a bold word, a table cell, "a tie", "both ties"
OLD_WORD = re.compile(
    r"\*\*(tie|level)\*\*|\|\s*(tie|level)\s*(\(provisional\))?\s*\||\b(a|both|as)\s+ties?\b"
)


def decisions(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == "decision" and isinstance(v, str)]
        return found + [d for v in node.values() for d in decisions(v)]
    if isinstance(node, list):
        return [d for v in node for d in decisions(v)]
    return []


def test_every_stored_reports_decision_is_one_of_the_four_words():
    reports = [ROOT / f for f in tracked("benchmarks/results/*tune.json")]
    assert reports
    wrong = {
        str(path.relative_to(ROOT)): word
        for path in reports
        for word in decisions(json.loads(path.read_text()))
        if word not in WORDS
    }
    assert not wrong, wrong


def test_no_stored_table_or_page_writes_a_verdict_word_outside_the_four():
    pages = [ROOT / f for f in tracked("benchmarks/results/*.md", "docs/*.md", "README.md")]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
        for path in pages
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if OLD_WORD.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_pattern_catches_the_old_words_and_not_todays():
    assert OLD_WORD.search("held out, **tie**.")
    assert OLD_WORD.search("| 0.101 | tie | 80 |")
    assert OLD_WORD.search("p 0.15: both ties. Here")
    assert not OLD_WORD.search("| 0.101 | inconclusive | 80 | the design level |")
