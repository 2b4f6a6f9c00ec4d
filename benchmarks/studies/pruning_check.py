"""Does pruning keep the winners? The tabular example (examples/tabular_mlp.py) tuned twice at
the user's guide's budget, once without pruning and once with it, the same protocol otherwise:
each optimizer's winner, its held-out mean, and the runs and run time each study spent.

    python benchmarks/studies/pruning_check.py            # both studies, then the table
    python benchmarks/studies/pruning_check.py --report   # the table from the stored reports

Writes ``benchmarks/results/pruning-check/check.md`` (the studies' own folders stay in
``runs/pruning-check``: a toy's journals are not worth landing). One model and one budget: a
first look, not the search benchmark's verdict on pruning.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from pathlib import Path

import torch_mars
from torch_mars.atomic_files import write_text_atomically
from torch_mars.train.study.objective import import_objective
from torch_mars.train.study.tune_record import read_tune_record

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "runs" / "pruning-check"
OUT = ROOT / "benchmarks" / "results" / "pruning-check"
OPTIMIZERS = ("adamw", "nadamw", "mars-adamw")


def example():
    """The tabular example's module, imported from the checkout as a user's function is
    (``examples.tabular_mlp:train``, its study knowing it by that name)."""
    os.chdir(ROOT)  # a training function is imported from the current folder
    train = import_objective("examples.tabular_mlp:train")
    return sys.modules[train.__module__]


def run(prune: bool) -> None:
    tabular = example()
    torch_mars.tune(
        tabular.train,
        OPTIMIZERS,
        trials=tabular.TRIALS,
        extra_space={"dropout": tabular.DROPOUT},
        prune=prune,
        out_dir=STUDIES,
        name="pruned" if prune else "unpruned",
    )


def table() -> str:
    rows = [
        "| study | optimizer | pruned trials | winner | held-out mean |",
        "|---|---|---:|---|---:|",
    ]
    spent = []
    for name in ("unpruned", "pruned"):
        record = read_tune_record(STUDIES / name)
        hours = sum(c["hours"] for c in record.cost.values())
        runs = sum(c["runs"] for c in record.cost.values())
        spent.append(f"{name}: {runs} runs, {hours * 60:.1f} run minutes")
        for o in record.optimizers:
            finals = o.heldout_finals
            mean = statistics.fmean(finals) if None not in finals else math.nan
            winner = ", ".join(f"{d} {v:g}" for d, v in o.winner.items())
            rows.append(
                f"| {name} | {o.optimizer} | {o.pruned_trials or 0} | {winner} | {mean:.4f} |"
            )
    return (
        "The tabular example at the user's guide's budget (20 trials an optimizer, dropout "
        "as a dimension of yours), without and with pruning; lower is better.\n\n"
        + "\n".join(rows)
        + "\n\nSpent: "
        + "; ".join(spent)
        + ".\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", action="store_true", help="the table only")
    args = parser.parse_args()
    if not args.report:
        run(prune=False)
        run(prune=True)
    OUT.mkdir(parents=True, exist_ok=True)
    text = table()
    write_text_atomically(OUT / "check.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
