"""Per-step MARS diagnostics that help tune gamma: the share of tensors whose corrected gradient
``c`` was clipped to unit norm, the mean ratio ``||c|| / ||g||`` before clipping, and the RMS of
the parameter update. Costs one copy of the MARS-routed parameters per step, so it is opt-in."""

from __future__ import annotations

import torch
from torch import Tensor

from torch_mars.optim import MARS
from torch_mars.optim.step_math import correction_scale
from torch_mars.optim.step_plan import routes_to_mars


class MarsDiagnostics:
    """Call :meth:`before_step` after the backward pass and :meth:`after_step` after
    ``optimizer.step()``; the latter returns the three statistics. Approximate mode only: in the
    exact mode ``g_tilde`` is computed inside the step."""

    def __init__(self, optimizer: MARS) -> None:
        self.optimizer = optimizer
        self._before: list[tuple[Tensor, Tensor]] = []
        self._clipped = self._ratio = 0.0

    def _mars_tensors(self) -> list[Tensor]:
        return [
            p
            for group in self.optimizer.param_groups
            for p in group["params"]
            if p.grad is not None and routes_to_mars(p, group)
        ]

    @torch.no_grad()
    def before_step(self) -> None:
        clipped, ratios = [], []
        for group in self.optimizer.param_groups:
            scale = correction_scale(group["gamma"], group["betas"][0])
            for p in group["params"]:
                if p.grad is None or not routes_to_mars(p, group):
                    continue
                last = self.optimizer.state[p].get("last_grad", p.grad)
                c_norm = torch.linalg.vector_norm((p.grad - last).mul_(scale).add_(p.grad))
                clipped.append(c_norm > 1.0)
                ratios.append(c_norm / torch.linalg.vector_norm(p.grad).clamp_min(1e-30))
        self._clipped = torch.stack(clipped).float().mean().item() if clipped else 0.0
        self._ratio = torch.stack(ratios).mean().item() if ratios else 0.0
        self._before = [(p, p.detach().clone()) for p in self._mars_tensors()]

    @torch.no_grad()
    def after_step(self) -> dict[str, float]:
        squares = sum(float((p - old).square().sum()) for p, old in self._before)
        count = sum(old.numel() for _, old in self._before)
        self._before = []
        return {
            "clipped_fraction": self._clipped,
            "correction_ratio": self._ratio,
            "update_rms": (squares / count) ** 0.5 if count else 0.0,
        }
