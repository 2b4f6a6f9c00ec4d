"""Every out-of-range hyperparameter is a ValueError that names the argument and its range,
raised before any state changes: in the constructor, in a param group, and in param_groups
edited between steps; sparse gradients too."""

from __future__ import annotations

import math

import pytest
import torch

from torch_mars import MARS

BAD_VALUES = [
    ("lr", -1e-3, r"lr must be a finite number >= 0"),
    ("lr", math.nan, r"lr must be a finite number >= 0"),
    ("lr", math.inf, r"lr must be a finite number >= 0"),
    ("eps", -1e-8, r"eps must be a finite number >= 0"),
    ("eps", math.inf, r"eps must be a finite number >= 0"),
    ("weight_decay", -0.1, r"weight_decay must be a finite number >= 0"),
    ("weight_decay", math.nan, r"weight_decay must be a finite number >= 0"),
    ("gamma", -0.025, r"gamma must be a finite number >= 0"),
    ("gamma", math.inf, r"gamma must be a finite number >= 0"),
    ("lr_1d", -1.0, r"lr_1d must be a finite number >= 0"),
    ("weight_decay_1d", -0.1, r"weight_decay_1d must be a finite number >= 0"),
    ("betas", (1.0, 0.99), r"betas\[0\] must be in \[0, 1\)"),
    ("betas", (0.9, -0.1), r"betas\[1\] must be in \[0, 1\)"),
    ("betas", (0.9,), r"betas must be a pair"),
    ("betas_1d", (0.9, 1.5), r"betas_1d\[1\] must be in \[0, 1\)"),
    ("mars_type", "mars-sgd", r"mars_type must be one of"),
    ("ns_steps", 0, r"ns_steps must be an integer in \[1, 100\]"),
    ("ns_steps", 2.5, r"ns_steps must be an integer in \[1, 100\]"),
    ("amsgrad", "yes", r"amsgrad must be True or False"),
    ("foreach", 1, r"foreach must be True, False or None"),
    ("fused", "yes", r"fused must be True, False or None"),
    ("reference_routing", 1, r"reference_routing must be True or False"),
    ("state_dtype", torch.float16, r"state_dtype must be None .*, torch.float32 or torch.bfloat16"),
    ("lr", torch.tensor([1e-3, 2e-3]), r"lr must be a float or a one-element floating tensor"),
    ("lr", torch.tensor(-1e-3), r"lr must be a finite number >= 0"),
    ("gamma", torch.tensor(1), r"gamma must be a float or a one-element floating tensor"),
    ("betas", (torch.tensor(1.0), 0.99), r"betas\[0\] must be in \[0, 1\)"),
]


def fresh() -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.ones(3, 2, requires_grad=True)
    bias = torch.ones(3, requires_grad=True)
    return weight, bias


@pytest.mark.parametrize(("name", "value", "message"), BAD_VALUES)
def test_constructor_rejects(name, value, message):
    with pytest.raises(ValueError, match=message):
        MARS(fresh(), **{name: value})


@pytest.mark.parametrize(("name", "value", "message"), BAD_VALUES)
def test_param_group_rejects_and_is_not_added(name, value, message):
    weight, bias = fresh()
    opt = MARS([weight])
    with pytest.raises(ValueError, match=message):
        opt.add_param_group({"params": [bias], name: value})
    assert len(opt.param_groups) == 1
    with pytest.raises(ValueError, match=message):
        MARS([{"params": [weight]}, {"params": [bias], name: value}])


@pytest.mark.parametrize(("name", "value", "message"), BAD_VALUES)
def test_values_edited_between_steps_are_checked_before_any_state_changes(name, value, message):
    weight, bias = fresh()
    opt = MARS([weight, bias], lr=0.1)
    for p in (weight, bias):
        p.grad = torch.ones_like(p)
    opt.step()
    params_before = [p.detach().clone() for p in (weight, bias)]
    state_before = {k: v.clone() if torch.is_tensor(v) else v for k, v in opt.state[weight].items()}
    opt.param_groups[0][name] = value
    with pytest.raises(ValueError, match=message):
        opt.step()
    for before, p in zip(params_before, (weight, bias), strict=True):
        assert torch.equal(before, p.detach())
    for key, before in state_before.items():
        after = opt.state[weight][key]
        assert torch.equal(before, after) if torch.is_tensor(before) else before == after


def test_sparse_gradients_are_rejected_before_any_state_changes():
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    dense = torch.nn.Linear(4, 4)
    opt = MARS([*dense.parameters(), *embedding.parameters()])
    before = embedding.weight.detach().clone()
    dense(embedding(torch.tensor([1, 2]))).sum().backward()
    with pytest.raises(ValueError, match="sparse"):
        opt.step()
    assert len(opt.state) == 0
    assert torch.equal(before, embedding.weight.detach())


def test_zero_initial_lr_with_one_d_tensors_is_rejected():
    weight, bias = fresh()
    with pytest.raises(ValueError, match="lr must be > 0 when a group has tensors on the 1-D"):
        MARS([weight, bias], lr=0.0)
    assert MARS([weight, bias], lr=0.0, optimize_1d=True).param_groups[0]["lr"] == 0.0
    assert MARS([weight], lr=0.0).param_groups[0]["lr"] == 0.0
