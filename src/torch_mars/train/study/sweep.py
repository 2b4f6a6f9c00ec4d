"""``torch-mars sweep``: tune each optimizer on a grid, then compare the winners over seeds; the
plain-grid mode of the study engine (:mod:`.study_engine`), which ``torch-mars tune`` runs too.

Stage 1 (search) trains every point of each optimizer's grid on the search seeds; the point
with the best mean final metric wins (lower val loss, higher accuracy; a diverged run counts as
the worst). Stage 2 trains each winner on the final seeds. Each run is a trial of the sweep's
Optuna study (``SWEEP/study.db`` by default), which keeps its summary and, for the final seeds,
its evaluation curve: a killed sweep resumes without rerunning a finished run, seeds shared by
the two stages run once, and ``jobs`` workers (or workers on other machines, through
``storage``) share the work. A sweep folder written before the study engine keeps its results in
``runs.jsonl``: its runs are taken into the new study as finished trials, where their budget is
the sweep's.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from torch_mars.atomic_files import write_text_atomically
from torch_mars.train.compare import OptimizerSummary, summarise
from torch_mars.train.optimizers import OPTIMIZER_NAMES
from torch_mars.train.run_archive import ARCHIVE_FILE, read_archive
from torch_mars.train.run_record import TASK_METRICS, RunResult
from torch_mars.train.study.engine import StudySpec, finished_results, open_study, study_progress
from torch_mars.train.study.grid import Grid, grid_points
from torch_mars.train.study.grid_search import GridSearch
from torch_mars.train.study.workers import run_workers
from torch_mars.train.task import TaskConfig, task_of

# Optimizers a MARS rule is measured against in the table's gap column.
BASELINES: tuple[str, ...] = ("adamw", "muon", "lion", "nadamw")


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep trains.

    Attributes:
        base: the budget and task (any optimizer; each run replaces it).
        grid: ``{optimizer: {key: values}}``; an optimizer with no axes runs its defaults.
        search_seeds: seeds of stage 1.
        seeds: seeds of stage 2, for each optimizer's best point.
        sweep_dir: the sweep folder.
        jobs: local worker processes (1: runs in this process).
        storage: the study's Optuna storage (None: ``sweep_dir/study.db``).
        overwrite: start the sweep afresh if it was run with other settings.
    """

    base: TaskConfig
    grid: Grid
    search_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    sweep_dir: Path
    jobs: int = 1
    storage: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.grid:
            raise ValueError("a sweep needs at least one optimizer")
        if not self.search_seeds or not self.seeds:
            raise ValueError("--search-seeds and --seeds must each name at least one seed")
        for flag, seeds in (("--search-seeds", self.search_seeds), ("--seeds", self.seeds)):
            if len(set(seeds)) != len(seeds):
                raise ValueError(f"{flag} {list(seeds)}: a seed is named twice")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")

    @property
    def task(self) -> str:
        return task_of(self.base).name

    def searches(self) -> tuple[GridSearch, ...]:
        lower = TASK_METRICS[self.task].lower_is_better
        return tuple(
            GridSearch(
                name,
                tuple((point_name(hp), tuple(hp.items())) for hp in grid_points(axes)),
                self.search_seeds,
                self.seeds,
                lower,
                getattr(self.base, "data_seed", 0),
            )
            for name, axes in self.grid.items()
        )

    def spec(self) -> StudySpec:
        settings = {
            "kind": "sweep",
            "grid": {
                name: {k: list(v) for k, v in axes.items()} for name, axes in self.grid.items()
            },
            "search_seeds": self.search_seeds,
            "seeds": self.seeds,
            "data_seed": getattr(self.base, "data_seed", 0),
        }
        return StudySpec(
            base=self.base,
            searches=self.searches(),
            curve_seeds=self.seeds,
            study_dir=self.sweep_dir,
            settings=json.loads(json.dumps(settings)),
            optimizer_choices=OPTIMIZER_NAMES,
            storage=self.storage,
            study_name=self.sweep_dir.name,
            jobs=self.jobs,
            overwrite=self.overwrite,
        )


