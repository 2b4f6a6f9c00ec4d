"""A campaign's verdicts: every comparison its declaration lists (:mod:`.family`), read from
each point's report (``ROOT/MODEL/POINT/tune.json``, ROOT the declaration's folder) and
decided by Holm over the declared family, as one table. The words come from
:func:`~.family.decide` over the same gaps as each point's own ``summary.md``, so a comparison
reads the same word in both."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from torch_mars.train.study.family import Comparison, Decision, campaign_family, decide
from torch_mars.train.study.verdict import PairedGap


@dataclass(frozen=True)
class CampaignRow:
    """One declared comparison: its control (the strongest, once read), gap and decision."""

    comparison: Comparison
    control: str | None
    gap: PairedGap | None
    decision: Decision


def campaign_rows(declaration: Path) -> list[CampaignRow]:
    """Every comparison of the campaign declared in ``declaration``, in its order."""
    family = campaign_family(declaration)
    root = Path(declaration).parent
    gaps: dict[Comparison, PairedGap] = {}
    controls: dict[Comparison, str] = {}
    for comparison in family:
        report = root / comparison.scope / "tune.json"
        if not report.is_file():
            continue
        for entry in json.loads(report.read_text()).get("verdicts", []):
            if entry["rule"] == comparison.rule and entry.get("pairs"):
                gaps[comparison] = PairedGap(
                    entry["gap"], *entry["interval"], entry["p"], entry["pairs"]
                )
                controls[comparison] = entry["control"]
    decided = decide(family, gaps)
    return [CampaignRow(c, controls.get(c), gaps.get(c), decided[c]) for c in family]


def format_campaign_table(rows: list[CampaignRow]) -> str:
    """The verdicts table: scope, rule, strongest control, gap with its interval, p, word."""
    done = sum(row.gap is not None for row in rows)
    lines = [
        f"Holm over the declared family of {len(rows)} comparisons ({done} read, "
        f"{len(rows) - done} pending); gaps are rule - control in held-out validation loss "
        "(negative: the rule ahead), intervals with seed and data order as crossed effects.",
        "",
        "| point | rule | strongest control | gap, 95% interval | p | decision |",
        "|---|---|---|---:|---:|---|",
    ]
    for row in rows:
        c = row.comparison
        gap = row.gap.text() if row.gap else "—"
        p = f"{row.gap.p:.3g}" if row.gap else "—"
        control = row.control or "/".join(c.controls)
        lines.append(f"| {c.scope} | {c.rule} | {control} | {gap} | {p} | {row.decision.text()} |")
    return "\n".join(lines)
