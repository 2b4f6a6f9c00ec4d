"""The report of a ``torch-mars tune`` study, written in one place: :mod:`.outcomes` read from
the trials, then ``summary.md`` (:mod:`.report_text`), ``tune.json`` (:func:`report_json`,
written by :mod:`.tune_record`), ``family.json`` and ``tune.png`` (:mod:`.report_plot`)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from torch_mars.atomic_files import write_text_atomically
from torch_mars.train.study.family import (
    family_records,
)
from torch_mars.train.study.outcomes import (
    OptimizerOutcome,
    Verdict,
    copied_runs,
    outcomes,
    plan_design,
    read_trials,
    run_cost,
    sibling_gaps,
    verdicts,
)
from torch_mars.train.study.report_plot import plot_tune
from torch_mars.train.study.report_text import devices_note, format_tune_table, ladder_note
from torch_mars.train.study.space import (
    Ladders,
    hyperparams_of,
    parse_point_key,
    split_extra,
    values_of,
)
from torch_mars.train.study.tune import (
    TunePlan,
    declared_family,
)
from torch_mars.train.study.tune_record import TuneRecord, write_tune_record


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
                "heldout_pairs": [list(p) for p in plan.selection.heldout_pairs(o.optimizer)],
                "heldout_finals": [number(v) for v in o.heldout_finals],
                "heldout_machines": list(o.heldout_machines),
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
                **_extremes_record(o, plan.selection.heldout_pairs(o.optimizer)),
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
                "pairs_left_out": v.left_out,
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
