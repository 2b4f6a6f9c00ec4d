"""A declared family's comparisons read across the studies of its points (``tune --family
FILE``, each point's study in ``ROOT/MODEL/POINT``, ROOT the declaration's folder): each
comparison's gap read again from its point's report (``tune.json``), its control
``RULE@gamma=G`` from the study beside it, and every word decided by Holm over the whole family
(:func:`~.family.decide`), so that a point's own ``summary.md`` and a table of all of them read
the same word."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from torch_mars.train.study.family import (
    Comparison,
    Decision,
    campaign_family,
    decide,
    fixed_gamma,
)
from torch_mars.train.study.pairs import diverged, same_machine
from torch_mars.train.study.tune_record import (
    OptimizerEntry,
    TuneRecord,
    VerdictEntry,
    read_tune_record,
)
from torch_mars.train.study.two_stage import design_of
from torch_mars.train.study.verdict import PairedGap, gap_of_pairs


@dataclass(frozen=True)
class CampaignRow:
    """One declared comparison: its control (the strongest, once read), gap and decision, and
    from its point's report each side's diverged runs on the pairs and B (the search's lean;
    None where the report has none)."""

    comparison: Comparison
    control: str | None
    gap: PairedGap | None
    decision: Decision
    diverged: tuple[int, int] | None = None
    bias: float | None = None


def fixed_gamma_folder(root: Path, scope: str, rule: str, gamma: float) -> Path:
    """Where a campaign point's ``rule`` is read at ``gamma`` with its lr re-profiled (the
    control ``RULE@gamma=G``; at 0 the correction's worth): beside the point's study."""
    return Path(root) / f"{scope}.gamma={gamma:g}.{rule}"


def _report_finals(report: Path) -> tuple[TuneRecord, dict[str, OptimizerEntry]]:
    """A study's report and each optimizer's entry in it."""
    stored = read_tune_record(report)
    return stored, {o.optimizer: o for o in stored.optimizers}


def _read_pairs(
    rule: OptimizerEntry | None, control: OptimizerEntry | None
) -> tuple[list[float], list[float], list[tuple[int, int]], list[bool]] | None:
    """Two sides' held-out finals on the pairs both read (the shorter list of pairs, where it
    begins the longer: a second look widens some studies' winners only) and those pairs,
    leaving out each pair whose sides trained on two machines or thread counts
    (:func:`~.pairs.same_machine`; a record before 2026-12-07 names no machines and is read
    whole), with which of the pairs both read are kept; None where they are not all read or
    the pairs differ."""
    if rule is None or control is None:
        return None
    (rule_finals, pairs), (control_finals, control_pairs) = rule.heldout, control.heldout
    both = min(len(pairs), len(control_pairs))
    if len(rule_finals) != len(pairs) or len(control_finals) != len(control_pairs) or both < 2:
        return None
    pairs, rule_finals, control_finals = pairs[:both], rule_finals[:both], control_finals[:both]
    if pairs != control_pairs[:both] or None in rule_finals + control_finals:
        return None
    kept = [True] * both
    machines = rule.heldout_machines[:both], control.heldout_machines[:both]
    if all(len(m) == both for m in machines):
        kept = same_machine(*machines)
    return (
        [v for v, k in zip(rule_finals, kept, strict=True) if k],
        [v for v, k in zip(control_finals, kept, strict=True) if k],
        [tuple(p) for p, k in zip(pairs, kept, strict=True) if k],
        kept,
    )


def _gap_of(
    rule: OptimizerEntry | None, control: OptimizerEntry | None, first: int
) -> PairedGap | None:
    """The gap of two sides on the pairs :func:`_read_pairs` reads, its first look the kept
    ones of the first ``first``; None where fewer than two are kept."""
    read = _read_pairs(rule, control)
    if read is None or len(read[2]) < 2:
        return None
    rule_finals, control_finals, pairs, kept = read
    return gap_of_pairs(rule_finals, control_finals, pairs, first=sum(kept[:first]))


def stored_verdicts(
    root: Path, family: list[Comparison], skip_scope: str = "", first: int = 0
) -> dict[Comparison, tuple[PairedGap, str]]:
    """Each comparison of ``family`` read where its point's study reported it
    (``root/SCOPE/tune.json``): its gap and the control it was read against; a point with no
    report yet, or one that read no gap, is left out (pending), and so is ``skip_scope``. The
    gap is read again from the report's held-out finals and pairs (:func:`gap_of_pairs`), so
    that a report written before it stored the gap's standard error reads at any level. A
    control ``RULE@gamma=G`` is read from its own study's report (:func:`fixed_gamma_folder`)
    on the point's pairs."""
    read: dict[Comparison, tuple[PairedGap, str]] = {}
    for comparison in family:
        report = Path(root) / comparison.scope / "tune.json"
        if comparison.scope == skip_scope or not report.is_file():
            continue
        stored, finals = _report_finals(report)
        (control,) = comparison.controls[:1] or ("",)
        gamma = fixed_gamma(control, comparison.rule)
        if gamma is not None:
            other = fixed_gamma_folder(root, comparison.scope, comparison.rule, gamma)
            if not (other / "tune.json").is_file() or comparison.rule not in finals:
                continue
            _, without = _report_finals(other / "tune.json")
            gap = _gap_of(finals[comparison.rule], without.get(comparison.rule), first)
            if gap is not None:
                read[comparison] = (gap, control)
            continue
        for entry in stored.verdicts:
            if entry.rule != comparison.rule or not entry.pairs:
                continue
            if entry.control not in comparison.controls:
                continue
            gap = _gap_of(finals.get(entry.rule), finals.get(entry.control), first)
            read[comparison] = (gap or _stored_gap(report, entry), entry.control)
    return read


