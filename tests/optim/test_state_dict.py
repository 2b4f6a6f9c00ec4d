"""Saving after 10 steps, loading into a fresh optimizer over fresh tensors and continuing gives
bitwise the parameters of an uninterrupted run, for every mars_type and both modes."""

from __future__ import annotations

import io

import pytest
import torch

from problems import MIXED_SHAPES, RandomProblem, take_step
from torch_mars import MARS, MARS_TYPES


def train(problem, params, opt, steps: range, is_approx: bool) -> None:
    for step in steps:

        def closure(step: int = step) -> torch.Tensor:
            opt.zero_grad()
            loss = problem.loss(params, step)
            loss.backward()
            return loss

        take_step(opt, closure, is_approx)


@pytest.mark.parametrize("is_approx", [True, False], ids=["approx", "exact"])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_resume_from_state_dict_is_bitwise(mars_type, is_approx):
    problem = RandomProblem(MIXED_SHAPES, steps=20, seed=7)
    kwargs = dict(mars_type=mars_type, is_approx=is_approx, lr=0.02, amsgrad=True, gamma=0.3)

    straight = [p.clone().float().requires_grad_() for p in problem.initial]
    straight_opt = MARS(straight, **kwargs)
    train(problem, straight, straight_opt, range(20), is_approx)

    first = [p.clone().float().requires_grad_() for p in problem.initial]
    first_opt = MARS(first, **kwargs)
    train(problem, first, first_opt, range(10), is_approx)
    buffer = io.BytesIO()
    torch.save({"params": [p.detach() for p in first], "opt": first_opt.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer)
    expected_keys = {"step", "exp_avg", "last_grad", "nonfinite_skips"}
    if mars_type == "mars-adamw":  # Lion and the Shampoo matrices keep no second moment
        expected_keys |= {"exp_avg_sq", "max_exp_avg_sq"}
    if not is_approx:
        expected_keys.add("prev_param")
    assert set(checkpoint["opt"]["state"][0]) == expected_keys
    assert checkpoint["opt"]["state"][0]["nonfinite_skips"].dtype == torch.int64

    resumed = [p.clone().requires_grad_() for p in checkpoint["params"]]
    resumed_opt = MARS(resumed, **kwargs)
    resumed_opt.load_state_dict(checkpoint["opt"])
    train(problem, resumed, resumed_opt, range(10, 20), is_approx)

    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)
    assert resumed_opt.state[resumed[0]]["nonfinite_skips"].dtype == torch.int64


def test_lr_at_construction_survives_a_resume_with_a_different_initial_lr():
    w = torch.zeros(3, requires_grad=True)
    opt = MARS([w], lr=0.1)
    opt.param_groups[0]["lr"] = 0.05
    other = MARS([torch.zeros(3, requires_grad=True)], lr=1.0)
    other.load_state_dict(opt.state_dict())
    assert other.param_groups[0]["lr_at_construction"] == 0.1
    assert other.param_groups[0]["lr"] == 0.05


@pytest.mark.parametrize("is_approx", [True, False], ids=["approx", "exact"])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_init_state_makes_every_buffer_and_changes_no_step(mars_type, is_approx):
    """``init_state`` (what DCP loads into) creates the buffers a step would, and a run that
    starts from it is bitwise the run that starts from no state."""
    problem = RandomProblem(MIXED_SHAPES, steps=6, seed=3)
    kwargs = dict(mars_type=mars_type, is_approx=is_approx, lr=0.02, amsgrad=True, gamma=0.3)

    stepped = [p.clone().float().requires_grad_() for p in problem.initial]
    stepped_opt = MARS(stepped, **kwargs)
    train(problem, stepped, stepped_opt, range(1), is_approx)

    initialised = [p.clone().float().requires_grad_() for p in problem.initial]
    initialised_opt = MARS(initialised, **kwargs)
    initialised_opt.init_state()
    for before, after in zip(stepped, initialised, strict=True):
        made = initialised_opt.state[after]
        assert made["step"] == 0
        assert sorted(made) == sorted(stepped_opt.state[before])
        for name, value in made.items():
            if name not in ("step", "prev_param"):
                assert not value.any(), name

    train(problem, stepped, stepped_opt, range(1, 6), is_approx)
    train(problem, initialised, initialised_opt, range(6), is_approx)
    for a, b in zip(stepped, initialised, strict=True):
        assert torch.equal(a, b)


def test_float32_state_on_bf16_parameters_steps_like_bf16_state_as_documented():
    """What `state_dtype=torch.float32` does with bf16 parameters (issue #35; the docstring
    says it): the maths runs in bf16, the parameter's dtype, so the float32 buffers hold bf16
    values and the parameters step bitwise like under bf16 state."""
    outcomes = {}
    for state_dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.randn(16, 16).bfloat16())
        opt = MARS([weight], lr=1e-2, state_dtype=state_dtype)
        for seed in range(3):
            generator = torch.Generator().manual_seed(seed)
            weight.grad = torch.randn(16, 16, generator=generator).bfloat16()
            opt.step()
        outcomes[state_dtype] = (weight.detach().clone(), opt.state[weight]["exp_avg"])
    (w32, m32), (w16, m16) = outcomes[torch.float32], outcomes[torch.bfloat16]
    assert m32.dtype == torch.float32 and torch.equal(m32, m16.float())
    assert torch.equal(w32, w16)
