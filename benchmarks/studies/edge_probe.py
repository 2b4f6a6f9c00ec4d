"""Whether a fight-map winner at an edge of the declared space is held there by the ladder: one
optimizer's winner at a point (from the point's report with the most trials), retrained with
one setting moved past the ladder's end, on the selection runs that chose it (its choosing
seeds, 0-2 and 6-8, on data order 0: no held-out run is read), each value a paired gap to the
winner's own selection runs in the report (the sweep retrains the winner too, to show that it
reproduces them). A value ahead by more than its interval says a wider ladder would move the
winner, which the declared space then has to take for every optimizer with that dimension.

    python benchmarks/studies/edge_probe.py b64-4x nadamw betas "(0.85,0.85)" "(0.85,0.8)"

The runs go through ``torch-mars sweep`` (its plain-grid mode): a resumable journal in
``benchmarks/results/fight-map/POINT/edge-OPTIMIZER-SETTING/``, and the table in
``POINT/edge-OPTIMIZER-SETTING.md``. The command is printed before it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from ablate_winners import budget_flags, flag_value, sweep_study_flags
from fight_ablation import FLAGS
from fight_map import FOLDER, ROOT, point_reports

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.verdict import paired_gap


def winner_at(point: str, optimizer: str, folder: Path = FOLDER) -> dict:
    """``optimizer``'s finished winner at ``point`` in the report with the most trials that has
    one: the report's budget, trials and choosing seeds, the winner's hyperparameters and its
    finals on those seeds."""
    for _, record in reversed(point_reports(point, folder)):
        for outcome in record["optimizers"]:
            if outcome["optimizer"] == optimizer and outcome["finished"]:
                selection = Selection.of_record(record["selection"])
                return {
                    "budget": record["budget"],
                    "trials": outcome["trials"],
                    "seeds": list(selection.choosing_seeds),
                    "data_seed": selection.data_seed,
                    "hyperparams": outcome["hyperparams"],
                    "finals": outcome["selection_finals"],
                }
    raise ValueError(f"{optimizer} has no finished winner at {point}")


def sweep_name(optimizer: str, setting: str) -> str:
    return f"edge-{optimizer}-{setting}"


def sweep_arguments(
    point: str, optimizer: str, setting: str, values: list[str], jobs: int
) -> list[str]:
    """The ``torch-mars sweep`` arguments: the winner's budget and values, ``setting`` at each
    of ``values``, on the winner's choosing seeds."""
    found = winner_at(point, optimizer)
    if setting not in found["hyperparams"]:
        raise ValueError(
            f"{optimizer}'s winner sets {sorted(found['hyperparams'])}, not {setting!r}"
        )
    arguments = budget_flags(found["budget"], FLAGS)
    arguments += ["--data-seed", str(found["data_seed"])]
    grid = {key: flag_value(value) for key, value in found["hyperparams"].items()}
    grid[setting] = ",".join([grid[setting], *values])  # the winner's own runs, to check
    for key, value in grid.items():
        arguments += ["--grid", f"{optimizer}:{key}={value}"]
    seeds = [str(s) for s in found["seeds"]]
    name = sweep_name(optimizer, setting)
    return [*arguments, *sweep_study_flags(FOLDER / point, name, seeds, jobs)]


def format_probe(point: str, optimizer: str, setting: str, folder: Path = FOLDER) -> str:
    """Each probed value's mean over the choosing seeds and its paired gap to the winner's own
    runs on them (< 0: the probe ahead)."""
    found = winner_at(point, optimizer, folder)
    record = json.loads(
        (folder / point / sweep_name(optimizer, setting) / "sweep.json").read_text()
    )
    own = flag_value(found["hyperparams"][setting])
    lines = [
        f"{optimizer}'s winner at {point} ({found['trials']} trials, {setting} {own}) against "
        f"{setting} past the ladder's end, on its choosing seeds "
        f"{', '.join(str(s) for s in found['seeds'])} (data order {found['data_seed']}).",
        "",
        f"| {setting} | mean | - winner [95% interval] | seeds |",
        "|---|---:|---:|---:|",
        f"| {own} (the winner) | {sum(found['finals']) / len(found['finals']):.4f} | | "
        f"{len(found['finals'])} |",
    ]
    for entry in record["points"]:
        finals = [entry["finals"].get(str(s), float("nan")) for s in found["seeds"]]
        done = [v for v in finals if v == v]
        value = flag_value(entry["hyperparams"][setting])
        if value == own:
            worst = max((abs(a - b) for a, b in zip(finals, found["finals"], strict=True)))
            gap = f"retrained: largest difference {worst:.2g}"
        else:
            gap = paired_gap(finals, found["finals"]).text() if len(done) == len(finals) else "—"
        mean = f"{sum(done) / len(done):.4f}" if done else "—"
        lines.append(f"| {value} | {mean} | {gap} | {len(done)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point")
    parser.add_argument("optimizer")
    parser.add_argument("setting", help="a hyperparameter the winner sets, e.g. betas")
    parser.add_argument("values", nargs="+", help="its probed values, as --grid takes them")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    os.chdir(ROOT)
    try:
        arguments = sweep_arguments(
            args.point, args.optimizer, args.setting, args.values, args.jobs
        )
    except ValueError as error:
        parser.error(str(error))
    print("torch-mars sweep " + shlex.join(arguments), flush=True)
    code = torch_mars(["sweep", *arguments])
    if code:
        return code
    table = format_probe(args.point, args.optimizer, args.setting)
    name = sweep_name(args.optimizer, args.setting)
    write_text_atomically(FOLDER / args.point / f"{name}.md", table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
