"""What MARS-AdamW's gain over its strongest same-cost control is made of (issue #24), at the
regime map's points where it wins by more than two of the control's std: `tiny` at 4 x 20
tokens per parameter, 16 sequences per step (the tokens axis's 4x point of
benchmarks/study_axes.py), and with ``--multiple 8`` its 8x point.

Each variant of the tuned MARS-AdamW (betas (0.9, 0.95), gamma 0.05) changes one thing and is
tuned like the others: lr on the Adam pair's 7-point 1.5x grid with edge extension, search
seed 0, its best lr on seeds 0-2.
- ``clip-off``: no per-tensor clip of c.
- ``gamma-0``: no correction (AdamW on the clipped g).
- ``gamma-0.1``: gamma = 1 - beta1, where the unclipped first moment is Nesterov's.
- ``gamma-0.2``: a stronger correction.
- ``gamma-0-clip-off``: neither the correction nor the clip: AdamW on ``g`` with MARS-AdamW's
  recipe (weight decay 1e-2 on the matrices, its 1-D AdamW path at lr 3e-3), which separates
  what the clip buys from what the recipe buys against NAdamW (weight decay 0.1 everywhere).
- ``gamma-0.1-v-of-g``, ``gamma-0.2-v-of-g``: gamma 0.1 and 0.2 with ``v`` averaging ``g^2``
  instead of ``c^2`` (``second_moment="gradient"``): at gamma 0.1 the matrices then have
  NAdamW's moments up to the clip, so what is left of the gain is not the second moment's.
The tuned gamma = 0.05 is the tokens axis's own MARS-AdamW at that point. Resumable.

``--batch 4``: the same at 4 x 20 tokens per parameter and 4 sequences per step, where NAdamW
leads MARS-AdamW, with the 5-point grid around that point's tuned MARS-AdamW lr.

``--batch 64``: the same at 4 x 20 tokens per parameter and 64 sequences per step, where
MARS-AdamW leads every Adam-rule control on six seeds (benchmarks/study_seeds.py). There the
seeds of one lr disagree by more than neighbouring lrs do, so each variant's lr is chosen as
study_seeds.py ``--select-on-mean`` chose the controls' there: a 5-point 1.5x grid around the
tuned MARS-AdamW's lr (4.4e-2), edge-extended, every point on seeds 0-2, the best mean kept
and held out on seeds 3-5.

    python benchmarks/study_ablations.py [--jobs 2] [--folder study-axes] [--multiple 4]
        [--batch 16] [--variants clip-off gamma-0 gamma-0.1 gamma-0.2 ...]

Writes benchmarks/results/FOLDER/ablations/<variant>/ (runs.jsonl, sweep.json, summary.md,
figures) and FOLDER/ablations.json; at another multiple M, FOLDER/ablations-Mx/ and
FOLDER/ablations-Mx.json; at another batch B, FOLDER/ablations-batch-B/ and
FOLDER/ablations-batch-B.json.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from study_axes import (
    ADAM_TINY_LRS,
    RESULTS,
    TINY_BATCH_MULTIPLE,
    TINY_BATCHES,
    at_batch,
    fixed_axes,
    grid_around,
    progress,
    study_parser,
    summary_of,
    sweep_lr_with_edges,
)
from study_compare import EXTENSIONS, MINI_BUDGET, extend_at_edges, tiny_budget

from torch_mars.train.sweep import SweepPlan, run_sweep, write_report
from torch_mars.train.trainer import TrainConfig

HELD_OUT = (3, 4, 5)
# The batch whose lr is chosen on the mean of seeds 0-2 and held out (the others: on seed 0).
HELD_OUT_BATCH = 64

VARIANTS: dict[str, dict] = {
    "clip-off": {"clip": False},
    "gamma-0": {"gamma": 0.0},
    "gamma-0.1": {"gamma": 0.1},
    "gamma-0.2": {"gamma": 0.2},
    "gamma-0-clip-off": {"gamma": 0.0, "clip": False},
    "gamma-0.1-v-of-g": {"gamma": 0.1, "second_moment": "gradient"},
    "gamma-0.2-v-of-g": {"gamma": 0.2, "second_moment": "gradient"},
}


def sweep_lr_on_seed_mean(
    folder: Path, base: TrainConfig, lrs: list[float], fixed: dict, jobs: int
) -> dict:
    """MARS-AdamW's lr grid on seeds 0-2, extended past an edge holding the best mean up to
    :data:`EXTENSIONS` times, the best mean held out on :data:`HELD_OUT`: mean ± std over seeds
    0-2 and over the held-out seeds."""
    grid = {"mars-adamw": list(lrs)}
    for _ in range(EXTENSIONS + 1):
        plan = SweepPlan(
            base=base, grid={"mars-adamw": {"lr": tuple(grid["mars-adamw"]), **fixed}},
            search_seeds=(0, 1, 2), seeds=HELD_OUT, sweep_dir=folder, jobs=jobs,
        )  # fmt: skip
        report = run_sweep(plan, progress)
        write_report(plan, report)
        winner = report.winners["mars-adamw"]
        if not extend_at_edges(grid, {"mars-adamw": winner.hyperparams["lr"]}):
            break
    searched = [winner.finals[seed] for seed in (0, 1, 2)]
    held = report.summaries[0]
    return {
        "point": winner.hyperparams,
        "seeds 0-2": {"mean": statistics.fmean(searched), "std": statistics.stdev(searched)},
        "mean": held.final,
        "std": held.final_std,
    }


def main() -> None:
    parser = study_parser(__doc__, multiple=True)
    parser.add_argument(
        "--batch", type=int, choices=TINY_BATCHES, default=MINI_BUDGET.batch_size,
        help="sequences per step at 4x (64: lr chosen on the mean of seeds 0-2, held out on 3-5)",
    )  # fmt: skip
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    folder = RESULTS / args.folder
    if args.batch != MINI_BUDGET.batch_size and args.multiple != TINY_BATCH_MULTIPLE:
        parser.error(f"the batch axis runs at {TINY_BATCH_MULTIPLE}x only; drop --multiple")
    if args.batch == HELD_OUT_BATCH:
        ablations_at_batch(folder, args.batch, args.variants, args.jobs)
        return
    point = f"tokens-{args.multiple}x"
    base = tiny_budget(MINI_BUDGET, args.multiple)
    name_of = "ablations" if args.multiple == TINY_BATCH_MULTIPLE else f"ablations-{args.multiple}x"
    lrs = list(ADAM_TINY_LRS)
    if args.batch != MINI_BUDGET.batch_size:
        point = f"batch-tiny-{args.batch}"
        base = tiny_budget(at_batch(MINI_BUDGET, args.batch), TINY_BATCH_MULTIPLE)
        name_of = f"ablations-batch-{args.batch}"
    tuned = json.loads((folder / point / "sweep.json").read_text())["winners"]["mars-adamw"]
    if args.batch != MINI_BUDGET.batch_size:
        lrs = list(grid_around(tuned["lr"]))
    table = folder / f"{name_of}.json"
    results = json.loads(table.read_text()) if table.exists() else {}
    for name in args.variants:
        change = VARIANTS[name]
        fixed = {**fixed_axes(tuned), **{key: (value,) for key, value in change.items()}}
        report = sweep_lr_with_edges(
            folder / name_of / name,
            base,
            {"mars-adamw": lrs},
            {"mars-adamw": fixed},
            args.jobs,
        )
        results[name] = summary_of(report)["mars-adamw"]
        table.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def ablations_at_batch(folder: Path, batch: int, variants: list[str], jobs: int) -> None:
    """Each variant at ``batch`` sequences per step (4 x 20 tokens per parameter), by
    :func:`sweep_lr_on_seed_mean`."""
    tuned = json.loads((folder / f"batch-tiny-{batch}" / "sweep.json").read_text())
    tuned = tuned["winners"]["mars-adamw"]
    base = tiny_budget(at_batch(MINI_BUDGET, batch), TINY_BATCH_MULTIPLE)
    table = folder / f"ablations-batch-{batch}.json"
    results = json.loads(table.read_text()) if table.exists() else {}
    for name in variants:
        fixed = {**fixed_axes(tuned), **{key: (value,) for key, value in VARIANTS[name].items()}}
        results[name] = sweep_lr_on_seed_mean(
            folder / f"ablations-batch-{batch}" / name,
            base,
            list(grid_around(tuned["lr"])),
            fixed,
            jobs,
        )
        table.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
