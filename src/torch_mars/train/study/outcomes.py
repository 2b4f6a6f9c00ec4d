"""What a ``torch-mars tune`` study found, read from its trials alone, training nothing: each
optimizer's outcome (trials, winner, selection and held-out finals, finalists, curves), the
verdicts of the declared family (Holm over it, a two-look design where declared), and the runs' cost
per machine. The plan it reads is :mod:`.tune`'s; :mod:`.tune_report` writes it out."""

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

from torch_mars.train.study.curves import expected_best_curve
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
    study_family,
)
from torch_mars.train.study.family_reads import stored_verdicts
from torch_mars.train.study.pairs import diverged, machine_of, same_machine
from torch_mars.train.study.profiled import ProfiledSearch, ProfiledState
from torch_mars.train.study.reuse import COPIED_ATTR
from torch_mars.train.study.selection import badness
from torch_mars.train.study.space import (
    Point,
    point_key,
)
from torch_mars.train.study.store import owner_of
from torch_mars.train.study.tune import (
    TunePlan,
)
from torch_mars.train.study.two_stage import Design, design_of
from torch_mars.train.study.verdict import (
    PairedGap,
    gap_of_pairs,
    independent_pairs,
)
from torch_mars.train.task import task_of


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
    # the machine each held-out run trained on (:func:`~.pairs.machine_of`), "" where unknown
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
                heldout_finals=[final(s, d) for s, d in plan.selection.heldout_pairs(own)]
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
                    for seed, data in plan.selection.heldout_pairs(own)
                    if point and (run := search.run(point, seed, data)) in curves
                ],
                heldout_machines=[
                    machines.get(search.run(point, seed, data), "")
                    for seed, data in plan.selection.heldout_pairs(own)
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
    """The machine each finished run trained on (:func:`~.pairs.machine_of` its owner
    record)."""
    machines = {}
    for trial in trials:
        run = run_of(trial)
        if trial.state == optuna.trial.TrialState.COMPLETE and run:
            machines[run] = machine_of(owner_of(trial))
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
    # the pairs both sides read that the verdict left out: their sides trained on two machines
    # or thread counts (:func:`~.pairs.same_machine`)
    left_out: int = 0

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
    left_out: dict[Comparison, int] = {}
    for comparison in mine:
        ran = [by_name[c] for c in comparison.controls if c in by_name]
        if comparison.rule not in by_name or len(ran) < len(comparison.controls):
            continue
        # the strongest control on the pairs every control read (a second look reads more
        # pairs for its sides alone), and each word on the pairs both its sides read
        shared = min(len(o.heldout_finals) for o in ran)
        control = min(ran, key=lambda o: statistics.fmean(o.heldout_finals[:shared]))
        rule = by_name[comparison.rule]
        both = min(len(rule.heldout_finals), len(control.heldout_finals))
        rule_finals, control_finals = rule.heldout_finals[:both], control.heldout_finals[:both]
        read_pairs = None if pairs is None else list(pairs)[:both]
        first = design.first if design is not None else 0
        if pairs is not None and independent_pairs(pairs):
            # a verdict never pairs runs across machines
            kept = same_machine(rule.heldout_machines[:both], control.heldout_machines[:both])
            read_pairs = [p for p, k in zip(read_pairs, kept, strict=True) if k]
            rule_finals = [v for v, k in zip(rule_finals, kept, strict=True) if k]
            control_finals = [v for v, k in zip(control_finals, kept, strict=True) if k]
            if len(rule_finals) < 2:
                continue
            first = sum(kept[:first])  # the first look: its pairs that are kept
        gaps[comparison] = gap_of_pairs(rule_finals, control_finals, read_pairs, first=first)
        lost[comparison] = (len(diverged(rule_finals)), len(diverged(control_finals)))
        bias[comparison] = rule.shortfall - control.shortfall
        left_out[comparison] = both - len(rule_finals)
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
            left_out[c],
        )
        for c in mine
        if c in controls
    ]


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
