"""Coordinate descent as a pure replay: it finds the optimum of a known objective, takes the
same path however many extra results it is shown, and asks for held-out seeds last."""

from __future__ import annotations

import math

import pytest

from torch_mars.train.descent import CoordinateDescent, Selection
from torch_mars.train.search_space import (
    LADDERS,
    parse_point_key,
    point_key,
    start_point,
    values_of,
)


def bowl(run, best_lr=0.004, best_gamma=0.1, diverge_above=None):
    """A smooth objective with a known minimum in lr and gamma; seeds shift it slightly."""
    _, key, seed = run
    values = values_of(parse_point_key(key))
    if diverge_above is not None and values["lr"] > diverge_above:
        return math.nan
    return (
        2.0
        + math.log(values["lr"] / best_lr) ** 2
        + 10 * (values.get("gamma", best_gamma) - best_gamma) ** 2
        + 0.001 * seed
    )


def run_to_end(descent, objective=bowl):
    results, batches = {}, []
    while True:
        state = descent.replay(results)
        if state.finished:
            return state, results, batches
        batches.append(list(state.needed))
        for run in state.needed:
            assert run not in results, "a finished run was asked for again"
            results[run] = objective(run)


@pytest.mark.parametrize("screen_top", [None, 2])
def test_the_descent_finds_a_known_minimum_on_the_ladders(screen_top):
    descent = CoordinateDescent(
        "mars-adamw", start_point("mars-adamw", "tiny"), Selection((0, 1, 2), (3, 4, 5), screen_top)
    )
    state, results, _ = run_to_end(descent)
    found = values_of(state.point)
    assert found["gamma"] == 0.1
    lr_ladder = LADDERS["lr"]
    nearest = lr_ladder.value(lr_ladder.nearest(0.004))
    assert found["lr"] == nearest
    heldout = [r for r in results if r[2] in (3, 4, 5)]
    assert len(heldout) == 3 and {r[1] for r in heldout} == {point_key(state.point)}


def test_held_out_seeds_are_asked_for_only_once_the_winner_is_fixed():
    descent = CoordinateDescent("adamw", start_point("adamw", "tiny"), Selection((0, 1), (2,)))
    state, _, batches = run_to_end(descent)
    assert batches[-1] == [("adamw", point_key(state.point), 2)]
    assert all(run[2] != 2 for batch in batches[:-1] for run in batch)


def test_replaying_on_extra_results_takes_the_same_path():
    descent = CoordinateDescent("adamw", start_point("adamw", "tiny"), Selection((0,), (1,), None))
    state, results, _ = run_to_end(descent)
    noise = {
        ("adamw", point_key({**state.point, "lr": state.point["lr"] + k}), 0): 0.0 for k in (7, 8)
    }
    again = descent.replay({**noise, **results})
    assert again.finished and again.point == state.point
    assert [s.chosen for s in again.sweeps] == [s.chosen for s in state.sweeps]


def test_screening_runs_every_candidate_on_the_first_seed_before_any_other():
    descent = CoordinateDescent(
        "adamw", start_point("adamw", "tiny"), Selection((0, 1, 2), (3,), 1)
    )
    state = descent.replay({})
    assert {run[2] for run in state.needed} == {0, 1, 2}  # the start point, on every seed
    results = {run: bowl(run) for run in state.needed}
    state = descent.replay(results)
    assert {run[2] for run in state.needed} == {0}  # the lr neighbours, screened on seed 0


def test_a_diverged_point_never_wins():
    descent = CoordinateDescent("adamw", start_point("adamw", "tiny"), Selection((0,), (1,)))
    state, _, _ = run_to_end(descent, lambda run: bowl(run, best_lr=0.1, diverge_above=0.02))
    assert values_of(state.point)["lr"] <= 0.02


def test_bad_selections_are_value_errors():
    with pytest.raises(ValueError, match="must differ"):
        Selection((0, 1), (1, 2))
    with pytest.raises(ValueError, match="screen_top"):
        Selection((0,), (1,), 0)
