"""What a MARS rule's lead on the fight map is made of: its winner at a point (from the point's
report with the most trials), retrained on that report's held-out runs (seeds 3-5 x data orders
1-2) with each ablation of ``ABLATIONS`` (the per-tensor clip of ``c`` off, the
second moment read from the gradient instead of ``c``, gamma 0, ...), each read as a paired gap
to the winner and to the strongest control on the same runs. The runs go through ``torch-mars
sweep`` (its plain-grid mode), one sweep per ablation and data order, each a resumable journal
in ``benchmarks/results/fight-map/POINT/ablate-RULE[-SUFFIX]-dataD/``; ``ablation-RULE.md`` in
the point's folder gives the table.

    python benchmarks/studies/fight_ablation.py b64-4x mars-adamw [--jobs 1]

The winner's own point is in every grid, so the table also says whether the sweep reproduces
the tune study's held-out runs. The commands are printed before they start.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from lab.ablation import (
    ABLATIONS,
    TUNE_BUDGET_FLAGS,
    UNSET,
    ablation_flags,
    short_flag_value,
    sweep_study_flags,
)
from lab.fight_map import FightMap
from lab.map_report import (
    point_reports,
)

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.compare import mean_std_text
from torch_mars.train.optimizers import MARS_RULE_OF
from torch_mars.train.study.verdict import paired_gap

MAP = FightMap(Path(__file__).resolve().parents[2])


def winner_of(point: str, rule: str, folder: Path = MAP.folder) -> dict:
    """``rule``'s finished winner at ``point`` in the point's report with the most trials that
    has one: its budget, hyperparameters, held-out pairs and finals, and its strongest
    control's name and held-out finals on the same pairs."""
    for _, record in reversed(point_reports(point, folder)):
        verdict = next((v for v in record.verdicts if v.rule == rule), None)
        winner = record.entry(rule)
        if verdict is not None and winner is not None and winner.finished:
            control = record.entry(verdict.control)
            return {
                "budget": record.budget,
                "trials": record.trials,
                "hyperparams": winner.hyperparams,
                "pairs": [tuple(p) for p in winner.heldout_pairs],
                "finals": winner.heldout_finals,
                "control": verdict.control,
                "control_finals": control.heldout_finals if control is not None else [],
            }
    raise ValueError(f"{rule} has no finished winner with a verdict at {point}")


def sweep_name(rule: str, suffix: str, data_seed: int) -> str:
    return f"ablate-{rule}{suffix}-data{data_seed}"


def sweep_arguments(point: str, rule: str, suffix: str, data_seed: int, jobs: int) -> list[str]:
    """The ``torch-mars sweep`` arguments of ``rule``'s ablation ``suffix`` at ``point`` on the
    held-out seeds of data order ``data_seed``."""
    found = winner_of(point, rule)
    arguments = ablation_flags(
        rule,
        suffix,
        found["budget"],
        found["hyperparams"],
        TUNE_BUDGET_FLAGS,
        ignored=("data_seed",),
    )
    arguments += ["--data-seed", str(data_seed)]
    seeds = [str(s) for s, d in found["pairs"] if d == data_seed]
    name = sweep_name(rule, suffix, data_seed)
    return [
        *arguments,
        *sweep_study_flags(MAP.folder / point, name, seeds, jobs, MAP.root),
    ]


def data_seeds(point: str, rule: str, folder: Path = MAP.folder) -> list[int]:
    return sorted({d for _, d in winner_of(point, rule, folder)["pairs"]})


