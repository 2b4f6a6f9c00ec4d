"""MarsCorrection, the paper's framework as a wrapper: on torch.optim.AdamW it is MARS-AdamW
(equal to torch_mars.MARS in float64, both modes); on SGD with momentum, Adafactor and Muon it
equals a float64 loop written from the formulas that feeds the optimizer c; it leaves p.grad
as it found it, and its state round-trips."""

from __future__ import annotations

import copy

import pytest
import torch

from torch_mars import MARS, MarsCorrection

SHAPES = [(6, 4), (5, 3), (4,)]


def problem(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=generator, dtype=torch.float64) for s in SHAPES]
    targets = [
        [torch.randn(s, generator=generator, dtype=torch.float64) for s in SHAPES] for _ in range(8)
    ]
    return params, targets


def loss_of(params, target):
    return sum(((p - t) ** 3).abs().sum() for p, t in zip(params, target, strict=True))


def run(optimizer, params, targets, exact: bool):
    for target in targets:

        def closure(target=target):
            loss = loss_of(params, target)
            loss.backward()
            return loss

        if exact:
            optimizer.step(closure)
        else:
            optimizer.zero_grad()
            closure()
            optimizer.step()
    return [p.detach() for p in params]


@pytest.mark.parametrize("exact", [False, True], ids=["approx", "exact"])
def test_on_adamw_it_is_mars_adamw(exact):
    kwargs = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    initial, targets = problem()
    ours = [p.clone().requires_grad_() for p in initial]
    wrapped = [p.clone().requires_grad_() for p in initial]
    mars = MARS(ours, gamma=0.3, optimize_1d=True, is_approx=not exact, foreach=False, **kwargs)
    correction = MarsCorrection(
        torch.optim.AdamW(wrapped, foreach=False, **kwargs), gamma=0.3, is_approx=not exact
    )
    expected = run(mars, ours, targets, exact)
    for a, b in zip(expected, run(correction, wrapped, targets, exact), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


def reference_run(make_optimizer, initial, targets, gamma: float, beta1: float):
    """The approximate mode from the formulas: c = g + gamma b1/(1-b1) (g - g_prev), clipped
    to norm 1, handed to the optimizer as the gradient."""
    params = [p.clone().requires_grad_() for p in initial]
    optimizer = make_optimizer(params)
    previous = None
    for target in targets:
        optimizer.zero_grad()
        loss_of(params, target).backward()
        grads = [p.grad.clone() for p in params]
        previous = previous or grads
        for p, g, g_prev in zip(params, grads, previous, strict=True):
            c = g + gamma * beta1 / (1 - beta1) * (g - g_prev)
            p.grad = c / max(1.0, float(c.norm()))
        optimizer.step()
        previous = grads
    return [p.detach() for p in params]


BASES = {
    "sgd-momentum": (lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True), None),
    "adafactor": (lambda ps: torch.optim.Adafactor(ps, lr=1e-2), 0.9),
    "muon": (lambda ps: torch.optim.Muon([p for p in ps if p.ndim == 2], lr=1e-2), None),
}