def _stored_gap(report: Path, entry: VerdictEntry) -> PairedGap:
    """A verdict entry's gap as its report stored it, checked (one line naming the file where
    its gap, interval or p is missing or not a number)."""
    low_high = entry.interval
    numbers = [entry.gap, entry.p, *(low_high if isinstance(low_high, list) else [None])]
    if len(numbers) != 4 or not all(isinstance(v, int | float) for v in numbers):
        raise ValueError(f"{report}: a verdict whose gap, interval or p is not numbers")
    return PairedGap(entry.gap, *low_high, entry.p, int(entry.pairs))


def campaign_rows(declaration: Path) -> list[CampaignRow]:
    """Every comparison of the campaign declared in ``declaration``, in its order."""
    family = campaign_family(declaration)
    design = design_of(json.loads(Path(declaration).read_text()))
    first = design.first if design is not None else 0
    read = stored_verdicts(Path(declaration).parent, family, first=first)
    decided = decide(family, {c: gap for c, (gap, _) in read.items()}, design=design)
    rows = []
    for comparison in family:
        gap, control = read.get(comparison, (None, None))
        lost, bias = comparison_notes(Path(declaration).parent, comparison, control)
        rows.append(CampaignRow(comparison, control, gap, decided[comparison], lost, bias))
    return rows


def comparison_notes(
    root: Path, comparison: Comparison, control: str | None
) -> tuple[tuple[int, int] | None, float | None]:
    """A read comparison's diverged runs per side (:func:`~.pairs.diverged`) on the pairs its
    gap read, and B: as its point's report recorded them, or for a control at a fixed gamma
    counted from the two studies' held-out finals on the pairs both read (B: None, the same
    search's winner on both sides); ``(None, None)`` where it is not read."""
    report = Path(root) / comparison.scope / "tune.json"
    if control is None or not report.is_file():
        return None, None
    gamma = fixed_gamma(control, comparison.rule)
    if gamma is not None:
        other = fixed_gamma_folder(root, comparison.scope, comparison.rule, gamma) / "tune.json"
        if not other.is_file():
            return None, None
        read = _read_pairs(
            _report_finals(report)[1].get(comparison.rule),
            _report_finals(other)[1].get(comparison.rule),
        )
        if read is None:
            return None, None
        return (len(diverged(read[0])), len(diverged(read[1]))), None
    for entry in read_tune_record(report).verdicts:
        if entry.rule == comparison.rule and entry.control == control:
            lost, bias = entry.diverged, entry.bias
            return (
                tuple(lost) if isinstance(lost, list) and len(lost) == 2 else None,  # type: ignore[return-value]
                bias if isinstance(bias, int | float) else None,
            )
    return None, None