@dataclass
class PointResult:
    """One grid point of one optimizer: its hyperparameters and the final metric per seed
    (NaN for a diverged run)."""

    optimizer: str
    hyperparams: dict[str, Any]
    finals: dict[int, float] = field(default_factory=dict)

    def mean(self, seeds: Sequence[int]) -> float:
        values = [self.finals[s] for s in seeds if s in self.finals]
        return math.fsum(values) / len(values) if values else math.nan


def point_name(hyperparams: dict[str, Any]) -> str:
    """A grid point's key, stable and readable: ``lr=0.003_betas=0.9,0.95``.

    >>> point_name({"lr": 3e-3, "betas": (0.9, 0.95)})
    'lr=0.003_betas=0.9,0.95'
    """
    if not hyperparams:
        return "defaults"

    def text(value: Any) -> str:
        if isinstance(value, tuple | list):
            return ",".join(text(v) for v in value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    return "_".join(f"{key}={text(value)}" for key, value in hyperparams.items())


@dataclass
class SweepReport:
    """A finished sweep: every point, each optimizer's winner, the winners' summaries over the
    final seeds (in the order of the plan's optimizers), and each winner's final runs' curves."""

    task: str
    points: list[PointResult]
    winners: dict[str, PointResult]
    summaries: list[OptimizerSummary]
    search_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    curves: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)


def validate_plan(plan: SweepPlan) -> int:
    """Check every point before anything trains: its optimizer builds with its hyperparameters
    on a small model of the task (an unknown key or a value out of range is a ``ValueError``
    naming the optimizer). Returns the number of points."""
    task = task_of(plan.base)
    count = 0
    for name, axes in plan.grid.items():
        for hp in grid_points(axes):
            try:
                config = dataclasses.replace(plan.base, optimizer=name, hyperparams=dict(hp))
                task.check_hyperparams(config)
            except ValueError as error:
                raise ValueError(f"--grid point {name}:{point_name(hp)}: {error}") from error
            count += 1
    return count


def select_best(points: Sequence[PointResult], seeds: Sequence[int], lower_is_better: bool):
    """The point with the best mean over ``seeds`` (NaN: worst; ties: the first)."""

    def badness(point: PointResult) -> float:
        mean = point.mean(seeds)
        if math.isnan(mean):
            return math.inf
        return mean if lower_is_better else -mean

    return min(points, key=badness)


def import_archive(plan: SweepPlan, study: optuna.Study, archive: dict[str, Any]) -> int:
    """Take the runs of a pre-engine ``runs.jsonl`` (``archive``, as :func:`read_archive`
    reads it) into ``study`` as finished trials: those of this sweep's budget and grid that it
    lacks. Returns how many."""
    if not archive:
        return 0
    spec = plan.spec()
    budget = spec.identity()["budget"]
    keys = {(s.optimizer, key) for s in spec.searches for key, _ in s.points}
    have = set(finished_results(study.get_trials(deepcopy=False)))
    added = 0
    for record in archive.values():
        optimizer, _, name = record["run"].partition("/")
        key, _, seed_text = name.rpartition("-seed")
        run = (optimizer, key, int(seed_text), getattr(plan.base, "data_seed", 0))
        config = json.loads(json.dumps(record["config"], default=str))
        same_budget = all(config.get(k, v) == v for k, v in budget.items() if k != "data")
        if run in have or (optimizer, key) not in keys or not same_budget:
            continue
        summary = record["summary"]
        attrs = {"optimizer": optimizer, "point": key, "seed": run[2], "label": key}
        attrs |= {"final": summary["final"], "summary": summary, "curve": record["curve"]}
        worse = math.inf if TASK_METRICS[plan.task].lower_is_better else -math.inf
        study.add_trial(
            optuna.trial.create_trial(
                value=summary["final"] if summary["final"] is not None else worse,
                user_attrs=attrs,
            )
        )
        have.add(run)
        added += 1
    return added


def run_sweep(
    plan: SweepPlan,
    progress: Callable[[str], None] | None = None,
    opened: Callable[[int, int], None] | None = None,
) -> SweepReport:
    """Run (or resume) ``plan`` and return its report; ``opened(finished, planned)`` is called
    once the study is open (its runs so far, an old archive's among them, and the runs it
    plans), then ``progress(line)`` as each run finishes here."""
    spec = plan.spec()
    archive = read_archive(plan.sweep_dir / ARCHIVE_FILE)  # a bad line stops it here
    study = open_study(spec)
    import_archive(plan, study, archive)
    if opened is not None:
        opened(*study_progress(spec, study.get_trials(deepcopy=False)))
    run_workers(spec, progress)
    return sweep_report(plan, study.get_trials(deepcopy=False))


