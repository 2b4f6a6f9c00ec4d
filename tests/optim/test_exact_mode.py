"""Exact mode on f(x; xi_t) = a_t/2 |x - b_t|^2, whose gradient a_t (x - b_t) is known in closed
form: g_tilde is the gradient at the previous parameters on the current batch, the closure runs
twice per step after the first, and p, p.grad and the returned loss are those at x_t."""

from __future__ import annotations

import math

import pytest
import torch

from torch_mars import MARS

STEPS = 12
GEN = torch.Generator().manual_seed(11)
SCALES = [0.5 + torch.rand((), generator=GEN).item() for _ in range(STEPS)]
TARGETS = [torch.randn(3, 4, generator=GEN, dtype=torch.float64) for _ in range(STEPS)]
X0 = torch.randn(3, 4, generator=GEN, dtype=torch.float64)
LR, BETA1, BETA2, EPS, GAMMA = 0.05, 0.9, 0.99, 1e-8, 0.4


def closed_form_trajectory() -> list[torch.Tensor]:
    """MARS-AdamW written out with g_t - g_tilde_t = a_t (x_t - x_{t-1})."""
    xs, m, v = [X0], torch.zeros_like(X0), torch.zeros_like(X0)
    for t in range(1, STEPS + 1):
        a, b, x = SCALES[t - 1], TARGETS[t - 1], xs[-1]
        previous = xs[-2] if t > 1 else x
        c = a * (x - b) + GAMMA * BETA1 / (1 - BETA1) * a * (x - previous)
        c = c / max(1.0, float(c.norm()))
        m = BETA1 * m + (1 - BETA1) * c
        v = BETA2 * v + (1 - BETA2) * c * c
        u = (m / (1 - BETA1**t)) / ((v / (1 - BETA2**t)).sqrt() + EPS)
        xs.append(x - LR * u)
    return xs


@pytest.mark.parametrize("foreach", [False, True])
def test_exact_mode_follows_the_closed_form_trajectory(foreach):
    x = X0.clone().requires_grad_()
    opt = MARS(
        [x], lr=LR, betas=(BETA1, BETA2), eps=EPS, gamma=GAMMA, is_approx=False, foreach=foreach
    )
    expected = closed_form_trajectory()
    calls = []
    for t in range(STEPS):
        a, b = SCALES[t], TARGETS[t]

        def closure(a: float = a, b: torch.Tensor = b) -> torch.Tensor:
            calls.append(x.detach().clone())
            opt.zero_grad()
            loss = a / 2 * (x - b).pow(2).sum()
            loss.backward()
            return loss

        x_t = x.detach().clone()
        calls.clear()
        loss = opt.step(closure)

        assert len(calls) == (1 if t == 0 else 2)
        assert torch.equal(calls[0], x_t)
        if t > 0:
            torch.testing.assert_close(calls[1], expected[t - 1], rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(
                opt.state[x]["last_grad"], a * (expected[t - 1] - b), rtol=1e-12, atol=1e-14
            )
        assert math.isclose(loss.item(), a / 2 * float((x_t - b).pow(2).sum()), rel_tol=1e-12)
        torch.testing.assert_close(x.grad, a * (x_t - b), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(opt.state[x]["prev_param"], x_t, rtol=0, atol=0)
        torch.testing.assert_close(x.detach(), expected[t + 1], rtol=1e-12, atol=1e-14)


def test_exact_mode_without_a_closure_raises_and_changes_nothing():
    x = torch.ones(2, 2, requires_grad=True)
    opt = MARS([x], is_approx=False)
    x.grad = torch.ones(2, 2)
    with pytest.raises(ValueError, match="closure"):
        opt.step()
    assert len(opt.state) == 0
    assert torch.equal(x.detach(), torch.ones(2, 2))


def test_approx_mode_accepts_a_closure_and_returns_its_loss():
    x = torch.ones(2, 2, requires_grad=True)
    opt = MARS([x])

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = x.pow(2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 4.0
    assert opt.state[x]["step"] == 1
