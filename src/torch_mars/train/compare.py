"""Comparisons, the same for every task: train one base configuration once per optimizer and
seed (same batches, same budget), then summarise the runs over seeds and tabulate them."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_mars.train.run_record import TASK_METRICS, RunResult
from torch_mars.train.run_shell import train_run
from torch_mars.train.task import TaskConfig, task_of
from torch_mars.train.trainer import TrainConfig

# MARS-AdamW against its base AdamW and its same-cost Nesterov control NAdamW, MARS-Shampoo
# against Muon (Nesterov momentum already).
DEFAULT_OPTIMIZERS: tuple[str, ...] = ("mars-adamw", "adamw", "nadamw", "mars-shampoo", "muon")
# Each MARS rule's same-cost controls: the optimizer it preconditions like, and the Nesterov
# momentum that its approximate first moment is shaped like (docs/algorithm.md). A rule's gain
# is read against the strongest of them.
SAME_COST_CONTROLS: dict[str, tuple[str, ...]] = {
    "mars-adamw": ("adamw", "nadamw"),
    "mars-lion": ("lion",),
    "mars-shampoo": ("muon", "muon-nd"),
    "mars-m": ("muon", "muon-nd"),
}
# The `tiny` GPT at 4 x 20 tokens per parameter (3,865 steps of 16 x 32 tokens): the point of
# the study's regime map where tiny's defaults were tuned and the seeds agree most closely
# (docs/results-history.md). The five optimizers take about four minutes on two CPU cores.
DEFAULT_COMPARE = TrainConfig(
    model="tiny", data="stdlib", steps=3865, batch_size=16, eval_interval=386, eval_batches=8
)


@dataclass
class OptimizerSummary:
    """One optimizer's runs over its seeds: mean and sample std (0 for one seed) of the task's
    headline ``metric``, final and best, and the mean time and throughput."""

    optimizer: str
    task: str
    metric: str
    seeds: list[int]
    final: float
    final_std: float
    best: float
    best_std: float
    budget: int
    budget_unit: str
    train_time_s: float
    throughput: float
    # the task's test split, read once after the last evaluation (NaN: none, or a run lacks it)
    test: float = math.nan
    test_std: float = math.nan


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def mean_std_text(values: Sequence[float]) -> str:
    """``mean ± std`` of the values that are not NaN (unfinished or diverged runs), to four
    decimals; the value alone where there is one, "—" where there is none.

    >>> mean_std_text([1.0, 2.0, float("nan")]), mean_std_text([1.5]), mean_std_text([])
    ('1.5000 ± 0.7071', '1.5000', '—')
    """
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"


def summarise(results: Sequence[RunResult]) -> list[OptimizerSummary]:
    """Group run results by optimizer, in first-seen order, with mean and std over seeds."""
    summaries = []
    for name in dict.fromkeys(r.optimizer for r in results):
        runs = [r for r in results if r.optimizer == name]
        final, final_std = mean_std([r.final for r in runs])
        best, best_std = mean_std([r.best for r in runs])
        tests = [r.test for r in runs if math.isfinite(r.test)]
        test, test_std = mean_std(tests) if len(tests) == len(runs) else (math.nan, math.nan)
        summaries.append(
            OptimizerSummary(
                optimizer=name,
                task=runs[0].task,
                metric=runs[0].metric,
                seeds=[r.seed for r in runs],
                final=final,
                final_std=final_std,
                best=best,
                best_std=best_std,
                budget=runs[0].budget,
                budget_unit=runs[0].budget_unit,
                train_time_s=statistics.fmean(r.train_time_s for r in runs),
                throughput=statistics.fmean(r.throughput for r in runs),
                test=test,
                test_std=test_std,
            )
        )
    return summaries


def format_table(summaries: Sequence[OptimizerSummary]) -> str:
    """A Markdown table of the summaries, best final metric first."""
    if not summaries:
        return ""
    spec = TASK_METRICS[summaries[0].task]
    unit = summaries[0].budget_unit

    def value(mean: float, std: float, seeds: int) -> str:
        shown = spec.format(mean)
        if seeds < 2:
            return shown
        spread = spec.format(std).rstrip("%")
        return f"{shown.rstrip('%')} ± {spread}{'%' if spec.percent else ''}"

    def rank(s: OptimizerSummary) -> tuple[bool, float]:
        return math.isnan(s.final), s.final if spec.lower_is_better else -s.final

    # the test split, read once after the last evaluation, beside what was chosen on
    tested = any(math.isfinite(s.test) for s in summaries)
    test_header = f" test {spec.label.replace('validation ', '')} (read once) |" if tested else ""
    lines = [
        f"| optimizer | seeds | final {spec.label} | best {spec.label} |{test_header} {unit} "
        f"| time (s) | {unit}/s |",
        "|---|---:|---:|---:|" + ("---:|" if tested else "") + "---:|---:|---:|",
    ]
    for s in sorted(summaries, key=rank):
        n = len(s.seeds)
        test = f" {value(s.test, s.test_std, n)} |" if tested else ""
        lines.append(
            f"| {s.optimizer} | {n} | {value(s.final, s.final_std, n)} | "
            f"{value(s.best, s.best_std, n)} |{test} {s.budget:,} | {s.train_time_s:.1f} | "
            f"{s.throughput:,.0f} |"
        )
    return "\n".join(lines)


def format_control_gaps(summaries: Sequence[OptimizerSummary], one_seed: bool | None = None) -> str:
    """One line per MARS rule in ``summaries`` that has a same-cost control among them: its
    final metric minus the strongest control's (the best final), in the metric's units and in
    that control's std. With one seed, ``one_seed`` not None adds :func:`one_seed_note` (True:
    at the point where the spread was measured). Empty when there is none.

    >>> def s(name, final, std):
    ...     return OptimizerSummary(name, "text", "val_loss", [0, 1], final, std, final, std,
    ...                             1, "tokens", 1.0, 1.0)
    >>> print(format_control_gaps([s("mars-adamw", 1.90, 0.01), s("adamw", 2.0, 0.02),
    ...                            s("nadamw", 1.95, 0.02)]))
    mars-adamw - nadamw (the strongest of adamw, nadamw): -0.0500 (-2.5 sd of nadamw)
    """
    if not summaries:
        return ""
    spec = TASK_METRICS[summaries[0].task]
    by_name = {s.optimizer: s for s in summaries}
    lines = []
    for rule, controls in SAME_COST_CONTROLS.items():
        ran = [by_name[name] for name in controls if name in by_name]
        if rule not in by_name or not ran:
            continue
        best = min(ran, key=lambda s: s.final if spec.lower_is_better else -s.final)
        gap = by_name[rule].final - best.final
        shown = f"{100 * gap:+.2f} points" if spec.percent else f"{gap:+.4f}"
        sds = f" ({gap / best.final_std:+.1f} sd of {best.optimizer})" if best.final_std > 0 else ""
        names = [c for c in controls if c in by_name]
        which = f" (the strongest of {', '.join(names)})" if len(names) > 1 else ""
        note = ""
        if one_seed is not None and len(by_name[rule].seeds) == 1:
            note = "; " + one_seed_note(rule, best.optimizer, gap, one_seed)
        lines.append(f"{rule} - {best.optimizer}{which}: {shown}{sds}{note}")
    return "\n".join(lines)


# The run-to-run std of each optimizer's final validation loss at the default `compare` point,
# at its default (tuned) settings: the std over the 12 held-out runs (seeds 3-6 x data orders
# 1-3) that campaign-3's tiny/b16-4x read its winner on (docs/results.md). A one-seed
# comparison at that point reads its gaps against them.
MEASURED_SEED_STD: dict[str, float] = {
    "mars-adamw": 0.0069,
    "adamw": 0.0075,
    "nadamw": 0.0080,
    "muon": 0.0050,
    "mars-shampoo": 0.0043,
}


def one_seed_note(rule: str, control: str, gap: float, measured: bool) -> str:
    """What a one-seed gap between ``rule`` and ``control`` can say: whether it is inside two
    std of a one-seed difference as the study measured it (``measured``: the run is at the
    default `compare` point), and how to get error bars.

    >>> one_seed_note("mars-adamw", "nadamw", 0.0249, True).split("; ")[0]
    'one seed: outside the seed-to-seed spread measured here (2 sd of a difference: 0.0211)'
    >>> one_seed_note("mars-shampoo", "muon", 0.0069, True).split("; ")[0]
    'one seed: inside the seed-to-seed spread measured here (2 sd of a difference: 0.0132)'
    >>> one_seed_note("mars-lion", "lion", 0.1, True).split("; ")[1]
    'error bars: --seeds 0 1 2'
    """
    stds = [MEASURED_SEED_STD.get(rule), MEASURED_SEED_STD.get(control)]
    if not measured or None in stds:
        return "one seed, and no spread measured at this budget; error bars: --seeds 0 1 2"
    bound = 2 * math.sqrt(sum(s * s for s in stds))
    where = "inside" if abs(gap) <= bound else "outside"
    return (
        f"one seed: {where} the seed-to-seed spread measured here (2 sd of a difference: "
        f"{bound:.4f}); error bars: --seeds 0 1 2"
    )


def is_default_compare(base: TaskConfig) -> bool:
    """Whether ``base`` trains what the default `compare` does (where the spread was measured)."""
    fields = ("model", "data", "steps", "batch_size", "grad_accum", "block_size", "schedule")
    return task_of(base) is task_of(DEFAULT_COMPARE) and all(
        getattr(base, f) == getattr(DEFAULT_COMPARE, f) for f in fields
    )


def write_comparison(
    results: Sequence[RunResult], out_dir: Path, title: str, measured_spread: bool
) -> tuple[str, Path]:
    """Write a comparison's ``summary.md`` (the table, then each MARS rule's gap to its
    strongest control; with one seed, whether each gap is inside the measured spread),
    ``summary.json`` and ``curves.png`` in ``out_dir``; returns the summary's text and the
    figure's path."""
    from torch_mars.train.plots import plot_runs

    summaries = summarise(results)
    text = format_table(summaries)
    gaps = format_control_gaps(summaries, one_seed=measured_spread)
    if gaps:
        text += "\n\nMARS against its strongest same-cost control (final; < 0: MARS ahead):\n"
        text += "\n".join(f"- {line}" for line in gaps.splitlines())
    figure = plot_runs([r.run_dir for r in results], out_dir / "curves.png", title=title)
    (out_dir / "summary.md").write_text(text + "\n")
    (out_dir / "summary.json").write_text(
        json.dumps([dataclasses.asdict(s) for s in summaries], indent=2) + "\n"
    )
    return text, figure


def run_comparison(
    base: TaskConfig,
    optimizers: Sequence[str],
    seeds: Sequence[int],
    out_dir: Path,
    hyperparams: dict[str, dict[str, Any]] | None = None,
    data: Any = None,
) -> list[RunResult]:
    """Train ``base`` once per seed and optimizer (seeds outer) into
    ``out_dir/<optimizer>-seed<k>`` on ``data`` (its task's loaded data; by default loaded
    once). ``hyperparams[name]`` overrides optimizer ``name``'s defaults; ``seed`` sets the
    model's initialisation, while the data order is the base's for every run."""
    results = []
    for seed in seeds:
        for name in optimizers:
            config = dataclasses.replace(
                base,
                optimizer=name,
                seed=seed,
                run_dir=out_dir / f"{name}-seed{seed}",
                hyperparams=dict((hyperparams or {}).get(name, {})),
            )
            results.append(train_run(config, data))
    return results
