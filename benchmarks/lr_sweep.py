"""Sweep the learning rate of each optimizer on one grid, then MARS's beta1 and gamma at its best
lr for MARS-AdamW (one factor at a time around the paper's (0.95, 0.99) and 0.025; MARS-Shampoo
keeps them, for lack of CPU time), at the budget of
`torch-mars compare`'s defaults and seed 0; the winners are the CPU defaults in
torch_mars.train.optimizers. Writes benchmarks/results/lr_sweep.json as it goes (and skips
settings already there).

    python benchmarks/lr_sweep.py [--optimizers adamw mars-adamw ...] [--out FILE] [--table]

--table prints the recorded runs as a Markdown table (for docs/results.md) and runs nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
from pathlib import Path
from tempfile import TemporaryDirectory

import torch
from study_compare import MINI_BUDGET

from torch_mars.data import load_corpus
from torch_mars.train.trainer import Trainer

LR_GRID = (1e-3, 3e-3, 1e-2, 3e-2)
LION_LR_GRID = (1e-4, 3e-4, 1e-3, 3e-3)
OPTIMIZERS = ("adamw", "mars-adamw", "muon", "mars-shampoo", "lion", "mars-lion")
MARS_VARIANTS = ({"betas": [0.9, 0.99]}, {"gamma": 0.0125}, {"gamma": 0.05})


def _setting(run: dict) -> str:
    """The run's hyperparameters besides lr, as text."""
    others = [f"{k}={v}" for k, v in run["hyperparams"].items() if k != "lr"]
    return ", ".join(others) or "default"


def markdown_table(runs: list[dict]) -> str:
    """One row per optimizer and setting besides lr, one column per lr; the best of each
    optimizer in bold."""
    lrs = sorted({r["hyperparams"]["lr"] for r in runs})
    lines = [
        "| optimizer | setting | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
        "|---|---|" + "---|" * len(lrs),
    ]
    for name in dict.fromkeys(r["optimizer"] for r in runs):
        mine = [r for r in runs if r["optimizer"] == name]
        best = min(r["final_val_loss"] for r in mine)
        for setting in dict.fromkeys(map(_setting, mine)):
            losses = {
                r["hyperparams"]["lr"]: r["final_val_loss"] for r in mine if _setting(r) == setting
            }
            cells = [
                ""
                if lr not in losses
                else (f"**{losses[lr]:.4f}**" if losses[lr] == best else f"{losses[lr]:.4f}")
                for lr in lrs
            ]
            lines.append(f"| {name} | {setting} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS[:4]), choices=OPTIMIZERS)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/lr_sweep.json"))
    parser.add_argument("--lrs", nargs="+", type=float, help="only these points of the lr grid")
    parser.add_argument("--no-variants", action="store_true", help="skip the beta1/gamma runs")
    parser.add_argument("--table", action="store_true", help="print the results, run nothing")
    args = parser.parse_args()
    if args.table:
        print(markdown_table(json.loads(args.out.read_text())["runs"]))
        return
    corpus = load_corpus(MINI_BUDGET.data)
    records = json.loads(args.out.read_text())["runs"] if args.out.exists() else []

    def run(name: str, hyperparams: dict) -> float:
        for record in records:
            if record["optimizer"] == name and record["hyperparams"] == hyperparams:
                return record["final_val_loss"]
        with TemporaryDirectory() as tmp:
            config = dataclasses.replace(
                MINI_BUDGET,
                optimizer=name,
                run_dir=Path(tmp),
                hyperparams={
                    k: tuple(v) if isinstance(v, list) else v for k, v in hyperparams.items()
                },
            )
            try:
                loss = Trainer(config, corpus).train().final
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
                        "model": MINI_BUDGET.model,
                        "steps": MINI_BUDGET.steps,
                        "batch_size": MINI_BUDGET.batch_size,
                    },
                    "runs": records,
                },
                indent=1,
            )
            + "\n"
        )
        return loss

    for name in args.optimizers:
        grid = args.lrs or (LION_LR_GRID if name.endswith("lion") else LR_GRID)
        losses = {lr: run(name, {"lr": lr}) for lr in grid}
        best_lr = min(losses, key=lambda lr: (losses[lr] != losses[lr], losses[lr]))
        if name == "mars-adamw" and not args.no_variants:
            for variant in MARS_VARIANTS:
                run(name, {"lr": best_lr, **variant})


if __name__ == "__main__":
    main()