def _result_of(summary: dict[str, Any]) -> RunResult:
    return RunResult.from_dict(summary)


def sweep_report(plan: SweepPlan, trials: Sequence[optuna.trial.FrozenTrial]) -> SweepReport:
    """The report of a finished sweep, from its study's trials."""
    results = finished_results(trials)
    by_run = {
        (t.user_attrs["optimizer"], t.user_attrs["point"], t.user_attrs["seed"]): t
        for t in trials
        if t.state == optuna.trial.TrialState.COMPLETE and "point" in t.user_attrs
    }
    points: list[PointResult] = []
    winners: dict[str, PointResult] = {}
    final_runs: list[RunResult] = []
    curves: dict[str, list[list[dict[str, Any]]]] = {}
    for search in plan.searches():
        mine = []
        for key, items in search.points:
            finals = {
                s: v for (o, k, s, _), v in results.items() if o == search.optimizer and k == key
            }
            mine.append(PointResult(search.optimizer, dict(items), finals))
        points += mine
        state = search.replay(results)
        if state.needed or state.winner is None:
            raise ValueError(f"the sweep of {search.optimizer} has not finished")
        winners[search.optimizer] = next(
            p for p in mine if point_name(p.hyperparams) == state.winner
        )
        for seed in plan.seeds:
            attrs = by_run[(search.optimizer, state.winner, seed)].user_attrs
            final_runs.append(_result_of(attrs["summary"]))
            curve = attrs.get("curve")
            if curve and curve["rows"]:
                columns = curve["columns"]
                curves.setdefault(search.optimizer, []).append(
                    [dict(zip(columns, row, strict=True)) for row in curve["rows"]]
                )
    return SweepReport(
        plan.task,
        points,
        winners,
        summarise(final_runs),
        plan.search_seeds,
        plan.seeds,
        curves,
    )


def format_sweep_table(report: SweepReport) -> str:
    """Each optimizer's winning point, its final metric over the final seeds (mean ± std), its
    gap to the best baseline (:data:`BASELINES`) in units of that baseline's std, and the mean
    over the final seeds that the search did not use (free of the search's selection bias)."""
    spec = TASK_METRICS[report.task]
    summaries = {s.optimizer: s for s in report.summaries}
    baselines = [s for s in report.summaries if s.optimizer in BASELINES]
    best_baseline = (
        min(baselines, key=lambda s: s.final if spec.lower_is_better else -s.final)
        if baselines
        else None
    )

    def gap(s: OptimizerSummary) -> str:
        if best_baseline is None or s is best_baseline:
            return "—"
        difference = s.final - best_baseline.final
        shown = spec.format(abs(difference)).rstrip("%")
        sign = "+" if difference >= 0 else "-"
        sigmas = (
            f" ({difference / best_baseline.final_std:+.1f} sd)"
            if best_baseline.final_std > 0
            else ""
        )
        return f"{sign}{shown}{'%' if spec.percent else ''}{sigmas}"

    def value(mean: float, std: float) -> str:
        if len(report.seeds) < 2:
            return spec.format(mean)
        return f"{spec.format(mean).rstrip('%')} ± {spec.format(std)}"

    reference = f"vs {best_baseline.optimizer}" if best_baseline else "vs best baseline"
    fresh = [seed for seed in report.seeds if seed not in report.search_seeds]
    fresh_label = f"seeds {', '.join(map(str, fresh))} only" if fresh else ""

    def fresh_value(name: str) -> str:
        values = [report.winners[name].finals.get(seed, math.nan) for seed in fresh]
        return spec.format(math.fsum(values) / len(values))

    lines = [
        f"| optimizer | best point | seeds | final {spec.label} | {reference} |"
        + (f" {fresh_label} |" if fresh else ""),
        "|---|---|---:|---:|---:|" + ("---:|" if fresh else ""),
    ]
    ranked = sorted(
        report.summaries,
        key=lambda s: (math.isnan(s.final), s.final if spec.lower_is_better else -s.final),
    )
    for s in ranked:
        point = report.winners[s.optimizer].hyperparams
        shown = ", ".join(f"{k}={v}" for k, v in point.items()) or "defaults"
        lines.append(
            f"| {s.optimizer} | {shown} | {len(s.seeds)} | {value(s.final, s.final_std)} | "
            f"{gap(summaries[s.optimizer])} |" + (f" {fresh_value(s.optimizer)} |" if fresh else "")
        )
    return "\n".join(lines)


