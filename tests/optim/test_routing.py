"""Which rule each tensor takes: ndim >= 2 (conv weights included) to MARS, the rest to AdamW
unless optimize_1d; use_mars forces either way; mars-shampoo sends MARS-routed 1-D tensors to
the mars-adamw rule; tensors without a gradient are skipped."""

from __future__ import annotations

import torch

from torch_mars import MARS
from torch_mars.optim import routes_to_mars


def one_step(params, grads, **kwargs) -> MARS:
    opt = MARS(params, lr=0.1, **kwargs)
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt.step()
    return opt


def test_conv_weights_take_mars_and_biases_take_adamw():
    conv, bias = torch.ones(2, 3, 3, 3, requires_grad=True), torch.ones(2, requires_grad=True)
    opt = one_step([conv, bias], [torch.ones(2, 3, 3, 3), torch.ones(2)])
    assert "last_grad" in opt.state[conv]
    assert "last_grad" not in opt.state[bias]


def test_use_mars_overrides_the_ndim_rule_both_ways():
    matrix, vector = torch.ones(3, 3, requires_grad=True), torch.ones(3, requires_grad=True)
    groups = [{"params": [matrix], "use_mars": False}, {"params": [vector], "use_mars": True}]
    opt = one_step([matrix, vector], [torch.ones(3, 3), torch.ones(3)])
    assert "last_grad" in opt.state[matrix]
    opt = MARS(groups, lr=0.1)
    matrix.grad, vector.grad = torch.ones(3, 3), torch.ones(3)
    opt.step()
    assert "last_grad" not in opt.state[matrix]
    assert "last_grad" in opt.state[vector]


def test_shampoo_sends_mars_routed_vectors_to_the_adamw_rule():
    torch.manual_seed(0)
    grads = [0.1 * torch.randn(5) for _ in range(4)]
    shampoo = torch.zeros(5, requires_grad=True)
    adamw = torch.zeros(5, requires_grad=True)
    opt_shampoo = MARS([shampoo], lr=0.1, optimize_1d=True, mars_type="mars-shampoo")
    opt_adamw = MARS([adamw], lr=0.1, optimize_1d=True, mars_type="mars-adamw")
    for g in grads:
        shampoo.grad, adamw.grad = g.clone(), g.clone()
        opt_shampoo.step()
        opt_adamw.step()
    assert torch.equal(shampoo, adamw)


def test_shampoo_update_of_a_matrix_is_orthogonal_and_scaled():
    weight = torch.zeros(8, 2, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(8, 2, dtype=torch.float64) * 0.01
    one_step([weight], [grad], mars_type="mars-shampoo")
    update = -weight.detach() / 0.1
    singular_values = torch.linalg.svdvals(update)
    assert ((singular_values / 2.0 - 1).abs() < 0.35).all()  # sqrt(8 / 2) = 2


def test_a_tensor_without_a_gradient_is_skipped():
    used, unused = torch.ones(2, 2, requires_grad=True), torch.ones(2, 2, requires_grad=True)
    opt = MARS([used, unused], lr=0.1)
    used.grad = torch.ones(2, 2)
    opt.step()
    assert unused not in opt.state
    assert torch.equal(unused.detach(), torch.ones(2, 2))
    assert opt.state[used]["step"] == 1


def test_reference_routing_sends_conv_weights_to_adamw_and_the_default_does_not():
    conv = torch.nn.Conv2d(3, 4, 3)
    linear = torch.nn.Linear(4, 2)
    params = [conv.weight, conv.bias, linear.weight, linear.bias]
    default = MARS(params)
    reference = MARS(params, reference_routing=True)
    assert [routes_to_mars(p, default.param_groups[0]) for p in params] == [
        True,
        False,
        True,
        False,
    ]
    assert [routes_to_mars(p, reference.param_groups[0]) for p in params] == [
        False,
        False,
        True,
        False,
    ]
    all_mars = MARS(params, reference_routing=True, optimize_1d=True)
    assert all(routes_to_mars(p, all_mars.param_groups[0]) for p in params)
