"""What a MARS winner's gain is made of (issue #36): the regime map's winner of one MARS rule at
one point, retrained on the held-out seeds 3-5 with the correction switched off (gamma = 0), the
per-tensor clip of ``c`` switched off, and, for MARS-AdamW, the second moment read from the
gradient instead of ``c`` (``second_moment=gradient``), and their combinations (``ABLATIONS``:
none at gamma = 0, where neither can change anything); for MARS-Shampoo also Newton-Schulz in
bf16, as ``torch.optim.Muon`` runs it; and Muon's winner without its Nesterov form, the
control's side of MARS-Shampoo's gap at gamma 0. Everything else is at the winner's values; the
runs go through ``torch-mars sweep`` (its plain-grid mode).

    python benchmarks/studies/ablate_winners.py b128-4x mars-shampoo [--jobs 1]

The point's ``tune.json`` (written by ``regime_map.py --report``) gives the winner and the
budget. Each sweep's study is ``benchmarks/results/regime-map/POINT/ablate-RULE*/study.log`` (a
journal, kept in git gzipped: ``gunzip -k`` it to resume where it stopped); ``ablation.md`` in
the first sweep's folder gives every point's held-out mean ± std and its difference from the
winner. The command is printed before it starts; it reproduces it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

from lab.ablation import (
    ABLATIONS,
    BUDGET_FLAGS,
    UNSET,
    ablation_flags,
    short_flag_value,
    sweep_study_flags,
)

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.optimizers import MARS_RULE_OF
from torch_mars.train.study.tune_record import read_tune_record

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "benchmarks" / "results" / "regime-map"
HELDOUT_SEEDS = ("3", "4", "5")


def tuned_winner(point: str, rule: str) -> tuple[dict, dict]:
    """The budget of ``point`` and ``rule``'s finished winner there, from its ``tune.json``."""
    path = FOLDER / point / "tune.json"
    if not path.is_file():
        raise ValueError(f"no {path.relative_to(ROOT)}: run regime_map.py --report for {point}")
    report = read_tune_record(path)
    winner = report.entry(rule)
    if winner is None or not winner.finished:
        raise ValueError(f"{rule} has no finished winner at {point}")
    return report.budget, winner.hyperparams


def sweep_arguments(point: str, rule: str, suffix: str, jobs: int) -> list[str]:
    """The ``torch-mars sweep`` arguments of ``rule``'s ablation sweep ``suffix`` at ``point``."""
    budget, winner = tuned_winner(point, rule)
    arguments = ablation_flags(rule, suffix, budget, winner, BUDGET_FLAGS)
    name = f"ablate-{rule}{suffix}"
    return [*arguments, *sweep_study_flags(FOLDER / point, name, HELDOUT_SEEDS, jobs, ROOT)]


def ablation_table(point: str, rule: str) -> str:
    """Every point of ``rule``'s ablation sweeps at ``point``, held-out mean ± std, against the
    tuned winner (clip on, the second moment of c, its gamma)."""
    _, winner = tuned_winner(point, rule)
    first = ("gamma",) if rule in MARS_RULE_OF else ()
    axes = list(dict.fromkeys(a for grid in ABLATIONS[rule].values() for a in (*first, *grid)))
    reference_values = [winner.get(a, UNSET.get(a)) for a in axes]
    rows = []
    for suffix in ABLATIONS[rule]:
        record = json.loads((FOLDER / point / f"ablate-{rule}{suffix}" / "sweep.json").read_text())
        for found in record["points"]:
            finals = [found["finals"][s] for s in HELDOUT_SEEDS if s in found["finals"]]
            mean = statistics.fmean(finals)
            std = statistics.stdev(finals) if len(finals) > 1 else 0.0
            values = [found["hyperparams"].get(a, UNSET.get(a)) for a in axes]
            rows.append((values, mean, std, len(finals)))
    reference = next(mean for values, mean, _, _ in rows if values == reference_values)
    lines = [
        f"| {' | '.join(axes)} | held out, seeds {'-'.join(HELDOUT_SEEDS[::2])} | vs the winner "
        "| seeds |",
        "|" + "---|" * len(axes) + "---:|---:|---:|",
    ]
    for values, mean, std, seeds in rows:
        lines.append(
            f"| {' | '.join('auto' if v is None else short_flag_value(v) for v in values)} | "
            f"{mean:.4f} ± {std:.4f} | "
            f"{mean - reference:+.4f} | {seeds} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point")
    parser.add_argument("rule", choices=list(ABLATIONS))
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    os.chdir(ROOT)
    try:
        sweeps = [
            sweep_arguments(args.point, args.rule, s, args.jobs) for s in ABLATIONS[args.rule]
        ]
    except ValueError as error:
        parser.error(str(error))
    for arguments in sweeps:
        print("torch-mars sweep " + shlex.join(arguments), flush=True)
        code = torch_mars(["sweep", *arguments])
        if code:
            return code
    table = ablation_table(args.point, args.rule)
    first = next(iter(ABLATIONS[args.rule]))
    write_text_atomically(
        FOLDER / args.point / f"ablate-{args.rule}{first}" / "ablation.md", table + "\n"
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
