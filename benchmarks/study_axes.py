"""The controls and the two axes of the tuned study (issue #13), with the protocol of
benchmarks/study_compare.py (lr grids spaced 1.5x, search seed 0, each winner on seeds 0-2),
fixed here before any result was seen. Resumable: finished runs are never rerun.

Controls, at the `compare` budget:
- ``nadamw``: torch's NAdam with decoupled weight decay, tuned like the others (lr grid x betas
  {(0.9, 0.95), (0.95, 0.99)}). MARS's approximate-mode momentum is a Nesterov-like mix of g_t
  and the EMA of past gradients; NAdamW has that shape without the variance-reduction story.
- ``gamma0``: MARS-AdamW with gamma = 0 (AdamW on a per-tensor clip of g), tuned the same way.
- ``exact``: each MARS rule's winner (from the study's stage B) in the exact mode, seeds 0-2.
Axes (AdamW, MARS-AdamW, Muon, MARS-Shampoo at their stage-B betas/gamma/momentum, lr re-tuned
on a 5-point 1.5x grid at every point):
- ``batch``: 4 and 64 sequences per step at the same 819,200 tokens (16 is the study itself);
  the grid is centred on the batch-16 lr times sqrt(batch / 16).
- ``tokens``: the `tiny` config (24,736 non-embedding parameters) trained for 1x, 4x and 8x of
  20 tokens per parameter, on a 7-point grid for the Adam pair and a 5-point one for the
  Newton-Schulz pair. The axis optimizers that ``--winners`` tuned take part: the Adam pair
  from the CPU study, all four from ``--winners study-compare-h100``.
- ``batch-tiny``: the batch axis where a CPU affords it: the same optimizers on `tiny` at
  4x 20 tokens per parameter with 4, 16 and 64 sequences per step (the same tokens; 16 is the
  tokens axis's 4x point), each grid centred on that point's tuned lr times sqrt(batch / 16).
Each lr grid of the axes gains a 1.5x point beyond an edge that holds the best lr, up to three
times (as in study_compare's stage A); the gain is then read at each optimizer's tuned lr.

    python benchmarks/study_axes.py [--jobs 6] [--folder study-axes-h100] [--data stdlib]
        [--winners study-compare-h100] [--stages controls batch tokens batch-tiny]

Writes benchmarks/results/FOLDER/<sweep>/ (run folders, sweep.json, summary.md, figures), then
``axes.json`` and ``axes.png`` (each MARS rule's gain over its base, in units of the base's
std, against batch size and against tokens per parameter).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from study_compare import EXTENSIONS, STEP, extend_at_edges, tiny_budget

from torch_mars.train.compare import DEFAULT_COMPARE
from torch_mars.train.sweep import SweepPlan, SweepReport, run_sweep, write_report
from torch_mars.train.trainer import TrainConfig

RESULTS = Path(__file__).resolve().parent / "results"
TOKENS_PER_STEP = DEFAULT_COMPARE.batch_size * 128
BATCHES = (4, 64)
AXIS_OPTIMIZERS = ("adamw", "mars-adamw", "muon", "mars-shampoo")
PAIRS = {"mars-adamw": "adamw", "mars-shampoo": "muon"}
TOKEN_MULTIPLES = (1, 4, 8)
TINY_BATCHES = (4, 16, 64)
TINY_BATCH_MULTIPLE = 4
ADAM_TINY_LRS = (1.3e-3, 2e-3, 3e-3, 4.5e-3, 6.7e-3, 1e-2, 1.5e-2)
# Muon's tuned rate on `tiny` at 4x (docs/results.md, MARS-M against Muon) was 3e-2.
NEWTON_SCHULZ_TINY_LRS = (1.3e-2, 2e-2, 3e-2, 4.5e-2, 6.7e-2)
TINY_LRS = {
    "adamw": ADAM_TINY_LRS,
    "mars-adamw": ADAM_TINY_LRS,
    "muon": NEWTON_SCHULZ_TINY_LRS,
    "mars-shampoo": NEWTON_SCHULZ_TINY_LRS,
}
BETAS = ((0.9, 0.95), (0.95, 0.99))


def progress(done: int, total: int) -> None:
    print(f"{done}/{total} runs", flush=True)


def grid_around(centre: float, points: int = 5) -> tuple[float, ...]:
    """``points`` values spaced ``STEP`` apart, centred on ``centre``, two significant digits."""
    half = points // 2
    return tuple(float(f"{centre * STEP**k:.2g}") for k in range(-half, half + 1))


def sweep(folder: Path, base: TrainConfig, grid: dict, jobs: int) -> SweepReport:
    plan = SweepPlan(
        base=base, grid=grid, search_seeds=(0,), seeds=(0, 1, 2), sweep_dir=folder, jobs=jobs
    )
    report = run_sweep(plan, progress)
    write_report(plan, report)
    return report


def sweep_lr_with_edges(
    folder: Path, base: TrainConfig, lrs: dict[str, list[float]], fixed: dict, jobs: int
) -> SweepReport:
    """The lr sweep of study_compare's stage A: an optimizer whose best lr is at an edge of its
    grid gets one more 1.5x point on that side, up to three times; then its winner's seeds."""
    grids = {name: list(values) for name, values in lrs.items()}
    for _ in range(EXTENSIONS + 1):
        grid = {name: {"lr": tuple(values), **fixed[name]} for name, values in grids.items()}
        report = sweep(folder, base, grid, jobs)
        best = {name: winner.hyperparams["lr"] for name, winner in report.winners.items()}
        if not extend_at_edges(grids, best):
            break
    return report


