"""``torch-mars sweep``: tune each optimizer on a grid, then compare the winners over seeds.

Stage 1 (search) trains every point of each optimizer's grid on the search seeds; the point
with the best mean final metric wins (lower val loss, higher accuracy; a diverged run counts as
the worst). Stage 2 trains each winner on the final seeds. Every run trains in a folder
``SWEEP/runs/<optimizer>/<point>-seed<k>`` (its full run record, a work area), and as it
finishes its compact record (config, summary, evaluation curve) is appended to
``SWEEP/runs.jsonl`` (:mod:`.run_archive`). A run in the archive, or whose folder has a
``summary.json``, is never run again: a killed sweep resumes where it stopped, also from the
archive alone (a study kept in git), and seeds shared by the two stages run once. Points run in
``jobs`` worker processes, with the cores divided among them.

``TORCH_MARS_SWEEP_PAUSE_AFTER=N`` makes a sweep stop still once N runs have finished in this
invocation (after archiving them), saying so on stderr: a test kills it there, at a point it
controls rather than at a moment it guesses.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torch_mars.train.compare import OptimizerSummary, summarise, train_run
from torch_mars.train.grid import Grid, grid_points
from torch_mars.train.run_archive import (
    ARCHIVE_FILE,
    append_record,
    compact_record,
    curve_rows,
    read_archive,
    result_of,
)
from torch_mars.train.run_record import (
    SUMMARY_FILE,
    TASK_METRICS,
    RunResult,
    read_summary,
    write_summary,
)
from torch_mars.train.trainer import TrainConfig
from torch_mars.train.vision import VisionConfig

BaseConfig = TrainConfig | VisionConfig
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
        jobs: worker processes (1: runs in this process).
    """

    base: BaseConfig
    grid: Grid
    search_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    sweep_dir: Path
    jobs: int = 1

    def __post_init__(self) -> None:
        if not self.grid:
            raise ValueError("a sweep needs at least one optimizer")
        if not self.search_seeds or not self.seeds:
            raise ValueError("--search-seeds and --seeds must each name at least one seed")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")


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
    """A folder name for a grid point, stable and readable: ``lr=0.003_betas=0.9,0.95``.

    >>> point_name({"lr": 3e-3, "betas": (0.9, 0.95)})
    'lr=0.003_betas=0.9,0.95'
    """
    if not hyperparams:
        return "defaults"

    def text(value: Any) -> str:
        if isinstance(value, tuple | list):
            return ",".join(text(v) for v in value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    name = "_".join(f"{key}={text(value)}" for key, value in hyperparams.items())
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "-", name)


def run_key(optimizer: str, hyperparams: dict[str, Any], seed: int) -> str:
    """A run's name in the sweep: its folder under ``runs/`` and its key in the archive."""
    return f"{optimizer}/{point_name(hyperparams)}-seed{seed}"


def run_dir(plan: SweepPlan, optimizer: str, hyperparams: dict[str, Any], seed: int) -> Path:
    return plan.sweep_dir / "runs" / run_key(optimizer, hyperparams, seed)


PAUSE_AFTER_VARIABLE = "TORCH_MARS_SWEEP_PAUSE_AFTER"


def _pause_if_asked(finished_here: int) -> None:
    """Block for good once ``finished_here`` reaches ``$TORCH_MARS_SWEEP_PAUSE_AFTER``."""
    wanted = os.environ.get(PAUSE_AFTER_VARIABLE)
    if wanted is not None and finished_here == int(wanted):
        print(f"\nsweep paused after {finished_here} finished runs", file=sys.stderr, flush=True)
        threading.Event().wait()


def _config(plan: SweepPlan, optimizer: str, hyperparams: dict[str, Any], seed: int) -> BaseConfig:
    return dataclasses.replace(
        plan.base,
        optimizer=optimizer,
        seed=seed,
        hyperparams=dict(hyperparams),
        run_dir=run_dir(plan, optimizer, hyperparams, seed),
        quiet=True,
    )


