"""The CPU-budget vision comparison of issue #6: MARS-AdamW, AdamW and muon-nd (Newton-Schulz
momentum on every kernel) on Fashion-MNIST with a narrow ResNet-18, each lr tuned on a small
grid with seed 0, then the best lr of each re-run with more seeds, and MARS-AdamW with the
authors' routing (conv kernels on AdamW) at its best lr. Same images, epochs and batch for every
run. Writes
benchmarks/results/vision_sweep.json as it goes (settings already there are skipped).

    python benchmarks/vision_sweep.py [--data fashion-mnist:DIR] [--table]

--table prints the recorded runs as Markdown (for docs/results.md) and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

from torch_mars.train.metrics import read_metrics
from torch_mars.train.vision import VISION_COMPARE_BUDGET, VisionConfig, VisionTrainer

GRIDS = {
    "adamw": (3e-4, 1e-3, 3e-3, 1e-2),
    "mars-adamw": (1e-3, 3e-3, 1e-2),
    "muon-nd": (6e-3, 2e-2, 6e-2),
}
BUDGET = {**VISION_COMPARE_BUDGET, "batch_size": 128}
SEEDS = (0, 1, 2)


# MARS-AdamW with the authors' routing (conv kernels on AdamW), at MARS-AdamW's best lr.
REFERENCE_ROUTING = {"reference_routing": True}


def run_key(optimizer: str, lr: float, seed: int, extra: dict | None = None) -> str:
    suffix = "".join(f" {k}={v}" for k, v in (extra or {}).items())
    return f"{optimizer} lr={lr:g} seed={seed}{suffix}"


def run_one(data: str, optimizer: str, lr: float, seed: int, extra: dict | None = None) -> dict:
    with TemporaryDirectory() as tmp:
        config = VisionConfig(
            data=data,
            optimizer=optimizer,
            hyperparams={"lr": lr, **(extra or {})},
            seed=seed,
            quiet=True,
            run_dir=Path(tmp),
            **BUDGET,
        )
        result = VisionTrainer(config).train()
        test_loss = read_metrics(Path(tmp))[-1]["test_loss"]
    return {
        "optimizer": optimizer + (" (reference routing)" if extra else ""),
        "lr": lr,
        "seed": seed,
        "final_test_accuracy": result.final,
        "best_test_accuracy": result.best,
        "final_test_loss": test_loss,
        "train_time_s": result.train_time_s,
    }


def best_lrs(runs: dict[str, dict]) -> dict[str, float]:
    """Per optimizer, the grid lr with the highest final test accuracy at seed 0."""
    best: dict[str, float] = {}
    for optimizer in GRIDS:
        seed0 = [r for r in runs.values() if r["optimizer"] == optimizer and r["seed"] == 0]
        if seed0:
            best[optimizer] = max(seed0, key=lambda r: r["final_test_accuracy"])["lr"]
    return best


def markdown(record: dict) -> str:
    runs = record["runs"]
    lines = ["| optimizer | lr | seed 0 final test acc | final test loss |", "|---|---:|---:|---:|"]
    for r in sorted(runs.values(), key=lambda r: (r["optimizer"], r["lr"])):
        if r["seed"] == 0 and r["optimizer"] in GRIDS:
            lines.append(
                f"| {r['optimizer']} | {r['lr']:g} | {100 * r['final_test_accuracy']:.2f}% "
                f"| {r['final_test_loss']:.4f} |"
            )
    lines += ["", "| optimizer | best lr | seeds | final test acc (mean ± std) | time/run |"]
    lines.append("|---|---:|---:|---:|---:|")
    rows = list(best_lrs(runs).items())
    reference = "mars-adamw (reference routing)"
    rows += [(reference, r["lr"]) for r in runs.values() if r["optimizer"] == reference][:1]
    for optimizer, lr in rows:
        chosen = [r for r in runs.values() if r["optimizer"] == optimizer and r["lr"] == lr]
        accuracies = [100 * r["final_test_accuracy"] for r in chosen]
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        seconds = statistics.mean(r["train_time_s"] for r in chosen)
        lines.append(
            f"| {optimizer} | {lr:g} | {len(chosen)} | {statistics.mean(accuracies):.2f} ± "
            f"{spread:.2f}% | {seconds:.0f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="fashion-mnist:../shared/data/vision/fashion-mnist")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/vision_sweep.json"))
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    record = {"runs": {}}
    if args.out.is_file():
        record = json.loads(args.out.read_text())
    if args.table:
        print(markdown(record))
        return
    record["machine"] = (
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    record["budget"] = {"data": args.data, **BUDGET}

    def ensure(optimizer: str, lr: float, seed: int, extra: dict | None = None) -> None:
        key = run_key(optimizer, lr, seed, extra)
        if key not in record["runs"]:
            record["runs"][key] = run_one(args.data, optimizer, lr, seed, extra)
            args.out.write_text(json.dumps(record, indent=2) + "\n")
            print(key, record["runs"][key], flush=True)

    for optimizer, grid in GRIDS.items():
        for lr in grid:
            ensure(optimizer, lr, SEEDS[0])
    # Seed-major, so that an interrupted sweep leaves every optimizer with the same seeds.
    for seed in SEEDS[1:]:
        for optimizer, lr in best_lrs(record["runs"]).items():
            ensure(optimizer, lr, seed)
    for seed in SEEDS:
        ensure("mars-adamw", best_lrs(record["runs"])["mars-adamw"], seed, REFERENCE_ROUTING)
    print(markdown(record))


if __name__ == "__main__":
    main()
