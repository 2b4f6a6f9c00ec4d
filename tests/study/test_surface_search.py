"""The surface searches (the third design is tune's default) on pure functions (no training,
seconds): every dimension of every optimizer is scored away from its start within 12 trials, a
(gamma, lr) ridge is followed to its optimum at one selection seed a trial, a replay takes the
same path whatever order the runs finished in, more trials extend the same search, and the
quadratic it fits is exact on a quadratic. The second design's two mends each fix a failure of
the first on a toy built to show it: a screen step that lost is tried the other way, and a
selection seed lucky at the lr's stability edge does not choose the winner."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from search_toys import BEST_GAMMA, LR_PER_GAMMA, START, ridge, run_search
from torch_mars.train.study.profiled import ProfiledSearch
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.space import dimensions_of
from torch_mars.train.study.surface import DESIGNS, LocalSurface, SurfaceSearch, joint_screen_plan
from torch_mars.train.study.tune import DEFAULT_SEARCH, DEFAULT_TRIALS, SEARCHES, TunePlan
from torch_mars.train.trainer import TrainConfig

# each design by its name: one class, its options (surface.DESIGNS)
SurfaceSearch1, SurfaceSearch2, SurfaceSearch3, SurfaceSearch4, SurfaceSearch5, SurfaceSearch6 = (
    functools.partial(SurfaceSearch, design=DESIGNS[name])
    for name in ("surface", "surface-2", "surface-3", "surface-4", "surface-5", "surface-6")
)
FIVE = ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo")
# every surface design tune can run, the default first
SURFACE_SEARCHES = [search for name, search in SEARCHES.items() if name.startswith("surface")]


def five_optimizer_plan(selection=PROTOCOL, **settings) -> TunePlan:
    return TunePlan(TrainConfig(model="tiny"), FIVE, selection, Path("unused"), **settings)


def bowl(centre: dict[str, int]):
    """A loss every dimension matters to, lowest at ``centre``, with seed noise."""

    def loss(point: dict[str, int], seed: int) -> float:
        return 2.0 + sum(0.01 * (point[d] - centre[d]) ** 2 for d in point) + 1e-3 * seed

    return loss


def test_the_default_is_the_surface_search_at_40_trials_on_one_selection_seed():
    plan = five_optimizer_plan()
    assert (plan.search, plan.trials) == (DEFAULT_SEARCH, DEFAULT_TRIALS) == ("surface-3", 40)
    assert all(type(s) is SurfaceSearch for s in plan.searches())
    assert all(s.design is DESIGNS["surface-3"] for s in plan.searches())
    assert PROTOCOL.seeds == (0,) and len(PROTOCOL.heldout_pairs()) == 12
    # the studies that ran the earlier designs replay their own
    assert SEARCHES["surface-2"].keywords["design"] is DESIGNS["surface-2"]
    assert SEARCHES["surface"].keywords["design"] is DESIGNS["surface"]
    assert SEARCHES["lr-profiled"] is ProfiledSearch


@pytest.mark.parametrize(
    "search", ["surface-6", "surface-5", "surface-4", "surface-3", "surface-2", "surface"]
)
@pytest.mark.parametrize("order_seed", [0, 1, 2])
def test_every_dimension_of_every_optimizer_moves_within_12_trials(search, order_seed):
    alone = dataclasses.replace(PROTOCOL, peer_winners=False)  # each search on its own bowl
    plan = five_optimizer_plan(alone, trials=12, order_seed=order_seed, search=search)
    for search in plan.searches():
        own = search.starts[0]
        far = {d: i + 3 for d, i in own.items()}  # the optimum away from every start
        state, _ = run_search(search, objective=bowl(far))
        assert len(state.trials) == 12
        moved = {d for point, _ in state.trials for d in point if point[d] != own[d]}
        assert moved == set(dimensions_of(search.optimizer)), search.optimizer


@pytest.mark.parametrize("design", SURFACE_SEARCHES)
@pytest.mark.parametrize("order_seed", [0, 1, 2, 3])
def test_a_gamma_lr_ridge_is_followed_to_its_optimum_within_40_trials(design, order_seed):
    search = design("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed)
    state, _ = run_search(search)
    assert state.point["gamma"] == BEST_GAMMA
    assert state.point["lr"] == START["lr"] + LR_PER_GAMMA * (BEST_GAMMA - START["gamma"])
    assert state.spent and len(state.trials) == 40


@pytest.mark.parametrize("design", SURFACE_SEARCHES)
def test_a_replay_takes_the_same_path_whatever_order_the_runs_finished_in(design):
    search = design("mars-adamw", (START,), PROTOCOL, trials=30)
    in_order, _ = run_search(search)
    shuffled, trained = run_search(search, shuffle=3)
    assert [p for p, _ in shuffled.trials] == [p for p, _ in in_order.trials]
    assert len(trained) == len(set(trained))


@pytest.mark.parametrize("design", SURFACE_SEARCHES)
def test_more_trials_extend_the_same_search_and_it_trains_exactly_its_plan(design):
    short, _ = run_search(design("mars-adamw", (START,), PROTOCOL, trials=15))
    search = design("mars-adamw", (START,), PROTOCOL, trials=30)
    long, trained = run_search(search)
    assert [p for p, _ in long.trials[:15]] == [p for p, _ in short.trials]
    # 30 trials on one seed, 4 finalists on seeds 1 and 2, 12 held-out runs
    assert len(trained) == search.planned_runs == 30 + 4 * 2 + 12


@pytest.mark.parametrize("design", SURFACE_SEARCHES)
def test_a_diverged_trial_never_wins_and_the_fit_survives_it(design):
    def diverges_above_the_start_lr(point, seed):
        return math.nan if point["lr"] > START["lr"] else ridge(point, seed)

    state, _ = run_search(
        design("mars-adamw", (START,), PROTOCOL, trials=25),
        objective=diverges_above_the_start_lr,
    )
    assert state.point["lr"] <= START["lr"] and math.isfinite(state.finalists[0][1])


def test_the_local_surface_is_exact_on_a_quadratic_with_a_ridge_term():
    dimensions = ("lr", "beta1", "gamma")
    centre = {"lr": 5, "beta1": 2, "gamma": 1}

    def quadratic(p):
        lr, b, g = p["lr"] - 5, p["beta1"] - 2, p["gamma"] - 1
        return 1.0 + 0.1 * lr + 0.05 * lr**2 - 0.2 * lr * g + 0.3 * g**2 + 0.02 * b**2 - 0.01 * b

    grid = [
        dict(zip(dimensions, (5 + a, 2 + b, 1 + c), strict=True))
        for a, b, c in itertools.product(range(-2, 3), range(-1, 2), range(-1, 2))
    ]
    surface = LocalSurface.fit(dimensions, centre, [(p, quadratic(p)) for p in grid])
    scores = np.array([quadratic(p) for p in grid])
    predicted = surface.predict(grid)
    # the fit is in units of the scores' spread about their weighted mean: affine in the truth
    slope, intercept = np.polyfit(scores, predicted, 1)
    assert np.allclose(predicted, slope * scores + intercept, atol=1e-3 * abs(slope))
    assert slope > 0


def one_sided_beta1(point: dict[str, int], seed: int) -> float:
    """Best one beta1 step below the start, much worse one step above it (as at b64-4x, where
    beta1 0.95 lost and 0.85 won), with small gains in three other dimensions that keep a
    model busy elsewhere."""
    b = point["beta1"] - (START["beta1"] - 1)
    elsewhere = sum(
        0.002 * (point[d] - START[d] - 3) ** 2
        for d in ("weight_decay", "weight_decay_1d", "lr_1d_ratio")
    )
    return (
        2.0
        + 0.03 * b**2
        + 0.1 * max(b - 1, 0)
        + elsewhere
        + 0.02 * (point["lr"] - START["lr"]) ** 2
    )


@pytest.mark.parametrize("order_seed", [0, 1, 2])  # each screen steps beta1 up first
def test_a_screen_step_that_lost_is_tried_the_other_way(order_seed):
    search = SurfaceSearch2("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed)
    state, _ = run_search(search, objective=one_sided_beta1)
    assert state.point["beta1"] == START["beta1"] - 1
    if order_seed == 1:  # the first design's even ridge predicts no gain there: never tried
        first, _ = run_search(
            SurfaceSearch1("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed),
            objective=one_sided_beta1,
        )
        assert min(p["beta1"] for p, _ in first.trials) == START["beta1"]


EDGE = START["lr"] + 1


def lucky_at_the_edge(point: dict[str, int], seed: int) -> float:
    """Lowest at the lr ``EDGE`` on seed 0, but every other seed is 0.05 worse there (the
    stability edge: one seed survives it, the next ones do not); one step down is safe on every
    seed. The other dimensions barely matter, so every good point sits at the edge."""
    flat = sum(1e-4 * (point[d] - START[d]) ** 2 for d in point if d != "lr")
    at_edge = 0.05 if point["lr"] >= EDGE and seed != 0 else 0.0
    past_edge = 1.0 if point["lr"] > EDGE else 0.0
    return 2.0 + 0.01 * (point["lr"] - EDGE) ** 2 + flat + at_edge + past_edge


@pytest.mark.parametrize("order_seed", [0, 1])
def test_a_selection_seed_lucky_at_the_lr_edge_does_not_choose_the_winner(order_seed):
    search = SurfaceSearch2("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed)
    state, trained = run_search(search, objective=lucky_at_the_edge)
    assert state.point["lr"] == EDGE - 1
    finalist_lrs = sorted(p["lr"] for p, _ in state.finalists)
    assert finalist_lrs == [EDGE - 1] + [EDGE] * 3
    assert len(trained) <= search.planned_runs + len(PROTOCOL.seeds)  # the step down, if new
    first, _ = run_search(
        SurfaceSearch1("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed),
        objective=lucky_at_the_edge,
    )
    assert first.point["lr"] == EDGE  # its four finalists all sit at the edge


def test_the_progress_count_includes_the_finalists_step_down_and_never_passes_its_plan():
    """A finalist no trial scored adds a run past the static plan: the counter's plan grows
    with it (303 of 303 at b64-4x, not 303 of 300)."""
    import types

    from torch_mars.train.study.engine import study_progress
    from torch_mars.train.study.space import parse_point_key

    search = SurfaceSearch2("mars-adamw", (START,), PROTOCOL, trials=12)
    spec = types.SimpleNamespace(searches=(search,))
    objective = bowl({d: i - 3 for d, i in START.items()})  # its best a screen point
    results: dict = {}
    while needed := search.replay(results).needed:
        done, planned = study_progress(spec, trials_of(results))
        assert done == len(results) and planned >= max(done + len(needed), search.planned_runs)
        for run in needed:
            results[run] = objective(parse_point_key(run[1]), run[2])
    assert len(results) == search.planned_runs + 1  # the step down was no trial
    assert study_progress(spec, trials_of(results)) == (len(results), len(results))


def trials_of(results: dict) -> list:
    import optuna

    return [
        optuna.trial.create_trial(
            value=value,
            user_attrs={"optimizer": o, "point": k, "seed": s, "data_seed": d, "final": value},
        )
        for (o, k, s, d), value in results.items()
    ]


def valley(point: dict[str, int], seed: int) -> float:
    """A valley along beta1 + gamma (a smaller beta1 wants a larger gamma, as the correction's
    strength gamma * beta1 / (1 - beta1) asks), best two steps down it: every one-dimension step
    from the start loses, only a step in both gains."""
    across = (point["beta1"] - START["beta1"]) + (point["gamma"] - START["gamma"])
    along = point["gamma"] - START["gamma"]
    lr = point["lr"] - START["lr"]
    return 2.0 + 0.05 * across**2 + 0.01 * (along - 2) ** 2 + 0.02 * lr**2 + 1e-4 * seed


@pytest.mark.parametrize("design", [SurfaceSearch3, SurfaceSearch4, SurfaceSearch5, SurfaceSearch6])
@pytest.mark.parametrize("order_seed", [0, 1, 2])
def test_a_beta1_gamma_valley_is_followed_by_the_pair_probe(design, order_seed):
    state, _ = run_search(
        design("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed),
        objective=valley,
    )
    (pair,) = state.pairs
    assert set(pair) == {"beta1", "gamma"} and state.moves[2] == f"probe {pair[0]}+{pair[1]}"
    assert state.point["gamma"] >= START["gamma"] + 2 and state.point["beta1"] < START["beta1"]
    # without the probe no trial moves two dimensions but the lr together: the valley is
    # invisible to the fit and neither earlier design leaves the start's setting of gamma
    for design in (SurfaceSearch1, SurfaceSearch2):
        earlier, _ = run_search(
            design("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed),
            objective=valley,
        )
        assert earlier.point["gamma"] <= START["gamma"]


@pytest.mark.parametrize("order_seed", [0, 1, 2])
def test_the_pair_probe_moves_two_dimensions_from_the_screens_best_at_its_lr(order_seed):
    search = SurfaceSearch3("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed)
    state, _ = run_search(search, objective=valley)
    screened = 3 + 2 * (len(search.dimensions) - 1)  # the start's lr profile, then the screen
    best, _ = min(state.trials[:screened], key=lambda ps: ps[1])
    probes = [p for p, _ in state.trials[screened : screened + 4]]
    (pair,) = state.pairs
    assert all(p["lr"] == best["lr"] for p in probes)
    assert all({d for d in p if p[d] != best[d]} == set(pair) for p in probes)
    assert len({tuple(sorted(p.items())) for p in probes}) == len(probes) <= 4


@pytest.mark.parametrize("order_seed", [0, 1, 2])
def test_the_fourth_design_profiles_the_probes_best_pair_at_once(order_seed):
    search = SurfaceSearch4("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed)
    state, _ = run_search(search, objective=valley)
    screened = 3 + 2 * (len(search.dimensions) - 1)
    probes = state.trials[screened : screened + 4]
    best, _ = min(probes, key=lambda ps: ps[1])
    rest = {d: i for d, i in best.items() if d != "lr"}
    profile = [p for p, _ in state.trials[screened + 4 :]][:2]
    # the profile's first two trials are the probe's best setting one lr step either side
    assert [p["lr"] for p in profile] == [best["lr"] - 1, best["lr"] + 1]
    assert all({d: i for d, i in p.items() if d != "lr"} == rest for p in profile)
    assert state.moves[2:4] == [state.moves[2], "probe profiled"]


def test_the_fourth_design_steps_one_ladder_step_where_the_third_steps_two():
    dimensions = ("lr", "beta1", "gamma")
    centre = {"lr": 5, "beta1": 2, "gamma": 1}
    # a fit whose optimum lies two gamma steps out, lr and beta1 flat
    trials = [({**centre, "gamma": 1 + k}, 1.0 + 0.01 * (k - 2) ** 2) for k in (-1, 0, 1)]
    trials += [({**centre, "lr": 5 + k, "beta1": 2 + k}, 1.04 + 0.001 * k) for k in (-1, 1)]
    surface = LocalSurface.fit(dimensions, centre, trials, curvature_ridge=3e-2)
    third = SurfaceSearch3("mars-adamw", (START,), PROTOCOL, trials=40)
    fourth = SurfaceSearch4("mars-adamw", (START,), PROTOCOL, trials=40)
    assert third._next_step(surface, centre, set())["gamma"] == 3
    assert fourth._next_step(surface, centre, set())["gamma"] == 2


@pytest.mark.parametrize("order_seed", [0, 1, 2])
def test_the_joint_screen_moves_every_dimension_at_once_in_balanced_signs(order_seed):
    others = ["beta1", "beta2", "weight_decay", "lr_1d_ratio", "weight_decay_1d", "gamma"]
    plan = joint_screen_plan(others, 12, order_seed)
    assert all(sum(p[d] for p in plan) == 0 and {p[d] for p in plan} == {-1, 1} for d in others)
    assert sorted(p["lr"] for p in plan) == [-1] * 4 + [0] * 4 + [1] * 4
    search = SurfaceSearch5("mars-adamw", (START,), PROTOCOL, trials=40, order_seed=order_seed)
    state, _ = run_search(search, objective=valley)
    centre, _ = min(state.trials[:3], key=lambda ps: ps[1])
    screened = [p for p, _ in state.trials[3:15]]
    # every screen point moves every dimension but the lr one step (reflected at a ladder's end)
    assert all(abs(p[d] - centre[d]) == 1 for p in screened for d in others)
    assert state.moves[:3] == ["start", "screen", "probe beta1+gamma"]