def report_json(report: SweepReport) -> dict[str, Any]:
    def jsonable(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, tuple):
            return list(value)
        return value

    return {
        "task": report.task,
        "search_seeds": list(report.search_seeds),
        "seeds": list(report.seeds),
        "points": [
            {
                "optimizer": p.optimizer,
                "hyperparams": {k: jsonable(v) for k, v in p.hyperparams.items()},
                "finals": {str(s): jsonable(v) for s, v in sorted(p.finals.items())},
                "search_mean": jsonable(p.mean(report.search_seeds)),
            }
            for p in report.points
        ],
        "winners": {
            name: {k: jsonable(v) for k, v in w.hyperparams.items()}
            for name, w in report.winners.items()
        },
        "summaries": [
            {k: jsonable(v) for k, v in dataclasses.asdict(s).items()} for s in report.summaries
        ],
    }


def plot_lr_curves(report: SweepReport, out_path: Path) -> Path | None:
    """Final metric (mean over the search seeds) against lr, log x, one line per optimizer
    and setting of its other axes; None when no optimizer has more than one lr."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    spec = TASK_METRICS[report.task]
    lines: dict[str, list[tuple[float, float]]] = {}
    for point in report.points:
        lr = point.hyperparams.get("lr")
        if not isinstance(lr, int | float):
            continue
        others = {k: v for k, v in point.hyperparams.items() if k != "lr"}
        label = point.optimizer + "".join(f" {k}={v}" for k, v in others.items())
        scale = 100.0 if spec.percent else 1.0
        lines.setdefault(label, []).append((lr, scale * point.mean(report.search_seeds)))
    lines = {k: sorted(v) for k, v in lines.items() if len(v) > 1}
    if not lines:
        return None
    figure, axis = plt.subplots(figsize=(8, 5))
    for label, points in lines.items():
        axis.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label)
    axis.set_xscale("log")
    # Tick the grid's own rates: log-scale minor labels overlap on grids spaced 1.5x.
    rates = sorted({lr for points in lines.values() for lr, _ in points})
    axis.set_xticks(rates, [f"{lr:.2g}" for lr in rates], rotation=45)
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.set_xlabel("peak learning rate")
    axis.set_ylabel(f"final {spec.label}" + (" (%)" if spec.percent else ""))
    seeds = ", ".join(map(str, report.search_seeds))
    plural = "s" if len(report.search_seeds) > 1 else ""
    axis.set_title(f"search stage, seed{plural} {seeds}" + (" (mean)" if plural else ""))
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=7)
    from torch_mars.train.plots import save_figure

    return save_figure(figure, out_path)


def write_report(plan: SweepPlan, report: SweepReport) -> list[Path]:
    """``summary.md``, ``sweep.json``, ``lr.png`` and ``winners.png`` (the winners' final runs'
    curves, from the study) in the sweep folder."""
    from torch_mars.train.plots import RunCurve, plot_curves

    folder = plan.sweep_dir
    table = format_sweep_table(report)
    write_text_atomically(folder / "summary.md", table + "\n")
    write_text_atomically(folder / "sweep.json", json.dumps(report_json(report), indent=2) + "\n")
    written = [folder / "summary.md", folder / "sweep.json"]
    lr_figure = plot_lr_curves(report, folder / "lr.png")
    if lr_figure is not None:
        written.append(lr_figure)
    curves = [
        RunCurve(report.task, name, rows) for name, runs in report.curves.items() for rows in runs
    ]
    if curves:
        written.append(plot_curves(curves, folder / "winners.png", title="winners"))
    return written
