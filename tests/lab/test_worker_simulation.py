"""The worker simulation of ``benchmarks/studies/worker_simulation.py`` on a pure-function search
(no training): one worker trains every run back to back; speculative runs are the next lr of a
waited-for profile both ways, and speculating changes neither the search's winner nor any run
it reads."""

from __future__ import annotations

import math

from benchmark_scripts import load_benchmark_script
from search_toys import SELECTION, START, ridge
from torch_mars.train.study.profiled import ProfiledSearch
from torch_mars.train.study.space import parse_point_key

SIMULATION = load_benchmark_script("studies/worker_simulation.py")


def finished_search(trials: int = 12) -> tuple[ProfiledSearch, dict, dict]:
    """A search of mars-adamw on the ridge, replayed to its end: the search, every run's value
    and a made-up wall time per run (hours, 1 to 3)."""
    search = ProfiledSearch("mars-adamw", (START,), SELECTION, trials)
    values: dict = {}
    while needed := search.replay(values).needed:
        for run in needed:
            values[run] = ridge(parse_point_key(run[1]), run[2])
    hours = {run: 1.0 + (index % 3) for index, run in enumerate(values)}
    return search, values, hours


def test_one_worker_trains_every_run_back_to_back():
    search, values, hours = finished_search()
    wall, busy, runs, results = SIMULATION.simulate([search], values, hours, 1, speculate=False)
    assert runs == len(values) and results == values
    assert math.isclose(wall, sum(hours.values())) and math.isclose(busy, wall)


def test_more_workers_never_make_a_study_slower_or_train_other_runs():
    search, values, hours = finished_search()
    walls = []
    for workers in (1, 3, 9):
        wall, _, runs, results = SIMULATION.simulate(
            [search], values, hours, workers, speculate=False
        )
        assert runs == len(values) and results == values
        walls.append(wall)
    assert walls[0] > walls[1] >= walls[2]


def test_speculative_runs_are_the_next_lr_of_a_waited_for_profile_both_ways():
    search = ProfiledSearch("mars-adamw", (START,), SELECTION, 12)
    waited = search.replay({}).needed  # the start's lr profile: three lrs on three seeds
    assert sorted({parse_point_key(run[1])["lr"] for run in waited}) == [
        START["lr"] - 1,
        START["lr"],
        START["lr"] + 1,
    ]
    values = {run: ridge(parse_point_key(run[1]), run[2]) for run in waited}
    guessed = SIMULATION.speculative_runs([search], {})
    lrs = {parse_point_key(run[1])["lr"] for run in guessed}
    assert {START["lr"] - 2, START["lr"] + 2} <= lrs
    assert not set(guessed) & set(values)


def test_speculating_trains_every_run_the_search_reads_and_names_the_same_winner():
    search, values, hours = finished_search()
    speculating = SIMULATION.simulate([search], values, hours, 9, speculate=True)
    assert set(values) <= set(speculating.results)
    assert speculating.runs == len(speculating.results) > len(values)
    assert search.replay(speculating.results).point == search.replay(values).point
