"""Sweep the learning rate of each optimizer (and MARS's betas and gamma at its best lr) at the
budget of `torch-mars compare`'s defaults; the winners are the CPU defaults in
torch_mars.train.optimizers. Writes benchmarks/results/lr_sweep.json and prints a table.

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

LR_GRID = {
    "adamw": (1e-3, 3e-3, 1e-2, 3e-2),
    "mars-adamw": (1e-3, 3e-3, 1e-2, 3e-2),
    "muon": (1e-3, 3e-3, 1e-2, 3e-2),
    "mars-shampoo": (1e-3, 3e-3, 1e-2, 3e-2),
    "lion": (1e-4, 3e-4, 1e-3, 3e-3),
    "mars-lion": (1e-4, 3e-4, 1e-3, 3e-3),
}
MARS_BETAS = ((0.9, 0.99), (0.95, 0.99))
MARS_GAMMAS = (0.0125, 0.025, 0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--optimizers", nargs="+", default=list(LR_GRID), choices=list(LR_GRID))
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
        losses = {lr: run(name, {"lr": lr}) for lr in LR_GRID[name]}
        best_lr = min(losses, key=lambda lr: (losses[lr] != losses[lr], losses[lr]))
        if name.startswith("mars-"):
            for betas in MARS_BETAS:
                for gamma in MARS_GAMMAS:
                    if (betas, gamma) == ((0.95, 0.99), 0.025):
                        continue  # the lr sweep ran these defaults already
                    run(name, {"lr": best_lr, "betas": list(betas), "gamma": gamma})


if __name__ == "__main__":
    main()
