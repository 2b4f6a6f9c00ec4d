"""``torch-mars tune``: every optimizer tuned by one protocol, on the study engine.

Each optimizer is tuned by coordinate descent (:mod:`.descent`) over the dimensions it has in
the declared space (:mod:`.search_space`), from its defaults; each winner is then read on
held-out seeds. The study runs on :mod:`.study_engine`: a trial is one harness run, the study
lives in an Optuna storage (an SQLite file in the study folder by default, or a shared
database or journal file), any number of workers (``--jobs`` here, ``--worker`` on other
machines) work on it, and a killed study resumes without rerunning a finished trial.
"""

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
from torch_mars.train.compare import SAME_COST_CONTROLS
from torch_mars.train.descent import CoordinateDescent, DescentState, RunId, Selection
from torch_mars.train.search_space import (
    LADDERS,
    Point,
    dimensions_of,
    hyperparams_of,
    parse_point_key,
    point_key,
    shares_space,
    space_record,
    start_point,
    tunable_optimizers,
    values_of,
)
from torch_mars.train.study_engine import StudySpec, budget_of, finished_results
from torch_mars.train.study_store import open_storage
from torch_mars.train.task import task_of
from torch_mars.train.trainer import TrainConfig

# A held-out seed "fails" when it ends this far above the winner's selection mean, or three of
# the selection seeds' std if that is more (nats).
FAILURE_MARGIN = 0.03
# The settings that choose which runs a study asks for, not what any run gives: a study
# reopened with other values of these resumes under them, every finished run counted.
PROTOCOL_KEYS = ("optimizers", "selection", "max_rounds", "peer_starts", "starts")
# The good-lr band: the lrs of the winner's last lr sweep within this share of its score.
GOOD_LR_SHARE = 0.01


@dataclass(frozen=True)
class TunePlan:
    """What a study tunes.

    Attributes:
        base: the budget and task (its optimizer, seed and hyperparams are replaced per run).
        optimizers: the optimizers, each with a search space (:func:`tunable_optimizers`).
        selection: the seeds that choose, the held-out seeds, and screening.
        study_dir: the study folder (report, run work folders, the default storage).
        storage: ``--storage`` as given (None: SQLite in ``study_dir``).
        study_name: the study's name in the storage.
        max_rounds: rounds of coordinate descent at most.
        peer_starts: try each optimizer at its peers' points once they have descended
            (:class:`~torch_mars.train.descent.CoordinateDescent`'s ``peers``).
        starts: each optimizer's start point (a point key); an optimizer not in it starts
            from its defaults for the model. A study keeps the starts it began with
            (:func:`with_study_starts`), so that new defaults never move a study's descent.
        jobs: local worker processes.
        overwrite: start the study afresh if it exists with other settings.
    """

    base: TrainConfig
    optimizers: tuple[str, ...]
    selection: Selection
    study_dir: Path
    storage: str | None = None
    study_name: str = "tune"
    max_rounds: int = 3
    peer_starts: bool = True
    starts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    jobs: int = 1
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.optimizers:
            raise ValueError("tune needs at least one optimizer")
        for name in self.optimizers:
            dimensions_of(name)  # a ValueError naming the tunable ones
        if len(set(self.optimizers)) != len(self.optimizers):
            raise ValueError(f"an optimizer is named twice: {self.optimizers}")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")
        if self.max_rounds < 1:
            raise ValueError(f"--max-rounds must be >= 1, got {self.max_rounds}")

    def descents(self) -> list[CoordinateDescent]:
        """One descent per optimizer, each with its peers (the study's optimizers that share
        its dimensions but for gamma) where ``peer_starts``."""
        model = self.base.model
        alone = [
            CoordinateDescent(
                name, self.start_of(name), self.selection, self.max_rounds, model=model
            )
            for name in self.optimizers
        ]
        if not self.peer_starts:
            return alone
        return [
            dataclasses.replace(
                descent,
                peers=tuple(
                    other
                    for other in alone
                    if other is not descent and shares_space(other.optimizer, descent.optimizer)
                ),
            )
            for descent in alone
        ]

    def start_of(self, optimizer: str) -> Point:
        if optimizer in self.starts:
            return parse_point_key(self.starts[optimizer])
        return start_point(optimizer, self.base.model)

    def spec(self) -> StudySpec:
        """The study the engine runs."""
        settings = {
            "kind": "tune",
            "optimizers": self.optimizers,
            "selection": dataclasses.asdict(self.selection),
            "max_rounds": self.max_rounds,
            "peer_starts": self.peer_starts,
            "starts": {name: point_key(self.start_of(name)) for name in self.optimizers},
            "space": space_record(),
        }
        return StudySpec(
            base=self.base,
            searches=tuple(self.descents()),
            curve_seeds=self.selection.heldout,
            study_dir=self.study_dir,
            settings=json.loads(json.dumps(settings)),
            optimizer_choices=tunable_optimizers(),
            storage=self.storage,
            study_name=self.study_name,
            jobs=self.jobs,
            overwrite=self.overwrite,
            protocol_keys=PROTOCOL_KEYS,
        )


