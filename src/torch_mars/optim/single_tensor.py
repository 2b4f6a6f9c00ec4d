"""The readable per-tensor reference of the MARS and AdamW steps; every fast path is tested
against these for-loops.

All functions update their tensor arguments in place and never read a tensor value on the host
(no ``.item()``, no Python branch on a tensor), so they queue on an accelerator without a sync.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torch_mars.optim.hyperparams import AdamWHyperparams, MarsHyperparams
from torch_mars.optim.newton_schulz import newton_schulz_orthogonalize, reduction_dtype


def correction_scale(gamma: float, beta1: float) -> float:
    """The factor ``gamma * beta1 / (1 - beta1)`` that multiplies ``g - g_tilde`` in MARS."""
    return gamma * beta1 / (1.0 - beta1)


def variance_reduced_gradient(
    grad: Tensor, last_grad: Tensor, gamma: float, beta1: float
) -> Tensor:
    """``c = g + gamma * beta1/(1-beta1) * (g - g_tilde)``, scaled to unit norm if ``||c||_2 > 1``.

    Args:
        grad: the gradient ``g`` at the current parameters, any shape.
        last_grad: ``g_tilde``, same shape as ``grad``.

    Returns:
        A new tensor ``c`` of the shape and dtype of ``grad``.
    """
    c = torch.sub(grad, last_grad).mul_(correction_scale(gamma, beta1)).add_(grad)
    norm = torch.linalg.vector_norm(c, dtype=reduction_dtype(c.dtype))
    return c.div_(norm.clamp_min_(1.0))


def adam_rule_(
    param: Tensor,
    update_input: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Tensor | None,
    step: int,
    hp: AdamWHyperparams,
) -> None:
    """Decoupled-weight-decay Adam on ``update_input`` (the gradient, or MARS's ``c``)::

    m <- b1 m + (1-b1) x;   v <- b2 v + (1-b2) x^2   (AMSGrad: v_max <- max(v_max, v))
    p <- p (1 - lr wd) - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
    """
    exp_avg.lerp_(update_input, 1.0 - hp.beta1)
    exp_avg_sq.mul_(hp.beta2).addcmul_(update_input, update_input, value=1.0 - hp.beta2)
    second_moment = exp_avg_sq
    if max_exp_avg_sq is not None:
        torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        second_moment = max_exp_avg_sq
    bias_correction1 = 1.0 - hp.beta1**step
    bias_correction2_sqrt = math.sqrt(1.0 - hp.beta2**step)
    denom = (second_moment.sqrt() / bias_correction2_sqrt).add_(hp.eps)
    if hp.weight_decay != 0.0:
        param.mul_(1.0 - hp.lr * hp.weight_decay)
    param.addcdiv_(exp_avg, denom, value=-hp.lr / bias_correction1)


def lion_rule_(param: Tensor, c: Tensor, exp_avg: Tensor, hp: MarsHyperparams) -> None:
    """``m <- b1 m + (1-b1) c;  p <- p (1 - lr wd) - lr sign(m)``."""
    exp_avg.lerp_(c, 1.0 - hp.beta1)
    if hp.weight_decay != 0.0:
        param.mul_(1.0 - hp.lr * hp.weight_decay)
    param.add_(exp_avg.sign(), alpha=-hp.lr)


def shampoo_direction(exp_avg: Tensor, ns_steps: int) -> Tensor:
    """``NS(M) * sqrt(max(1, rows/cols))`` for ``M = m`` viewed as ``(shape[0], -1)``.

    Returns a tensor of ``exp_avg``'s shape; zeros for a tensor with no elements.
    """
    if exp_avg.numel() == 0:
        return torch.zeros_like(exp_avg)
    matrix = exp_avg.reshape(exp_avg.size(0), -1)
    rows, cols = matrix.shape
    orthogonal = newton_schulz_orthogonalize(matrix, ns_steps)
    return orthogonal.mul_(math.sqrt(max(1.0, rows / cols))).view_as(exp_avg)


def shampoo_rule_(param: Tensor, c: Tensor, exp_avg: Tensor, hp: MarsHyperparams) -> None:
    """``m <- b1 m + (1-b1) c;  p <- p (1 - lr wd) - lr NS(m) sqrt(max(1, rows/cols))``."""
    exp_avg.lerp_(c, 1.0 - hp.beta1)
    if hp.weight_decay != 0.0:
        param.mul_(1.0 - hp.lr * hp.weight_decay)
    param.add_(shampoo_direction(exp_avg, hp.ns_steps), alpha=-hp.lr)


def mars_step_single_tensor(
    params: list[Tensor],
    grads: list[Tensor],
    last_grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    steps: list[int],
    hp: MarsHyperparams,
    store_last_grad: bool,
) -> None:
    """One MARS step on each tensor in turn; see :func:`torch_mars.optim.functional.mars_step`."""
    for index, param in enumerate(params):
        grad = -grads[index] if hp.maximize else grads[index]
        c = variance_reduced_gradient(grad, last_grads[index], hp.gamma, hp.beta1)
        if store_last_grad:
            last_grads[index].copy_(grad)
        if hp.mars_type == "mars-lion":
            lion_rule_(param, c, exp_avgs[index], hp)
        elif hp.mars_type == "mars-shampoo" and param.ndim >= 2:
            shampoo_rule_(param, c, exp_avgs[index], hp)
        else:
            max_exp_avg_sq = max_exp_avg_sqs[index] if hp.amsgrad else None
            adam_rule_(
                param, c, exp_avgs[index], exp_avg_sqs[index], max_exp_avg_sq, steps[index], hp
            )


def adamw_step_single_tensor(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    steps: list[int],
    hp: AdamWHyperparams,
) -> None:
    """One AdamW step on each tensor in turn; see :func:`torch_mars.optim.functional.adamw_step`."""
    for index, param in enumerate(params):
        grad = -grads[index] if hp.maximize else grads[index]
        max_exp_avg_sq = max_exp_avg_sqs[index] if hp.amsgrad else None
        adam_rule_(
            param, grad, exp_avgs[index], exp_avg_sqs[index], max_exp_avg_sq, steps[index], hp
        )
