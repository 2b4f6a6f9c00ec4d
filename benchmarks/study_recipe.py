"""NAdamW with MARS-AdamW's whole recipe at the regime map's small-batch points (issue #24): at
64 sequences per step, giving NAdamW MARS-AdamW's 1-D path (norms and biases on AdamW at lr
3e-3, betas (0.9, 0.95), weight decay 0.1, instead of at NAdamW's own lr and weight decay) made
it 0.025 better (benchmarks/study_seeds.py ``--select-on-mean``). This asks the same at `tiny`
4 x 20 tokens per parameter with 16 sequences per step (the `compare` point) and with 4, where
NAdamW at weight decay 1e-2 already ties or beats MARS-AdamW.

Protocol of benchmarks/study_axes.py, fixed before any result was seen: every setting but lr
is the ``weight-decay`` stage's NAdamW winner at that point (betas (0.95, 0.99), weight decay
1e-2), plus MARS-AdamW's 1-D path; lr on a 5-point 1.5x grid centred on that winner's lr,
extended past an edge that holds the best lr up to three times, search seed 0, the best lr on
seeds 0-2. Resumable.

    python benchmarks/study_recipe.py [--jobs 2] [--folder study-axes] [--batches 16 4]

Writes benchmarks/results/FOLDER/recipe-batch-B/ (run folders, sweep.json, summary.md) and
FOLDER/recipe.json.
"""

from __future__ import annotations

import json

from study_axes import (
    RESULTS,
    TINY_BATCH_MULTIPLE,
    at_batch,
    fixed_axes,
    grid_around,
    study_parser,
    summary_of,
    sweep_lr_with_edges,
)
from study_compare import MINI_BUDGET, tiny_budget
from study_seeds import MARS_ADAMW_PATH

# The weight-decay stage's sweep of NAdamW at each batch (16 is the tokens axis's 4x point).
SOURCES = {16: f"weight-decay-{TINY_BATCH_MULTIPLE}x", 4: "weight-decay-batch-4"}


def main() -> None:
    parser = study_parser(__doc__)
    parser.add_argument("--batches", type=int, nargs="+", choices=list(SOURCES), default=[16, 4])
    args = parser.parse_args()
    folder = RESULTS / args.folder
    table = folder / "recipe.json"
    results = json.loads(table.read_text()) if table.exists() else {}
    for batch in args.batches:
        source = json.loads((folder / SOURCES[batch] / "sweep.json").read_text())
        winner = source["winners"]["nadamw"]
        fixed = {**fixed_axes(winner), **{k: (v,) for k, v in MARS_ADAMW_PATH.items()}}
        base = tiny_budget(at_batch(MINI_BUDGET, batch), TINY_BATCH_MULTIPLE)
        report = sweep_lr_with_edges(
            folder / f"recipe-batch-{batch}",
            base,
            {"nadamw": list(grid_around(winner["lr"]))},
            {"nadamw": fixed},
            args.jobs,
        )
        control = next(s for s in source["summaries"] if s["optimizer"] == "nadamw")
        results[str(batch)] = {
            **summary_of(report)["nadamw"],
            "without the recipe": {"mean": control["final"], "std": control["final_std"]},
        }
        table.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
