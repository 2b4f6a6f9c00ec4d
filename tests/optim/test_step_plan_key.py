"""The step plan is keyed on everything it derives from (issue #35): after each mutation that
the plan is keyed on, the cached optimizer steps bitwise like a fresh one built from its state
dict, or refuses before any tensor steps."""

from __future__ import annotations

import copy

import pytest
import torch

from torch_mars import MARS

RULES = ["mars-adamw", "mars-lion", "mars-shampoo"]


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4))


def fill_grads(net: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for p in net.parameters():
        p.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype)


def stepped_once(rule: str, **settings) -> tuple[torch.nn.Module, MARS]:
    net = model()
    opt = MARS(net.parameters(), lr=1e-2, mars_type=rule, **settings)  # routed by ndim
    fill_grads(net, 1)
    opt.step()
    return net, opt


def fresh_copy(net: torch.nn.Module, opt: MARS, **settings) -> tuple[torch.nn.Module, MARS]:
    """The same parameters, groups and state, in an optimizer that never planned anything."""
    twin = copy.deepcopy(net)
    twin_of = {id(a): b for a, b in zip(net.parameters(), twin.parameters(), strict=True)}
    groups = [
        {
            **{k: v for k, v in g.items() if k != "params"},
            "params": [twin_of[id(p)] for p in g["params"]],
        }
        for g in opt.param_groups
    ]
    fresh = MARS(groups, **settings)
    fresh.load_state_dict(copy.deepcopy(opt.state_dict()))
    return twin, fresh


def assert_steps_alike(net, opt, twin, fresh) -> None:
    fill_grads(net, 2)
    fill_grads(twin, 2)
    opt.step()
    fresh.step()
    for a, b in zip(net.parameters(), twin.parameters(), strict=True):
        assert a.shape == b.shape and torch.equal(a, b)


def reshape_bias_to_2d(net, opt):
    bias = net[0].bias
    opt.state.pop(bias)
    bias.data = bias.data.reshape(1, -1)


def flatten_weight(net, opt):
    weight = net[2].weight
    opt.state.pop(weight)
    weight.data = weight.data.flatten()


def retype_to_float64(net, opt):
    for p in net.parameters():
        p.data = p.data.double()


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("mutation", [reshape_bias_to_2d, flatten_weight, retype_to_float64])
def test_a_mutated_tensor_steps_as_in_a_fresh_optimizer(rule, mutation):
    net, opt = stepped_once(rule)
    mutation(net, opt)
    twin, fresh = fresh_copy(net, opt)
    assert_steps_alike(net, opt, twin, fresh)


@pytest.mark.parametrize("rule", RULES)
def test_a_new_tensor_in_a_stepped_ones_place_gets_its_own_routing(rule):
    """The id() reuse case: a group whose tensor is replaced by another of another shape."""
    net, opt = stepped_once(rule)
    old = net[0].bias
    opt.state.pop(old)
    net[0].bias = torch.nn.Parameter(torch.randn(1, 8))
    group = next(g for g in opt.param_groups if any(p is old for p in g["params"]))
    group["params"] = [net[0].bias if p is old else p for p in group["params"]]
    twin, fresh = fresh_copy(net, opt)
    assert_steps_alike(net, opt, twin, fresh)


@pytest.mark.parametrize("rule", RULES)
def test_a_change_of_state_dtype_converts_the_existing_state(rule):
    net, opt = stepped_once(rule)
    for group in opt.param_groups:
        group["state_dtype"] = torch.bfloat16
    twin, fresh = fresh_copy(net, opt, state_dtype=torch.bfloat16)
    assert_steps_alike(net, opt, twin, fresh)
    for state in opt.state.values():
        for name in ("exp_avg", "exp_avg_sq", "last_grad"):
            if name in state:
                assert state[name].dtype == torch.bfloat16, name


@pytest.mark.parametrize("rule", RULES)
def test_a_tensor_reshaped_under_its_state_is_refused_before_any_tensor_steps(rule):
    net, opt = stepped_once(rule)
    weight = net[2].weight
    weight.data = weight.data.reshape(2, -1)  # its state keeps the old shape
    before = [p.detach().clone() for p in net.parameters()]
    fill_grads(net, 2)
    with pytest.raises(ValueError, match="changed shape since it last stepped"):
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), before, strict=True))
