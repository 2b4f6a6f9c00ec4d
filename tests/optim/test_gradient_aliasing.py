"""Approximate mode keeps its own copy of the last gradient: zeroing grads in place, accumulating
micro-batches into the same .grad, and grads that are views into one shared buffer all give the
results of fresh gradient tensors, bitwise."""

from __future__ import annotations

import pytest
import torch

from problems import MIXED_SHAPES, RandomProblem
from torch_mars import MARS, MARS_TYPES

PROBLEM = RandomProblem(MIXED_SHAPES[:4], steps=12, seed=3)


def half_losses(params, step):
    """Two micro-batch losses that sum to the step's loss, each with its own graph."""
    return [0.5 * PROBLEM.loss(params, step) for _ in range(2)]


def summed_micro_batch_grads(params, step) -> list[torch.Tensor]:
    first, second = (torch.autograd.grad(half, params) for half in half_losses(params, step))
    return [a + b for a, b in zip(first, second, strict=True)]


def fresh_grads(opt, params, step):
    opt.zero_grad(set_to_none=True)
    for p, g in zip(params, summed_micro_batch_grads(params, step), strict=True):
        p.grad = g


def zeroed_in_place(opt, params, step):
    opt.zero_grad(set_to_none=False)
    for p, g in zip(params, summed_micro_batch_grads(params, step), strict=True):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        p.grad.add_(g)


def accumulated_by_autograd(opt, params, step):
    opt.zero_grad(set_to_none=False)
    for half in half_losses(params, step):
        half.backward()


def views_into_one_buffer(opt, params, step):
    if step == 0:
        flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
        for p, view in zip(params, flat.split([p.numel() for p in params]), strict=True):
            p.grad = view.view_as(p)
    for p, g in zip(params, summed_micro_batch_grads(params, step), strict=True):
        p.grad.copy_(g)


def train(feed, mars_type, foreach) -> list[torch.Tensor]:
    params = [p.clone().requires_grad_() for p in PROBLEM.initial]
    opt = MARS(params, lr=0.02, gamma=0.5, mars_type=mars_type, optimize_1d=True, foreach=foreach)
    for step in range(PROBLEM.steps):
        feed(opt, params, step)
        opt.step()
        for p in params:
            last = opt.state[p]["last_grad"]
            assert last.untyped_storage().data_ptr() != p.grad.untyped_storage().data_ptr()
    return [p.detach() for p in params]


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
@pytest.mark.parametrize(
    "feed",
    [zeroed_in_place, accumulated_by_autograd, views_into_one_buffer],
    ids=lambda f: f.__name__,
)
def test_gradient_buffers_reused_in_place_give_fresh_gradient_results(feed, mars_type, foreach):
    expected = train(fresh_grads, mars_type, foreach)
    for a, b in zip(train(feed, mars_type, foreach), expected, strict=True):
        assert torch.equal(a, b)
