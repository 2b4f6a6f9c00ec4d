"""An independent float64 model of the MARS contract, written from the formulas of issue #2.

It shares no code with ``torch_mars``: state lives in plain dicts, every formula is spelled out
once per tensor, and the clipping uses a Python branch (fine in a test, banned in the library).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315


@dataclass
class ReferenceConfig:
    lr: float = 3e-3
    betas: tuple[float, float] = (0.95, 0.99)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    gamma: float = 0.025
    mars_type: str = "mars-adamw"
    optimize_1d: bool = False
    lr_1d: float | None = None  # None: the lr at construction (lr0)
    betas_1d: tuple[float, float] = (0.9, 0.95)
    weight_decay_1d: float = 0.1
    maximize: bool = False
    ns_steps: int = 5
    clip: bool = True
    cautious: bool = False
    second_moment: str = "corrected"  # or "gradient": v averages g^2 instead of c^2
    skip_nonfinite: bool = True  # the reference problems have finite gradients only
    lr0: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.lr0 = self.lr


def orthogonalize(m: Tensor, steps: int) -> Tensor:
    """Quintic Newton-Schulz on M/(|M|_F + 1e-7) in float64 (MARS's default for float64
    parameters), on M^T when rows > cols."""
    x = m / (m.norm() + 1e-7)
    tall = m.shape[0] > m.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        gram = x @ x.T
        x = NS_A * x + NS_B * (gram @ x) + NS_C * (gram @ (gram @ x))
    if tall:
        x = x.T
    return x.to(torch.float64)


def cautious(update: Tensor, g: Tensor) -> Tensor:
    """C-AdamW's mask: entries whose sign disagrees with g's are dropped, the rest divided by
    the kept fraction (at least 1e-3)."""
    if update.numel() == 0:
        return update
    mask = (update * g > 0).to(update.dtype)
    return update * mask / max(float(mask.mean()), 1e-3)


class ReferenceMARS:
    """Float64 MARS over a list of tensors; ``step(grads, previous_grads)`` updates ``params``."""

    def __init__(self, params: list[Tensor], config: ReferenceConfig) -> None:
        self.params = [p.detach().to(torch.float64).clone() for p in params]
        self.config = config
        self.state: list[dict] = [{} for _ in params]

    def uses_mars(self, p: Tensor) -> bool:
        return self.config.optimize_1d or p.ndim >= 2

    def step(self, grads: list[Tensor | None], previous_grads: list[Tensor | None] | None) -> None:
        """``previous_grads``: the exact mode's grad at x_{t-1} on this batch (None: approx)."""
        cfg = self.config
        for i, (x, g) in enumerate(zip(self.params, grads, strict=True)):
            if g is None:
                continue
            g = g.to(torch.float64)
            if cfg.maximize:
                g = -g
            st = self.state[i]
            first = not st
            if first:
                st.update(
                    t=0, m=torch.zeros_like(x), v=torch.zeros_like(x), vmax=torch.zeros_like(x)
                )
            st["t"] += 1
            t = st["t"]
            if not self.uses_mars(x):
                b1, b2 = cfg.betas_1d
                lr_1d = cfg.lr0 if cfg.lr_1d is None else cfg.lr_1d
                lr = cfg.lr * lr_1d / cfg.lr0
                st["m"] = b1 * st["m"] + (1 - b1) * g
                st["v"] = b2 * st["v"] + (1 - b2) * g * g
                st["vmax"] = torch.maximum(st["vmax"], st["v"])
                v = st["vmax"] if cfg.amsgrad else st["v"]
                u = (st["m"] / (1 - b1**t)) / (torch.sqrt(v / (1 - b2**t)) + cfg.eps)
                self.params[i] = x - lr * (cfg.weight_decay_1d * x + u)
                continue
            b1, b2 = cfg.betas
            if first:
                g_tilde = g
            elif previous_grads is None:
                g_tilde = st["last"]
            else:
                g_tilde = previous_grads[i].to(torch.float64)
                if cfg.maximize:
                    g_tilde = -g_tilde
            c = g + cfg.gamma * b1 / (1 - b1) * (g - g_tilde)
            norm = float(torch.sqrt((c * c).sum()))
            if cfg.clip and norm > 1:
                c = c / norm
            st["last"] = g
            st["m"] = b1 * st["m"] + (1 - b1) * c
            lr, wd = cfg.lr, cfg.weight_decay
            masked = (lambda u, g=g: cautious(u, g)) if cfg.cautious else (lambda u: u)
            if cfg.mars_type == "mars-lion":
                self.params[i] = x - lr * (wd * x + masked(torch.sign(st["m"])))
            elif cfg.mars_type in ("mars-shampoo", "mars-m") and x.ndim >= 2:
                if x.numel() == 0:
                    continue
                matrix = st["m"].reshape(x.shape[0], -1)
                rows, cols = matrix.shape
                if cfg.mars_type == "mars-m":  # Moonlight's scale, as in the MARS-M paper
                    scale = 0.2 * math.sqrt(max(rows, cols))
                else:
                    scale = math.sqrt(max(1, rows / cols))
                direction = orthogonalize(matrix, cfg.ns_steps) * scale
                self.params[i] = x - lr * (masked(direction.reshape(x.shape)) + wd * x)
            else:
                y = g if cfg.second_moment == "gradient" else c
                st["v"] = b2 * st["v"] + (1 - b2) * y * y
                st["vmax"] = torch.maximum(st["vmax"], st["v"])
                v = st["vmax"] if cfg.amsgrad else st["v"]
                u = (st["m"] / (1 - b1**t)) / (torch.sqrt(v / (1 - b2**t)) + cfg.eps)
                self.params[i] = x - lr * (wd * x + masked(u))
