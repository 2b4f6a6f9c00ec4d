"""The lr-profiled search on pure functions (no training, well under a second): it follows a
ridge where two dimensions must move together, which one round of coordinate descent misses;
it spends exactly its trial budget; and a replay takes the same path whatever order the runs
finished in, so a study resumes where it stopped."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from search_toys import BEST_GAMMA, LR_PER_GAMMA, SELECTION, START, ridge, run_search
from torch_mars.train.study.profiled import ProfiledSearch
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.space import LADDERS, dimensions_of, parse_point_key, start_point
from torch_mars.train.study.workers import needed_runs


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


ADAMW_START = start_point("adamw", "tiny")
LUCKY = {**ADAMW_START, "lr": 10}  # ranks first on the selection seeds by luck


def lucky_on_the_selection_seeds(point: dict[str, int], seed: int) -> float:
    """Best at lr index 9; ``LUCKY`` (lr 10) is 0.05 better on seeds 0-2 and 0.1 worse on
    every other seed."""
    luck = (-0.05 if seed in SELECTION.seeds else 0.1) if point == LUCKY else 0.0
    return 3.0 + 0.01 * abs(point["lr"] - 9) + luck


def test_finalists_on_more_seeds_unseat_a_point_that_ranked_first_by_luck():
    alone, _ = run_search(
        ProfiledSearch("adamw", (ADAMW_START,), SELECTION, trials=12),
        objective=lucky_on_the_selection_seeds,
    )
    assert alone.point == LUCKY and not alone.finalists
    with_finalists = Selection(
        seeds=(0, 1, 2), heldout=(3, 4, 5), heldout_data_seeds=(1, 2), finalists=2,
        final_seeds=(6, 7),
    )  # fmt: skip
    state, trained = run_search(
        ProfiledSearch("adamw", (ADAMW_START,), with_finalists, trials=12),
        objective=lucky_on_the_selection_seeds,
    )
    assert [p for p, _ in state.trials] == [p for p, _ in alone.trials]  # the same search
    assert state.point == {**ADAMW_START, "lr": 9}
    assert [p for p, _ in state.finalists] == [state.point, LUCKY]
    assert state.finalists[1][1] == pytest.approx((3 * 2.96 + 2 * 3.11) / 5)
    final_runs = [run for run in trained if run[2] in (6, 7)]
    assert sorted((parse_point_key(r[1]) == LUCKY, r[2], r[3]) for r in final_runs) == [
        (False, 6, 0), (False, 7, 0), (True, 6, 0), (True, 7, 0),
    ]  # fmt: skip
    heldout = [run for run in trained if run[3] != SELECTION.data_seed]
    assert {parse_point_key(run[1]) == state.point for run in heldout} == {True}
    assert len(heldout) == len(SELECTION.heldout_pairs())


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"finalists": 2}, "--final-seeds"),
        ({"final_seeds": (6,)}, "--finalists"),
        ({"finalists": -1, "final_seeds": (6,)}, "--finalists must be >= 0"),
        ({"finalists": 2, "final_seeds": (2,)}, "final seeds (2,) must differ"),
        ({"finalists": 2, "final_seeds": (4,)}, "final seeds (4,) must differ"),
        ({"finalists": 2, "final_seeds": (6, 6)}, "--final-seeds [6, 6]"),
    ],
)
def test_finalists_without_their_seeds_or_on_a_choosing_seed_are_refused(settings, names):
    with pytest.raises(ValueError, match=re.escape(names)):
        Selection(**settings)


def test_a_stored_selection_reads_back_and_drops_an_earlier_searchs_field():
    record = {"seeds": [0, 1, 2], "heldout": [3, 4, 5], "screen_top": None, "data_seed": 0}
    assert Selection.of_record(record) == Selection()
    stored = dataclasses.asdict(Selection(finalists=3, final_seeds=(6, 7, 8)))
    assert Selection.of_record(json.loads(json.dumps(stored))).choosing_seeds == (
        0, 1, 2, 6, 7, 8,
    )  # fmt: skip


@pytest.mark.parametrize("trials", [1, 12])
def test_a_finished_search_trained_exactly_its_planned_runs(trials):
    """Every trial on seeds 0-2, its two finalists (one where a single trial ran) on seeds 6-7,
    the winner's six held-out runs."""
    selection = dataclasses.replace(SELECTION, finalists=2, final_seeds=(6, 7))
    search = ProfiledSearch("adamw", (ADAMW_START,), selection, trials=trials)
    _, trained = run_search(search, objective=lucky_on_the_selection_seeds)
    assert len(trained) == search.planned_runs == 3 * trials + 2 * min(2, trials) + 6


def test_the_runs_of_the_search_with_most_left_are_claimed_first():
    """AdamW halfway through its search, NAdamW not begun: NAdamW's runs come first although
    AdamW is named first, and with both untouched the named order holds."""
    adamw = ProfiledSearch("adamw", (ADAMW_START,), SELECTION, trials=4)
    nadamw = ProfiledSearch("nadamw", (start_point("nadamw", "tiny"),), SELECTION, trials=4)
    assert needed_runs([adamw, nadamw], {})[0][0] == "adamw"
    results = {}
    for run in adamw.replay(results).needed:
        results[run] = 3.0 + 0.01 * parse_point_key(run[1])["lr"]
    needed = needed_runs([adamw, nadamw], results)
    names = [run[0] for run in needed]
    assert names[0] == "nadamw" and set(names) == {"adamw", "nadamw"}
    assert names == sorted(names, key=lambda n: n != "nadamw")  # NAdamW's all before AdamW's