@pytest.mark.parametrize("name", list(BASES))
def test_on_other_optimizers_it_feeds_them_c(name):
    make, beta1 = BASES[name]
    if name == "muon" and not hasattr(torch.optim, "Muon"):
        pytest.skip("torch.optim.Muon needs torch >= 2.9")
    initial, targets = problem(1)
    if name == "muon":
        initial = [p for p in initial if p.ndim == 2]
        targets = [[t for t in target if t.ndim == 2] for target in targets]
    params = [p.clone().requires_grad_() for p in initial]
    base = make(params)
    correction = MarsCorrection(base, gamma=0.1, beta1=beta1)
    result = run(correction, params, targets, exact=False)
    momentum = beta1 if beta1 is not None else base.param_groups[0]["momentum"]
    expected = reference_run(make, initial, targets, 0.1, momentum)
    for a, b in zip(expected, result, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_p_grad_is_handed_back_untouched():
    initial, targets = problem()
    params = [p.clone().requires_grad_() for p in initial]
    correction = MarsCorrection(torch.optim.AdamW(params, lr=1e-2), gamma=0.5)
    for target in targets[:3]:
        correction.zero_grad()
        loss_of(params, target).backward()
        grads = [p.grad for p in params]
        values = [g.clone() for g in grads]
        correction.step()
        assert all(p.grad is g for p, g in zip(params, grads, strict=True))
        assert all(torch.equal(g, v) for g, v in zip(grads, values, strict=True))
        assert all(correction.state[p]["last_grad"].data_ptr() != p.grad.data_ptr() for p in params)


def test_a_group_without_a_momentum_needs_beta1():
    params = [torch.zeros(3, 3, requires_grad=True)]
    with pytest.raises(ValueError, match="beta1 is needed"):
        MarsCorrection(torch.optim.Adafactor(params))
    with pytest.raises(ValueError, match="gamma must be"):
        MarsCorrection(torch.optim.AdamW(params), gamma=-1.0)


def test_state_round_trips_and_resumes_bitwise():
    initial, targets = problem()
    straight = [p.clone().requires_grad_() for p in initial]
    expected = run(MarsCorrection(torch.optim.AdamW(straight, lr=1e-2)), straight, targets, False)
    first = [p.clone().requires_grad_() for p in initial]
    correction = MarsCorrection(torch.optim.AdamW(first, lr=1e-2))
    run(correction, first, targets[:4], exact=False)
    saved = copy.deepcopy(correction.state_dict())
    resumed_params = [p.detach().clone().requires_grad_() for p in first]
    resumed = MarsCorrection(torch.optim.AdamW(resumed_params, lr=1e-2))
    resumed.load_state_dict(saved)
    for a, b in zip(expected, run(resumed, resumed_params, targets[4:], False), strict=True):
        assert torch.equal(a, b)


def test_a_wrapped_optimizer_of_named_parameters_steps_as_an_unnamed_one():
    kwargs = dict(lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, foreach=False)
    initial, targets = problem()
    plain = [p.clone().requires_grad_() for p in initial]
    named = [p.clone().requires_grad_() for p in initial]
    unnamed_run = MarsCorrection(torch.optim.AdamW(plain, **kwargs), gamma=0.3)
    named_pairs = [(f"w{i}", p) for i, p in enumerate(named)]
    named_run = MarsCorrection(torch.optim.AdamW(named_pairs, **kwargs), gamma=0.3)
    expected = run(unnamed_run, plain, targets, exact=False)
    got = run(named_run, named, targets, exact=False)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    assert named_run.param_groups[0]["param_names"] == ["w0", "w1", "w2"]
    restored = MarsCorrection(
        torch.optim.AdamW([p.detach().clone().requires_grad_() for p in initial], **kwargs),
        gamma=0.3,
    )
    restored.load_state_dict(named_run.state_dict())
    saved, loaded = named_run.state_dict(), restored.state_dict()
    assert loaded["correction"].keys() == saved["correction"].keys()
    assert loaded["optimizer"]["state"].keys() == saved["optimizer"]["state"].keys()


def test_a_tensor_gamma_is_taken_as_mars_takes_it():
    """The one check of gamma (optim/settings.py) for MARS and the wrapper alike."""
    initial, targets = problem()
    as_float = [p.clone().requires_grad_() for p in initial]
    as_tensor = [p.clone().requires_grad_() for p in initial]
    first = MarsCorrection(torch.optim.AdamW(as_float, lr=1e-2, foreach=False), gamma=0.3)
    second = MarsCorrection(
        torch.optim.AdamW(as_tensor, lr=1e-2, foreach=False),
        gamma=torch.tensor(0.3, dtype=torch.float64),
    )
    for a, b in zip(
        run(first, as_float, targets, False), run(second, as_tensor, targets, False), strict=True
    ):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="gamma must be"):
        MarsCorrection(torch.optim.AdamW(as_float), gamma=torch.tensor(-1.0))
