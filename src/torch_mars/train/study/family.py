"""The family of comparisons a study or a campaign declares before its first run, and the one
place where a comparison's decision word is made.

Holm's correction is only as honest as its family: chosen after the results, a family can be
cut down until a gap passes. So the family is declared first and kept: a study records it in
its storage when it opens for its first run (``family.json`` beside its report is a copy to
read), a campaign in its declaration file (``--family FILE``: every comparison of every point,
each with its scope ``MODEL/POINT``), and a command line that would add a comparison to a
declared family is refused. A comparison that has not been read yet is *pending*: Holm runs
over the whole family with each pending p value taken as 1, and the words of the finished
ones are marked provisional until the rest arrive (a pending comparison holds a Holm step, so
the others' levels can only loosen as it is read).

The words (:func:`~torch_mars.train.study.verdict.holm_words`): win or loss where the
comparison's Holm-adjusted interval excludes 0, equivalent where it lies inside the declared
margin, inconclusive otherwise; the interval printed beside a word is the one it was read
from.

Every file that prints a decision (a study's ``summary.md``, the campaign's ``map.md``,
docs/results.md, the README) takes it from :func:`decide` over the same family and gaps, so
the same comparison reads the same word everywhere.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_mars.train.compare import SAME_COST_CONTROLS
from torch_mars.train.study.two_stage import Design, Reading, Stage, read_family
from torch_mars.train.study.verdict import EQUIVALENCE_MARGIN, PairedGap, holm_words


@dataclass(frozen=True)
class Comparison:
    """A MARS rule against the strongest (lowest held-out mean) of its ``controls``, at
    ``scope`` (``""``: the study's own; ``MODEL/POINT`` in a campaign)."""

    rule: str
    controls: tuple[str, ...]
    scope: str = ""

    @property
    def key(self) -> str:
        where = f"{self.scope}: " if self.scope else ""
        return f"{where}{self.rule} vs {'/'.join(self.controls)}"

    def record(self) -> dict[str, Any]:
        return {"scope": self.scope, "rule": self.rule, "controls": list(self.controls)}

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> Comparison:
        return cls(record["rule"], tuple(record["controls"]), record.get("scope", ""))


@dataclass(frozen=True)
class Decision:
    """A comparison's word: ``win`` (the rule ahead), ``loss``, ``equivalent``,
    ``inconclusive``, or ``pending`` (not read yet); ``provisional`` while another comparison of
    the family is pending; ``low``, ``high``: the adjusted interval the word is read from, at
    ``level`` (NaN where none)."""

    word: str
    provisional: bool
    low: float = math.nan
    high: float = math.nan
    level: float = math.nan

    def text(self) -> str:
        return f"{self.word} (provisional)" if self.provisional else self.word

    def interval_text(self) -> str:
        """The adjusted interval, ``[low, high] at 99.50%``; empty where none was read."""
        if math.isnan(self.low):
            return ""
        return f"[{self.low:+.4f}, {self.high:+.4f}] at {1 - self.level:.2%}"


def study_family(optimizers: Sequence[str]) -> list[Comparison]:
    """A study's own comparisons: each MARS rule it tunes against the controls of its cost
    that it tunes too."""
    family = []
    for rule, controls in SAME_COST_CONTROLS.items():
        ran = tuple(c for c in controls if c in optimizers)
        if rule in optimizers and ran:
            family.append(Comparison(rule, ran))
    return family


# A control that is the rule itself with gamma fixed at G (``RULE@gamma=G``), every other
# dimension at the rule's winner and its lr re-profiled: at G = 0 the rule without its
# correction (the correction's worth, a comparison campaign-4 declares at every point); at
# another G a gamma a user could take everywhere (campaign-4's gamma to take).
AT_GAMMA = "@gamma="
WITHOUT_CORRECTION = f"{AT_GAMMA}0"


def fixed_gamma(control: str, rule: str) -> float | None:
    """G where ``control`` is ``rule`` at a fixed gamma (``RULE@gamma=G``, G finite and not
    negative); None for any other control."""
    if not control.startswith(rule + AT_GAMMA):
        return None
    try:
        gamma = float(control.removeprefix(rule + AT_GAMMA))
    except ValueError:
        return None
    return gamma if math.isfinite(gamma) and gamma >= 0 else None


def _check_comparison(index: int, comparison: Comparison, path: Path) -> None:
    """Refuse a declared comparison whose rule is no MARS rule or whose control is neither a
    same-cost control of it nor the rule at a fixed gamma (:func:`fixed_gamma`)."""
    where = f"--family {path}: comparison {index + 1} ({comparison.key})"
    if comparison.rule not in SAME_COST_CONTROLS:
        raise ValueError(
            f"{where} names the rule {comparison.rule!r}, not a MARS rule "
            f"({', '.join(SAME_COST_CONTROLS)})"
        )
    allowed = SAME_COST_CONTROLS[comparison.rule]
    unknown = [
        c
        for c in comparison.controls
        if c not in allowed and fixed_gamma(c, comparison.rule) is None
    ]
    if unknown or not comparison.controls:
        raise ValueError(
            f"{where} names the control(s) {unknown or 'none'}; {comparison.rule}'s are "
            f"{', '.join(allowed)}, or itself at a fixed gamma ({comparison.rule}{AT_GAMMA}G, "
            "G >= 0)"
        )


def campaign_family(path: Path) -> list[Comparison]:
    """The family a campaign's declaration file lists (its ``family``: scope, rule, controls),
    checked when read: the file a regular file of JSON, each rule a MARS rule and each control
    one of its same-cost controls or itself without the correction, every error one line. A
    comparison listed more than once counts once (Holm's family is a set), said on stderr."""
    path = Path(path)
    if not path.is_file():
        kind = "missing" if not os.path.lexists(path) else "not a regular file (a FIFO, device, "
        kind += "" if kind == "missing" else "folder or dangling link)"
        raise ValueError(f"--family {path}: {kind}; a family is a JSON file")
    try:
        declared = json.loads(path.read_text())
        entries = [
            Comparison(e["rule"], tuple(e["controls"]), f"{e['model']}/{e['point']}")
            for e in declared["family"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--family {path}: not a campaign declaration ({error})") from None
    for index, comparison in enumerate(entries):
        _check_comparison(index, comparison, path)
    family = list(dict.fromkeys(entries))
    if len(family) < len(entries):
        twice = sorted({c.key for c in entries if entries.count(c) > 1})
        print(
            f"--family {path}: {'; '.join(twice)} listed more than once, counted once",
            file=sys.stderr,
        )
    return family


def scope_of(study_dir: Path, family_file: Path) -> str:
    """A campaign study's scope: its folder relative to the declaration's (``MODEL/POINT``)."""
    try:
        return Path(study_dir).resolve().relative_to(Path(family_file).resolve().parent).as_posix()
    except ValueError as error:
        raise ValueError(
            f"--family {family_file}: the study folder {study_dir} is not inside the campaign's"
        ) from error


def family_records(family: Sequence[Comparison]) -> list[dict[str, Any]]:
    return [c.record() for c in family]


def check_holds(declared: Sequence[Comparison], wanted: Sequence[Comparison], name: str) -> None:
    """Refuse a command line whose comparisons are not all in the family ``declared`` before
    the study's first run (fewer are fine: those left out stay pending)."""
    extra = [c.key for c in wanted if c not in declared]
    if extra:
        raise ValueError(
            f"study {name!r} declared its family before its first run "
            f"({'; '.join(c.key for c in declared) or 'no comparison'}); this command line adds "
            f"{'; '.join(extra)}: a family does not change mid-study (give another --name)"
        )


def decide(
    family: Sequence[Comparison],
    gaps: Mapping[Comparison, PairedGap],
    alpha: float = 0.05,
    margin: float = EQUIVALENCE_MARGIN,
    design: Design | None = None,
) -> dict[Comparison, Decision]:
    """Each comparison's word by Holm's step-down correction at ``alpha`` over the whole
    ``family`` (:func:`~torch_mars.train.study.verdict.holm_words`), a comparison without a gap
    pending (its p taken as 1). With a two-look ``design`` (a campaign that declares one) every
    word is read by :func:`~torch_mars.train.study.two_stage.read_family` from each gap's
    stages, its alpha and margin the design's."""
    duplicated = [c.key for c in family if list(family).count(c) > 1]
    if duplicated:
        raise ValueError(f"the family lists {sorted(set(duplicated))} more than once")
    pending = [c for c in family if c not in gaps]
    if design is not None:
        return _decide_in_looks(family, gaps, design, pending)
    stand_in = PairedGap(0.0, 0.0, 0.0, 1.0, 0)
    words = holm_words([gaps.get(c, stand_in) for c in family], alpha, margin)
    return {
        c: Decision(
            "pending" if c in pending else w.word,
            bool(pending) and c not in pending,
            w.low,
            w.high,
            w.level,
        )
        for c, w in zip(family, words, strict=True)
    }


def _reading(comparison: Comparison, gap: PairedGap | None) -> Reading | None:
    """A gap as a two-look reading: its stages, or its whole as one look; None where it has
    none to read (pending, or not finite: a diverged run)."""
    if gap is None or not math.isfinite(gap.mean) or gap.pairs < 2:
        return None
    if gap.stages:
        return Reading(comparison.key, tuple(Stage(*stage) for stage in gap.stages))
    if math.isnan(gap.error):
        return None
    return Reading(comparison.key, (Stage(gap.mean, gap.error, gap.pairs),))


def _decide_in_looks(
    family: Sequence[Comparison],
    gaps: Mapping[Comparison, PairedGap],
    design: Design,
    pending: Sequence[Comparison],
) -> dict[Comparison, Decision]:
    readings = [_reading(c, gaps.get(c)) for c in family]
    verdicts = read_family(readings, design)
    decided = {}
    for comparison, verdict in zip(family, verdicts, strict=True):
        provisional = bool(pending) and comparison not in pending
        if verdict is None:
            word = "pending" if comparison in pending else "inconclusive"
            decided[comparison] = Decision(word, provisional)
        else:
            decided[comparison] = Decision(
                verdict.word, provisional, verdict.low, verdict.high, verdict.level
            )
    return decided
