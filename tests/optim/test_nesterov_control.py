"""The same-cost control of MARS-AdamW, in float64: NAdamW's update against its formula written
out here, and the algebra that makes it the control (unclipped approximate MARS at
gamma = 1 - beta1 has Nesterov's first moment, up to a term that decays as beta1^t)."""

from __future__ import annotations

import math

import pytest
import torch

from torch_mars import MARS
from torch_mars.train.nadamw import NAdamW
from torch_mars.train.optimizers import build_optimizer, default_hyperparams
from torch_mars.train.trainer import TrainConfig


def gradient_sequence(steps: int, shape: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for _ in range(steps)]


def nadamw_by_formula(
    param: torch.Tensor,
    grads: list[torch.Tensor],
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
) -> torch.Tensor:
    """Adam with constant-beta1 Nesterov momentum (Dozat's bias correction), decoupled decay."""
    x = param.clone()
    m = torch.zeros_like(x)
    v = torch.zeros_like(x)
    for t, g in enumerate(grads, start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat = beta1 * m / (1 - beta1 ** (t + 1)) + (1 - beta1) * g / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        x = x - lr * weight_decay * x - lr * m_hat / (v_hat.sqrt() + eps)
    return x


@pytest.mark.parametrize(("beta1", "weight_decay"), [(0.9, 0.1), (0.95, 0.0), (0.0, 0.01)])
def test_nadamw_follows_its_formula_in_float64(beta1, weight_decay):
    start = torch.randn(5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads = gradient_sequence(12, (5, 7))
    param = torch.nn.Parameter(start.clone())
    optimizer = NAdamW([param], lr=3e-3, betas=(beta1, 0.99), eps=1e-8, weight_decay=weight_decay)
    for g in grads:
        param.grad = g.clone()
        optimizer.step()
    expected = nadamw_by_formula(start, grads, 3e-3, beta1, 0.99, 1e-8, weight_decay)
    torch.testing.assert_close(param.detach(), expected, rtol=1e-13, atol=1e-15)
    assert optimizer.state[param]["step"] == len(grads)


def test_nadamw_momentum_is_constant_unlike_torch_nadam():
    """On a first step, NAdamW's Nesterov moment weighs the momentum with beta1 = 0.9, torch's
    NAdam with its default schedule with mu_1 of about 0.45: the reason the earlier control was
    not Nesterov at beta1."""
    g = torch.ones(3, dtype=torch.float64)
    ours = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    theirs = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    nadamw = NAdamW([ours], lr=1.0, betas=(0.9, 0.999), eps=0.0)
    nadam = torch.optim.NAdam([theirs], lr=1.0, betas=(0.9, 0.999), eps=0.0)
    for p, opt in ((ours, nadamw), (theirs, nadam)):
        p.grad = g.clone()
        opt.step()
    # m_1 = 0.1 g, so m_hat = 0.9 * 0.1 / (1 - 0.9^2) + 0.1 / (1 - 0.9); sqrt(v_hat) = 1.
    expected = -(0.9 * 0.1 / (1 - 0.9**2) + 1.0)
    torch.testing.assert_close(ours.detach(), torch.full((3,), expected, dtype=torch.float64))
    mu = 0.9 * (1 - 0.5 * 0.96 ** (1 * 4e-3))  # torch's mu_1 with momentum_decay=4e-3
    assert mu < 0.46
    assert not torch.allclose(theirs.detach(), ours.detach())


def test_mars_at_gamma_one_minus_beta1_has_nesterovs_first_moment():
    """Approximate MARS with clip off and gamma = 1 - beta1, on a recorded gradient sequence:
    exp_avg_t = beta1 u_t + (1 - beta1) g_t - gamma beta1^t g_1, where u is the plain EMA of
    the gradients (g_tilde_1 = g_1 adds the last term)."""
    beta1 = 0.9
    gamma = 1 - beta1
    grads = gradient_sequence(20, (4, 6), seed=3)
    param = torch.nn.Parameter(torch.zeros(4, 6, dtype=torch.float64))
    optimizer = MARS(
        [param], lr=0.0, betas=(beta1, 0.99), gamma=gamma, weight_decay=0.0, clip=False
    )
    u = torch.zeros(4, 6, dtype=torch.float64)
    worst = 0.0
    for t, g in enumerate(grads, start=1):
        param.grad = g.clone()
        optimizer.step()
        u = beta1 * u + (1 - beta1) * g
        nesterov = beta1 * u + (1 - beta1) * g - gamma * beta1**t * grads[0]
        m = optimizer.state[param]["exp_avg"]
        worst = max(worst, (m - nesterov).abs().max().item())
    assert worst <= 2e-16


def test_mars_first_moment_is_quasi_hyperbolic_for_any_gamma():
    """m_t = (1 - b1 + gamma b1) g_t + b1 (1 - gamma) u_{t-1} + (decaying first-step term)
    for the unclipped approximate mode; at gamma = 0 it is the plain EMA."""
    beta1, gamma = 0.95, 0.05
    grads = gradient_sequence(30, (3, 3), seed=4)
    param = torch.nn.Parameter(torch.zeros(3, 3, dtype=torch.float64))
    optimizer = MARS([param], lr=0.0, betas=(beta1, 0.99), gamma=gamma, clip=False)
    u_previous = torch.zeros(3, 3, dtype=torch.float64)
    for t, g in enumerate(grads, start=1):
        param.grad = g.clone()
        optimizer.step()
        shape = (1 - beta1 + gamma * beta1) * g + beta1 * (1 - gamma) * u_previous
        first_step = -gamma * beta1**t * grads[0]
        torch.testing.assert_close(
            optimizer.state[param]["exp_avg"], shape + first_step, rtol=0, atol=1e-15
        )
        u_previous = beta1 * u_previous + (1 - beta1) * g


def test_the_harness_builds_the_constant_momentum_control_and_keeps_dozats_as_nadam():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    built = build_optimizer("nadamw", model, default_hyperparams("nadamw", "mini"))
    assert isinstance(built.optimizer, NAdamW)
    # Its 1-D tensors are treated as AdamW's: one group, the same lr and weight decay.
    assert len(built.optimizer.param_groups) == 1
    assert built.optimizer.param_groups[0]["weight_decay"] == 0.1
    dozat = build_optimizer("nadam", model, default_hyperparams("nadam", "mini"))
    assert isinstance(dozat.optimizer, torch.optim.NAdam)
    assert dozat.optimizer.param_groups[0]["momentum_decay"] == 4e-3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lr": -1.0}, "lr must be"),
        ({"lr": math.nan}, "lr must be"),
        ({"betas": (1.0, 0.9)}, "betas must be"),
        ({"eps": -1e-8}, "eps must be"),
        ({"weight_decay": -0.1}, "weight_decay must be"),
    ],
)
def test_nadamw_refuses_bad_hyperparameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NAdamW([torch.nn.Parameter(torch.zeros(2))], **kwargs)


def test_nadamw_given_a_1d_setting_takes_mars_adamws_routing():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    settings = {**default_hyperparams("nadamw", "mini"), "lr_1d": 3e-3, "weight_decay": 1e-2}
    built = build_optimizer("nadamw", model, settings)
    nadamw, adamw = built.optimizer
    assert isinstance(nadamw, NAdamW) and type(adamw) is torch.optim.AdamW
    assert [p.shape for p in nadamw.param_groups[0]["params"]] == [torch.Size([4, 4])]
    assert len(adamw.param_groups[0]["params"]) == 3  # the bias and the norm's two vectors
    assert nadamw.param_groups[0]["weight_decay"] == 1e-2
    group = adamw.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (3e-3, (0.9, 0.95), 0.1)
    config = TrainConfig(optimizer="nadamw", model="tiny", hyperparams={"weight_decay_1d": 0.0})
    assert config.resolved_hyperparams()["weight_decay_1d"] == 0.0
    with pytest.raises(ValueError, match="lr_1d must be a number >= 0"):
        build_optimizer("nadamw", model, {**settings, "lr_1d": -1.0})
