"""The report of a ``torch-mars tune`` study: each optimizer's outcome (trials, winner,
selection and held-out finals, finalists, curves), the verdicts of the declared family with
Holm, the answer first in words, the tables, the tuning-curve figure, ``summary.md`` and
``tune.json``; read from the study's trials alone, training nothing. The plan it reports on is
:mod:`.tune`'s."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from torch_mars.atomic_files import write_text_atomically
from torch_mars.train.compare import mean_std_text
from torch_mars.train.study.curves import best_so_far, expected_best_curve
from torch_mars.train.study.engine import (
    AskedFor,
    RunId,
    failed_runs,
    finished_results,
    run_of,
)
from torch_mars.train.study.family import (
    Comparison,
    Decision,
    decide,
    family_records,
    study_family,
)
from torch_mars.train.study.family_reads import stored_verdicts
from torch_mars.train.study.pairs import DIVERGED_ABOVE_MEDIAN, diverged, same_machine
from torch_mars.train.study.profiled import ProfiledSearch, ProfiledState
from torch_mars.train.study.reuse import COPIED_ATTR
from torch_mars.train.study.selection import Selection, badness
from torch_mars.train.study.space import (
    LADDERS,
    Fixed,
    Ladders,
    Point,
    hyperparams_of,
    ladder_of,
    parse_point_key,
    point_key,
    split_extra,
    values_of,
)
from torch_mars.train.study.store import owner_of
from torch_mars.train.study.tune import (
    DEFAULT_SEARCH,
    TunePlan,
    declared_family,
    finalists_drawn,
)
from torch_mars.train.study.tune_record import TuneRecord, write_tune_record
from torch_mars.train.study.two_stage import Design, design_of
from torch_mars.train.study.verdict import (
    PairedGap,
    gap_of_pairs,
    independent_pairs,
    student_t_quantile,
)
from torch_mars.train.task import task_of

# The tuning curve's rows in the report: the expected best after this many trials.
CURVE_ROWS = (1, 2, 5, 10, 20, 40, 80)


def sibling_gaps(
    study_dir: Path, family: Sequence[Comparison], scope: str, first: int = 0
) -> dict[Comparison, PairedGap]:
    """The gaps of the family's comparisons at other scopes, from their studies' reports
    (``ROOT/SCOPE/tune.json``, ROOT the campaign folder ``scope`` is relative to); a scope with
    no report yet is pending. ``first``: a two-look design's first pairs."""
    if not scope:
        return {}
    root = Path(study_dir).resolve().parents[len(Path(scope).parts) - 1]
    read = stored_verdicts(root, list(family), skip_scope=scope, first=first)
    return {comparison: gap for comparison, (gap, _) in read.items()}


# ---------------------------------------------------------------- the report


@dataclass
class OptimizerOutcome:
    """One optimizer's tuning: its winner, its trials' selection scores in the order the search
    ran them, the winner's finals on every choosing seed (the selection's, then the
    finalists') and on the held-out pairs (NaN where a run has not finished), its finalists
    ``(point, search score, mean over every choosing seed)`` best first, its rounds, and its
    lr profiles."""

    optimizer: str
    finished: bool
    winner: Point
    trial_scores: list[float]
    selection_finals: list[float]
    heldout_finals: list[float]
    rounds: int
    lr_profiles: list[list[tuple[float, float]]]
    finalists: list[tuple[Point, float, float]] = dataclasses.field(default_factory=list)
    winner_score: float = math.nan  # on the selection seeds, as its search scored it
    runs: frozenset[RunId] = frozenset()  # the finished runs this outcome reads
    # the dimensions its trials scored away from its first start, of all it has
    moved: tuple[str, ...] = ()
    dimensions: tuple[str, ...] = ()
    # the runs it reads that failed, with their messages (each scored worst, never averaged)
    failures: dict[RunId, str] = dataclasses.field(default_factory=dict)
    # each finished held-out run's evaluation curve: ``(step, metric)`` points in step order
    heldout_curves: list[list[tuple[float, float]]] = dataclasses.field(default_factory=list)
    # per dimension, how many values its trials scored it at
    values_scored: dict[str, int] = dataclasses.field(default_factory=dict)
    # the machine (owner record's device) each held-out run trained on, "" where unknown
    heldout_machines: list[str] = dataclasses.field(default_factory=list)
    # where peers' winners were read: the search's own winner and its mean over every choosing
    # run, each ``(peer, point, mean over every choosing run)``, and the peer whose setting is
    # the best-known (the winner here), None where the search's own is
    own_winner: Point = dataclasses.field(default_factory=dict)
    own_score: float = math.nan
    peer_points: list[tuple[str, Point, float]] = dataclasses.field(default_factory=list)
    best_known_from: str | None = None

    @property
    def shortfall(self) -> float:
        """How far the search's own winner fell short of the best-known setting, on the
        choosing runs (0 where it is the best-known; NaN where no peer was read)."""
        if not self.peer_points:
            return math.nan
        best = min([self.own_score, *(s for _, _, s in self.peer_points)], key=badness)
        return self.own_score - best

    @property
    def moved_text(self) -> str:
        """``"6 of 7 (lr, beta1, ...)"``, or ``"only lr"``."""
        if self.moved == ("lr",) and len(self.dimensions) > 1:
            return "only lr"
        return f"{len(self.moved)} of {len(self.dimensions)}"

    def heldout_extremes(
        self, pairs: Sequence[tuple[int, int]]
    ) -> tuple[tuple[float, tuple[int, int]] | None, int]:
        """The worst held-out run ``(final, (seed, data order))`` and how many held-out runs lie
        more than 3 standard deviations from their median (None, 0 until all finished)."""
        if not self.heldout_complete:
            return None, 0
        finals = self.heldout_finals
        worst = max(zip(finals, pairs, strict=True), key=lambda fp: fp[0])
        spread = statistics.stdev(finals) if len(finals) > 1 else 0.0
        middle = statistics.median(finals)
        far = sum(abs(v - middle) > 3 * spread for v in finals) if spread else 0
        return worst, far

    def heldout_states(self, pairs: Sequence[tuple[int, int]]) -> list[str]:
        """Each held-out run's state: ``finished``, ``diverged`` (finished, not finite),
        ``failed`` (raised; scored worst and not retried) or ``waiting`` (not trained yet)."""
        if not self.winner:
            return ["waiting"] * len(pairs)
        key = point_key(self.winner)
        states = []
        for (seed, data), value in zip(pairs, self.heldout_finals, strict=True):
            run = (self.optimizer, key, seed, data)
            if run in self.failures:
                states.append("failed")
            elif math.isfinite(value):
                states.append("finished")
            elif run in self.runs:
                states.append("diverged")
            else:
                states.append("waiting")
        return states

    def lost_text(self, pairs: Sequence[tuple[int, int]]) -> str:
        """The held-out runs this winner lost, named: ``1 diverged (seed 3, data order 1); 1
        failed (seed 4, data order 2: RuntimeError ...)``; empty where none."""
        states = self.heldout_states(pairs)
        key = point_key(self.winner) if self.winner else ""
        parts = []
        for state in ("diverged", "failed"):
            named = []
            for (seed, data), s in zip(pairs, states, strict=True):
                if s != state:
                    continue
                message = self.failures.get((self.optimizer, key, seed, data))
                named.append(
                    f"seed {seed}, data order {data}" + (f": {message}" if message else "")
                )
            if named:
                parts.append(f"{len(named)} {state} ({'; '.join(named)})")
        return "; ".join(parts)

    @property
    def heldout_complete(self) -> bool:
        return bool(self.heldout_finals) and not any(math.isnan(v) for v in self.heldout_finals)

    @property
    def heldout_mean(self) -> float:
        return statistics.fmean(self.heldout_finals) if self.heldout_complete else math.nan

    @property
    def pruned(self) -> int:
        """Its trials whose run was pruned (scored worst: infinity)."""
        return sum(score == math.inf for score in self.trial_scores)

    @property
    def curve(self) -> list[float]:
        """The expected best selection score after k trials; a pruned trial counts as the
        worst finished one (it was worse than the median when it stopped: never the best of
        several, and no divergence)."""
        finite = [s for s in self.trial_scores if math.isfinite(s)]
        worst = max(finite, default=math.nan)
        return expected_best_curve([worst if s == math.inf else s for s in self.trial_scores])


