"""Whether a fight-map winner at an edge of the declared space is held there by the ladder: one
optimizer's winner at a point (from the point's report with the most trials), retrained with
one setting moved past the ladder's end, on the selection runs that chose it (its choosing
seeds, 0-2 and 6-8, on data order 0: no held-out run is read), each value a paired gap to the
winner's own selection runs in the report (the sweep retrains the winner too, to show that it
reproduces them). A value ahead by more than its interval says a wider ladder would move the
winner, which the declared space then has to take for every optimizer with that dimension.

    python benchmarks/studies/edge_probe.py b64-4x nadamw betas "(0.85,0.85)" "(0.85,0.8)"

``--with SETTING VALUE...`` moves a second setting beside the first, for a ridge (MARS's beta1
past its ladder with a smaller gamma, which keeps the correction's strength): the grid is every
combination of the moved settings' values, the winner's own included.

    python benchmarks/studies/edge_probe.py b16-4x mars-shampoo betas "(0.99,0.95)" \
        --with gamma 0.025

The runs go through ``torch-mars sweep`` (its plain-grid mode): a resumable journal in
``benchmarks/results/fight-map/POINT/edge-OPTIMIZER-SETTINGS/``, and the table in
``POINT/edge-OPTIMIZER-SETTINGS.md`` (SETTINGS: the moved settings joined by ``-``). The command
is printed before it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from lab.ablation import (
    TUNE_BUDGET_FLAGS,
    budget_flags,
    short_flag_value,
    sweep_study_flags,
)
from lab.fight_map import FightMap
from lab.map_report import (
    point_reports,
)

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.verdict import paired_gap

MAP = FightMap(Path(__file__).resolve().parents[2])


def winner_at(point: str, optimizer: str, folder: Path = MAP.folder) -> dict:
    """``optimizer``'s finished winner at ``point`` in the report with the most trials that has
    one: the report's budget, trials and choosing seeds, the winner's hyperparameters and its
    finals on those seeds."""
    for _, record in reversed(point_reports(point, folder)):
        outcome = record.entry(optimizer)
        if outcome is not None and outcome.finished:
            selection = Selection.of_record(record.selection)
            if selection.final_data_seeds:
                raise ValueError(
                    f"{optimizer}'s winner at {point} was chosen on data orders "
                    f"{selection.data_seed} and {list(selection.final_data_seeds)}: a probe "
                    "sweeps one data order, so it cannot repeat that choice"
                )
            return {
                "budget": record.budget,
                "trials": outcome.trials,
                "seeds": list(selection.choosing_seeds),
                "data_seed": selection.data_seed,
                "hyperparams": outcome.hyperparams,
                "finals": outcome.selection_finals,
            }
    raise ValueError(f"{optimizer} has no finished winner at {point}")


def sweep_name(optimizer: str, settings: Sequence[str]) -> str:
    return "-".join(["edge", optimizer, *settings])


def sweep_arguments(
    point: str, optimizer: str, moves: dict[str, list[str]], jobs: int
) -> list[str]:
    """The ``torch-mars sweep`` arguments: the winner's budget and values, each setting of
    ``moves`` at the winner's own value and each of its values (every combination), on the
    winner's choosing seeds."""
    found = winner_at(point, optimizer)
    for setting in moves:
        if setting not in found["hyperparams"]:
            raise ValueError(
                f"{optimizer}'s winner sets {sorted(found['hyperparams'])}, not {setting!r}"
            )
    arguments = budget_flags(found["budget"], TUNE_BUDGET_FLAGS)
    arguments += ["--data-seed", str(found["data_seed"])]
    grid = {key: short_flag_value(value) for key, value in found["hyperparams"].items()}
    for setting, values in moves.items():
        grid[setting] = ",".join([grid[setting], *values])  # the winner's own runs, to check
    for key, value in grid.items():
        arguments += ["--grid", f"{optimizer}:{key}={value}"]
    seeds = [str(s) for s in found["seeds"]]
    name = sweep_name(optimizer, list(moves))
    return [
        *arguments,
        *sweep_study_flags(MAP.folder / point, name, seeds, jobs, MAP.root),
    ]


def format_probe(
    point: str, optimizer: str, settings: Sequence[str], folder: Path = MAP.folder
) -> str:
    """Each probed combination's mean over the choosing seeds and its paired gap to the
    winner's own runs on them (< 0: the probe ahead)."""
    found = winner_at(point, optimizer, folder)
    record = json.loads(
        (folder / point / sweep_name(optimizer, settings) / "sweep.json").read_text()
    )
    own = [short_flag_value(found["hyperparams"][setting]) for setting in settings]
    winner = ", ".join(f"{setting} {value}" for setting, value in zip(settings, own, strict=True))
    columns = " | ".join(settings)
    lines = [
        f"{optimizer}'s winner at {point} ({found['trials']} trials, {winner}) against "
        f"{' and '.join(settings)} past the ladder's end, on its choosing seeds "
        f"{', '.join(str(s) for s in found['seeds'])} (data order {found['data_seed']}).",
        "",
        f"| {columns} | mean | - winner [95% interval] | seeds |",
        f"|{'---|' * len(settings)}---:|---:|---:|",
        f"| {' | '.join(own)} (the winner) | "
        f"{sum(found['finals']) / len(found['finals']):.4f} | | {len(found['finals'])} |",
    ]
    for entry in record["points"]:
        finals = [entry["finals"].get(str(s), float("nan")) for s in found["seeds"]]
        done = [v for v in finals if v == v]
        values = [short_flag_value(entry["hyperparams"][setting]) for setting in settings]
        if values == own:
            worst = max((abs(a - b) for a, b in zip(finals, found["finals"], strict=True)))
            gap = f"retrained: largest difference {worst:.2g}"
        else:
            gap = paired_gap(finals, found["finals"]).text() if len(done) == len(finals) else "—"
        mean = f"{sum(done) / len(done):.4f}" if done else "—"
        lines.append(f"| {' | '.join(values)} | {mean} | {gap} | {len(done)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point")
    parser.add_argument("optimizer")
    parser.add_argument("setting", help="a hyperparameter the winner sets, e.g. betas")
    parser.add_argument("values", nargs="+", help="its probed values, as --grid takes them")
    parser.add_argument(
        "--with",
        dest="together",
        nargs="+",
        action="append",
        default=[],
        metavar="SETTING VALUE",
        help="a second setting moved beside the first, and its values (every combination)",
    )
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    moves = {args.setting: args.values}
    for setting, *values in args.together:
        if not values or setting in moves:
            parser.error(f"--with {setting}: a setting not moved yet, then its values")
        moves[setting] = values
    os.chdir(MAP.root)
    try:
        arguments = sweep_arguments(args.point, args.optimizer, moves, args.jobs)
    except ValueError as error:
        parser.error(str(error))
    print("torch-mars sweep " + shlex.join(arguments), flush=True)
    code = torch_mars(["sweep", *arguments])
    if code:
        return code
    table = format_probe(args.point, args.optimizer, list(moves))
    name = sweep_name(args.optimizer, list(moves))
    write_text_atomically(MAP.folder / args.point / f"{name}.md", table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