def plan_of_identity(
    identity: dict[str, Any], study_dir: Path, storage: str | None, study_name: str
) -> TunePlan:
    """The plan a tune study's stored identity describes (what ``--worker`` joins)."""
    search = identity["search"]
    if search.get("kind") != "tune":
        raise ValueError(f"study {study_name!r} is not a tune study (a {search.get('kind')})")
    selection = search["selection"]
    base = budget_of(identity)
    if task_of(base).name != "text":
        raise ValueError(f"study {study_name!r} is not a text study")
    return TunePlan(
        base=base,
        optimizers=tuple(search["optimizers"]),
        selection=Selection(
            tuple(selection["seeds"]), tuple(selection["heldout"]), selection["screen_top"]
        ),
        study_dir=study_dir,
        storage=storage,
        study_name=study_name,
        max_rounds=search["max_rounds"],
        peer_starts=search.get("peer_starts", False),
        starts=search.get("starts", {}),
    )


def with_study_starts(plan: TunePlan) -> TunePlan:
    """``plan`` with the start points its study began with, where the study exists and
    recorded them (a study begun before starts were recorded began at today's defaults)."""
    storage = open_storage(plan.spec().url)
    try:
        study = optuna.load_study(study_name=plan.study_name, storage=storage)
    except KeyError:
        return plan
    stored = study.user_attrs.get("identity", {}).get("search", {}).get("starts", {})
    return dataclasses.replace(plan, starts={**stored, **plan.starts})


def frontier(plan: TunePlan, results: dict[RunId, float]) -> list[DescentState]:
    return [descent.replay(results) for descent in plan.descents()]


# ---------------------------------------------------------------- the report


@dataclass
class OptimizerOutcome:
    """One optimizer's tuning: its winner, the winner's selection and held-out finals, how many
    runs and distinct points it took, its rounds, the peer whose point it moved to, and the
    robustness figures."""

    optimizer: str
    finished: bool
    winner: dict[str, int]
    selection_finals: list[float]
    heldout_finals: list[float]
    runs: int
    points: int
    rounds: int
    moved_to_peer: str | None
    heldout_failures: int
    good_lr_band: tuple[float, float] | None
    lr_sweeps: list[list[tuple[float, float]]]

    @property
    def heldout_mean(self) -> float:
        return statistics.fmean(self.heldout_finals) if self.heldout_finals else math.nan

    @property
    def heldout_std(self) -> float:
        return statistics.stdev(self.heldout_finals) if len(self.heldout_finals) > 1 else 0.0


def progress_label(finished: bool, runs: int) -> str:
    """How far an optimizer's tuning has got, as the reports print it: "" once finished,
    "unfinished" while it has runs but is still descending, "not started" with no run."""
    return "" if finished else "unfinished" if runs else "not started"