def outcomes(plan: TunePlan, trials: Sequence[optuna.trial.FrozenTrial]) -> list[OptimizerOutcome]:
    """Each optimizer's outcome from the study's trials (as far as it has got)."""
    finished = finished_results(trials)
    failed = failed_runs(trials)
    curves = curves_of(trials, task_of(plan.base).metric.key)
    machines = machines_of(trials)
    found = []
    for search in plan.searches():
        results = AskedFor(finished)
        state: ProfiledState = search.replay(results)
        point, own = state.point, search.optimizer
        search_scores = {point_key(p): score for p, score in state.trials}

        def final(
            seed: int, data_seed: int, point: Point = point, s=search, results=results
        ) -> float:
            return results.get(s.run(point, seed, data_seed), math.nan)

        found.append(
            OptimizerOutcome(
                optimizer=search.optimizer,
                finished=state.finished,
                winner=point,
                trial_scores=[score for _, score in state.trials],
                selection_finals=[final(s, d) for s, d in plan.selection.choosing_pairs()]
                if point
                else [],
                heldout_finals=[final(s, d) for s, d in plan.selection.heldout_pairs()]
                if point
                else [],
                rounds=state.rounds,
                lr_profiles=state.lr_profiles,
                finalists=[
                    (p, _selection_score(search, results, p, search_scores), final)
                    for p, final in state.finalists
                ],
                winner_score=_selection_score(search, results, point, search_scores),
                runs=frozenset(r for r in results.asked & finished.keys() if r[0] == own),
                moved=moved_dimensions(search.starts[0], [p for p, _ in state.trials]),
                values_scored={
                    d: len({p[d] for p, _ in state.trials if d in p}) for d in search.dimensions
                },
                dimensions=search.dimensions,
                failures={
                    r: failed[r] for r in sorted(results.asked & failed.keys()) if r[0] == own
                },
                heldout_curves=[
                    curves[run]
                    for seed, data in plan.selection.heldout_pairs()
                    if point and (run := search.run(point, seed, data)) in curves
                ],
                heldout_machines=[
                    machines.get(search.run(point, seed, data), "")
                    for seed, data in plan.selection.heldout_pairs()
                ]
                if point
                else [],
                own_winner=state.own_point,
                own_score=state.own_score,
                peer_points=state.peer_points,
                best_known_from=state.best_known_from,
            )
        )
    return found


def _selection_score(
    search: ProfiledSearch,
    results: Mapping[RunId, float],
    point: Point,
    search_scores: Mapping[str, float],
) -> float:
    """``point``'s score on the selection seeds: as its search scored it, or, for a finalist
    no trial scored (the later surface designs' lr step down), from its runs there (NaN
    until they have finished)."""
    if point_key(point) in search_scores:
        return search_scores[point_key(point)]
    if not point or any(search.run(point, s) not in results for s in search.selection.seeds):
        return math.nan
    return search.score(results, point)


