"""The first map's winners read under the new protocol: is the new search at least as strong?

For one point, each optimizer's winner of the first map (coordinate descent,
``benchmarks/results/regime-map/POINT/tune.json``) is trained on the new map's selection seeds
0-2 with its validation set (131,072 fixed tokens) and budget, through ``torch-mars sweep``
(a grid of one point per optimizer: resumable; ``fight_map.py --snapshot`` lands its journal
gzipped). Its table sits
beside the new winners' selection scores (``fight-map/POINT/tune.json``) in
``fight-map/POINT/first-map-winners.md``: the new search must reach them or better for every
optimizer.

    python benchmarks/studies/first_map_winners.py b64-4x [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from lab.fight_map import EVAL_TOKENS, FightMap

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.study.store import restore_journals
from torch_mars.train.study.tune_record import read_tune_record

MAP = FightMap(Path(__file__).resolve().parents[2])
SEEDS = ("0", "1", "2")


def sweep_arguments(point: str, jobs: int) -> list[str]:
    old = read_tune_record(MAP.root / "benchmarks/results/regime-map" / point)
    winners = {entry.optimizer: entry.hyperparams for entry in old.optimizers}
    return MAP.winners_sweep_arguments(
        point, winners, MAP.folder / point, "first-map-winners", SEEDS, jobs
    )


def compare(point: str) -> str:
    """The first map's winners against the new search's, on the selection seeds."""
    new = read_tune_record(MAP.folder / point)
    old = json.loads((MAP.folder / point / "first-map-winners" / "sweep.json").read_text())
    old_means = {s["optimizer"]: s["final"] for s in old["summaries"]}
    lines = [
        f"Selection seeds 0-2, data order 0, {EVAL_TOKENS:,} validation tokens (lower is better).",
        "",
        "| optimizer | first map's winner | new search's winner | new - first |",
        "|---|---:|---:|---:|",
    ]
    for entry in new.optimizers:
        name = entry.optimizer
        finals = [v for v in entry.selection_finals if v is not None]
        ours = statistics.fmean(finals) if finals else math.nan
        theirs = old_means.get(name, math.nan)
        lines.append(f"| {name} | {theirs:.4f} | {ours:.4f} | {ours - theirs:+.4f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("point")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    restore_journals(MAP.folder / args.point)
    arguments = sweep_arguments(args.point, args.jobs)
    print("torch-mars sweep " + shlex.join(arguments), flush=True)
    code = torch_mars(["sweep", *arguments])
    if code:
        return code
    if (MAP.folder / args.point / "tune.json").is_file():
        table = compare(args.point)
        write_text_atomically(MAP.folder / args.point / "first-map-winners.md", table)
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