def outcomes(plan: TunePlan, trials: Sequence[optuna.trial.FrozenTrial]) -> list[OptimizerOutcome]:
    """Each optimizer's outcome from the study's trials (as far as it has got)."""
    results = finished_results(trials)
    found = []
    for descent, state in zip(plan.descents(), frontier(plan, results), strict=True):
        name = descent.optimizer
        key = point_key(state.point)
        sel = [results.get((name, key, s), math.nan) for s in plan.selection.seeds]
        held = [
            results[(name, key, s)] for s in plan.selection.heldout if (name, key, s) in results
        ]
        mine = [run for run in results if run[0] == name]
        known = [v for v in sel if not math.isnan(v)]
        spread = statistics.stdev(known) if len(known) > 1 else 0.0
        margin = max(FAILURE_MARGIN, 3 * spread)
        reference = statistics.fmean(known) if known else math.nan
        failures = sum(1 for v in held if not v <= reference + margin)
        lr_sweeps = [
            [
                (values_of(p)["lr"], results.get((name, point_key(p), plan.selection.seeds[0])))
                for p in sorted(sweep.tried, key=lambda p: p["lr"])
            ]
            for sweep in state.sweeps
            if sweep.dimension == "lr"
        ]
        found.append(
            OptimizerOutcome(
                optimizer=name,
                finished=state.finished,
                winner=state.point,
                selection_finals=sel,
                heldout_finals=held,
                runs=len(mine),
                points=len({run[1] for run in mine}),
                rounds=state.rounds,
                moved_to_peer=state.moved_to_peer,
                heldout_failures=failures,
                good_lr_band=_good_lr_band(descent, state, results),
                lr_sweeps=[[(lr, v) for lr, v in s if v is not None] for s in lr_sweeps],
            )
        )
    return found


def _good_lr_band(
    descent: CoordinateDescent, state: DescentState, results: dict[RunId, float]
) -> tuple[float, float] | None:
    """The lowest and highest lr of the last lr sweep whose first-seed final is within
    :data:`GOOD_LR_SHARE` of the winner's."""
    sweeps = [s for s in state.sweeps if s.dimension == "lr"]
    if not sweeps:
        return None
    seed = descent.selection.seeds[0]
    best = results.get((descent.optimizer, point_key(state.point), seed))
    if best is None or math.isnan(best):
        return None
    good = [
        values_of(p)["lr"]
        for p in sweeps[-1].tried
        if results.get((descent.optimizer, point_key(p), seed), math.inf)
        <= best * (1 + GOOD_LR_SHARE)
    ]
    return (min(good), max(good)) if good else None


def _winner_text(name: str, point: dict[str, int]) -> str:
    return ", ".join(f"{d} {v:g}" for d, v in values_of(point).items())


