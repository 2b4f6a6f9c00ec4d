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
The tuned gamma = 0.05 is the tokens axis's own MARS-AdamW at that point. Resumable.

    python benchmarks/study_ablations.py [--jobs 2] [--folder study-axes] [--multiple 4]
        [--variants clip-off gamma-0 gamma-0.1 gamma-0.2]

Writes benchmarks/results/FOLDER/ablations/<variant>/ (runs.jsonl, sweep.json, summary.md,
figures) and FOLDER/ablations.json; at another multiple M, FOLDER/ablations-Mx/ and
FOLDER/ablations-Mx.json.
"""

from __future__ import annotations

import argparse
import json

from study_axes import (
    ADAM_TINY_LRS,
    RESULTS,
    TINY_BATCH_MULTIPLE,
    TOKEN_MULTIPLES,
    fixed_axes,
    summary_of,
    sweep_lr_with_edges,
)
from study_compare import MINI_BUDGET, tiny_budget

VARIANTS: dict[str, dict] = {
    "clip-off": {"clip": False},
    "gamma-0": {"gamma": 0.0},
    "gamma-0.1": {"gamma": 0.1},
    "gamma-0.2": {"gamma": 0.2},
    "gamma-0-clip-off": {"gamma": 0.0, "clip": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--folder", default="study-axes")
    parser.add_argument(
        "--multiple", type=int, choices=TOKEN_MULTIPLES, default=TINY_BATCH_MULTIPLE,
        help="the tokens axis's point: this many x 20 tokens per parameter",
    )  # fmt: skip
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    folder = RESULTS / args.folder
    point = f"tokens-{args.multiple}x"
    tuned = json.loads((folder / point / "sweep.json").read_text())["winners"]["mars-adamw"]
    base = tiny_budget(MINI_BUDGET, args.multiple)
    name_of = "ablations" if args.multiple == TINY_BATCH_MULTIPLE else f"ablations-{args.multiple}x"
    table = folder / f"{name_of}.json"
    results = json.loads(table.read_text()) if table.exists() else {}
    for name in args.variants:
        change = VARIANTS[name]
        fixed = {**fixed_axes(tuned), **{key: (value,) for key, value in change.items()}}
        report = sweep_lr_with_edges(
            folder / name_of / name,
            base,
            {"mars-adamw": list(ADAM_TINY_LRS)},
            {"mars-adamw": fixed},
            args.jobs,
        )
        results[name] = summary_of(report)["mars-adamw"]
        table.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
