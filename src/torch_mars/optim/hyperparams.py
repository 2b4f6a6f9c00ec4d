"""Typed hyperparameters of one functional MARS or AdamW step, and their validation.

The :class:`~torch_mars.MARS` optimizer keeps hyperparameters in ``param_groups`` dicts, as every
``torch.optim`` optimizer does; before each step it checks them with :func:`validate_group` and
turns them into the frozen dataclasses below, which the functional step paths take.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from torch_mars.optim.step_tensors import Scalar

MarsType = Literal["mars-adamw", "mars-lion", "mars-shampoo"]
MARS_TYPES: tuple[str, ...] = ("mars-adamw", "mars-lion", "mars-shampoo")
STATE_DTYPES: tuple[torch.dtype | None, ...] = (None, torch.float32, torch.bfloat16)


@dataclass(frozen=True)
class AdamWHyperparams:
    """Hyperparameters of a decoupled-weight-decay Adam step.

    Attributes:
        lr: learning rate (parameter units per unit of normalised update); a float or a
            one-element tensor.
        beta1: decay of the first moment ``m`` (float or one-element tensor).
        beta2: decay of the second moment ``v`` (float or one-element tensor).
        eps: added to ``sqrt(v_hat)`` in the denominator.
        weight_decay: decoupled weight decay; the step subtracts ``lr * weight_decay * p``.
        amsgrad: use the running maximum of ``v`` in the denominator.
        maximize: ascend instead of descend (the gradient is negated).
    """

    lr: Scalar
    beta1: Scalar
    beta2: Scalar
    eps: float
    weight_decay: float
    amsgrad: bool = False
    maximize: bool = False


@dataclass(frozen=True)
class MarsHyperparams(AdamWHyperparams):
    """Hyperparameters of a MARS step: the AdamW ones plus the variance-reduction settings.

    Attributes:
        gamma: strength of the variance-reduction correction (0 turns MARS into its base rule);
            a float or a one-element tensor.
        mars_type: which preconditioned rule consumes the corrected gradient.
        ns_steps: Newton-Schulz iterations of ``mars-shampoo``.
    """

    gamma: Scalar = 0.025
    mars_type: MarsType = "mars-adamw"
    ns_steps: int = 5


def _check_tensor_scalar(name: str, value: Tensor, allowed: str) -> float | None:
    """Check a tensor hyperparameter's shape and dtype; return its value only if it is on the CPU
    (reading a device tensor would synchronise the host with the device)."""
    if value.numel() != 1 or not value.is_floating_point() or value.requires_grad:
        raise ValueError(
            f"{name} must be a float or a one-element floating tensor without grad ({allowed}), "
            f"got a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
        )
    return float(value) if value.device.type == "cpu" else None


def _check_nonnegative_finite(name: str, value: Any, tensor_ok: bool = False) -> None:
    if tensor_ok and isinstance(value, Tensor):
        value = _check_tensor_scalar(name, value, "finite, >= 0")
        if value is None:
            return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check_betas(name: str, value: Any) -> None:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (beta1, beta2) with each in [0, 1), got {value!r}")
    for index, beta in enumerate(value):
        if isinstance(beta, Tensor):
            beta = _check_tensor_scalar(f"{name}[{index}]", beta, "in [0, 1)")
            if beta is None:
                continue
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not (0.0 <= beta < 1.0):
            raise ValueError(f"{name}[{index}] must be in [0, 1), got {beta!r}")


def _check_flag(name: str, value: Any, allow_none: bool = False) -> None:
    if isinstance(value, bool) or (allow_none and value is None):
        return
    allowed = "True, False or None" if allow_none else "True or False"
    raise ValueError(f"{name} must be {allowed}, got {value!r}")


def validate_group(group: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first hyperparameter of ``group`` outside its range.

    ``group`` is a complete param-group dict (defaults filled in). Nothing is modified.
    """
    for name in ("lr", "gamma"):
        _check_nonnegative_finite(name, group[name], tensor_ok=True)
    for name in ("eps", "weight_decay", "lr_1d", "weight_decay_1d"):
        _check_nonnegative_finite(name, group[name])
    _check_betas("betas", group["betas"])
    _check_betas("betas_1d", group["betas_1d"])
    if group["mars_type"] not in MARS_TYPES:
        raise ValueError(f"mars_type must be one of {MARS_TYPES}, got {group['mars_type']!r}")
    ns_steps = group["ns_steps"]
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1:
        raise ValueError(f"ns_steps must be an integer >= 1, got {ns_steps!r}")
    for name in ("amsgrad", "is_approx", "optimize_1d", "reference_routing", "maximize"):
        _check_flag(name, group[name])
    for name in ("use_mars", "foreach", "fused"):
        _check_flag(name, group.get(name), allow_none=True)
    if group.get("foreach") and group.get("fused"):
        raise ValueError("foreach and fused cannot both be True: pick one implementation")
    state_dtype = group.get("state_dtype")
    if state_dtype not in STATE_DTYPES:
        raise ValueError(
            f"state_dtype must be None (the parameter's dtype), torch.float32 or torch.bfloat16, "
            f"got {state_dtype!r}"
        )


def mars_hyperparams(group: Mapping[str, Any]) -> MarsHyperparams:
    """The MARS-rule hyperparameters of a validated param group."""
    beta1, beta2 = group["betas"]
    return MarsHyperparams(
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        eps=group["eps"],
        weight_decay=group["weight_decay"],
        amsgrad=group["amsgrad"],
        maximize=group["maximize"],
        gamma=group["gamma"],
        mars_type=group["mars_type"],
        ns_steps=group["ns_steps"],
    )


def adamw_1d_hyperparams(group: Mapping[str, Any]) -> AdamWHyperparams:
    """The hyperparameters of the plain-AdamW path for tensors not routed to MARS.

    Its learning rate is ``lr * lr_1d / lr_at_construction``, so a schedule applied to ``lr``
    moves it in proportion.
    """
    beta1, beta2 = group["betas_1d"]
    return AdamWHyperparams(
        lr=group["lr"] * group["lr_1d"] / group["lr_at_construction"],
        beta1=beta1,
        beta2=beta2,
        eps=group["eps"],
        weight_decay=group["weight_decay_1d"],
        amsgrad=group["amsgrad"],
        maximize=group["maximize"],
    )