_CORPORA: dict[str, Any] = {}


def run_point(config: BaseConfig) -> RunResult:
    """Train one point into its run folder (its log lines to ``log.txt``, no checkpoint kept)
    and return its result; a diverged run returns, and records, a final metric of NaN."""
    if config.run_dir.exists():
        shutil.rmtree(config.run_dir)  # a run killed before its summary: start it again
    config.run_dir.mkdir(parents=True)
    corpus = None
    if isinstance(config, TrainConfig):
        from torch_mars.data import load_corpus

        if config.data not in _CORPORA:
            _CORPORA[config.data] = load_corpus(config.data)
        corpus = _CORPORA[config.data]
    with (config.run_dir / "log.txt").open("w") as log, contextlib.redirect_stdout(log):
        try:
            result = train_run(config, corpus)
            # A sweep reruns an unfinished point from the start; the checkpoint is dead weight.
            (config.run_dir / "checkpoint.pt").unlink(missing_ok=True)
            return result
        except FloatingPointError as error:
            print(f"diverged: {error}")
            task = "vision" if isinstance(config, VisionConfig) else "text"
            result = RunResult(
                task=task,
                optimizer=config.optimizer,
                seed=config.seed,
                metric=TASK_METRICS[task].key,
                final=math.nan,
                best=math.nan,
                final_train_loss=math.nan,
                budget=0,
                budget_unit="tokens" if task == "text" else "images",
                train_time_s=0.0,
                steps=0,
                run_dir=config.run_dir,
            )
            write_summary(result)
            return result


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def _run_all(
    plan: SweepPlan,
    configs: list[BaseConfig],
    done: Callable[[BaseConfig, RunResult], None],
) -> None:
    """Run ``configs`` (none of them done yet) on ``plan.jobs`` workers; ``done(config,
    result)`` is called in this process as each finishes."""
    if not configs:
        return
    if plan.jobs == 1:
        for config in configs:
            done(config, run_point(config))
        return
    threads = max(1, (os.cpu_count() or 1) // plan.jobs)
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=plan.jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads,),
    ) as pool:
        futures = {pool.submit(run_point, config): config for config in configs}
        for future in concurrent.futures.as_completed(futures):
            done(futures[future], future.result())


@dataclass
class SweepReport:
    """A finished sweep: every point, each optimizer's winner, and the winners' summaries over
    the final seeds (in the order of the plan's optimizers)."""

    task: str
    points: list[PointResult]
    winners: dict[str, PointResult]
    summaries: list[OptimizerSummary]
    search_seeds: tuple[int, ...]
    seeds: tuple[int, ...]


def validate_plan(plan: SweepPlan) -> int:
    """Check every point before anything trains: its optimizer builds with its hyperparameters
    on a small model of the task (an unknown key or a value out of range is a ``ValueError``
    naming the optimizer). Returns the number of points."""
    from torch_mars.models import GPT, gpt_config, resnet18
    from torch_mars.train.optimizers import build_optimizer
    from torch_mars.train.vision import vision_hyperparams

    count = 0
    for name, axes in plan.grid.items():
        for hp in grid_points(axes):
            try:
                if isinstance(plan.base, VisionConfig):
                    settings = vision_hyperparams(name, hp)
                    model: torch.nn.Module = resnet18(width=1)
                else:
                    config = dataclasses.replace(plan.base, optimizer=name, hyperparams=dict(hp))
                    settings = config.resolved_hyperparams()
                    model = GPT(gpt_config("tiny", 256))
                build_optimizer(name, model, settings, getattr(plan.base, "exact", False))
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


