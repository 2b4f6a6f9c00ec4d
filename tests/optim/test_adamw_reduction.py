"""With gamma = 0 and gradient norms <= 1, MARS-AdamW on a 2-D tensor is torch.optim.AdamW; the
1-D path is torch.optim.AdamW with betas_1d, weight_decay_1d and lr * lr_1d / lr0, following a
schedule on lr."""

from __future__ import annotations

import pytest
import torch

from torch_mars import MARS


def small_gradient_problem(
    seed: int,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    batches = [
        (torch.randn(8, 4, generator=gen, dtype=torch.float64), torch.randn(8, 5, generator=gen))
        for _ in range(30)
    ]
    return weight, [(x, y.to(torch.float64)) for x, y in batches]


def train(weight: torch.Tensor, batches, opt_factory, lr_schedule=None) -> torch.Tensor:
    w = weight.clone().requires_grad_()
    opt = opt_factory([w])
    for step, (x, y) in enumerate(batches):
        if lr_schedule is not None:
            opt.param_groups[0]["lr"] = lr_schedule(step)
        opt.zero_grad()
        # 0.01 keeps every gradient norm below 1, so MARS's clipping never acts.
        loss = 0.01 * (x @ w.T - y).pow(2).mean()
        loss.backward()
        assert float(w.grad.norm()) <= 1.0
        opt.step()
    return w.detach()


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_gamma_zero_mars_adamw_is_adamw_on_a_matrix(foreach, amsgrad, weight_decay):
    weight, batches = small_gradient_problem(seed=1)
    hyper = dict(lr=0.05, betas=(0.9, 0.97), eps=1e-6, weight_decay=weight_decay, amsgrad=amsgrad)
    ours = train(weight, batches, lambda p: MARS(p, gamma=0.0, foreach=foreach, **hyper))
    torch_adamw = train(weight, batches, lambda p: torch.optim.AdamW(p, foreach=False, **hyper))
    assert float((ours - weight).abs().max()) > 0.1
    torch.testing.assert_close(ours, torch_adamw, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("foreach", [False, True])
def test_one_d_tensors_take_adamw_with_their_own_rate_that_follows_the_lr_schedule(foreach):
    gen = torch.Generator().manual_seed(3)
    bias = torch.randn(6, generator=gen, dtype=torch.float64)
    targets = [torch.randn(6, generator=gen, dtype=torch.float64) for _ in range(20)]

    def schedule(step: int) -> float:
        return 0.1 * (0.5 if step >= 10 else 1.0)

    def run(opt_factory, lr_of_step) -> torch.Tensor:
        b = bias.clone().requires_grad_()
        opt = opt_factory([b])
        for step, target in enumerate(targets):
            opt.param_groups[0]["lr"] = lr_of_step(step)
            opt.zero_grad()
            (b - target).pow(2).sum().backward()
            opt.step()
        return b.detach()

    ours = run(
        lambda p: MARS(
            p, lr=0.1, lr_1d=0.02, betas_1d=(0.8, 0.9), weight_decay_1d=0.3, foreach=foreach
        ),
        schedule,
    )
    expected = run(
        lambda p: torch.optim.AdamW(p, lr=0.02, betas=(0.8, 0.9), weight_decay=0.3),
        lambda step: schedule(step) * 0.02 / 0.1,
    )
    torch.testing.assert_close(ours, expected, rtol=1e-13, atol=1e-15)
