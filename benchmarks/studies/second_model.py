"""The fight on a second model and corpus (issue "A fight that decides", item 7): the map's
protocol (one trial budget per optimizer, the lr-profiled search, 131,072 fixed validation
tokens, winners read on seeds 3-5 x data orders 1-2) for ``tiny-w64`` (``tiny`` at width 64: 4x
its non-embedding parameters, a run about 16x a ``tiny`` run at the same tokens per parameter)
on the Python 3.11 documentation (11 MB of English prose, ``../shared/data/text``), at the
``compare`` point b16-4x and the point where MARS leads most on ``tiny``.

The Adam pair runs first: MARS-AdamW against NAdamW, the stronger of its two controls at every
point and budget of the map so far (AdamW trails NAdamW by 0.016-0.022 held out at b16-4x and
b64-4x), which leaves a point at two thirds of the trio's cost; ``--optimizers`` adds AdamW
and the Shampoo pair when there is time. Each point is one study,
``benchmarks/results/second-model/POINT/``, resumable and landed like the map's
(``--snapshot`` gzips its journal).

    python benchmarks/studies/second_model.py [--points b16-4x b64-4x] [--jobs 2] [--trials 16]
    python benchmarks/studies/second_model.py --points b16-4x --jobs 1 &  # the points side by
    python benchmarks/studies/second_model.py --points b64-4x --jobs 1 &  # side: no worker waits
    python benchmarks/studies/second_model.py --report  # also beside-tiny.md (the winners
        # beside tiny's at each point) and verdicts.md (Holm over the model's comparisons)
    python benchmarks/studies/second_model.py --snapshot
    python benchmarks/studies/second_model.py --status
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from lab.fight_map import POINTS, FightMap
from lab.map_report import (
    format_map,
    format_progress,
    map_rows,
    point_reports,
    progress_rows,
)

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.study.store import restore_journals, snapshot_journals
from torch_mars.train.study.tune_record import read_tune_record

MAP = FightMap(Path(__file__).resolve().parents[2])
FOLDER = MAP.root / "benchmarks" / "results" / "second-model"
MODEL = "tiny-w64"
DATA = MAP.root.parent / "shared" / "data" / "text" / "python311-docs.txt.gz"
# The compare point, then the point where MARS leads most on ``tiny`` (b64-4x, the one where it
# leads at all so far: docs/results.md).
SECOND_POINTS = ("b16-4x", "b64-4x")
ADAM_PAIR = ("nadamw", "mars-adamw")
TRIALS = 16


def beside_first_model(point: str, folder: Path = FOLDER, first: Path | None = None) -> str:
    """Each optimizer's winner at ``point`` on the second model beside its winner on ``tiny``
    (the map's report with the most trials that finished it), dimension by dimension, with the
    trials each search spent: where the tuned values carry across width and corpus."""
    second = read_tune_record(folder / point)
    firsts = point_reports(point, first or MAP.folder)
    lines = [
        f"Winners at {point}: `tiny` on the stdlib corpus (the map) against `{MODEL}` on the "
        "Python documentation (this study).",
        "",
        "| optimizer | dimension | tiny | " + MODEL + " |",
        "|---|---|---:|---:|",
    ]
    for outcome in second.optimizers:
        name = outcome.optimizer
        mine = outcome.winner if outcome.finished else None
        theirs, trials = None, None
        for count, record in reversed(firsts):
            found = record.entry(name)
            if found is not None and found.finished:
                theirs, trials = found.winner, count
                break
        if mine is None or theirs is None:
            left = "not finished" if theirs is None else f"finished at {trials} trials"
            right = "not finished" if mine is None else "finished"
            lines.append(f"| {name} | — | {left} | {right} |")
            continue
        for i, dimension in enumerate(mine):
            label = f"{name} ({trials} / {second.trials} trials)" if i == 0 else ""
            lines.append(f"| {label} | {dimension} | {theirs[dimension]:g} | {mine[dimension]:g} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", nargs="+", choices=list(POINTS), default=list(SECOND_POINTS))
    parser.add_argument("--optimizers", nargs="+", default=list(ADAM_PAIR))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--snapshot", action="store_true")
    parser.add_argument(
        "--status",
        action="store_true",
        help="each study's finished runs so far and its run hours left (changes nothing)",
    )
    args = parser.parse_args()
    if args.status:
        print(format_progress(progress_rows(FOLDER)))
        return 0
    for point in args.points:
        if args.snapshot:
            for written in snapshot_journals(FOLDER / point):
                print(f"wrote {written.relative_to(MAP.root)}")
            continue
        restore_journals(FOLDER / point)
        arguments = MAP.tune_arguments(
            point,
            args.jobs,
            args.trials,
            args.report,
            study=FOLDER / point,
            model=MODEL,
            data=str(args.data),
            optimizers=tuple(args.optimizers),
        )
        print("torch-mars tune " + shlex.join(arguments), flush=True)
        code = torch_mars(["tune", *arguments])
        if code:
            return code
        if args.report:
            table = beside_first_model(point, FOLDER)
            write_text_atomically(FOLDER / point / "beside-tiny.md", table + "\n")
            print(table)
    rows = map_rows(FOLDER) if args.report else []
    if rows:
        table = format_map(rows, over="model")
        text = f"The second model's verdicts, Holm over its {len(rows)} comparison(s).\n\n{table}\n"
        write_text_atomically(FOLDER / "verdicts.md", text)
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