def machines_of(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[RunId, str]:
    """The machine each finished run trained on: its owner record's device."""
    machines = {}
    for trial in trials:
        run = run_of(trial)
        if trial.state == optuna.trial.TrialState.COMPLETE and run:
            device = owner_of(trial).get("device")
            machines[run] = device if isinstance(device, str) else ""
    return machines


def curves_of(
    trials: Sequence[optuna.trial.FrozenTrial], metric: str
) -> dict[RunId, list[tuple[float, float]]]:
    """Each run's stored evaluation curve (the runs a study keeps them for: its held-out ones)
    as ``(step, metric)`` points, the first column being the step (or epoch)."""
    curves = {}
    for trial in trials:
        curve, run = trial.user_attrs.get("curve"), run_of(trial)
        if not isinstance(curve, dict) or run is None or metric not in curve.get("columns", []):
            continue
        at = curve["columns"].index(metric)
        rows = curve.get("rows", [])
        numeric = (int, float)
        if not isinstance(rows, list) or not all(
            isinstance(row, list)
            and len(row) == len(curve["columns"])
            and all(v is None or isinstance(v, numeric) for v in row)
            for row in rows
        ):
            raise ValueError(
                f"trial {trial.number} of the study stores a curve whose rows are not rows of "
                f"{len(curve['columns'])} numbers: the study's data were changed outside tune"
            )
        points = [(row[0], row[at]) for row in rows if row[at] is not None]
        curves[run] = sorted(points)
    return curves


def moved_dimensions(start: Point, points: Sequence[Point]) -> tuple[str, ...]:
    """The dimensions of ``start`` that some of ``points`` score at another value."""
    return tuple(d for d in start if any(p[d] != start[d] for p in points))


def read_trials(
    found: Sequence[OptimizerOutcome], trials: Sequence[optuna.trial.FrozenTrial]
) -> list[optuna.trial.FrozenTrial]:
    """The finished trials of the runs ``found`` reads (pruned ones too): what its protocol
    cost."""
    read = frozenset().union(*(o.runs for o in found))
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [t for t in trials if run_of(t) in read and t.state in done]


@dataclass(frozen=True)
class Verdict:
    """A MARS rule against its strongest same-cost control on the held-out pairs, and its
    decision over the study's declared family (:mod:`.family`)."""

    rule: str
    control: str
    gap: PairedGap
    decision: str
    provisional: bool = False
    low: float = math.nan
    high: float = math.nan
    level: float = math.nan
    # each side's diverged runs on the pairs read (:func:`~.pairs.diverged`)
    diverged: tuple[int, int] = (0, 0)
    # B (:func:`~.pairs.verdict_bias`) on the choosing runs: how far a word read at the two
    # searches' own winners would have leant the rule's way (negative) or the control's; NaN
    # where the study read no peer's winner
    bias: float = math.nan

    def bias_text(self) -> str:
        return f"{self.bias:+.4f}" if math.isfinite(self.bias) else "—"

    @property
    def decision_text(self) -> str:
        return Decision(self.decision, self.provisional).text()

    @property
    def read(self) -> Decision:
        return Decision(self.decision, self.provisional, self.low, self.high, self.level)

    def interval_text(self) -> str:
        """The gap and the adjusted interval its word is read from, with the pairs' degrees
        of freedom: ``-0.0132 [-0.0190, -0.0074] at 99.50%, 11 dof``."""
        adjusted = self.read.interval_text() or "no interval"
        dof = f", {self.gap.dof} dof" if self.gap.dof else ""
        return f"{self.gap.mean:+.4f} {adjusted}{dof}"


def verdicts(
    found: Sequence[OptimizerOutcome],
    alpha: float = 0.05,
    *,
    pairs: Sequence[tuple[int, int]] | None = None,
    family: Sequence[Comparison] | None = None,
    scope: str = "",
    others: Mapping[Comparison, PairedGap] | None = None,
    design: Design | None = None,
) -> list[Verdict]:
    """Each comparison of ``family`` at ``scope`` (default: the study's own comparisons) whose
    runs have all finished: the rule against the control with the lowest held-out mean, over
    the held-out runs (with ``pairs``, the seeds x data orders they cross, seed and data order
    as crossed random effects; else as independent pairs), decided by Holm over the whole
    family, where ``others`` holds the gaps of the family's comparisons read elsewhere (a
    campaign's other points)."""
    # a winner read only where its search scored it and every held-out run finished: a
    # winner of failed (or diverged) trials alone, or with a failed held-out run, has none
    by_name = {
        o.optimizer: o for o in found if o.heldout_complete and math.isfinite(o.winner_score)
    }
    mine = [c for c in family if c.scope == scope] if family is not None else None
    if mine is None:
        mine = study_family([o.optimizer for o in found])
        family = mine
    gaps: dict[Comparison, PairedGap] = dict(others or {})
    controls: dict[Comparison, str] = {}
    lost: dict[Comparison, tuple[int, int]] = {}
    bias: dict[Comparison, float] = {}
    for comparison in mine:
        ran = [by_name[c] for c in comparison.controls if c in by_name]
        if comparison.rule not in by_name or len(ran) < len(comparison.controls):
            continue
        control = min(ran, key=lambda o: o.heldout_mean)
        rule, rule_finals, control_finals = (
            by_name[comparison.rule],
            by_name[comparison.rule].heldout_finals,
            control.heldout_finals,
        )
        read_pairs = pairs
        if pairs is not None and independent_pairs(pairs):
            # a verdict never pairs runs across machines
            kept = same_machine(rule.heldout_machines, control.heldout_machines)
            read_pairs = [p for p, k in zip(pairs, kept, strict=True) if k]
            rule_finals = [v for v, k in zip(rule_finals, kept, strict=True) if k]
            control_finals = [v for v, k in zip(control_finals, kept, strict=True) if k]
            if len(rule_finals) < 2:
                continue
        first = design.first if design is not None else 0
        gaps[comparison] = gap_of_pairs(rule_finals, control_finals, read_pairs, first=first)
        lost[comparison] = (len(diverged(rule_finals)), len(diverged(control_finals)))
        bias[comparison] = rule.shortfall - control.shortfall
        controls[comparison] = control.optimizer
    decided = decide(family, gaps, alpha, design=design)
    return [
        Verdict(
            c.rule,
            controls[c],
            gaps[c],
            decided[c].word,
            decided[c].provisional,
            decided[c].low,
            decided[c].high,
            decided[c].level,
            lost[c],
            bias[c],
        )
        for c in mine
        if c in controls
    ]


def progress_label(finished: bool, runs: int) -> str:
    """How far an optimizer's tuning has got, as the reports print it: "" once finished,
    "unfinished" while it has runs but is still searching, "not started" with no run."""
    return "" if finished else "unfinished" if runs else "not started"


def format_tune_table(
    plan: TunePlan,
    found: Sequence[OptimizerOutcome],
    found_verdicts: Sequence[Verdict] | None = None,
) -> str:
    """The report: per optimizer its trials, held-out mean ± std, selection mean and winner;
    each MARS rule's gap to its strongest control (``found_verdicts``, default: over the
    study's own family); the tuning curves."""
    sel = plan.selection
    heldout = (
        f"held out: {sel.heldout_text()}"
        if sel.pairs
        else f"held out: seeds {','.join(map(str, sel.heldout))} x data orders "
        f"{','.join(map(str, sel.heldout_data_seeds))}"
    )
    ranked = sorted(found, key=lambda o: (math.isnan(o.heldout_mean), o.heldout_mean))
    if found_verdicts is None:
        found_verdicts = verdicts(found, pairs=sel.heldout_pairs())
    lines = [*answer_sentences(plan, ranked, found_verdicts), ""]
    if getattr(plan.base, "direction", "minimize") == "maximize":
        lines += [
            "Every value below is the function's score negated (direction maximize), so that "
            "lower is better throughout: -0.9500 is a score of 0.9500.",
            "",
        ]
    lines += [
        f"| optimizer | trials | {heldout} | selection (seeds "
        f"{','.join(map(str, sel.choosing_seeds))}, data order {sel.data_seed}"
        f"{sel.final_orders_text()}) | "
        "dimensions moved |",
        "|---|---:|---:|---:|---:|",
    ]
    for o in ranked:
        progress = progress_label(o.finished, len(o.trial_scores))
        status = f" ({progress})" if progress else ""
        states = o.heldout_states(sel.heldout_pairs())
        lost = sum(state in ("diverged", "failed") for state in states)
        note = (
            f" ({lost} of {len(states)} lost: diverged or failed, not in this mean)" if lost else ""
        )
        lines.append(
            f"| {o.optimizer}{status} | {len(o.trial_scores)} | "
            f"{mean_std_text(o.heldout_finals)}{note} | {mean_std_text(o.selection_finals)} | "
            f"{o.moved_text} |"
        )
    lines += [
        "",
        *failure_sentences(ranked, sel.heldout_pairs()),
        *fixed_sentences(plan.fixed, plan.ladders, plan.extra),
        *moved_sentences(ranked),
        *depth_sentences(ranked),
        *heldout_sentences(ranked, sel.heldout_pairs()),
        *peer_sentences(ranked, plan.all_ladders),
        *pruned_sentences(ranked, plan.prune),
    ]
    if found_verdicts:
        lines += [
            "",
            "| rule | strongest control | gap, Holm-adjusted interval (the word's) | p | "
            "word (declared family) | diverged runs (rule, control) | B |",
            "|---|---|---:|---:|---|---:|---:|",
        ]
        lines += [
            f"| {v.rule} | {v.control} | {v.interval_text()} | {v.gap.p:.3g} | "
            f"{v.decision_text} | {v.diverged[0]}, {v.diverged[1]} | {v.bias_text()} |"
            for v in found_verdicts
        ]
        if sel.peer_winners:
            lines += [
                "",
                "B: how far a word read at the two searches' own winners would have leant the "
                "rule's way (negative) or its control's, on the choosing runs: (rule's own "
                "winner - its best-known setting) - (control's own winner - its best-known). "
                "Every word above is read at the best-known settings.",
            ]
    rows = [k for k in CURVE_ROWS if k <= plan.trials]
    lines += [
        "",
        "Tuning curves: the expected best selection score after k trials, in random order.",
        "",
        "| optimizer | " + " | ".join(f"k={k}" for k in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for o in ranked:
        curve = o.curve
        cells = [f"{curve[k - 1]:.4f}" if k <= len(curve) else "—" for k in rows]
        lines.append(f"| {o.optimizer} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [
        f"- {o.optimizer}: {_winner_text(o.winner, plan.all_ladders)}" for o in ranked if o.winner
    ]
    if sel.finalists:
        lines += ["", finalists_table(sel, ranked, plan.search, plan.all_ladders)]
    return "\n".join(lines)


def answer_sentences(
    plan: TunePlan, ranked: Sequence[OptimizerOutcome], found_verdicts: Sequence[Verdict]
) -> list[str]:
    """The report's answer in words, first: the best optimizer held out (and by how much it
    leads the next), then one sentence per comparison with its interval, its word and the
    budget it was read at. ``ranked``: best held-out mean first."""
    plural = "" if plan.trials == 1 else "s"
    budget = (
        f"{plan.trials} trial{plural} each, {len(plan.selection.heldout_pairs())} held-out runs"
    )
    read = [o for o in ranked if not math.isnan(o.heldout_mean)]
    pairs = plan.selection.heldout_pairs()
    if len(read) < len(ranked) or not read:
        waiting = [
            o.optimizer for o in ranked if not o.finished or "waiting" in o.heldout_states(pairs)
        ]
        if waiting:
            return [
                f"**Answer:** not yet: {', '.join(waiting)} still without every held-out run "
                f"({budget}); the same command resumes."
            ]
        lost = [
            f"{o.optimizer}'s winner lost {o.lost_text(pairs)}" for o in ranked if o not in read
        ]
        return [
            f"**Answer:** none: the study has finished ({budget}) and no verdict is read from "
            f"a winner that lost held-out runs: {'; '.join(lost)}. A failed run scores its "
            "point worst and is not trained again; a diverged run is a result of its setting."
        ]
    best, *rest = read
    negated = getattr(plan.base, "direction", "minimize") == "maximize"
    quantity = "held-out mean of the score negated" if negated else "held-out mean"
    lead = (
        f", {rest[0].heldout_mean - best.heldout_mean:.4f} ahead of {rest[0].optimizer}"
        if rest
        else ""
    )
    lines = [
        f"**Answer** ({budget}; {quantity}, lower is better): best overall "
        f"**{best.optimizer}**, {best.heldout_mean:.4f}{lead}."
    ]
    for v in found_verdicts:
        caveat = " (provisional: comparisons of the declared family are pending)"
        lines.append(
            f"- {word_sentence(v.decision, v.rule, v.control)} on this model at this budget: "
            f"{v.rule} - {v.control} = {v.interval_text()} held out, **{v.decision}**"
            f"{caveat if v.provisional else ''}."
        )
    return lines


def word_sentence(word: str, rule: str, control: str) -> str:
    """What a word says of ``rule`` against ``control``, the one sentence every report uses.

    >>> word_sentence("inconclusive", "mars-adamw", "nadamw")
    'not shown different nor equivalent: mars-adamw against nadamw'
    """
    return {
        "win": f"{rule} beat {control}",
        "loss": f"{control} beat {rule}",
        "equivalent": f"{rule} and {control} equivalent (within the margin)",
        "inconclusive": f"not shown different nor equivalent: {rule} against {control}",
    }.get(word, f"{rule} against {control}: not read yet")


def failure_sentences(
    found: Sequence[OptimizerOutcome], pairs: Sequence[tuple[int, int]]
) -> list[str]:
    """Per optimizer with failed runs: how many of the runs it reads failed, and the first
    message. A failed run scores its point worst (never the mean of its other seeds), and a
    winner with a failed held-out run gets no verdict."""
    lines = []
    for o in found:
        if not o.failures:
            continue
        (seed, data), message = next((r[2:], m) for r, m in o.failures.items())
        winner = point_key(o.winner)
        heldout = any(r[1] == winner and (r[2], r[3]) in pairs for r in o.failures)
        verdict = "; its winner has failed held-out runs: no verdict" if heldout else ""
        lines.append(
            f"- FAILED: {len(o.failures)} of {o.optimizer}'s {len(o.runs)} runs (first, seed "
            f"{seed} data order {data}: {message}){verdict}."
        )
    return lines


def fixed_sentences(fixed: Fixed, ladders: Ladders = (), extra: Ladders = ()) -> list[str]:
    """The dimensions the study held at a value, those it stepped on your values, and your
    own dimensions: a line each, none where there were none."""
    lines = []
    if fixed:
        held = ", ".join(f"{d} {v:g}" for d, v in fixed)
        lines.append(f"- Fixed for every optimizer that has them, never tuned: {held}.")
    if ladders:
        yours = "; ".join(f"{d} {', '.join(f'{v:g}' for v in values)}" for d, values in ladders)
        lines.append(f"- Searched on your values: {yours}.")
    if extra:
        own = "; ".join(f"{d} {', '.join(f'{v:g}' for v in values)}" for d, values in extra)
        lines.append(f"- Your own dimensions, tuned for every optimizer alike: {own}.")
    return lines


# A dimension is called tuned once its search scored it at this many values (its start and at
# least one step each way, or two steps one way): one other value scored once is a move, not a
# tuning (issue "Your model, round 2").
TUNED_DEPTH = 3


def depth_sentences(found: Sequence[OptimizerOutcome]) -> list[str]:
    """Per optimizer with trials: how many values each dimension was scored at, and a WARNING
    naming the dimensions scored at fewer than :data:`TUNED_DEPTH` (moved, or left at the
    start, but not tuned: a short search for them)."""
    lines = []
    for o in found:
        if not o.trial_scores or not o.values_scored:
            continue
        counts = ", ".join(f"{d} {n}" for d, n in o.values_scored.items())
        short = [d for d, n in o.values_scored.items() if n < TUNED_DEPTH]
        lines.append(f"- {o.optimizer}: values scored per dimension: {counts}.")
        if short:
            lines.append(
                f"- WARNING: {o.optimizer}'s search is short: {', '.join(short)} scored at fewer "
                f"than {TUNED_DEPTH} values, not tuned (more trials would tune them)."
            )
    return lines


def moved_sentences(found: Sequence[OptimizerOutcome]) -> list[str]:
    """Per optimizer with trials, in words: which dimensions its search moved away from its
    start, and a warning where it moved only the lr (its other dimensions are its defaults:
    more trials, or fewer dimensions, would tune them)."""
    lines = []
    for o in found:
        if not o.trial_scores:
            continue
        still = [d for d in o.dimensions if d not in o.moved]
        if o.moved == ("lr",) and still:
            lines.append(
                f"- WARNING: {o.optimizer}'s search moved only the lr in {len(o.trial_scores)} "
                f"trials; {', '.join(still)} stayed at their defaults."
            )
        else:
            kept = f"; never moved: {', '.join(still)}" if still else " (every dimension)"
            lines.append(f"- {o.optimizer}'s search moved {', '.join(o.moved) or 'nothing'}{kept}.")
    return lines


def heldout_sentences(
    found: Sequence[OptimizerOutcome], pairs: Sequence[tuple[int, int]]
) -> list[str]:
    """Per optimizer whose held-out runs have all finished: its worst run, how many lie more
    than 3 standard deviations from the median (a blow-up a mean would hide), and how many
    diverged by the declared rule (:func:`~.pairs.diverged`: counted, never dropped)."""
    lines = []
    for o in found:
        worst, far = o.heldout_extremes(pairs)
        if worst is not None:
            value, (seed, data) = worst
            lost = len(diverged(o.heldout_finals))
            lines.append(
                f"- {o.optimizer}'s worst held-out run: {value:.4f} (seed {seed}, data order "
                f"{data}); runs over 3 std from the median: {far}; diverged (more than "
                f"{DIVERGED_ABOVE_MEDIAN:g} above its median, or not finite): {lost} of "
                f"{len(o.heldout_finals)}."
            )
    return lines


def pruned_sentences(found: Sequence[OptimizerOutcome], prune: bool) -> list[str]:
    """Where the study prunes: per optimizer, how many of its trials' runs were stopped early."""
    if not prune:
        return []
    counts = ", ".join(f"{o.optimizer} {o.pruned} of {len(o.trial_scores)}" for o in found)
    return [
        f"- Pruned trials (stopped where a reported value was worse than the median of the same "
        f"optimizer's finished trial runs at that step; each scores worst): {counts}."
    ]


def peer_sentences(found: Sequence[OptimizerOutcome], ladders: Ladders = ()) -> list[str]:
    """Per optimizer whose peers' winners were read on its space: a control beaten by its
    peer's setting (its search stopped short, and it is read at that setting), or that its own
    winner held."""
    lines = []
    for o in found:
        if not o.peer_points:
            continue
        if o.best_known_from is None:
            peers = ", ".join(f"{n} {s:.4f}" for n, _, s in o.peer_points)
            lines.append(
                f"- {o.optimizer}'s own winner ({o.own_score:.4f} on the choosing runs) held "
                f"against its peers' winners moved onto its space ({peers})."
            )
            continue
        score = next(s for n, _, s in o.peer_points if n == o.best_known_from)
        lines.append(
            f"- {o.optimizer} at {o.best_known_from}'s winner moved onto its space scored "
            f"{score:.4f} on the choosing runs against its own winner's {o.own_score:.4f}: its "
            f"search stopped {o.shortfall:.4f} short, and it is read at that setting "
            f"({_winner_text(o.winner, ladders)})."
        )
    return lines


def finalists_table(
    sel: Selection,
    found: Sequence[OptimizerOutcome],
    search: str = DEFAULT_SEARCH,
    ladders: Ladders = (),
) -> str:
    """Each optimizer's finalists (as the ``search`` design draws them), each with its score
    on the selection seeds and its mean over the finalists' seeds too (the winner first)."""
    drawn = finalists_drawn(search)
    lines = [
        f"Finalists: {sel.finalists} points of each search ({drawn}) re-read on seeds "
        f"{','.join(map(str, sel.final_seeds))}{sel.final_orders_text()}; the best mean over seeds "
        f"{','.join(map(str, sel.choosing_seeds))} wins (the search's own best is marked *).",
        "",
        f"| optimizer | point | seeds {','.join(map(str, sel.seeds))} | "
        f"seeds {','.join(map(str, sel.choosing_seeds))} |",
        "|---|---|---:|---:|",
    ]
    for o in found:
        best = min((score for _, score, _ in o.finalists), default=math.nan)
        for point, score, final in o.finalists:
            mark = "*" if score == best else ""
            lines.append(
                f"| {o.optimizer} | {_winner_text(point, ladders)} | {score:.4f}{mark} | "
                f"{final:.4f} |"
            )
    return "\n".join(lines)


def _winner_text(point: Point, ladders: Ladders = ()) -> str:
    return ", ".join(f"{d} {v:g}" for d, v in values_of(point, ladders).items())


def plot_tune(found: Sequence[OptimizerOutcome], out_path: Path) -> Path | None:
    """Four panels: each optimizer's lr profiles (faint) with its winner's drawn solid; its
    tuning curve (expected best after k trials; dashed: best so far in the search's order); its
    winner's held-out mean with a 95% interval over the held-out runs; and its winner's
    evaluation curve on the held-out runs (their mean at each step), where runs report more
    than one point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [o for o in found if o.trial_scores]
    if not drawn:
        return None
    figure, ((left, right), (heldout, curves)) = plt.subplots(2, 2, figsize=(12, 9))
    for index, o in enumerate(drawn):
        colour = f"C{index}"
        winner_lr = LADDERS["lr"].value(o.winner["lr"])
        for profile in o.lr_profiles:
            finite = [(lr, v) for lr, v in profile if math.isfinite(v)]
            if len(finite) < 2:
                continue
            mine = (winner_lr, o.winner_score) in finite
            left.plot(
                *zip(*finite, strict=True),
                color=colour,
                alpha=1.0 if mine else 0.15,
                marker="o" if mine else None,
                label=o.optimizer if mine else None,
            )
        ks = range(1, len(o.trial_scores) + 1)
        right.plot(ks, o.curve, color=colour, label=o.optimizer)
        right.plot(ks, best_so_far(o.trial_scores), color=colour, linestyle="--", alpha=0.6)
        if o.heldout_complete and len(o.heldout_finals) > 1:
            half = _t_half_width(o.heldout_finals)
            heldout.errorbar([index], [o.heldout_mean], yerr=[half], fmt="o", color=colour)
        mean_curve = _mean_curve(o.heldout_curves)
        if len(mean_curve) > 1:
            curves.plot(*zip(*mean_curve, strict=True), color=colour, label=o.optimizer)
    left.set_xscale("log")
    left.set_xlabel("peak learning rate")
    left.set_ylabel("selection score (mean final metric)")
    left.set_title("lr profiles (solid: the winner's)")
    right.set_xlabel("trials")
    right.set_ylabel("best selection score")
    right.set_title("tuning curves (dashed: best so far in search order)")
    heldout.set_xticks(range(len(drawn)), [o.optimizer for o in drawn], fontsize=8)
    heldout.set_ylabel("held-out final metric")
    heldout.set_title("each winner held out: mean, 95% interval over its runs")
    curves.set_xlabel("step")
    curves.set_ylabel("metric on the held-out runs (mean)")
    curves.set_title(
        "each winner's curve, held out"
        if curves.get_legend_handles_labels()[1]
        else "no run reported a curve of more than one point"
    )
    for axis in (left, right, heldout, curves):
        axis.grid(alpha=0.3, which="both")
        if axis.get_legend_handles_labels()[1]:
            axis.legend(fontsize=8)
    from torch_mars.train.plots import save_figure

    return save_figure(figure, out_path)


def _t_half_width(values: Sequence[float]) -> float:
    """Half the 95% t interval of the mean of ``values`` (independent runs)."""
    quantile = student_t_quantile(0.05, len(values) - 1)
    return quantile * statistics.stdev(values) / math.sqrt(len(values))


def _mean_curve(curves: Sequence[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The mean of ``curves`` at each step all of them reported."""
    if not curves:
        return []
    steps = set.intersection(*({step for step, _ in c} for c in curves))
    return [
        (step, statistics.fmean(v for c in curves for at, v in c if at == step))
        for step in sorted(steps)
    ]


def report_json(
    plan: TunePlan,
    found: Sequence[OptimizerOutcome],
    trials: Sequence[optuna.trial.FrozenTrial] = (),
    found_verdicts: Sequence[Verdict] | None = None,
) -> dict[str, Any]:
    """The report's record: the protocol, each optimizer's trials, winner, held-out finals and
    tuning curve, the verdicts, and the cost of ``trials`` (the runs the report reads) per
    device."""

    def number(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return {
        "command": ["torch-mars", "tune", *plan.command_line()],
        "selection": plan.selection.record(),
        "trials": plan.trials,
        "budget": plan.spec().identity()["budget"],
        "cost": run_cost(trials),
        "copied_runs": copied_runs(trials),
        "optimizers": [
            {
                "optimizer": o.optimizer,
                "finished": o.finished,
                "trials": len(o.trial_scores),
                "winner": values_of(o.winner, plan.all_ladders),
                "hyperparams": {
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in hyperparams_of(
                        o.optimizer,
                        split_extra(o.winner, plan.extra)[0],
                        plan.base.model,
                        plan.fixed,
                        plan.ladders,
                    ).items()
                }
                if o.winner
                else {},
                **(
                    {"extra_space": split_extra(o.winner, plan.extra)[1]}
                    if plan.extra and o.winner
                    else {}
                ),
                "selection_finals": [number(v) for v in o.selection_finals],
                "finalists": [
                    {
                        "point": values_of(p, plan.all_ladders),
                        "search_score": number(score),
                        "score": number(final),
                    }
                    for p, score, final in o.finalists
                ],
                "heldout_pairs": [list(p) for p in plan.selection.heldout_pairs()],
                "heldout_finals": [number(v) for v in o.heldout_finals],
                "trial_scores": [number(v) for v in o.trial_scores],
                "tuning_curve": [number(v) for v in o.curve],
                "rounds": o.rounds,
                **({"pruned_trials": o.pruned} if plan.prune else {}),
                **_peer_record(o, plan.all_ladders),
                "moved": list(o.moved),
                "values_scored": dict(o.values_scored),
                "failed_runs": len(o.failures),
                "failures": [
                    {
                        "point": values_of(parse_point_key(r[1]), plan.all_ladders),
                        "seed": r[2],
                        "data_seed": r[3],
                        "error": m,
                    }
                    for r, m in o.failures.items()
                ],
                **_extremes_record(o, plan.selection.heldout_pairs()),
            }
            for o in found
        ],
        "verdicts": [
            {
                "rule": v.rule,
                "control": v.control,
                "gap": v.gap.mean,
                "interval": [v.gap.low, v.gap.high],
                "p": v.gap.p,
                "pairs": v.gap.pairs,
                "error": number(v.gap.error),
                "dof": v.gap.dof,
                "adjusted_interval": [number(v.low), number(v.high)],
                "level": number(v.level),
                "diverged": list(v.diverged),
                "bias": number(v.bias),
                "decision": v.decision,
                "provisional": v.provisional,
            }
            for v in (
                verdicts(found, pairs=plan.selection.heldout_pairs())
                if found_verdicts is None
                else found_verdicts
            )
        ],
    }


def _peer_record(o: OptimizerOutcome, ladders: Ladders = ()) -> dict[str, Any]:
    """Where peers' winners were read: the search's own winner and its score, each peer's
    winner on this space with its score, and the peer whose setting won (absent otherwise)."""
    if not o.peer_points:
        return {}
    finite = math.isfinite
    return {
        "own_winner": values_of(o.own_winner, ladders),
        "own_score": o.own_score if finite(o.own_score) else None,
        "peer_winners": [
            {"peer": n, "point": values_of(p, ladders), "score": s if finite(s) else None}
            for n, p, s in o.peer_points
        ],
        "best_known_from": o.best_known_from,
    }


def _extremes_record(o: OptimizerOutcome, pairs: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """``worst_heldout`` (its final, seed and data order; None until all finished) and
    ``heldout_outliers`` for ``tune.json``."""
    worst, far = o.heldout_extremes(pairs)
    if worst is None:
        return {"worst_heldout": None, "heldout_outliers": far}
    value, (seed, data) = worst
    return {
        "worst_heldout": {"final": value, "seed": seed, "data_seed": data},
        "heldout_outliers": far,
    }


def plan_design(plan: TunePlan) -> Design | None:
    """The two-look design the study declares (``two_looks``), or its campaign (its
    ``--family`` file), if any."""
    if plan.looks is not None:
        return plan.looks
    if plan.family_file is None:
        return None
    try:
        declared = json.loads(Path(plan.family_file).read_text())
    except (OSError, ValueError) as error:
        raise ValueError(
            f"--family {plan.family_file}: not a campaign declaration ({error})"
        ) from None
    return design_of(declared) if isinstance(declared, dict) else None


@dataclass(frozen=True)
class WrittenReport:
    """What :func:`write_tune_report` wrote, as it wrote it: ``summary.md``'s text, the record
    (``tune.json``) and the files; a caller prints and returns them without reading back."""

    summary: str
    record: TuneRecord
    paths: list[Path]


def write_tune_report(plan: TunePlan, study: optuna.Study) -> WrittenReport:
    """``summary.md``, ``tune.json``, ``family.json`` and ``tune.png`` in the study folder."""
    found = outcomes(plan, study.get_trials(deepcopy=False))
    trials = read_trials(found, study.get_trials(deepcopy=False))
    folder = Path(plan.study_dir)
    folder.mkdir(parents=True, exist_ok=True)
    family, scope = declared_family(study, plan)
    design = plan_design(plan)
    found_verdicts = verdicts(
        found,
        pairs=plan.selection.heldout_pairs(),
        family=family,
        scope=scope,
        others=sibling_gaps(folder, family, scope, design.first if design else 0),
        design=design,
    )
    write_text_atomically(
        folder / "family.json",
        json.dumps({"scope": scope, "family": family_records(family)}, indent=2) + "\n",
    )
    summary = (
        format_tune_table(plan, found, found_verdicts)
        + f"\n\nLadders: {ladder_note(plan.ladders)}.\n\nTrained on: {devices_note(trials)}.\n"
    )
    write_text_atomically(folder / "summary.md", summary)
    record = write_tune_record(folder, report_json(plan, found, trials, found_verdicts))
    written = [folder / "summary.md", folder / "tune.json", folder / "family.json"]
    figure = plot_tune(found, folder / "tune.png")
    if figure is not None:
        written.append(figure)
    return WrittenReport(summary, record, written)


def ladder_note(ladders: Ladders = ()) -> str:
    """One line per dimension: its ladder (yours where given), for the report's readers."""
    lines = []
    for dimension in LADDERS:
        ladder = ladder_of(dimension, ladders)
        if ladder.levels:
            lines.append(f"{dimension}: {', '.join(f'{v:g}' for v in ladder.levels)}")
        else:
            lines.append(f"{dimension}: {ladder.anchor:g} x {ladder.factor:g}^k")
    return "; ".join(lines)


def copied_runs(trials: Sequence[optuna.trial.FrozenTrial]) -> int:
    """How many of the study's finished runs were taken from other studies, not trained here
    (``tune --reuse-runs``, :mod:`.reuse`)."""
    return sum(
        t.state == optuna.trial.TrialState.COMPLETE and COPIED_ATTR in t.system_attrs
        for t in trials
    )


def run_seconds(trial: optuna.trial.FrozenTrial) -> float:
    """A finished run's cost in seconds: what its worker recorded (CPU time on a CPU, wall time
    on an accelerator; ``engine.RUN_COST_ATTR``), else, for runs from before it was recorded,
    its wall time from claim to result, pauses included."""
    from torch_mars.train.study.engine import RUN_COST_ATTR

    if RUN_COST_ATTR in trial.user_attrs:
        return float(trial.user_attrs[RUN_COST_ATTR])
    if trial.datetime_start and trial.datetime_complete:
        return (trial.datetime_complete - trial.datetime_start).total_seconds()
    return 0.0


def trained_runs(trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The study's finished runs it trained itself, a pruned run's part included (it cost
    what it trained): none taken from other studies (:func:`copied_runs`)."""
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [t for t in trials if t.state in done and COPIED_ATTR not in t.system_attrs]


def median_run_seconds(trials: Sequence[optuna.trial.FrozenTrial]) -> float | None:
    """The study's typical run cost: the median of :func:`run_seconds` over the runs it
    trained (a run stretched by a pause does not move it); None before its first."""
    costs = [run_seconds(t) for t in trained_runs(trials)]
    return statistics.median(costs) if costs else None


def run_cost(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[str, dict[str, Any]]:
    """Per device the study's finished runs trained on (most runs first): their count, summed
    cost in hours (:func:`run_seconds`) and the threads a run used (``"?"`` where not
    recorded). Runs taken from other studies are not counted (:func:`trained_runs`)."""

    runs: dict[str, list[optuna.trial.FrozenTrial]] = collections.defaultdict(list)
    for trial in trained_runs(trials):
        runs[owner_of(trial).get("device", "not recorded")].append(trial)
    cost = {}
    for device, done in sorted(runs.items(), key=lambda item: -len(item[1])):
        seconds = math.fsum(run_seconds(t) for t in done)
        threads = {str(owner_of(t).get("threads", "?")) for t in done}
        cost[device] = {"runs": len(done), "hours": seconds / 3600, "threads": sorted(threads)}
    return cost


def devices_note(trials: Sequence[optuna.trial.FrozenTrial]) -> str:
    """The devices the study's finished runs trained on, with their runs and cost: a run's
    floats depend on the kernels its device runs, so a study run on several is said to be."""
    notes = []
    for device, c in run_cost(trials).items():
        recorded = [t for t in c["threads"] if t != "?"]
        threads = (
            f"{'/'.join(recorded)} thread(s) per run"
            + (" where recorded" if "?" in c["threads"] else "")
            if recorded
            else "threads per run not recorded"
        )
        notes.append(f"{device} ({c['runs']} runs, {c['hours']:.2f} h of run time, {threads})")
    copied = copied_runs(trials)
    if copied:
        notes.append(f"{copied} runs taken from other studies, trained there (--reuse-runs)")
    return "; ".join(notes) or "no runs"
