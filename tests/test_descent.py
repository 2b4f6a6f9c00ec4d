"""Coordinate descent as a pure replay: it finds the optimum of a known objective, takes the
same path however many extra results it is shown, and asks for held-out seeds last."""

from __future__ import annotations

import math
from dataclasses import replace

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


def run_together(descents, objective=bowl):
    """Replay several descents on one shared results table until none needs a run."""
    results = {}
    while True:
        states = [d.replay(results) for d in descents]
        needed = list(dict.fromkeys(run for s in states for run in s.needed))
        if not needed:
            assert all(s.finished for s in states)
            return states, results
        for run in needed:
            assert run not in results, "a finished run was asked for again"
            results[run] = objective(run)


def test_a_descent_that_ends_short_moves_to_its_peers_better_point():
    """One round that can move the lr only a step at a time ends far from the optimum; its
    peer, started near it, ends there, and the short descent takes the peer's point."""
    best = LADDERS["lr"].nearest(0.004)
    selection = Selection((0,), (1,))
    near = CoordinateDescent(
        "muon", {**start_point("muon", "tiny"), "lr": best}, selection, 1, max_extensions=0
    )
    far = CoordinateDescent(
        "mars-shampoo",
        {**start_point("mars-shampoo", "tiny"), "lr": best + 6},
        selection,
        1,
        max_extensions=0,
    )
    alone, _, _ = run_to_end(far)
    assert alone.point["lr"] > best + 1 and alone.moved_to_peer is None

    paired = [replace(near, peers=(far,)), replace(far, peers=(near,))]
    (muon, shampoo), results = run_together(paired)
    assert shampoo.moved_to_peer == "muon" and shampoo.point["lr"] == best
    assert shampoo.point["gamma"] == alone.point["gamma"]  # muon has no gamma: its own is kept
    assert muon.moved_to_peer is None and muon.point["lr"] == best
    assert ("mars-shampoo", point_key(shampoo.point), 1) in results
    assert ("mars-shampoo", point_key(alone.point), 1) not in results


def test_a_descent_waits_for_its_peers_before_its_held_out_seeds():
    selection = Selection((0,), (1,))
    muon = CoordinateDescent("muon", start_point("muon", "tiny"), selection, 1)
    shampoo = CoordinateDescent("mars-shampoo", start_point("mars-shampoo", "tiny"), selection, 1)
    _, results, _ = run_to_end(shampoo)
    descended = {run: v for run, v in results.items() if run[2] == 0}
    state = replace(shampoo, peers=(muon,)).replay(descended)
    assert state.waiting and state.needed == [] and not state.finished


def test_a_peer_must_share_every_dimension_but_gamma():
    selection = Selection((0,), (1,))
    adamw = CoordinateDescent("adamw", start_point("adamw", "tiny"), selection)
    with pytest.raises(ValueError, match="adamw cannot be a peer of muon"):
        CoordinateDescent("muon", start_point("muon", "tiny"), selection, peers=(adamw,))
