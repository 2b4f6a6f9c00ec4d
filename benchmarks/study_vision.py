"""The tuned vision study of issue #13: the ResNet-18 of `torch-mars compare-vision` on
Fashion-MNIST at its CPU budget (width 8, 10,000 training images, 4 epochs of batch 128), with
the protocol of benchmarks/study_compare.py, fixed here before any result was seen.

Stage A, learning rate: AdamW, MARS-AdamW, muon-nd (Newton-Schulz momentum on every matrix and
conv kernel) and MARS-Shampoo on 5-point lr grids spaced 1.5x around the optima of the earlier
3x sweep (docs/results.md), search seed 0, a grid extended past an edge that holds the best lr.
Stage B at each stage-A lr: the MARS rules over betas {(0.95, 0.99), (0.9, 0.95)} x gamma
{0, 0.025, 0.05, 0.1}; AdamW and NAdamW (issue #24's control: Adam with constant-beta1
Nesterov momentum) over betas {(0.9, 0.999), (0.9, 0.95)}; muon-nd over betas
{(0.95, 0.99), (0.9, 0.95)}. Each winner then on seeds 0, 1 and 2. Resumable.

    python benchmarks/study_vision.py [--jobs 2] [--data fashion-mnist:DIR] [--folder NAME]

Writes benchmarks/results/study-vision/{lr,betas}/ (run folders, sweep.json, summary.md,
figures).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from study_compare import GAMMAS, MARS_BETAS, stage_a, stage_b

from torch_mars.train.vision import VISION_COMPARE_BUDGET, VisionConfig

RESULTS = Path(__file__).resolve().parent / "results"
SHARED_FASHION = Path(__file__).resolve().parents[2] / "shared/data/vision/fashion-mnist"
ADAM_LRS = (1.3e-3, 2e-3, 3e-3, 4.5e-3, 6.7e-3)
ORTHOGONAL_LRS = (9e-3, 1.3e-2, 2e-2, 3e-2, 4.5e-2)
LR_GRIDS = {
    "adamw": ADAM_LRS,
    "mars-adamw": ADAM_LRS,
    "muon-nd": ORTHOGONAL_LRS,
    "mars-shampoo": ORTHOGONAL_LRS,
    "nadamw": ADAM_LRS,
}
OTHER_AXES = {
    "adamw": {"betas": ((0.9, 0.999), (0.9, 0.95))},
    "nadamw": {"betas": ((0.9, 0.999), (0.9, 0.95))},
    "muon-nd": {"betas": MARS_BETAS},
    "mars-adamw": {"betas": MARS_BETAS, "gamma": GAMMAS},
    "mars-shampoo": {"betas": MARS_BETAS, "gamma": GAMMAS},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--data", default=f"fashion-mnist:{SHARED_FASHION}")
    parser.add_argument("--folder", default="study-vision")
    args = parser.parse_args()
    base = VisionConfig(data=args.data, quiet=True, **VISION_COMPARE_BUDGET)
    folder = RESULTS / args.folder
    lrs = stage_a(folder, base, args.jobs, LR_GRIDS)
    stage_b(folder, base, args.jobs, lrs, OTHER_AXES)


if __name__ == "__main__":
    main()
