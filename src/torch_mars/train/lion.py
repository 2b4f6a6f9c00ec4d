"""Lion (Chen et al., 2023, arXiv 2302.06675), the baseline of MARS-Lion:

u = sign(beta1 m + (1 - beta1) g);  p <- p (1 - lr wd) - lr u;  m <- beta2 m + (1 - beta2) g
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer


class Lion(Optimizer):
    """Lion with decoupled weight decay; state per tensor: ``exp_avg``."""

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"betas must be two values in [0, 1), got {betas}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["exp_avg"] = torch.zeros_like(param)
                exp_avg = state["exp_avg"]
                update = torch.lerp(param.grad, exp_avg, beta1).sign_()
                param.mul_(1 - group["lr"] * group["weight_decay"]).add_(update, alpha=-group["lr"])
                exp_avg.lerp_(param.grad, 1 - beta2)
        return loss
