"""The gamma to take, read on pairs (issue "The map, second stage", item 3): at each point of a
campaign and each MARS rule its declaration names, the rule's winner against the same winner
at the declared candidate gamma (its lr re-profiled), by the campaign's two-look design, Holm
over the comparisons so realised. ``gamma_to_take.py`` tables it; ``campaign.py`` plans a
second look where one look read neither side of the margin."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from torch_mars.train.study.family import AT_GAMMA, Comparison, Decision, decide
from torch_mars.train.study.family_reads import stored_verdicts
from torch_mars.train.study.tune_record import read_tune_record
from torch_mars.train.study.two_stage import Design, design_of
from torch_mars.train.study.verdict import PairedGap


def winner_gamma(root: Path, label: str, rule: str) -> float | None:
    """The gamma of the setting ``rule`` is read at (its best-known) at the campaign point
    ``root/label``; None until the point's report has it."""
    report = root / label / "tune.json"
    ran = read_tune_record(report).entry(rule) if report.is_file() else None
    if ran is None or not ran.finished or not ran.winner:
        return None
    return float(ran.winner["gamma"])


@dataclass(frozen=True)
class GammaRead:
    """One point and rule: the winner's gamma (None until read), the candidate, and where the
    winner takes another gamma the comparison winner - candidate with its gap (None until
    both studies read their pairs) and its decision over the realised family."""

    label: str
    rule: str
    candidate: float
    own: float | None
    comparison: Comparison | None = None
    gap: PairedGap | None = None
    decision: Decision | None = None

    def state(self, margin: float) -> str:
        """holds (by construction where the winner takes the candidate, or the adjusted
        interval above -margin), fails (below it), not shown either way, or pending."""
        if self.comparison is None:
            return "holds"
        if self.gap is None or self.decision is None:
            return "pending"
        if self.decision.low > -margin:
            return "holds"
        return "fails" if self.decision.high < -margin else "not shown either way"


def gamma_reads(path: Path) -> tuple[list[GammaRead], Design]:
    """Every point and rule of the gamma-to-take declaration at ``path``, in its campaign's
    order, read from the reports of its points and their studies at each candidate; with the
    campaign's design (a ValueError where it declares none)."""
    declared = json.loads(path.read_text())
    campaign_file = path.parent / declared["campaign"]
    campaign = json.loads(campaign_file.read_text())
    design = design_of(campaign)
    if design is None:
        raise ValueError(f"{campaign_file}: declares no two-look design to read the pairs by")
    root = campaign_file.parent
    cases = []
    for entry in campaign["points"]:
        label = f"{entry['model']}/{entry['point']}"
        for rule, gamma in declared["candidates"].items():
            if rule not in entry["optimizers"]:
                continue
            own = winner_gamma(root, label, rule)
            held = own is not None and math.isclose(own, gamma)
            comparison = None if held else Comparison(rule, (f"{rule}{AT_GAMMA}{gamma:g}",), label)
            cases.append(GammaRead(label, rule, gamma, own, comparison))
    family = [case.comparison for case in cases if case.comparison is not None]
    read = stored_verdicts(root, family, first=design.first)
    decided = decide(family, {c: gap for c, (gap, _) in read.items()}, design=design)
    return [
        case
        if case.comparison is None
        else GammaRead(
            *(case.label, case.rule, case.candidate, case.own, case.comparison),
            read.get(case.comparison, (None, None))[0],
            decided[case.comparison],
        )
        for case in cases
    ], design