def format_tune_table(plan: TunePlan, found: Sequence[OptimizerOutcome]) -> str:
    """The report's table: per optimizer its held-out mean ± std, its gap to the strongest
    same-cost control in that control's held-out std, the selection mean, the trial counts and
    the robustness figures; then each winner's settings."""
    by_name = {o.optimizer: o for o in found}
    seeds_sel = ",".join(map(str, plan.selection.seeds))
    seeds_out = ",".join(map(str, plan.selection.heldout))

    def gap(o: OptimizerOutcome) -> str:
        controls = [by_name[c] for c in SAME_COST_CONTROLS.get(o.optimizer, ()) if c in by_name]
        controls = [c for c in controls if c.heldout_finals]
        if not controls or not o.heldout_finals:
            return "—"
        best = min(controls, key=lambda c: c.heldout_mean)
        difference = o.heldout_mean - best.heldout_mean
        # in the control's std, and in the rule's own: either can be tiny on three seeds
        parts = [
            f"{difference / std:+.1f} {whose}"
            for std, whose in ((best.heldout_std, "sd"), (o.heldout_std, "own sd"))
            if std > 0
        ]
        sds = f" ({', '.join(parts)})" if parts else ""
        return f"{difference:+.4f} vs {best.optimizer}{sds}"

    def mean_std(values: list[float]) -> str:
        values = [v for v in values if not math.isnan(v)]
        if not values:
            return "—"
        if len(values) == 1:
            return f"{values[0]:.4f}"
        return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"

    def rounds(o: OptimizerOutcome) -> str:
        return f"{o.rounds}, then {o.moved_to_peer}'s point" if o.moved_to_peer else str(o.rounds)

    def band(o: OptimizerOutcome) -> str:
        if o.good_lr_band is None:
            return "—"
        low, high = o.good_lr_band
        return f"{low:.3g} to {high:.3g} ({high / low:.2g}x)"

    lines = [
        f"| optimizer | held-out seeds {seeds_out} | vs strongest control | selection seeds "
        f"{seeds_sel} | runs | points | rounds | held-out failures | good-lr band |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ranked = sorted(found, key=lambda o: (math.isnan(o.heldout_mean), o.heldout_mean))
    for o in ranked:
        progress = progress_label(o.finished, o.runs)
        status = f" ({progress})" if progress else ""
        lines.append(
            f"| {o.optimizer}{status} | {mean_std(o.heldout_finals)} | {gap(o)} | "
            f"{mean_std(o.selection_finals)} | {o.runs} | {o.points} | {rounds(o)} | "
            f"{o.heldout_failures}/{len(o.heldout_finals)} | {band(o)} |"
        )
    lines.append("")
    lines += [f"- {o.optimizer}: {_winner_text(o.optimizer, o.winner)}" for o in ranked]
    return "\n".join(lines)


def plot_tune_lr(found: Sequence[OptimizerOutcome], out_path: Path) -> Path | None:
    """Final loss (first selection seed) against lr for each optimizer's lr sweeps, the last
    (at the winner's other settings) drawn solid, earlier ones faint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [o for o in found if any(len(s) > 1 for s in o.lr_sweeps)]
    if not drawn:
        return None
    figure, axis = plt.subplots(figsize=(8, 5))
    for index, o in enumerate(drawn):
        colour = f"C{index}"
        sweeps = [s for s in o.lr_sweeps if len(s) > 1]
        for sweep in sweeps[:-1]:
            axis.plot(*zip(*sweep, strict=True), color=colour, alpha=0.2, linewidth=1)
        axis.plot(*zip(*sweeps[-1], strict=True), color=colour, marker="o", label=o.optimizer)
    axis.set_xscale("log")
    axis.set_xlabel("peak learning rate")
    axis.set_ylabel("final validation loss (first selection seed)")
    axis.set_title("lr sweeps of the descent (faint: before the last accepted change)")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    from torch_mars.train.plots import save_figure

    return save_figure(figure, out_path)


def report_json(plan: TunePlan, found: Sequence[OptimizerOutcome]) -> dict[str, Any]:
    return {
        "selection": dataclasses.asdict(plan.selection),
        "budget": plan.spec().identity()["budget"],
        "optimizers": [
            {
                "optimizer": o.optimizer,
                "finished": o.finished,
                "winner": values_of(o.winner),
                "hyperparams": {
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in hyperparams_of(o.optimizer, o.winner, plan.base.model).items()
                },
                "selection_finals": [None if math.isnan(v) else v for v in o.selection_finals],
                "heldout_finals": o.heldout_finals,
                "runs": o.runs,
                "points": o.points,
                "rounds": o.rounds,
                "moved_to_peer": o.moved_to_peer,
                "heldout_failures": o.heldout_failures,
                "good_lr_band": o.good_lr_band,
            }
            for o in found
        ],
    }


def write_tune_report(plan: TunePlan, study: optuna.Study) -> list[Path]:
    """``summary.md``, ``tune.json`` and ``lr.png`` in the study folder."""
    trials = study.get_trials(deepcopy=False)
    found = outcomes(plan, trials)
    folder = Path(plan.study_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomically(
        folder / "summary.md",
        format_tune_table(plan, found)
        + f"\n\nLadders: {ladder_note()}.\n\nTrained on: {devices_note(trials)}.\n",
    )
    write_text_atomically(
        folder / "tune.json", json.dumps(report_json(plan, found), indent=2) + "\n"
    )
    written = [folder / "summary.md", folder / "tune.json"]
    figure = plot_tune_lr(found, folder / "lr.png")
    if figure is not None:
        written.append(figure)
    return written


def ladder_note() -> str:
    """One line per dimension: its ladder, for the report's readers."""
    lines = []
    for dimension, ladder in LADDERS.items():
        if ladder.levels:
            lines.append(f"{dimension}: {', '.join(f'{v:g}' for v in ladder.levels)}")
        else:
            lines.append(f"{dimension}: {ladder.anchor:g} x {ladder.factor:g}^k")
    return "; ".join(lines)


def devices_note(trials: Sequence[optuna.trial.FrozenTrial]) -> str:
    """The devices the study's finished runs trained on, with counts: a run's floats depend on
    the kernels its device runs, so a study run on several is said to be."""
    counts = collections.Counter(
        trial.system_attrs.get("torch_mars_worker", {}).get("device", "not recorded")
        for trial in trials
        if trial.state == optuna.trial.TrialState.COMPLETE
    )
    return "; ".join(f"{device} ({n} runs)" for device, n in counts.most_common()) or "no runs"