def summary_of(report: SweepReport) -> dict[str, dict]:
    return {
        s.optimizer: {
            "mean": s.final,
            "std": s.final_std,
            "point": report.winners[s.optimizer].hyperparams,
        }
        for s in report.summaries
    }


def controls(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    adam_lrs = grid_around(winners["adamw"]["lr"], 7)
    nadamw = sweep(folder / "nadamw", base, {"nadamw": {"lr": adam_lrs, "betas": BETAS}}, jobs)
    gamma0 = sweep(
        folder / "gamma0",
        base,
        {"mars-adamw": {"lr": adam_lrs, "betas": BETAS, "gamma": (0.0,)}},
        jobs,
    )
    exact_grid = {
        name: {key: (tuple(v) if isinstance(v, list) else v,) for key, v in winners[name].items()}
        for name in ("mars-adamw", "mars-lion", "mars-shampoo")
        if name in winners
    }
    exact = sweep(folder / "exact", dataclasses.replace(base, exact=True), exact_grid, jobs)
    return {
        "nadamw": summary_of(nadamw),
        "gamma0": summary_of(gamma0),
        "exact": summary_of(exact),
    }


def fixed_axes(point: dict) -> dict:
    """A winner's settings other than lr, as one-value grid axes."""
    return {k: (tuple(v) if isinstance(v, list) else v,) for k, v in point.items() if k != "lr"}


def at_batch(base: TrainConfig, batch: int) -> TrainConfig:
    """``base`` with ``batch`` sequences per step and as many validation sequences as ``base``
    (eval_batches scaled by the inverse), so every point of an axis is scored on the same
    number of tokens."""
    sequences = base.eval_batches * base.batch_size
    return dataclasses.replace(base, batch_size=batch, eval_batches=max(1, sequences // batch))


def batch_axis(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    results = {}
    for batch in BATCHES:
        steps = DEFAULT_COMPARE.steps * DEFAULT_COMPARE.batch_size // batch
        sized = dataclasses.replace(
            at_batch(base, batch), steps=steps, eval_interval=max(1, steps // 10)
        )
        scale = (batch / DEFAULT_COMPARE.batch_size) ** 0.5
        lrs = {name: list(grid_around(winners[name]["lr"] * scale)) for name in AXIS_OPTIMIZERS}
        fixed = {name: fixed_axes(winners[name]) for name in AXIS_OPTIMIZERS}
        report = sweep_lr_with_edges(folder / f"batch-{batch}", sized, lrs, fixed, jobs)
        results[batch] = summary_of(report)
    return results


def tokens_sweep(
    folder: Path, base: TrainConfig, winners: dict, multiple: int, jobs: int
) -> dict[str, dict]:
    """The axis optimizers that ``winners`` tuned, on `tiny` for ``multiple`` x 20 tokens per
    parameter."""
    sized = tiny_budget(base, multiple)
    names = [name for name in AXIS_OPTIMIZERS if name in winners]
    lrs = {name: list(TINY_LRS[name]) for name in names}
    fixed = {name: fixed_axes(winners[name]) for name in names}
    return summary_of(sweep_lr_with_edges(folder / f"tokens-{multiple}x", sized, lrs, fixed, jobs))


def tokens_axis(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    return {
        multiple: tokens_sweep(folder, base, winners, multiple, jobs)
        for multiple in TOKEN_MULTIPLES
    }


def tiny_batch_axis(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    """The batch axis on `tiny`. Batch 16 is the tokens axis's sweep (resumed: nothing reruns);
    the other batches centre their grids on its tuned lrs and keep its other settings."""
    results = {
        DEFAULT_COMPARE.batch_size: tokens_sweep(folder, base, winners, TINY_BATCH_MULTIPLE, jobs)
    }
    tuned = {name: point["point"] for name, point in results[DEFAULT_COMPARE.batch_size].items()}
    for batch in TINY_BATCHES:
        if batch == DEFAULT_COMPARE.batch_size:
            continue
        sized = tiny_budget(at_batch(base, batch), TINY_BATCH_MULTIPLE)
        scale = (batch / DEFAULT_COMPARE.batch_size) ** 0.5
        lrs = {name: list(grid_around(point["lr"] * scale)) for name, point in tuned.items()}
        fixed = {name: fixed_axes(point) for name, point in tuned.items()}
        report = sweep_lr_with_edges(folder / f"batch-tiny-{batch}", sized, lrs, fixed, jobs)
        results[batch] = summary_of(report)
    return dict(sorted(results.items()))


def gain_in_stds(results: dict, mars: str) -> float | None:
    """(base mean - MARS mean) / base std: positive when MARS is ahead."""
    if mars not in results or PAIRS[mars] not in results:
        return None
    base = results[PAIRS[mars]]
    return (base["mean"] - results[mars]["mean"]) / base["std"] if base["std"] else None


def gap_points(results: dict, mars: str) -> list[tuple[float, float, float, float]]:
    """``(x, gap, spread, gap in base std)`` per axis point where both ``mars`` and its base
    ran: gap = base mean - MARS mean (positive: MARS ahead), spread = sqrt(std_base^2 +
    std_mars^2)."""
    points = []
    for x in sorted(results, key=float):
        pair = results[x]
        if mars in pair and PAIRS[mars] in pair:
            base, ours = pair[PAIRS[mars]], pair[mars]
            spread = (base["std"] ** 2 + ours["std"] ** 2) ** 0.5
            points.append((float(x), base["mean"] - ours["mean"], spread, gain_in_stds(pair, mars)))
    return points


def plot_axes(axes: dict, path: Path) -> None:
    """One panel per axis that has results: each MARS rule's gap to its base in nats (error
    bars: the two stds combined), labelled with the gap in the base's std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {
        "batch": ("sequences per step (same tokens)", True),
        "tokens": ("tokens per parameter / 20 (tiny)", False),
        "batch-tiny": ("sequences per step (tiny, 4 x 20 tokens/param)", True),
    }
    shown = [name for name in panels if axes.get(name)]
    if not shown:
        return
    figure, subplots = plt.subplots(1, len(shown), figsize=(5 * len(shown), 4), squeeze=False)
    for panel, name in zip(subplots[0], shown, strict=True):
        label, log = panels[name]
        ticks = sorted(float(x) for x in axes[name])
        low, high = ticks[0], ticks[-1]
        for pair, mars in enumerate(PAIRS):
            points = gap_points(axes[name], mars)
            if not points:
                continue
            xs, gaps, spreads, stds = zip(*points, strict=True)
            # The pairs share x values: the second is drawn 2% of the axis to the right, so
            # that the error bars do not hide each other.
            if log:
                xs = tuple(x * (high / low) ** (0.02 * pair) for x in xs)
            else:
                xs = tuple(x + (high - low) * 0.02 * pair for x in xs)
            line = panel.errorbar(
                xs, gaps, yerr=spreads, marker="o", capsize=3, label=f"{PAIRS[mars]} - {mars}"
            )
            for x, gap, in_std in zip(xs, gaps, stds, strict=True):
                if in_std is not None:
                    panel.annotate(f"{in_std:.1f} sd", (x, gap), textcoords="offset points",
                                   xytext=(6 + 4 * pair, 4), color=line[0].get_color())  # fmt: skip
        panel.margins(x=0.12)
        if log:
            panel.set_xscale("log", base=2)
        panel.set_xticks(ticks, [f"{x:g}" for x in ticks])
        panel.set_xlabel(label)
        panel.set_ylabel("final val loss gap (nats/byte; > 0: MARS ahead)")
        panel.axhline(0, color="grey", linewidth=0.8)
        panel.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--folder", default="study-axes")
    parser.add_argument("--winners", default="study-compare", help="the study whose winners to use")
    parser.add_argument("--data", default=DEFAULT_COMPARE.data)
    parser.add_argument(
        "--stages",
        nargs="+",
        choices=("controls", "batch", "tokens", "batch-tiny"),
        default=["controls", "batch", "tokens"],
    )
    args = parser.parse_args()
    folder = RESULTS / args.folder
    base = dataclasses.replace(DEFAULT_COMPARE, data=args.data)
    winners = json.loads((RESULTS / args.winners / "betas" / "sweep.json").read_text())["winners"]
    axes_file = folder / "axes.json"
    axes = json.loads(axes_file.read_text()) if axes_file.exists() else {}
    stages = {
        "controls": controls,
        "batch": batch_axis,
        "tokens": tokens_axis,
        "batch-tiny": tiny_batch_axis,
    }
    for stage in args.stages:
        axes[stage] = stages[stage](folder, base, winners, args.jobs)
        folder.mkdir(parents=True, exist_ok=True)
        axes_file.write_text(json.dumps(axes, indent=2) + "\n")
    plot_axes(json.loads(axes_file.read_text()), folder / "axes.png")
    print(json.dumps(axes, indent=2))


if __name__ == "__main__":
    main()
