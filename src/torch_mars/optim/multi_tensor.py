"""Multi-tensor (``torch._foreach_*``) MARS and AdamW steps.

Tensors are grouped by device and dtype and each group is updated with a handful of fused
multi-tensor kernels instead of one small kernel per tensor and per operation. The maths and the
order of operations are those of :mod:`torch_mars.optim.single_tensor`, which the tests compare
this path against. Nothing here reads a tensor value on the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from torch_mars.optim.hyperparams import AdamWHyperparams, MarsHyperparams
from torch_mars.optim.newton_schulz import reduction_dtype
from torch_mars.optim.single_tensor import correction_scale, shampoo_direction


def group_by_device_and_dtype(tensors: Sequence[Tensor]) -> list[list[int]]:
    """Indices of ``tensors`` split by (device, dtype), groups in first-seen order."""
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault((tensor.device, tensor.dtype), []).append(index)
    return list(groups.values())


def _select(indices: Sequence[int], *lists: Sequence) -> list[list]:
    """Each of ``lists`` restricted to ``indices``; an empty list (no AMSGrad maxima) stays so."""
    return [[values[i] for i in indices] if values else [] for values in lists]


def _variance_reduced_gradients(
    grads: list[Tensor], last_grads: list[Tensor], gamma: float, beta1: float
) -> list[Tensor]:
    cs = torch._foreach_sub(grads, last_grads)
    torch._foreach_mul_(cs, correction_scale(gamma, beta1))
    torch._foreach_add_(cs, grads)
    norms = torch._foreach_norm(cs, 2, dtype=reduction_dtype(cs[0].dtype))
    torch._foreach_clamp_min_(norms, 1.0)
    torch._foreach_div_(cs, norms)
    return cs


def _decay_weights(params: list[Tensor], hp: AdamWHyperparams) -> None:
    if hp.weight_decay != 0.0:
        torch._foreach_mul_(params, 1.0 - hp.lr * hp.weight_decay)


def _adam_rule_foreach(
    params: list[Tensor],
    update_inputs: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    steps: list[int],
    hp: AdamWHyperparams,
) -> None:
    torch._foreach_lerp_(exp_avgs, update_inputs, 1.0 - hp.beta1)
    torch._foreach_mul_(exp_avg_sqs, hp.beta2)
    torch._foreach_addcmul_(exp_avg_sqs, update_inputs, update_inputs, 1.0 - hp.beta2)
    second_moments = exp_avg_sqs
    if hp.amsgrad:
        torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)
        second_moments = max_exp_avg_sqs
    bias_correction2_sqrts = [math.sqrt(1.0 - hp.beta2**step) for step in steps]
    step_sizes = [-hp.lr / (1.0 - hp.beta1**step) for step in steps]
    denoms = torch._foreach_sqrt(second_moments)
    torch._foreach_div_(denoms, bias_correction2_sqrts)
    torch._foreach_add_(denoms, hp.eps)
    _decay_weights(params, hp)
    torch._foreach_addcdiv_(params, exp_avgs, denoms, step_sizes)


def _mars_step_one_group(
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
    if hp.maximize:
        grads = torch._foreach_neg(grads)
    cs = _variance_reduced_gradients(grads, last_grads, hp.gamma, hp.beta1)
    if store_last_grad:
        torch._foreach_copy_(last_grads, grads)
    if hp.mars_type == "mars-lion":
        torch._foreach_lerp_(exp_avgs, cs, 1.0 - hp.beta1)
        _decay_weights(params, hp)
        torch._foreach_add_(params, torch._foreach_sign(exp_avgs), alpha=-hp.lr)
        return
    adam_indices = range(len(params))
    if hp.mars_type == "mars-shampoo":
        matrices = [i for i, p in enumerate(params) if p.ndim >= 2]
        adam_indices = [i for i, p in enumerate(params) if p.ndim < 2]
        if matrices:
            matrix_params, matrix_cs, matrix_exp_avgs = _select(matrices, params, cs, exp_avgs)
            torch._foreach_lerp_(matrix_exp_avgs, matrix_cs, 1.0 - hp.beta1)
            _decay_weights(matrix_params, hp)
            directions = [shampoo_direction(m, hp.ns_steps) for m in matrix_exp_avgs]
            torch._foreach_add_(matrix_params, directions, alpha=-hp.lr)
    if adam_indices:
        selected = _select(adam_indices, params, cs, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps)
        _adam_rule_foreach(*selected, hp)


def mars_step_foreach(
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
    """One MARS step with multi-tensor kernels; see :func:`~.functional.mars_step`."""
    for indices in group_by_device_and_dtype(params):
        selected = _select(
            indices, params, grads, last_grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps
        )
        _mars_step_one_group(*selected, hp, store_last_grad)


def adamw_step_foreach(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    steps: list[int],
    hp: AdamWHyperparams,
) -> None:
    """One AdamW step with multi-tensor kernels; see :func:`~.functional.adamw_step`."""
    for indices in group_by_device_and_dtype(params):
        group_params, group_grads, *moments_and_steps = _select(
            indices, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps
        )
        if hp.maximize:
            group_grads = torch._foreach_neg(group_grads)
        _adam_rule_foreach(group_params, group_grads, *moments_and_steps, hp)
