"""A param group's step plan (routing, state buffers, path) is derived once and reused while
nothing it depends on changes, and rebuilt when something does: a setting, a tensor gaining a
gradient, a loaded state dict. The plan never holds state, so a cleared state is recreated."""

from __future__ import annotations

import torch

import torch_mars.optim.step_plan as step_plan
from torch_mars import MARS


def two_layer_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))


def backward(model: torch.nn.Module) -> None:
    model(torch.randn(5, 4)).pow(2).mean().backward()


def test_a_step_after_the_first_derives_no_routing(monkeypatch):
    model = two_layer_model()
    opt = MARS(model.parameters(), lr=1e-2)
    backward(model)
    opt.step()
    plan = opt._plans[0]
    calls = []
    original = step_plan.routes_to_mars
    monkeypatch.setattr(step_plan, "routes_to_mars", lambda p, g: calls.append(p) or original(p, g))
    opt.step()
    assert opt._plans[0] is plan
    assert calls == []


def test_a_changed_setting_rebuilds_the_plan_and_creates_the_new_buffers():
    model = two_layer_model()
    opt = MARS(model.parameters(), lr=1e-2)
    backward(model)
    opt.step()
    bias = model[0].bias
    assert "last_grad" not in opt.state[bias]
    opt.param_groups[0]["optimize_1d"] = True
    opt.step()
    assert "last_grad" in opt.state[bias]
    assert any(opt.param_groups[0]["params"][i] is bias for i in opt._plans[0].mars)


def test_a_tensor_that_gains_a_gradient_is_stepped_from_then_on():
    model = two_layer_model()
    opt = MARS(model.parameters(), lr=1e-2)
    model[1].requires_grad_(False)
    backward(model)
    opt.step()
    assert model[1].weight not in opt.state
    model[1].requires_grad_(True)
    opt.zero_grad()
    backward(model)
    before = model[1].weight.detach().clone()
    opt.step()
    assert opt.state[model[1].weight]["step"] == 1
    assert not torch.equal(model[1].weight, before)


def test_a_cleared_state_is_recreated_on_the_next_step():
    model = two_layer_model()
    opt = MARS(model.parameters(), lr=1e-2)
    backward(model)
    opt.step()
    opt.state.clear()
    opt.step()
    assert all(opt.state[p]["step"] == 1 for p in model.parameters())


def test_a_loaded_state_dict_gets_the_buffers_the_current_settings_need():
    """A state saved without AMSGrad, loaded into an AMSGrad optimizer: the plan is rebuilt on
    load, so the missing maxima are created rather than looked up and not found."""
    model = two_layer_model()
    plain = MARS(model.parameters(), lr=1e-2)
    backward(model)
    plain.step()
    amsgrad = MARS(model.parameters(), lr=1e-2, amsgrad=True)
    amsgrad.step()
    saved = plain.state_dict()
    saved["param_groups"][0]["amsgrad"] = True
    amsgrad.load_state_dict(saved)
    amsgrad.step()
    assert all("max_exp_avg_sq" in amsgrad.state[p] for p in model.parameters())
    assert all(amsgrad.state[p]["step"] == 2 for p in model.parameters())
