"""Sweep the learning rate of each optimizer on one grid, then MARS's beta1 and gamma at its best
lr (one factor at a time around the paper's (0.95, 0.99) and 0.025), at the budget of
`torch-mars compare`'s defaults and seed 0; the winners are the CPU defaults in
torch_mars.train.optimizers. Writes benchmarks/results/lr_sweep.json as it goes (and skips
settings already there).

    python benchmarks/lr_sweep.py [--optimizers adamw mars-adamw ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

from torch_mars.data import load_corpus
from torch_mars.train.compare import DEFAULT_COMPARE
from torch_mars.train.trainer import Trainer

LR_GRID = (1e-3, 3e-3, 1e-2, 3e-2)
LION_LR_GRID = (1e-4, 3e-4, 1e-3, 3e-3)
OPTIMIZERS = ("adamw", "mars-adamw", "muon", "mars-shampoo", "lion", "mars-lion")
MARS_VARIANTS = ({"betas": [0.9, 0.99]}, {"gamma": 0.0125}, {"gamma": 0.05})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS[:4]), choices=OPTIMIZERS)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/lr_sweep.json"))
    args = parser.parse_args()
    corpus = load_corpus(DEFAULT_COMPARE.data)
    records = json.loads(args.out.read_text())["runs"] if args.out.exists() else []

    def run(name: str, hyperparams: dict) -> float:
        for record in records:
            if record["optimizer"] == name and record["hyperparams"] == hyperparams:
                return record["final_val_loss"]
        with TemporaryDirectory() as tmp:
            config = dataclasses.replace(
                DEFAULT_COMPARE,
                optimizer=name,
                run_dir=Path(tmp),
                hyperparams={
                    k: tuple(v) if isinstance(v, list) else v for k, v in hyperparams.items()
                },
            )
            try:
                loss = Trainer(config, corpus).train().final_val_loss
            except FloatingPointError:
                loss = float("nan")
        records.append({"optimizer": name, "hyperparams": hyperparams, "final_val_loss": loss})
        print(f"{name} {hyperparams}: {loss:.4f}", flush=True)
        args.out.write_text(
            json.dumps(
                {
                    "machine": f"{platform.processor() or platform.machine()}, "
                    f"{torch.get_num_threads()} threads, torch {torch.__version__}",
                    "budget": {
                        "model": DEFAULT_COMPARE.model,
                        "steps": DEFAULT_COMPARE.steps,
                        "batch_size": DEFAULT_COMPARE.batch_size,
                    },
                    "runs": records,
                },
                indent=1,
            )
            + "\n"
        )
        return loss

    for name in args.optimizers:
        grid = LION_LR_GRID if name.endswith("lion") else LR_GRID
        losses = {lr: run(name, {"lr": lr}) for lr in grid}
        best_lr = min(losses, key=lambda lr: (losses[lr] != losses[lr], losses[lr]))
        if name.startswith("mars-"):
            for variant in MARS_VARIANTS:
                run(name, {"lr": best_lr, **variant})


if __name__ == "__main__":
    main()
