"""How many workers does a tune study keep busy, and would speculative runs help? A replay of a
finished map point, no training: the engine's claim order (``needed_runs``: the first needed
run no worker holds) with W workers, each run taking the wall time it took in the journal.

Speculation, the one alternative measured: a worker that would wait takes a run the searches
may need next instead (each search replayed on made-up values of the runs it waits for: each
waited-for point in turn the best, then all of them the worst; see :func:`speculative_runs`).
Its runs' values come from the journal where the real search trained them (the same result
training it early gives); a run the journal lacks is never read and takes the median run time.

    python benchmarks/studies/worker_simulation.py b64-4x [--workers 1 3 6 9 15]
        [--optimizers mars-adamw]  # one search alone, as a user tuning one optimizer runs it

It prints one table per point: wall hours and the workers' busy share, without and with
speculation, and the runs each trains.
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from lab.fight_map import FightMap

from torch_mars.bench.table import markdown_table
from torch_mars.train.study.engine import RunId, Search, finished_results, run_of
from torch_mars.train.study.store import stored_study
from torch_mars.train.study.tune import plan_of_identity
from torch_mars.train.study.workers import by_runs_left, needed_runs

MAP = FightMap(Path(__file__).resolve().parents[2])


def speculative_runs(searches: Sequence[Search], results: Mapping[RunId, float]) -> list[RunId]:
    """Runs the searches may need once the runs they wait for finish: each search replayed
    with each waited-for point in turn below every result so far by their spread (the best)
    and the others above it, then all of them above; the runs those replays need next, first
    outcome first, searches in :func:`needed_runs`'s order."""
    guessed: dict[RunId, None] = {}
    for search in by_runs_left(searches, results):
        waited = search.replay(results).needed
        own = [v for run, v in results.items() if run[0] == search.optimizer and math.isfinite(v)]
        low, high = (min(own), max(own)) if own else (0.0, 1.0)
        spread = (high - low) or 1.0
        for best in [*dict.fromkeys(run[1] for run in waited), None]:
            made_up = {run: low - spread if run[1] == best else high + spread for run in waited}
            for run in search.replay({**results, **made_up}).needed:
                if run not in results and run not in made_up:
                    guessed[run] = None
    return list(guessed)


class Simulated(NamedTuple):
    """A simulated study: its wall hours, the run hours its workers spent, the runs they
    trained and the results the study ended with."""

    wall_hours: float
    run_hours: float
    runs: int
    results: dict[RunId, float]


def simulate(
    searches: Sequence[Search],
    values: Mapping[RunId, float],
    hours: Mapping[RunId, float],
    workers: int,
    speculate: bool,
) -> Simulated:
    """The study run by ``workers`` workers that claim as the engine does (and, with
    ``speculate``, take a speculative run rather than wait)."""
    typical = statistics.median(hours.values())
    results: dict[RunId, float] = {}
    running: set[RunId] = set()
    finishing: list[tuple[float, int, RunId]] = []  # (time, order, run)
    now = busy = 0.0
    trained = 0
    while True:
        while len(running) < workers:
            needed = needed_runs(searches, results)
            if not needed and not running:
                return Simulated(now, busy, trained, results)
            free = [run for run in needed if run not in running]
            if not free and speculate:
                free = [run for run in speculative_runs(searches, results) if run not in running]
            if not free:
                break
            run = free[0]
            took = hours.get(run, typical)
            running.add(run)
            busy += took
            trained += 1
            heapq.heappush(finishing, (now + took, trained, run))
        if not finishing:
            return Simulated(now, busy, trained, results)
        now, _, run = heapq.heappop(finishing)
        running.discard(run)
        results[run] = values.get(run, math.nan)


def point_rows(
    point: str, worker_counts: Sequence[int], optimizers: Sequence[str] = ()
) -> list[list[str]]:
    """One row per worker count: the point's study (its searches of ``optimizers`` only,
    where named) replayed without and with speculation."""
    trials, identity, history = stored_study(MAP.study_folder(point))
    plan = plan_of_identity(identity, MAP.study_folder(point), None, point, history)
    searches = [s for s in plan.searches() if not optimizers or s.optimizer in optimizers]
    values = finished_results(trials)
    hours: dict[RunId, float] = {}
    for trial in trials:
        run = run_of(trial)
        if run in values and trial.datetime_start and trial.datetime_complete:
            hours[run] = (trial.datetime_complete - trial.datetime_start).total_seconds() / 3600
    if any(search.replay(values).needed for search in searches):
        raise SystemExit(f"{point}: a search of its study has not finished; nothing to replay")
    rows = []
    for count in worker_counts:
        plain_wall, plain_busy, plain_runs, _ = simulate(searches, values, hours, count, False)
        spec_wall, spec_busy, spec_runs, _ = simulate(searches, values, hours, count, True)
        rows.append(
            [
                point,
                ", ".join(s.optimizer for s in searches),
                str(count),
                f"{plain_wall:.2f}",
                f"{plain_busy / (count * plain_wall):.0%}",
                str(plain_runs),
                f"{spec_wall:.2f}",
                f"{spec_busy / (count * spec_wall):.0%}",
                str(spec_runs),
            ]
        )
    return rows


def main() -> int:
    import optuna

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("points", nargs="+")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 3, 6, 9, 15])
    parser.add_argument("--optimizers", nargs="+", default=[], help="these searches only")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = [
        row for point in args.points for row in point_rows(point, args.workers, args.optimizers)
    ]
    headers = ["point", "searches", "workers", "wall h", "busy", "runs",
               "speculating: wall h", "busy", "runs"]  # fmt: skip
    print(markdown_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
