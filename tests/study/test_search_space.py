"""The declared search space: every optimizer of a comparison is tuned over every dimension it
has, on the same ladders, and every dimension it is given reaches its optimizer."""

from __future__ import annotations

import pytest
import torch

from torch_mars.models import GPT, gpt_config
from torch_mars.train.compare import SAME_COST_CONTROLS
from torch_mars.train.optimizers import build_optimizer
from torch_mars.train.study.space import (
    LADDERS,
    MARS_ONLY,
    SPELLING,
    dimensions_of,
    hyperparams_of,
    parse_point_key,
    point_key,
    start_point,
    tunable_optimizers,
)
from torch_mars.train.trainer import TrainConfig


@pytest.mark.parametrize("rule", [r for r in SAME_COST_CONTROLS if r in SPELLING])
def test_a_mars_rule_has_its_controls_dimensions_and_gamma_as_its_only_extra(rule):
    controls = [c for c in SAME_COST_CONTROLS[rule] if c in SPELLING]
    assert controls, f"{rule} has no tunable control"
    for control in controls:
        mine, theirs = set(dimensions_of(rule)), set(dimensions_of(control))
        assert mine - theirs == set(MARS_ONLY), (rule, control)
        assert theirs <= mine, (rule, control)
        assert {"lr", "beta1", "weight_decay", "lr_1d_ratio", "weight_decay_1d"} <= theirs


def test_every_adam_rule_tunes_both_betas_and_no_newton_schulz_rule_tunes_an_unread_beta2():
    for name in ("adamw", "nadamw", "mars-adamw"):
        assert {"beta1", "beta2"} <= set(dimensions_of(name))
    for name in ("muon", "mars-shampoo"):
        assert "beta2" not in dimensions_of(name)


def _built_settings(name: str, hyperparams: dict) -> list[tuple]:
    """Every param group's settings of the optimizer the harness builds (params dropped)."""
    model = GPT(gpt_config("tiny", 64))
    config = TrainConfig(optimizer=name, model="tiny", hyperparams=hyperparams)
    built = build_optimizer(name, model, config.resolved_hyperparams())
    groups = built.optimizer.param_groups
    return [
        tuple(sorted((k, repr(v)) for k, v in g.items() if k != "params" and k != "initial_lr"))
        for g in groups
    ]


@pytest.mark.parametrize("name", tunable_optimizers())
def test_each_dimension_of_an_optimizer_changes_what_its_optimizer_runs(name):
    """A dimension that parsed and did nothing would be a knob one side only seems to have."""
    start = start_point(name, "tiny")
    before = _built_settings(name, hyperparams_of(name, start, "tiny"))
    for dimension in dimensions_of(name):
        moved = {
            **start,
            dimension: start[dimension]
            + (1 if LADDERS[dimension].has(start[dimension] + 1) else -1),
        }
        after = _built_settings(name, hyperparams_of(name, moved, "tiny"))
        assert after != before, f"{name}: {dimension} reached no param group"


@pytest.mark.parametrize("name", tunable_optimizers())
def test_a_point_is_named_by_ladder_positions_and_round_trips(name):
    point = start_point(name, "tiny")
    assert parse_point_key(point_key(point)) == point
    assert all(LADDERS[d].has(i) for d, i in point.items())


def test_an_optimizer_without_a_space_and_a_partial_point_are_value_errors():
    with pytest.raises(ValueError, match="tune has a search space for"):
        dimensions_of("nadam")
    with pytest.raises(ValueError, match="needs exactly"):
        hyperparams_of("adamw", {"lr": 0}, "tiny")


def test_adamw_given_1d_settings_routes_them_like_mars_adamw():
    torch.manual_seed(0)
    groups = _built_settings("adamw", {"lr_1d": 1e-3, "weight_decay_1d": 0.0})
    rates = {dict(g)["lr"] for g in groups}
    assert len(groups) == 2 and repr(1e-3) in rates
