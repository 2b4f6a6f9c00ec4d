"""Weight-decay control of the MARS-M study (issue #16): the harness's MARS-M decays its matrices
by 0.1 (the authors' and Moonlight's setting) and its Muon by 0 (torch.optim.Muon's recipe), so
each study winner also runs with the other's weight decay, seeds 0-2, at the study's budget
(`tiny`, 4 x 20 tokens per parameter); and MARS-M's winner at weight decay 0 with gamma = 0
(its base rule: Moonlight-scaled Newton-Schulz of a plain EMA), seeds 0-2. Resumable.

    python benchmarks/study_mars_m_controls.py [--jobs 2] [--folder study-mars-m-tiny4x]

Writes benchmarks/results/FOLDER/weight-decay/ and weight-decay-gamma0/.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from study_compare import MINI_BUDGET, RESULTS, progress, tiny_budget

from torch_mars.train.sweep import SweepPlan, format_sweep_table, run_sweep, write_report

SWAPPED_WEIGHT_DECAY = {"mars-m": 0.0, "muon": 0.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--folder", default="study-mars-m-tiny4x")
    args = parser.parse_args()
    folder = RESULTS / args.folder
    winners = json.loads((folder / "betas" / "sweep.json").read_text())["winners"]
    grid = {
        name: {
            **{k: (tuple(v) if isinstance(v, list) else v,) for k, v in winners[name].items()},
            "weight_decay": (weight_decay,),
        }
        for name, weight_decay in SWAPPED_WEIGHT_DECAY.items()
    }
    gamma0 = {"mars-m": {**grid["mars-m"], "gamma": (0.0,)}}
    base = tiny_budget(dataclasses.replace(MINI_BUDGET), 4)
    for name, points in (("weight-decay", grid), ("weight-decay-gamma0", gamma0)):
        plan = SweepPlan(
            base=base,
            grid=points,
            search_seeds=(0,),
            seeds=(0, 1, 2),
            sweep_dir=folder / name,
            jobs=args.jobs,
        )
        report = run_sweep(plan, progress)
        write_report(plan, report)
        print(format_sweep_table(report))


if __name__ == "__main__":
    main()
