"""MARS as the paper frames it: a variance-reduction step in front of any preconditioned optimizer.

:class:`MarsCorrection` wraps a ``torch.optim`` optimizer and, at every step, hands it the
clipped corrected gradient in place of ``g``::

    c = g + gamma * beta1 / (1 - beta1) * (g - g_tilde),    c <- c / max(1, ||c||_2)

(per tensor), where ``g_tilde`` is the previous step's gradient (approximate mode) or the
gradient of the current batch at the previous parameters (exact mode, through a closure). The
wrapped optimizer's own update then runs on ``c``: on ``torch.optim.AdamW`` this is MARS-AdamW
(``tests/optim/test_mars_correction.py`` checks it against :class:`~torch_mars.MARS` in float64),
on SGD with momentum a variance-reduced SGD, on Muon a MARS-Muon.

``p.grad`` is never written in place: it is reassigned to ``c`` for the wrapped step and to the
original gradient afterwards, and ``g_tilde`` is a copy. Nothing reads a tensor on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from torch_mars.optim.settings import DEFAULTS, SETTING_OF
from torch_mars.optim.step_math import correction_scale, reduction_dtype


def _momentum_of(group: dict[str, Any]) -> float | None:
    """A param group's first-moment decay: ``betas[0]`` (Adam-like) or ``momentum`` (SGD, Muon)."""
    if "betas" in group:
        return group["betas"][0]
    momentum = group.get("momentum")
    return momentum if momentum else None


class MarsCorrection:
    """Turn ``optimizer`` into its MARS variant.

    Args:
        optimizer: any ``torch.optim.Optimizer``; its param groups and state are its own.
        gamma: strength of the correction, >= 0 (0 gives the wrapped optimizer on clipped
            gradients).
        beta1: the ``beta1`` of the correction's factor ``gamma * beta1 / (1 - beta1)``; None
            (default) takes each group's ``betas[0]`` or ``momentum``, and is an error for a
            group that has neither (Adafactor: pass it).
        is_approx: approximate mode (``g_tilde`` = the previous gradient) or exact mode (a
            closure is then required, evaluated at the current and the previous parameters).
        clip: scale ``c`` to unit norm when its norm exceeds 1 (the paper's clip).

    Use it where you would use ``optimizer``: ``step(closure=None)``, ``zero_grad()``,
    ``param_groups``, ``state_dict()``. Attach learning-rate schedulers to ``optimizer``.

    Example:
        >>> import torch
        >>> from torch_mars import MarsCorrection
        >>> model = torch.nn.Linear(4, 2)
        >>> opt = MarsCorrection(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        >>> model(torch.randn(8, 4)).pow(2).mean().backward()
        >>> opt.step()
        >>> sorted(opt.state[model.weight])
        ['last_grad']
    """

    def __init__(
        self,
        optimizer: Optimizer,
        gamma: float | Tensor = DEFAULTS["gamma"],
        beta1: float | None = None,
        is_approx: bool = True,
        clip: bool = True,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise ValueError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer)}")
        SETTING_OF["gamma"].check("gamma", gamma)  # MARS's own check: a tensor gamma too
        if beta1 is not None and not 0.0 <= beta1 < 1.0:
            raise ValueError(f"beta1 must be in [0, 1), got {beta1!r}")
        betas = [beta1 if beta1 is not None else _momentum_of(g) for g in optimizer.param_groups]
        if any(b is None for b in betas):
            raise ValueError(
                "beta1 is needed: a param group has neither betas nor a momentum (Adafactor, "
                "plain SGD); pass MarsCorrection(..., beta1=0.9)"
            )
        self.optimizer = optimizer
        self.gamma, self.beta1, self.is_approx, self.clip = gamma, beta1, is_approx, clip
        self.state: dict[Tensor, dict[str, Tensor]] = {}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def _params(self) -> list[tuple[Tensor, float]]:
        return [
            (p, self.beta1 if self.beta1 is not None else _momentum_of(group))
            for group in self.optimizer.param_groups
            for p in group["params"]
        ]

    def corrected(self, grad: Tensor, last_grad: Tensor, beta1: float) -> Tensor:
        """``c`` from ``g`` and ``g_tilde`` (a new tensor), clipped when ``clip``."""
        c = torch.lerp(grad, last_grad, -correction_scale(self.gamma, beta1))
        if self.clip:
            norm = torch.linalg.vector_norm(c, dtype=reduction_dtype(c.dtype))
            c.div_(norm.clamp_min(1.0))
        return c

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Correct every gradient, take the wrapped optimizer's step on the corrected ones, and
        put the original gradients back; returns ``closure()``'s loss (or None)."""
        if not self.is_approx and closure is None:
            raise ValueError("closure is required when is_approx=False (exact mode)")
        loss = None
        if closure is not None:
            if not self.is_approx:
                self.zero_grad(set_to_none=True)
            with torch.enable_grad():
                loss = closure()
        params = [(p, beta1) for p, beta1 in self._params() if p.grad is not None]
        grads = {p: p.grad for p, _ in params}
        previous = self._previous_gradients(params, closure) if not self.is_approx else {}
        for param, beta1 in params:
            grad = grads[param]
            state = self.state.setdefault(param, {})
            if "last_grad" not in state:  # first step: g_tilde = g, so c = g (clipped)
                state["last_grad"] = grad.detach().clone()
            last_grad = previous.get(param, state["last_grad"])
            param.grad = self.corrected(grad, last_grad, beta1)
            if self.is_approx:
                state["last_grad"].copy_(grad)
            else:  # x_t, where the next step evaluates its batch a second time
                state["prev_param"] = param.detach().clone()
        try:
            self.optimizer.step()
        finally:
            for param, grad in grads.items():
                param.grad = grad
        return loss

    def _previous_gradients(
        self, params: list[tuple[Tensor, float]], closure: Callable[[], Any] | None
    ) -> dict[Tensor, Tensor]:
        """Exact mode: the gradients of the current batch at the previous parameters, for the
        tensors that have stepped before; parameters and ``.grad`` are left as they were."""
        assert closure is not None
        moved = [p for p, _ in params if "prev_param" in self.state.get(p, {})]
        if not moved:
            return {}
        current_grads = {p: p.grad for p, _ in params}
        current_values = [p.detach().clone() for p in moved]
        for param in moved:
            param.copy_(self.state[param]["prev_param"])
        self.zero_grad(set_to_none=True)
        with torch.enable_grad():
            closure()
        previous = {p: p.grad if p.grad is not None else torch.zeros_like(p) for p in moved}
        for param, value in zip(moved, current_values, strict=True):
            param.copy_(value)
        for param, grad in current_grads.items():
            param.grad = grad
        return previous

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict and the correction's ``last_grad``/``prev_param``
        per parameter index."""
        index = {id(p): i for i, (p, _) in enumerate(self._params())}
        return {
            "optimizer": self.optimizer.state_dict(),
            "correction": {index[id(p)]: dict(s) for p, s in self.state.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict["optimizer"])
        params = [p for p, _ in self._params()]
        self.state = {
            params[int(i)]: {k: v.to(params[int(i)].device) for k, v in s.items()}
            for i, s in state_dict["correction"].items()
        }
