"""The readable per-tensor reference of the MARS and AdamW steps; every fast path is tested
against these for-loops.

All functions update their tensor arguments in place and never read a tensor value on the host
(no ``.item()``, no Python branch on a tensor), so they queue on an accelerator without a sync.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torch_mars.optim.newton_schulz import newton_schulz_orthogonalize, newton_schulz_settings
from torch_mars.optim.step_math import (
    NORM_DTYPE,
    add_scaled_,
    addcdiv_scaled_,
    addcmul_scaled_,
    bias_corrections,
    cautious_,
    correction_scale,
    finite_gates,
    is_shampoo_matrix,
    matrix_shape,
    one_buffer_coefficients,
    orthogonal_update_scale,
    second_moment_input,
    update_coefficients,
)
from torch_mars.optim.step_types import (
    AdamWHyperparams,
    MarsHyperparams,
    Scalar,
    StepTensors,
    UpdateCoefficients,
)


def variance_reduced_gradient(
    grad: Tensor,
    last_grad: Tensor,
    gamma: Scalar,
    beta1: Scalar,
    skip_nonfinite: bool = False,
    clip: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """``c = g + gamma * beta1/(1-beta1) * (g - g_tilde)``, scaled to unit norm if ``||c||_2 > 1``
    (unless ``clip`` is False).

    With ``skip_nonfinite``, also ``c``'s gate: 1 if ``||c||`` is finite, else 0, and then ``c``
    becomes all zeros (clipped, ``c / ||c||`` holds only NaN and zero entries, which
    ``nan_to_num`` zeroes; a finite ``c`` has none to change).

    ``c`` is formed as ``lerp(g, g_tilde, -scale)``, one fused pass over both inputs.

    Args:
        grad: the gradient ``g`` at the current parameters, any shape.
        last_grad: ``g_tilde``, same shape as ``grad``.

    Returns:
        ``(c, gate)``: a new tensor of the shape and dtype of ``grad``, and a 0-d tensor of its
        dtype (None without ``skip_nonfinite``).
    """
    c = torch.lerp(grad, last_grad, -correction_scale(gamma, beta1))
    if not (clip or skip_nonfinite):
        return c, None
    norm = torch.linalg.vector_norm(c, dtype=NORM_DTYPE)
    if clip:
        c.div_(norm.clamp_min(1.0))
    if not skip_nonfinite:
        return c, None
    gate = finite_gates(norm, c.dtype)
    if clip:  # c / ||c|| holds only NaN and zero entries when ||c|| is not finite
        return c.nan_to_num_(0.0, 0.0, 0.0), gate
    return torch.where(gate > 0, c, 0.0), gate


def adam_rule_(
    param: Tensor,
    update_input: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Tensor | None,
    step: int,
    hp: AdamWHyperparams,
    k: UpdateCoefficients | None = None,
    cautious_grad: Tensor | None = None,
    second_moment_of: Tensor | None = None,
) -> None:
    """Decoupled-weight-decay Adam on ``update_input`` (the gradient, or MARS's ``c``)::

    m <- b1 m + (1-b1) x;   v <- b2 v + (1-b2) y^2   (AMSGrad: v_max <- max(v_max, v))
    p <- p (1 - lr wd) - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)

    with ``y = second_moment_of`` (default: ``x``). ``k``: the coefficients with the
    tensor's skip gate folded in (default: ungated ``hp``). ``cautious_grad``: mask the update
    with :func:`~torch_mars.optim.step_math.cautious_` against this gradient.
    """
    k = k or update_coefficients(hp)
    y = update_input if second_moment_of is None else second_moment_of
    exp_avg.lerp_(update_input, k.momentum_weight)
    exp_avg_sq.mul_(k.second_moment_decay)
    addcmul_scaled_(exp_avg_sq, y, y, 1.0 - hp.beta2)
    second_moment = exp_avg_sq
    if max_exp_avg_sq is not None:
        torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
        second_moment = max_exp_avg_sq
    bias_correction1, bias_correction2_sqrt = bias_corrections(hp.beta1, hp.beta2, step)
    denom = (second_moment.sqrt() / bias_correction2_sqrt).add_(k.eps)
    if hp.weight_decay != 0.0:
        param.mul_(k.weight_decay_factor)
    if cautious_grad is None:
        addcdiv_scaled_(param, exp_avg, denom, -hp.lr / bias_correction1)
    else:
        add_scaled_(param, cautious_(exp_avg / denom, cautious_grad), -hp.lr / bias_correction1)


def lion_step_(
    param: Tensor, m: Tensor, hp: MarsHyperparams, k: UpdateCoefficients, grad: Tensor
) -> None:
    """``p <- p (1 - lr wd) - lr sign(m)`` (the sign masked against ``grad`` under
    ``hp.cautious``)."""
    if hp.weight_decay != 0.0:
        param.mul_(k.weight_decay_factor)
    update = m.sign()
    add_scaled_(param, cautious_(update, grad) if hp.cautious else update, -k.lr)


def one_buffer_momentum(
    grad: Tensor, buffer: Tensor, first: bool, hp: MarsHyperparams
) -> tuple[Tensor, Tensor | None]:
    """MARS's unclipped approximate momentum ``m_t`` from ``g_t`` and one buffer, updated in
    place (:func:`~torch_mars.optim.step_math.one_buffer_coefficients`); with
    ``hp.skip_nonfinite`` also the gate of ``||g||`` (the buffer keeps its value at gate 0).

    Returns ``(m_t, gate)``: a new tensor of ``grad``'s shape, and a 0-d tensor or None.
    """
    gate = None
    if hp.skip_nonfinite:
        gate = finite_gates(torch.linalg.vector_norm(grad, dtype=NORM_DTYPE), grad.dtype)
        grad = torch.where(gate > 0, grad, 0.0)
    a, beta1 = one_buffer_coefficients(hp, first)
    updated = buffer * beta1 + grad * a
    buffer.copy_(updated if gate is None else torch.where(gate > 0, updated, buffer))
    return grad * hp.gamma + buffer * beta1, gate


def shampoo_direction(
    exp_avg: Tensor,
    ns_steps: int,
    transposed: bool = False,
    mars_type: str = "mars-shampoo",
    ns_dtype: torch.dtype | None = None,
    ns_iteration: str = "quintic",
    ns_products: str = "dense",
) -> Tensor:
    """``NS(M) * scale`` for ``M = m`` viewed as ``(shape[0], -1)``, with the scale of
    ``mars_type`` (:func:`~torch_mars.optim.step_math.orthogonal_update_scale`), the
    iterations in ``ns_dtype`` (None: the device's).

    Returns a tensor of ``exp_avg``'s shape; zeros for a tensor with no elements.
    """
    if exp_avg.numel() == 0:
        return torch.zeros_like(exp_avg)
    matrix = exp_avg.reshape(matrix_shape(exp_avg.shape))
    orthogonal = newton_schulz_orthogonalize(matrix, ns_steps, ns_dtype, ns_iteration, ns_products)
    scale = orthogonal_update_scale(mars_type, exp_avg.shape, transposed)
    return orthogonal.mul_(scale).view_as(exp_avg)


def shampoo_step_(
    param: Tensor, m: Tensor, hp: MarsHyperparams, k: UpdateCoefficients, grad: Tensor
) -> None:
    """``p <- p (1 - lr wd) - lr NS(m) scale`` (``mars-shampoo``: ``sqrt(max(1, rows/cols))``;
    ``mars-m``: ``0.2 sqrt(max(rows, cols))``), masked against ``grad`` under ``hp.cautious``."""
    if hp.weight_decay != 0.0:
        param.mul_(k.weight_decay_factor)
    direction = shampoo_direction(m, *newton_schulz_settings(hp))
    if hp.cautious:
        cautious_(direction, grad)
    add_scaled_(param, direction, -k.lr)


def mars_step_single_tensor(
    tensors: StepTensors, hp: MarsHyperparams, store_last_grad: bool
) -> list[Tensor] | None:
    """One MARS step on each tensor in turn; see :func:`torch_mars.optim.functional.mars_step`.
    Returns each tensor's gate under ``hp.skip_nonfinite`` (1: updated, 0: skipped), else None.
    """
    gates: list[Tensor] = []
    for index, param in enumerate(tensors.params):
        grad = -tensors.grads[index] if hp.maximize else tensors.grads[index]
        exp_avg = tensors.exp_avgs[index]
        if hp.one_buffer:  # momentum-only rules, validated with the group
            m, gate = one_buffer_momentum(grad, exp_avg, tensors.steps[index] == 1, hp)
            k = update_coefficients(hp, gate)
            step = lion_step_ if hp.mars_type == "mars-lion" else shampoo_step_
            step(param, m, hp, k, grad)
            if gate is not None:
                gates.append(gate)
            continue
        last_grad = tensors.last_grads[index]
        c, gate = variance_reduced_gradient(
            grad, last_grad, hp.gamma, hp.beta1, hp.skip_nonfinite, hp.clip
        )
        k = update_coefficients(hp, gate)
        if store_last_grad:
            if gate is None:
                last_grad.copy_(grad)
            else:
                torch.where(gate > 0, grad, last_grad, out=last_grad)
        if hp.mars_type == "mars-lion" or is_shampoo_matrix(hp.mars_type, param.ndim):
            exp_avg.lerp_(c, k.momentum_weight)  # m <- b1 m + (1-b1) c
            step = lion_step_ if hp.mars_type == "mars-lion" else shampoo_step_
            step(param, exp_avg, hp, k, grad)
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
                k,
                grad if hp.cautious else None,
                second_moment_input(grad, gate) if hp.second_moment == "gradient" else None,
            )
        if gate is not None:
            gates.append(gate)
    return gates if hp.skip_nonfinite else None


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
