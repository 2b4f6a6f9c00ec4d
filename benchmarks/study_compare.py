"""The tuned comparison at the `torch-mars compare` budget (issue #13), with its protocol fixed
here before any result was seen. Resumable: run it again and it skips every finished run.

Stage A, learning rate: every optimizer on an lr grid spaced 1.5x, around the previous sweep's
optimum (docs/results.md), at its default betas/gamma, search seed 0. An optimizer whose best lr
is at an edge of its grid gets one more 1.5x point on that side, up to three times.
Stage B, betas and gamma at each optimizer's stage-A lr: MARS rules over betas
{(0.95, 0.99), (0.9, 0.95)} x gamma {0, 0.025, 0.05, 0.1}; AdamW over the same two betas; Muon
over momentum {0.9, 0.95}; Lion over betas {(0.9, 0.99), (0.95, 0.98)}. Search seed 0; each
optimizer's winner then runs seeds 0, 1 and 2, reported as mean and std.

    python benchmarks/study_compare.py [--jobs 2] [--stage a|b|all] [--optimizers NAME ...]
        [--folder study-compare] [--data stdlib] [--tiny-multiple N]

``--folder`` names the study under benchmarks/results/ (one study per machine: the runs use the
device ``auto`` picks, CUDA where there is one). ``--data stdlib:FOLDER`` trains on another
Python's standard library, e.g. the 3.11 one on a machine with another version.
``--tiny-multiple N`` trains the `tiny` GPT for N x 20 tokens per parameter instead (the tokens
axis of benchmarks/study_axes.py), where the Newton-Schulz rules are cheap on a CPU:

    python benchmarks/study_compare.py --optimizers muon mars-m --tiny-multiple 4 \
        --folder study-mars-m-tiny4x

Finished runs are never rerun, so a subset of the optimizers can run first (the Newton-Schulz
pair is slow on some CPUs). Each stage's report (sweep.json, summary.md, figures) covers the
optimizers of the last invocation, so finish with one run over all six.

Writes benchmarks/results/study-compare/{lr,betas}/ (run folders, sweep.json, summary.md,
lr.png, winners.png).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from torch_mars.train.sweep import SweepPlan, format_sweep_table, run_sweep, write_report
from torch_mars.train.trainer import TrainConfig

RESULTS = Path(__file__).resolve().parent / "results"
# The study's budget: `mini` for 400 steps of 16 x 128 tokens (about one token per parameter),
# `torch-mars compare`'s default until issue #24 moved that to `tiny`.
MINI_BUDGET = TrainConfig(
    model="mini", data="stdlib", steps=400, batch_size=16, eval_interval=40, eval_batches=8
)
STEP = 1.5
LR_GRIDS = {
    "adamw": (1.3e-3, 2e-3, 3e-3, 4.5e-3, 6.7e-3),
    "mars-adamw": (3e-3, 4.5e-3, 6.7e-3, 1e-2, 1.5e-2, 2.2e-2),
    "lion": (1e-4, 1.5e-4, 2.2e-4, 3.3e-4, 5e-4, 7.5e-4, 1.1e-3),
    "mars-lion": (1e-4, 1.5e-4, 2.2e-4, 3.3e-4, 5e-4, 7.5e-4, 1.1e-3),
    "muon": (1.3e-2, 2e-2, 3e-2, 4.5e-2, 6.7e-2, 1e-1),
    "mars-shampoo": (1.3e-2, 2e-2, 3e-2, 4.5e-2, 6.7e-2, 1e-1),
    # Moonlight's scale makes the update's RMS AdamW's, so the grid sits on AdamW's rates.
    "mars-m": (3e-3, 4.5e-3, 6.7e-3, 1e-2, 1.5e-2, 2.2e-2),
}
MARS_RULES = ("mars-adamw", "mars-shampoo", "mars-lion", "mars-m")
MARS_BETAS = ((0.95, 0.99), (0.9, 0.95))
EXTENSIONS = 3
GAMMAS = (0.0, 0.025, 0.05, 0.1)
OTHER_AXES = {
    "adamw": {"betas": MARS_BETAS},
    "muon": {"momentum": (0.9, 0.95)},
    "lion": {"betas": ((0.9, 0.99), (0.95, 0.98))},
    **{name: {"betas": MARS_BETAS, "gamma": GAMMAS} for name in MARS_RULES},
}
# The tiny GPT's non-embedding parameters and context, for budgets in tokens per parameter.
TINY_NON_EMBEDDING = 24_736
TINY_BLOCK = 32


def tiny_budget(base: TrainConfig, multiple: int) -> TrainConfig:
    """``base`` on the `tiny` GPT trained for ``multiple`` x 20 tokens per parameter."""
    steps = 20 * TINY_NON_EMBEDDING * multiple // (base.batch_size * TINY_BLOCK)
    return dataclasses.replace(base, model="tiny", steps=steps, eval_interval=max(1, steps // 10))


def progress(done: int, total: int) -> None:
    print(f"{done}/{total} runs", flush=True)


def extend_at_edges(grids: dict[str, list[float]], best: dict[str, float]) -> bool:
    """Give each grid whose best lr is at an edge one more 1.5x point on that side; whether any
    grid grew."""
    extended = False
    for name, lr in best.items():
        if lr == grids[name][0]:
            grids[name].insert(0, float(f"{lr / STEP:.2g}"))
            extended = True
        elif lr == grids[name][-1]:
            grids[name].append(float(f"{lr * STEP:.2g}"))
            extended = True
    return extended


def stage_a(
    folder: Path, base: Any, jobs: int, lr_grids: dict[str, tuple[float, ...]]
) -> dict[str, float]:
    """Each optimizer on its lr grid (extended at an edge that holds the best lr, up to
    :data:`EXTENSIONS` times), search seed 0; returns each one's best lr."""
    grids = {name: list(grid) for name, grid in lr_grids.items()}
    for _ in range(EXTENSIONS + 1):
        plan = SweepPlan(
            base=base,
            grid={name: {"lr": tuple(grid)} for name, grid in grids.items()},
            search_seeds=(0,),
            seeds=(0,),
            sweep_dir=folder / "lr",
            jobs=jobs,
        )
        report = run_sweep(plan, progress)
        write_report(plan, report)
        lrs = {name: winner.hyperparams["lr"] for name, winner in report.winners.items()}
        if not extend_at_edges(grids, lrs):
            break
    print(format_sweep_table(report))
    return lrs


