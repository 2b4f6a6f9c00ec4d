"""The regime map (issue #36), every point through ``torch-mars tune``: AdamW, NAdamW,
MARS-AdamW, Muon and MARS-Shampoo, each tuned over its whole declared space by coordinate
descent (selection on seeds 0-2, screened on seed 0 with the best two rerun on 1-2; two rounds
at most), each winner read on held-out seeds 3-5.

The points, on the `tiny` GPT and the stdlib corpus (T x 20 tokens per non-embedding
parameter, B sequences of 32 tokens per step):

- batch axis at 4x: B = 64, 128, 256 (run first: the regime where MARS-AdamW led), 16 (the
  `compare` point) and 4;
- the same tokens at 128 and 256 leave 483 and 241 steps, so those batches run at 16x too
  (1,932 and 966 steps);
- tokens axis at B = 16: 1x and 8x (4x is the batch axis's 16).

Each point is one study in ``benchmarks/results/regime-map/POINT/study.log`` (an Optuna
journal, kept in git: a killed or interrupted map resumes from it, on this machine or another,
and nothing finished reruns). Runs are resumable per point; points run in the order above.

    python benchmarks/studies/regime_map.py [--points b64-4x ...] [--jobs 2]
    python benchmarks/studies/regime_map.py --report   # each point's summary.md, map.md

The command each point runs is printed before it starts; it is the one that reproduces it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from torch_mars.cli import main as torch_mars
from torch_mars.models import GPT, gpt_config

FOLDER = Path(__file__).resolve().parents[1] / "results" / "regime-map"
BLOCK = 32
# name: (sequences per step, multiple of 20 tokens per parameter)
POINTS: dict[str, tuple[int, int]] = {
    "b64-4x": (64, 4),
    "b128-4x": (128, 4),
    "b256-4x": (256, 4),
    "b256-16x": (256, 16),
    "b128-16x": (128, 16),
    "b16-4x": (16, 4),
    "b4-4x": (4, 4),
    "b16-1x": (16, 1),
    "b16-8x": (16, 8),
}
OPTIMIZERS = ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo")


def non_embedding_parameters(model: str = "tiny") -> int:
    gpt = GPT(gpt_config(model, 256))
    return sum(p.numel() for n, p in gpt.named_parameters() if not n.startswith(("wte", "wpe")))


def tune_arguments(point: str, jobs: int, report: bool = False) -> list[str]:
    """The ``torch-mars tune`` arguments of one point of the map."""
    batch, multiple = POINTS[point]
    tokens = 20 * multiple * non_embedding_parameters()
    steps = tokens // (batch * BLOCK)
    arguments = (
        f"--model tiny --data stdlib --steps {steps} --batch-size {batch} "
        f"--eval-interval {max(1, steps // 10)} --eval-batches 8 "
        f"--optimizers {' '.join(OPTIMIZERS)} --seeds 0 1 2 --heldout-seeds 3 4 5 "
        f"--screen-top 2 --max-rounds 2 --jobs {jobs} --name {point} "
        f"--out-dir {FOLDER} --storage journal:{FOLDER / point / 'study.log'}"
    )
    return shlex.split(arguments) + (["--report"] if report else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", nargs="+", choices=list(POINTS), default=list(POINTS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--report", action="store_true", help="write the reports of the points begun, train nothing"
    )
    args = parser.parse_args()
    for point in args.points:
        if args.report and not (FOLDER / point / "study.log").is_file():
            continue
        arguments = tune_arguments(point, args.jobs, args.report)
        print("torch-mars tune " + shlex.join(arguments), flush=True)
        code = torch_mars(["tune", *arguments])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