def ablation_rows(point: str, rule: str, folder: Path = MAP.folder) -> list[dict]:
    """Every point of ``rule``'s ablation sweeps at ``point``: its ablated values, its finals on
    the winner's held-out pairs (NaN where a run has not finished), and paired gaps to the
    winner as the sweeps retrained it and to the strongest control."""
    found = winner_of(point, rule, folder)
    first = ("gamma",) if rule in MARS_RULE_OF else ()
    axes = list(dict.fromkeys(a for grid in ABLATIONS[rule].values() for a in (*first, *grid)))
    finals: dict[tuple, dict[tuple[int, int], float]] = {}
    for suffix in ABLATIONS[rule]:
        for data_seed in data_seeds(point, rule, folder):
            path = folder / point / sweep_name(rule, suffix, data_seed) / "sweep.json"
            if not path.is_file():
                continue
            for entry in json.loads(path.read_text())["points"]:
                values = tuple(entry["hyperparams"].get(a, UNSET.get(a)) for a in axes)
                runs = finals.setdefault(values, {})
                for seed, value in entry["finals"].items():
                    runs[(int(seed), data_seed)] = value
    winner_values = tuple(found["hyperparams"].get(a, UNSET.get(a)) for a in axes)
    retrained = [finals.get(winner_values, {}).get(p, float("nan")) for p in found["pairs"]]
    rows = []
    for values, runs in finals.items():
        row = [runs.get(p, float("nan")) for p in found["pairs"]]
        complete = all(v == v for v in row)
        rows.append(
            {
                "values": dict(zip(axes, values, strict=True)),
                "finals": row,
                "winner": values == winner_values,
                "to_winner": paired_gap(row, retrained) if complete and values != winner_values
                and all(v == v for v in retrained) else None,
                "to_control": paired_gap(row, found["control_finals"]) if complete else None,
            }
        )  # fmt: skip
    return rows


def format_ablation(point: str, rule: str, rows: list[dict], folder: Path = MAP.folder) -> str:
    """The table of :func:`ablation_rows`, with whether the sweeps reproduce the tune study's
    held-out runs of the winner."""
    found = winner_of(point, rule, folder)
    axes = list(rows[0]["values"]) if rows else []
    own = next((r for r in rows if r["winner"]), None)
    if own is None or any(v != v for v in own["finals"]):
        reproduced = "the winner's runs have not finished"
    else:
        worst = max(abs(a - b) for a, b in zip(own["finals"], found["finals"], strict=True))
        reproduced = f"the largest difference from the tune study's runs: {worst:.2g}"
    lines = [
        f"{rule}'s winner at {point} ({found['trials']} trials), retrained on its held-out runs "
        f"(seed, data order) {', '.join(f'{s}/{d}' for s, d in found['pairs'])}; {reproduced}.",
        "",
        f"| {' | '.join(axes)} | held out | - winner [95% interval] | "
        f"- {found['control']} [95% interval] |",
        "|" + "---|" * len(axes) + "---:|---:|---:|",
    ]
    for row in rows:
        mean = mean_std_text(row["finals"])
        values = " | ".join(
            "auto" if v is None else short_flag_value(v) for v in row["values"].values()
        )
        to_winner = "the winner" if row["winner"] else (row["to_winner"] or "—")
        lines.append(
            f"| {values} | {mean} | "
            f"{to_winner if isinstance(to_winner, str) else to_winner.text()} | "
            f"{row['to_control'].text() if row['to_control'] else '—'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point")
    parser.add_argument("rule", choices=[r for r in ABLATIONS if r in MARS_RULE_OF])
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    os.chdir(MAP.root)
    try:
        sweeps = [
            sweep_arguments(args.point, args.rule, suffix, data_seed, args.jobs)
            for suffix in ABLATIONS[args.rule]
            for data_seed in data_seeds(args.point, args.rule)
        ]
    except ValueError as error:
        parser.error(str(error))
    for arguments in sweeps:
        print("torch-mars sweep " + shlex.join(arguments), flush=True)
        code = torch_mars(["sweep", *arguments])
        if code:
            return code
    table = format_ablation(args.point, args.rule, ablation_rows(args.point, args.rule))
    write_text_atomically(MAP.folder / args.point / f"ablation-{args.rule}.md", table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
