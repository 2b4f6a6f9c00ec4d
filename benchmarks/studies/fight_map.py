"""The map redone as a fight that decides (issue "A fight that decides"): every point through
``torch-mars tune`` with one trial budget per optimizer, the lr-profiled search, a validation
set of 131,072 fixed tokens, and each winner read on seeds 3-5 x data orders 1-2, which no
selection saw. Two pairs: MARS-AdamW against the better of AdamW and NAdamW, MARS-Shampoo
against Muon; each gap is a paired 95% interval, decided by Holm's correction over every
comparison of the map.

The points (the `tiny` GPT on the stdlib corpus, T x 20 tokens per non-embedding parameter, B
sequences of 32 tokens per step) run in the order that decides most first: b64-4x, b16-4x (the
`compare` point), b256-16x, b128-16x, b4-4x, then b128-4x, b256-4x, b16-1x, b16-8x.

Each point is one study, an Optuna journal at ``benchmarks/results/fight-map/POINT/study.log``.
The live journal is not committed: ``--snapshot`` gzips it beside itself (``study.log.gz``,
about 20x smaller), which is what lands; a point whose journal is missing starts from its
snapshot. So a map interrupted anywhere resumes, on this machine or another, and nothing
finished reruns.

    python benchmarks/studies/fight_map.py [--points b64-4x ...] [--jobs 2]  # 80 trials each
    python benchmarks/studies/fight_map.py --points b16-4x --optimizers muon mars-shampoo
        # a pair first; the study's report at 80 in b16-4x/trials-80/b16-4x/, at 40 (the
        # first budget, --trials 40) in b16-4x/: a budget's report never replaces another's
    python benchmarks/studies/fight_map.py --snapshot   # study.log.gz of every point with runs
    python benchmarks/studies/fight_map.py --status     # each study's runs per optimizer, time left
    python benchmarks/studies/fight_map.py --report     # each point's report, map.md, map.png
    python benchmarks/studies/fight_map.py --points b64-4x --order-seed 1  # a second search
        [--optimizers nadamw mars-adamw muon mars-shampoo]  # of the optimizers it checks

The command each point runs is printed before it starts; it is the one that reproduces it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from lab.fight_map import OPTIMIZERS, POINTS, TRIALS, FightMap
from lab.map_report import (
    format_map,
    format_progress,
    format_second_against_first,
    map_rows,
    plot_map,
    point_reports,
    progress_rows,
    second_against_first,
    start_independence_sections,
)

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.study.store import restore_journals, snapshot_journals

MAP = FightMap(Path(__file__).resolve().parents[2])
ROOT, FOLDER = MAP.root, MAP.folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", nargs="+", choices=list(POINTS), default=list(POINTS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--snapshot", action="store_true")
    parser.add_argument(
        "--status",
        action="store_true",
        help="each study's finished runs so far and its run hours left (changes nothing)",
    )
    parser.add_argument(
        "--optimizers",
        nargs="+",
        choices=OPTIMIZERS,
        default=list(OPTIMIZERS),
        help="a subset (a pair first, or a second search's); each verdict is read where its "
        "rule and controls all ran",
    )
    parser.add_argument(
        "--order-seed",
        type=int,
        default=0,
        help="> 0: a second search of each point with this order seed, in POINT/order-seed-N/",
    )
    args = parser.parse_args()
    if args.status:
        print(format_progress(progress_rows(FOLDER)))
        return 0
    if args.snapshot:
        for point in args.points:
            for written in snapshot_journals(FOLDER / point):
                print(f"wrote {written.relative_to(ROOT)}")
        return 0
    for point in args.points:
        restore_journals(FOLDER / point)
        if args.report and not MAP.journal(point, args.order_seed).is_file():
            continue
        arguments = MAP.tune_arguments(
            point,
            args.jobs,
            args.trials,
            args.report,
            args.order_seed,
            reports_in=MAP.budget_folder(point, args.trials, args.order_seed),
            optimizers=tuple(args.optimizers),
        )
        print("torch-mars tune " + shlex.join(arguments), flush=True)
        code = torch_mars(["tune", *arguments])
        if code:
            return code
    if args.report and args.order_seed == 0:
        rows = map_rows(FOLDER)
        text = format_map(rows) + "\n"
        for point in POINTS:
            reports = point_reports(point, FOLDER)
            for budget, record in reports[1:]:
                heading = (
                    f"Budget at {point}: the same search extended to {budget} trials (second) "
                    f"against its {reports[0][0]} (first), on the same held-out runs."
                )
                checked = second_against_first(reports[0][1], record)
                text += "\n" + format_second_against_first(heading, checked) + "\n"
            for section in start_independence_sections(point, FOLDER):
                text += "\n" + section + "\n"
        write_text_atomically(FOLDER / "map.md", text)
        print(f"wrote {(FOLDER / 'map.md').relative_to(ROOT)}")
        if rows:
            print(f"wrote {plot_map(rows, FOLDER / 'map.png').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
