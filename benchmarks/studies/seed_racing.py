"""Would racing the selection seeds make the fight map cheaper? A replay of finished map points,
no training (issue "A fight that decides", item 5: prune only where it keeps the winner).

Racing: a trial's first selection seed runs first; where its final is worse than the current
best point's on the same seed (a paired difference) by more than a margin, its other seeds are
skipped and it scores the best's mean plus that difference. Each optimizer's search of a point
is replayed on its study's finished runs with racing at each margin: the selection runs it
would have trained, whether its winner is the full search's, and whether the replay could go
on (where racing changes a decision, the path leaves the runs the journal holds: "left the
path", and what it would have cost is unknown).

    python benchmarks/studies/seed_racing.py b64-4x b16-4x [--margins 0.01 0.02 0.03 0.05]

It reads each point's ``study.log`` (or its ``study.log.gz`` snapshot, unpacked to a temporary
file) under ``benchmarks/results/fight-map/``, and prints one table.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path

import optuna
from lab.fight_map import FightMap

from torch_mars.bench.table import markdown_table
from torch_mars.train.study.engine import RunId, finished_results
from torch_mars.train.study.profiled import BudgetSpent, ProfiledSearch, ProfiledState
from torch_mars.train.study.selection import badness, need
from torch_mars.train.study.space import Point, point_key
from torch_mars.train.study.store import stored_study
from torch_mars.train.study.tune import plan_of_identity

MAP = FightMap(Path(__file__).resolve().parents[2])

FOLDER = MAP.folder


@dataclasses.dataclass(frozen=True)
class RacingSearch(ProfiledSearch):
    """The profiled search with the selection seeds raced at ``margin`` (see the module);
    ``trained`` collects the selection runs each scoring asked for."""

    margin: float = 0.03
    trained: list[int] = dataclasses.field(default_factory=list)

    def score_points(
        self, results: Mapping[RunId, float], state: ProfiledState, points: list[Point]
    ) -> list[tuple[Point, float]]:
        known = {point_key(p): s for p, s in state.trials}
        fresh = list(dict((point_key(p), p) for p in points).values())
        fresh = [p for p in fresh if point_key(p) not in known]
        taken = fresh[: self.trials - len(state.trials)]
        first, *rest = self.selection.seeds
        need(results, [self.run(p, first) for p in taken])
        best = state.point
        estimates = {}
        for p in taken:
            if best:
                gap = badness(results[self.run(p, first)]) - badness(results[self.run(best, first)])
                if gap > self.margin:
                    estimates[point_key(p)] = self._best_score(state) + gap
        raced = [p for p in taken if point_key(p) not in estimates]
        need(results, [self.run(p, s) for p in raced for s in rest])
        for p in taken:
            key = point_key(p)
            score = estimates[key] if key in estimates else self.score(results, p)
            state.trials.append((p, score))
            known[point_key(p)] = score
            if not state.point or badness(score) < self._best_score(state):
                state.point = p
        self.trained.append(len(taken) + len(rest) * len(raced))
        if len(taken) < len(fresh):
            raise BudgetSpent
        return [(p, known[point_key(p)]) for p in points if point_key(p) in known]


def point_rows(point: str, margins: list[float]) -> list[list[str]]:
    """One row per finished search of the point and margin."""
    trials, identity, history = stored_study(FOLDER / point)
    plan = plan_of_identity(identity, FOLDER / point, None, point, history)
    results = finished_results(trials)
    rows = []
    for search in plan.searches():
        full = search.replay(results)
        if not full.finished:
            continue
        full_runs = len(full.trials) * len(plan.selection.seeds)
        for margin in margins:
            racing = RacingSearch(
                **{f.name: getattr(search, f.name) for f in dataclasses.fields(search)},
                margin=margin,
            )
            state = racing.replay(results)
            same = "yes" if point_key(state.point) == point_key(full.point) else "no"
            runs = f"{sum(racing.trained)} / {full_runs}"
            if state.needed:  # racing changed a decision: what it would cost is not known
                same, runs = "—", f"left the path after {sum(racing.trained)}"
            rows.append([point, search.optimizer, f"{margin:g}", runs, same])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="+")
    parser.add_argument("--margins", type=float, nargs="+", default=[0.01, 0.02, 0.03, 0.05])
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = [row for point in args.points for row in point_rows(point, args.margins)]
    headers = ["point", "optimizer", "margin (nats)", "selection runs raced / full",
               "same winner"]  # fmt: skip
    print(markdown_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
