"""The lr-profiled search on pure functions (no training, well under a second): it follows a
ridge where two dimensions must move together, which one round of coordinate descent misses;
it spends exactly its trial budget; and a replay takes the same path whatever order the runs
finished in, so a study resumes where it stopped."""

from __future__ import annotations

import math
import random

from torch_mars.train.study.profiled import ProfiledSearch
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.space import LADDERS, dimensions_of, parse_point_key, start_point

SELECTION = Selection(seeds=(0, 1, 2), heldout=(3, 4, 5), heldout_data_seeds=(1, 2))
START = start_point("mars-adamw", "tiny")
BEST_GAMMA = START["gamma"] + 2  # two ladder steps up from the default gamma
LR_PER_GAMMA = 2  # each gamma step wants the lr two 1.5x steps higher


def ridge(point: dict[str, int], seed: int) -> float:
    """A loss whose valley runs diagonally in (gamma, lr): at the start's lr a larger gamma is
    worse, at its own best lr it is better, down to ``BEST_GAMMA``."""
    shift = point["lr"] - (START["lr"] + LR_PER_GAMMA * (point["gamma"] - START["gamma"]))
    return 2.0 + 0.05 * shift**2 + 0.01 * (point["gamma"] - BEST_GAMMA) ** 2 + 1e-4 * seed


def run_search(search: ProfiledSearch, objective=ridge, shuffle: int | None = None):
    """Replay until finished, training each needed run with ``objective`` (in a shuffled order
    where ``shuffle`` is a seed); returns the final state and the runs trained."""
    results: dict = {}
    trained = []
    while True:
        state = search.replay(results)
        if not state.needed:
            return state, trained
        needed = list(state.needed)
        if shuffle is not None:
            random.Random(shuffle + len(results)).shuffle(needed)
        for run in needed[: 1 if shuffle is not None else None]:
            assert run not in results
            results[run] = objective(parse_point_key(run[1]), run[2])
            trained.append(run)


def one_round_of_coordinate_descent(objective, start: dict[str, int]) -> dict[str, int]:
    """The search this one replaces, reduced: each dimension in turn, its neighbours at the
    current point's other values (the lr included), a better one taken; the lr swept again
    after each accepted change."""

    def score(point):
        return sum(objective(point, s) for s in SELECTION.seeds) / len(SELECTION.seeds)

    def sweep(point, dimension):
        while True:
            moves = [{**point, dimension: point[dimension] + d} for d in (-1, 1)]
            moves = [p for p in moves if LADDERS[dimension].has(p[dimension])]
            best = min(moves, key=score)
            if not score(best) < score(point):
                return point
            point = best

    point = dict(start)
    for dimension in dimensions_of("mars-adamw"):
        moved = sweep(point, dimension)
        if moved != point and dimension != "lr":
            moved = sweep(moved, "lr")
        point = moved
    return point


def test_one_round_of_coordinate_descent_misses_the_ridge_the_profiled_search_follows():
    missed = one_round_of_coordinate_descent(ridge, START)
    assert missed["gamma"] == START["gamma"]  # at its own lr every other gamma is worse
    search = ProfiledSearch("mars-adamw", (START,), SELECTION, trials=60)
    state, _ = run_search(search)
    assert state.point["gamma"] == BEST_GAMMA
    assert state.point["lr"] == START["lr"] + LR_PER_GAMMA * (BEST_GAMMA - START["gamma"])
    assert len(state.trials) == 60 and state.spent


def test_another_order_seed_finds_the_same_ridge_optimum():
    for order_seed in (1, 2):
        search = ProfiledSearch("mars-adamw", (START,), SELECTION, trials=60, order_seed=order_seed)
        state, _ = run_search(search)
        assert state.point["gamma"] == BEST_GAMMA


def test_two_optimizers_spend_exactly_their_budget_and_the_held_out_runs_follow():
    for name in ("adamw", "mars-adamw"):
        start = start_point(name, "tiny")
        search = ProfiledSearch(name, (start,), SELECTION, trials=17)
        state, trained = run_search(search, objective=lambda p, s: 3.0 + 0.01 * abs(p["lr"] - 9))
        points = {run[1] for run in trained if run[3] == SELECTION.data_seed}
        assert len(state.trials) == len(points) == 17
        heldout = {(run[2], run[3]) for run in trained if run[3] != SELECTION.data_seed}
        assert heldout == set(SELECTION.heldout_pairs())
        assert all(run[1] == trained[-1][1] for run in trained[-len(heldout) :])


def test_a_replay_takes_the_same_path_whatever_order_the_runs_finished_in():
    search = ProfiledSearch("mars-adamw", (START,), SELECTION, trials=20)
    in_order, _ = run_search(search)
    shuffled, trained = run_search(search, shuffle=7)
    assert [p for p, _ in shuffled.trials] == [p for p, _ in in_order.trials]
    assert len(trained) == len(set(trained))  # nothing trained twice


def test_more_trials_extend_the_same_search():
    short, _ = run_search(ProfiledSearch("mars-adamw", (START,), SELECTION, trials=10))
    long, _ = run_search(ProfiledSearch("mars-adamw", (START,), SELECTION, trials=25))
    assert [p for p, _ in long.trials[:10]] == [p for p, _ in short.trials]


def test_a_diverged_trial_scores_worst_and_is_never_the_winner():
    def diverges_at_large_lr(point, seed):
        return math.nan if point["lr"] > START["lr"] else 2.0 - 0.01 * point["lr"]

    state, _ = run_search(
        ProfiledSearch("adamw", (start_point("adamw", "tiny"),), SELECTION, trials=12),
        objective=diverges_at_large_lr,
    )
    assert state.point["lr"] <= START["lr"]
