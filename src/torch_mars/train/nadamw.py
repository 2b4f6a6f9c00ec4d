"""NAdamW: Adam with Nesterov momentum at a constant ``mu = beta1`` and decoupled weight decay,
the same-cost control of MARS-AdamW. Per tensor, at its step ``t`` (from 1):

    m_t = beta1 m_{t-1} + (1 - beta1) g_t
    v_t = beta2 v_{t-1} + (1 - beta2) g_t^2
    m_hat = beta1 m_t / (1 - beta1^(t+1)) + (1 - beta1) g_t / (1 - beta1^t)
    v_hat = v_t / (1 - beta2^t)
    p <- p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)

``m_hat`` is Dozat's bias-corrected Nesterov moment (the ``nadamw`` of optax and of Marin's
optimizer study): the momentum that the next step will apply, taken now. Unclipped approximate
MARS with ``gamma = 1 - beta1`` has exactly this first moment up to a term that decays as
``beta1^t`` (docs/algorithm.md), so what MARS-AdamW gains over NAdamW is not the Nesterov shape
of its momentum.

Not :class:`torch.optim.NAdam`: that one applies Dozat's momentum *schedule*
``mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay))``, about ``beta1 / 2`` over a short run
(``momentum_decay=0`` gives exactly ``beta1 / 2``). The harness keeps it as ``nadam``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


class NAdamW(Optimizer):
    """Adam with constant-``beta1`` Nesterov momentum and decoupled weight decay (see the module
    docstring for the update). State per tensor: ``step`` (an int), ``exp_avg`` and
    ``exp_avg_sq`` (the parameter's shape)."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if not (isinstance(lr, int | float) and math.isfinite(lr) and lr >= 0):
            raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two values in [0, 1), got {betas!r}")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps!r}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            # Tensors at the same step share the step's scalars: one set of foreach ops each.
            by_step: dict[int, list[Tensor]] = {}
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("NAdamW does not support sparse gradients")
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(
                        param, memory_format=torch.preserve_format
                    )
                state["step"] += 1
                by_step.setdefault(state["step"], []).append(param)
            for step, params in by_step.items():
                _nadamw_foreach(
                    params,
                    [p.grad for p in params],
                    [self.state[p]["exp_avg"] for p in params],
                    [self.state[p]["exp_avg_sq"] for p in params],
                    step=step,
                    lr=group["lr"],
                    betas=group["betas"],
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                )
        return loss


def _nadamw_foreach(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    *,
    step: int,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
) -> None:
    """One NAdamW step of tensors that are all at ``step`` (the update in the module
    docstring), in place."""
    beta1, beta2 = betas
    if weight_decay != 0:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    denominators = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denominators, math.sqrt(1 - beta2**step))
    torch._foreach_add_(denominators, eps)
    torch._foreach_addcdiv_(
        params, grads, denominators, value=-lr * (1 - beta1) / (1 - beta1**step)
    )
    torch._foreach_addcdiv_(
        params, exp_avgs, denominators, value=-lr * beta1 / (1 - beta1 ** (step + 1))
    )
