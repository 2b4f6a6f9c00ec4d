"""The readable per-tensor reference of the MARS and AdamW steps; every fast path is tested
against these for-loops.

All functions update their tensor arguments in place and never read a tensor value on the host
(no ``.item()``, no Python branch on a tensor), so they queue on an accelerator without a sync.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torch_mars.optim.newton_schulz import newton_schulz_orthogonalize
from torch_mars.optim.step_types import (
    AdamWHyperparams,
    MarsHyperparams,
    Scalar,
    StepTensors,
    add_scaled_,
    addcdiv_scaled_,
    addcmul_scaled_,
    bias_corrections,
    correction_scale,
    is_shampoo_matrix,
    matrix_shape,
    reduction_dtype,
    shampoo_scale,
)


def variance_reduced_gradient(
    grad: Tensor, last_grad: Tensor, gamma: Scalar, beta1: Scalar
) -> Tensor:
    """``c = g + gamma * beta1/(1-beta1) * (g - g_tilde)``, scaled to unit norm if ``||c||_2 > 1``.

    ``c`` is formed as ``lerp(g, g_tilde, -scale)``, one fused pass over both inputs.

    Args:
        grad: the gradient ``g`` at the current parameters, any shape.
        last_grad: ``g_tilde``, same shape as ``grad``.

    Returns:
        A new tensor ``c`` of the shape and dtype of ``grad``.
    """
    c = torch.lerp(grad, last_grad, -correction_scale(gamma, beta1))
    norm = torch.linalg.vector_norm(c, dtype=reduction_dtype(c.dtype))
    return c.div_(norm.clamp_min(1.0))


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
    addcmul_scaled_(exp_avg_sq.mul_(hp.beta2), update_input, update_input, 1.0 - hp.beta2)
    second_moment = exp_avg_sq
    if max_exp_avg_sq is not None:
        torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        second_moment = max_exp_avg_sq
    bias_correction1, bias_correction2_sqrt = bias_corrections(hp.beta1, hp.beta2, step)
    denom = (second_moment.sqrt() / bias_correction2_sqrt).add_(hp.eps)
    if hp.weight_decay != 0.0:
        param.mul_(1.0 - hp.lr * hp.weight_decay)
    addcdiv_scaled_(param, exp_avg, denom, -hp.lr / bias_correction1)


def lion_rule_(param: Tensor, c: Tensor, exp_avg: Tensor, hp: MarsHyperparams) -> None:
    """``m <- b1 m + (1-b1) c;  p <- p (1 - lr wd) - lr sign(m)``."""
    exp_avg.lerp_(c, 1.0 - hp.beta1)
    if hp.weight_decay != 0.0:
        param.mul_(1.0 - hp.lr * hp.weight_decay)
    add_scaled_(param, exp_avg.sign(), -hp.lr)


def shampoo_direction(exp_avg: Tensor, ns_steps: int, transposed: bool = False) -> Tensor:
    """``NS(M) * sqrt(max(1, rows/cols))`` for ``M = m`` viewed as ``(shape[0], -1)``.

    Returns a tensor of ``exp_avg``'s shape; zeros for a tensor with no elements.
    """
    if exp_avg.numel() == 0:
        return torch.zeros_like(exp_avg)
    matrix = exp_avg.reshape(matrix_shape(exp_avg.shape))
    orthogonal = newton_schulz_orthogonalize(matrix, ns_steps)
    return orthogonal.mul_(shampoo_scale(exp_avg.shape, transposed)).view_as(exp_avg)


def shampoo_rule_(param: Tensor, c: Tensor, exp_avg: Tensor, hp: MarsHyperparams) -> None:
    """``m <- b1 m + (1-b1) c;  p <- p (1 - lr wd) - lr NS(m) sqrt(max(1, rows/cols))``."""
    exp_avg.lerp_(c, 1.0 - hp.beta1)
    if hp.weight_decay != 0.0:
        param.mul_(1.0 - hp.lr * hp.weight_decay)
    direction = shampoo_direction(exp_avg, hp.ns_steps, hp.transposed_matrices)
    add_scaled_(param, direction, -hp.lr)


def mars_step_single_tensor(
    tensors: StepTensors, hp: MarsHyperparams, store_last_grad: bool
) -> None:
    """One MARS step on each tensor in turn; see :func:`torch_mars.optim.functional.mars_step`."""
    for index, param in enumerate(tensors.params):
        grad = -tensors.grads[index] if hp.maximize else tensors.grads[index]
        last_grad = tensors.last_grads[index]
        c = variance_reduced_gradient(grad, last_grad, hp.gamma, hp.beta1)
        if store_last_grad:
            last_grad.copy_(grad)
        exp_avg = tensors.exp_avgs[index]
        if hp.mars_type == "mars-lion":
            lion_rule_(param, c, exp_avg, hp)
        elif is_shampoo_matrix(hp.mars_type, param.ndim):
            shampoo_rule_(param, c, exp_avg, hp)
        else:
            max_exp_avg_sq = tensors.max_exp_avg_sqs[index] if hp.amsgrad else None
            adam_rule_(
                param,
                c,
                exp_avg,
                tensors.exp_avg_sqs[index],
                max_exp_avg_sq,
                tensors.steps[index],
                hp,
            )


def adamw_step_single_tensor(tensors: StepTensors, hp: AdamWHyperparams) -> None:
    """One AdamW step on each tensor in turn; see :func:`torch_mars.optim.functional.adamw_step`."""
    for index, param in enumerate(tensors.params):
        grad = -tensors.grads[index] if hp.maximize else tensors.grads[index]
        max_exp_avg_sq = tensors.max_exp_avg_sqs[index] if hp.amsgrad else None
        adam_rule_(
            param,
            grad,
            tensors.exp_avgs[index],
            tensors.exp_avg_sqs[index],
            max_exp_avg_sq,
            tensors.steps[index],
            hp,
        )