def run_sweep(plan: SweepPlan, progress: Callable[[int, int], None] | None = None) -> SweepReport:
    """Run (or resume) ``plan`` and return its report; ``progress(done, total)`` is called as
    runs finish (runs found done count at once)."""
    task = "vision" if isinstance(plan.base, VisionConfig) else "text"
    spec = TASK_METRICS[task]
    points = {
        (name, point_name(hp)): PointResult(name, hp)
        for name, axes in plan.grid.items()
        for hp in grid_points(axes)
    }
    archive_path = plan.sweep_dir / ARCHIVE_FILE
    archived = read_archive(archive_path)
    results: dict[Path, RunResult] = {}
    finished = 0
    finished_here = 0
    total = len(points) * len(plan.search_seeds)

    def record(config: BaseConfig, result: RunResult) -> None:
        nonlocal finished
        results[config.run_dir] = result
        points[(config.optimizer, point_name(config.hyperparams))].finals[config.seed] = (
            result.final
        )
        finished += 1
        if progress is not None:
            progress(finished, total)

    def archive(config: BaseConfig, result: RunResult) -> None:
        key = run_key(config.optimizer, config.hyperparams, config.seed)
        archived[key] = compact_record(config.run_dir, key)
        append_record(archive_path, archived[key])
        record(config, result)

    def trained(config: BaseConfig, result: RunResult) -> None:
        nonlocal finished_here
        archive(config, result)
        finished_here += 1
        _pause_if_asked(finished_here)

    def stage(wanted: list[tuple[str, dict[str, Any], int]]) -> None:
        to_run = []
        for name, hp, seed in wanted:
            config = _config(plan, name, hp, seed)
            key = run_key(name, hp, seed)
            if config.run_dir in results:
                continue
            if key in archived:
                record(config, result_of(archived[key], config.run_dir))
            elif (config.run_dir / SUMMARY_FILE).is_file():
                archive(config, read_summary(config.run_dir))
            else:
                to_run.append(config)
        _run_all(plan, to_run, trained)

    stage([(p.optimizer, p.hyperparams, s) for p in points.values() for s in plan.search_seeds])
    winners = {
        name: select_best(
            [p for p in points.values() if p.optimizer == name],
            plan.search_seeds,
            spec.lower_is_better,
        )
        for name in plan.grid
    }
    extra = [s for s in plan.seeds if s not in plan.search_seeds]
    total += len(winners) * len(extra)
    stage([(w.optimizer, w.hyperparams, s) for w in winners.values() for s in plan.seeds])
    final_runs = [
        results[run_dir(plan, w.optimizer, w.hyperparams, s)]
        for w in winners.values()
        for s in plan.seeds
    ]
    return SweepReport(
        task,
        list(points.values()),
        winners,
        summarise(final_runs),
        plan.search_seeds,
        plan.seeds,
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
    figure.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_path, dpi=120)
    plt.close(figure)
    return out_path


def write_report(plan: SweepPlan, report: SweepReport) -> list[Path]:
    """``summary.md``, ``sweep.json``, ``lr.png`` and ``winners.png`` (drawn from the archive)
    in the sweep folder."""
    from torch_mars.train.plots import RunCurve, plot_curves

    folder = plan.sweep_dir
    table = format_sweep_table(report)
    (folder / "summary.md").write_text(table + "\n")
    (folder / "sweep.json").write_text(json.dumps(report_json(report), indent=2) + "\n")
    written = [folder / "summary.md", folder / "sweep.json"]
    lr_figure = plot_lr_curves(report, folder / "lr.png")
    if lr_figure is not None:
        written.append(lr_figure)
    archived = read_archive(folder / ARCHIVE_FILE)
    keys = [
        run_key(w.optimizer, w.hyperparams, s)
        for w in report.winners.values()
        for s in report.seeds
    ]
    curves = [
        RunCurve(report.task, archived[key]["config"]["optimizer"], curve_rows(archived[key]))
        for key in keys
        if key in archived and archived[key]["curve"]["rows"]
    ]
    if curves:
        written.append(plot_curves(curves, folder / "winners.png", title="winners"))
    return written