def stage_b(
    folder: Path, base: Any, jobs: int, lrs: dict[str, float], axes: dict[str, dict]
) -> None:
    """Each optimizer at its stage-A lr over its other ``axes``, search seed 0; each winner on
    seeds 0, 1 and 2."""
    plan = SweepPlan(
        base=base,
        grid={name: {"lr": (lr,), **axes[name]} for name, lr in lrs.items()},
        search_seeds=(0,),
        seeds=(0, 1, 2),
        sweep_dir=folder / "betas",
        jobs=jobs,
    )
    report = run_sweep(plan, progress)
    write_report(plan, report)
    print(format_sweep_table(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--stage", choices=("a", "b", "all"), default="all")
    parser.add_argument("--optimizers", nargs="+", choices=list(LR_GRIDS), default=list(LR_GRIDS))
    parser.add_argument("--folder", default="study-compare")
    parser.add_argument("--data", default=MINI_BUDGET.data)
    parser.add_argument(
        "--tiny-multiple",
        type=int,
        help="instead of the compare budget: the tiny GPT at this many x 20 tokens/parameter",
    )
    args = parser.parse_args()
    folder = RESULTS / args.folder
    base = dataclasses.replace(MINI_BUDGET, data=args.data)
    if args.tiny_multiple:
        base = tiny_budget(base, args.tiny_multiple)
    if args.stage in ("a", "all"):
        lrs = stage_a(folder, base, args.jobs, {name: LR_GRIDS[name] for name in args.optimizers})
    else:
        lrs = json.loads((folder / "lr" / "sweep.json").read_text())["winners"]
        lrs = {name: point["lr"] for name, point in lrs.items() if name in args.optimizers}
    if args.stage in ("b", "all"):
        stage_b(folder, base, args.jobs, lrs, OTHER_AXES)


if __name__ == "__main__":
    main()
