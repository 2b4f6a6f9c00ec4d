"""Multi-tensor (``torch._foreach_*``) MARS and AdamW steps.

Tensors are grouped by device and dtype and each group is updated with a handful of fused
multi-tensor kernels instead of one small kernel per tensor and per operation. The maths is that
of :mod:`torch_mars.optim.single_tensor`, which the tests compare this path against; the passes
over memory are kept to what the rule needs (``c`` in one ``lerp`` of ``g`` and ``g_tilde``, the
bias corrections folded into scalars). Nothing here reads a tensor value on the host, and
one-element tensor hyperparameters stay on their device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torch_mars.optim.step_math import (
    NORM_DTYPE,
    bias_corrections,
    correction_scale,
    finite_gates,
    foreach_add_scaled_,
    foreach_cautious_,
    foreach_step_,
    is_shampoo_matrix,
    one_buffer_coefficients,
    second_moment_input,
    update_coefficients,
)
from torch_mars.optim.step_types import (
    AdamWHyperparams,
    MarsHyperparams,
    Scalar,
    StepTensors,
    UpdateCoefficients,
    WholeTensorOps,
    group_by_device_and_dtype,
    group_indices,
    hyperparams_on_device,
)


def _variance_reduced_gradients(
    grads: list[Tensor],
    last_grads: list[Tensor],
    gamma: Scalar,
    beta1: Scalar,
    whole: WholeTensorOps | None = None,
    skip_nonfinite: bool = False,
    clip: bool = True,
) -> tuple[list[Tensor], Tensor | None]:
    """The ``c`` of every tensor (clipped unless ``clip`` is False) and, with ``skip_nonfinite``,
    their gates as one vector (see
    :func:`~torch_mars.optim.single_tensor.variance_reduced_gradient`)."""
    weight = -correction_scale(gamma, beta1)
    if isinstance(weight, Tensor):
        cs = list(torch._foreach_lerp(grads, last_grads, [weight] * len(grads)))
    else:
        cs = list(torch._foreach_lerp(grads, last_grads, weight))
    if not (clip or skip_nonfinite):
        return cs, None
    norms = torch._foreach_norm(cs, 2, dtype=NORM_DTYPE)
    if whole is not None:
        norms = whole.whole_norms(norms)
    gates = finite_gates(torch.stack(norms), cs[0].dtype) if skip_nonfinite else None
    if clip:
        torch._foreach_clamp_min_(norms, 1.0)
        torch._foreach_div_(cs, norms)
    if gates is not None:
        # No multi-tensor nan_to_num or where; a finite c has nothing to change.
        for index, (c, finite) in enumerate(zip(cs, gates.bool().unbind(), strict=True)):
            cs[index] = c.nan_to_num_(0.0, 0.0, 0.0) if clip else torch.where(finite, c, 0.0)
    return cs, gates


def _lerp_weights(weight: Scalar | list[Tensor], n: int) -> float | list[Tensor]:
    """A lerp weight as ``_foreach_lerp_`` takes it: a float, or one tensor per entry."""
    return [weight] * n if isinstance(weight, Tensor) else weight


def _decay_weights(params: list[Tensor], hp: AdamWHyperparams, k: UpdateCoefficients) -> None:
    if hp.weight_decay != 0.0:
        torch._foreach_mul_(params, k.weight_decay_factor)


def _update_moments(
    update_inputs: list[Tensor],
    tensors: StepTensors,
    hp: AdamWHyperparams,
    k: UpdateCoefficients,
    second_moment_inputs: list[Tensor] | None = None,
) -> list[Tensor]:
    """Update ``m`` on ``update_inputs`` and ``v`` on ``second_moment_inputs`` (default: the
    same), and the AMSGrad maxima; return the second moments to use."""
    n = len(update_inputs)
    ys = update_inputs if second_moment_inputs is None else second_moment_inputs
    torch._foreach_lerp_(tensors.exp_avgs, update_inputs, _lerp_weights(k.momentum_weight, n))
    torch._foreach_mul_(tensors.exp_avg_sqs, k.second_moment_decay)
    if isinstance(hp.beta2, Tensor):
        squares = torch._foreach_mul(ys, ys)
        torch._foreach_mul_(squares, 1.0 - hp.beta2)
        torch._foreach_add_(tensors.exp_avg_sqs, squares)
    else:
        torch._foreach_addcmul_(tensors.exp_avg_sqs, ys, ys, 1.0 - hp.beta2)
    if not hp.amsgrad:
        return tensors.exp_avg_sqs
    torch._foreach_maximum_(tensors.max_exp_avg_sqs, tensors.exp_avg_sqs)
    return tensors.max_exp_avg_sqs


def _same_step_groups(steps: list[int]) -> list[list[int]]:
    """Indices grouped by step count; tensors of one group share their bias corrections.

    Usually all steps are equal. That case is tested by comparison, not hashing, so that a
    compiled step guards on "all steps equal" rather than on the step's value (a recompile per
    step).
    """
    if all(step == steps[0] for step in steps):
        return [list(range(len(steps)))]
    return group_indices(steps)


def _adam_rule_foreach(
    update_inputs: list[Tensor],
    tensors: StepTensors,
    hp: AdamWHyperparams,
    k: UpdateCoefficients,
    cautious_grads: list[Tensor] | None = None,
    whole: WholeTensorOps | None = None,
    second_moment_inputs: list[Tensor] | None = None,
) -> None:
    """Adam on ``update_inputs`` (``v`` on ``second_moment_inputs`` when given); with
    ``cautious_grads``, each update is masked against them
    (:func:`~torch_mars.optim.step_math.foreach_cautious_`)."""
    second_moments = _update_moments(update_inputs, tensors, hp, k, second_moment_inputs)
    _decay_weights(tensors.params, hp, k)
    for indices in _same_step_groups(tensors.steps):
        bias_correction1, bias_correction2_sqrt = bias_corrections(
            hp.beta1, hp.beta2, tensors.steps[indices[0]]
        )
        params = [tensors.params[i] for i in indices]
        exp_avgs = [tensors.exp_avgs[i] for i in indices]
        denoms = torch._foreach_sqrt([second_moments[i] for i in indices])
        torch._foreach_div_(denoms, bias_correction2_sqrt)
        torch._foreach_add_(denoms, k.select(indices).eps if isinstance(k.eps, list) else k.eps)
        step_size = -hp.lr / bias_correction1
        if isinstance(step_size, Tensor) or cautious_grads is not None:
            updates = torch._foreach_div(exp_avgs, denoms)
            if cautious_grads is not None:
                foreach_cautious_(updates, [cautious_grads[i] for i in indices], whole)
            foreach_add_scaled_(params, updates, step_size)
        else:
            torch._foreach_addcdiv_(params, exp_avgs, denoms, step_size)


def _mars_elementwise_one_group(
    tensors: StepTensors,
    hp: MarsHyperparams,
    store_last_grad: bool,
    whole: WholeTensorOps | None,
) -> Tensor | None:
    grads = torch._foreach_neg(tensors.grads) if hp.maximize else tensors.grads
    cs, gates = _variance_reduced_gradients(
        grads, tensors.last_grads, hp.gamma, hp.beta1, whole, hp.skip_nonfinite, hp.clip
    )
    k = update_coefficients(hp) if gates is None else update_coefficients(hp, gates).unbind()
    if store_last_grad:
        if gates is None:
            torch._foreach_copy_(tensors.last_grads, grads)
        else:
            finite = gates.bool().unbind()
            for grad, last_grad, keep_new in zip(grads, tensors.last_grads, finite, strict=True):
                torch.where(keep_new, grad, last_grad, out=last_grad)
    n = len(cs)
    if hp.mars_type == "mars-lion":
        torch._foreach_lerp_(tensors.exp_avgs, cs, _lerp_weights(k.momentum_weight, n))
        _decay_weights(tensors.params, hp, k)
        signs = torch._foreach_sign(tensors.exp_avgs)
        if hp.cautious:
            foreach_cautious_(signs, list(grads), whole)
        foreach_step_(tensors.params, signs, k.lr)
        return gates
    shampoo = [is_shampoo_matrix(hp.mars_type, p.ndim) for p in tensors.params]
    matrices = [i for i, is_matrix in enumerate(shampoo) if is_matrix]
    adam_indices = [i for i, is_matrix in enumerate(shampoo) if not is_matrix]
    if matrices:
        momenta = [tensors.exp_avgs[i] for i in matrices]
        weights = _lerp_weights(k.select(matrices).momentum_weight, len(matrices))
        torch._foreach_lerp_(momenta, [cs[i] for i in matrices], weights)
    if adam_indices:
        of_grads = None
        if hp.second_moment == "gradient":
            tensor_gates = [None] * n if gates is None else gates.unbind()
            of_grads = [second_moment_input(grads[i], tensor_gates[i]) for i in adam_indices]
        _adam_rule_foreach(
            [cs[i] for i in adam_indices],
            tensors.select(adam_indices),
            hp,
            k.select(adam_indices),
            [grads[i] for i in adam_indices] if hp.cautious else None,
            whole,
            of_grads,
        )
    return gates


def one_buffer_momenta_foreach(
    tensors: StepTensors, hp: MarsHyperparams, whole: WholeTensorOps | None = None
) -> tuple[list[Tensor], list[Tensor] | None]:
    """The one-buffer form of the momentum with multi-tensor kernels
    (:func:`~torch_mars.optim.step_math.one_buffer_coefficients`): updates each buffer
    (``exp_avgs``) in place, applies the Lion step to Lion tensors, and returns every tensor's
    ``m_t`` (for the Newton-Schulz step of the matrices) and, under ``hp.skip_nonfinite``, the
    gates of ``||g||``. With ``whole``, the tensors are local shards."""
    momenta: list[Tensor | None] = [None] * len(tensors)
    gates: list[Tensor | None] = [None] * len(tensors)
    for indices in group_by_device_and_dtype(tensors.params):
        group = tensors.select(indices)
        group_hp = hyperparams_on_device(hp, group.params[0].device)
        grads = torch._foreach_neg(group.grads) if hp.maximize else list(group.grads)
        group_gates = None
        if hp.skip_nonfinite:
            norms = torch._foreach_norm(grads, 2, dtype=NORM_DTYPE)
            if whole is not None:
                norms = whole.whole_norms(norms)
            group_gates = finite_gates(torch.stack(norms), grads[0].dtype)
            finite = group_gates.bool().unbind()
            grads = [torch.where(ok, g, 0.0) for g, ok in zip(grads, finite, strict=True)]
        for same_step in _same_step_groups(group.steps):
            a, beta1 = one_buffer_coefficients(group_hp, group.steps[same_step[0]] == 1)
            buffers = [group.exp_avgs[i] for i in same_step]
            step_grads = [grads[i] for i in same_step]
            updated = torch._foreach_mul(buffers, beta1)
            foreach_add_scaled_(updated, step_grads, a)
            if group_gates is None:
                torch._foreach_copy_(buffers, updated)
            else:
                for i, buffer, new in zip(same_step, buffers, updated, strict=True):
                    torch.where(group_gates[i] > 0, new, buffer, out=buffer)
            m = torch._foreach_mul(step_grads, group_hp.gamma)
            foreach_add_scaled_(m, buffers, beta1)
            for i, value in zip(same_step, m, strict=True):
                momenta[indices[i]] = value
        if group_gates is not None:
            for i, gate in zip(indices, group_gates.unbind(), strict=True):
                gates[i] = gate
        if hp.mars_type == "mars-lion":
            k = update_coefficients(group_hp, group_gates)
            k = k.unbind() if group_gates is not None else k
            _decay_weights(group.params, group_hp, k)
            signs = torch._foreach_sign([momenta[i] for i in indices])
            if hp.cautious:
                foreach_cautious_(signs, grads, whole)
            foreach_step_(group.params, signs, k.lr)
    return momenta, (gates if hp.skip_nonfinite else None)  # type: ignore[return-value]


def mars_elementwise_foreach(
    tensors: StepTensors,
    hp: MarsHyperparams,
    store_last_grad: bool,
    whole: WholeTensorOps | None = None,
) -> list[Tensor] | None:
    """The element-wise part of a MARS step with multi-tensor kernels: everything but
    Newton-Schulz (the Shampoo matrices get their momentum only; see
    :func:`~.functional.mars_step`). With ``whole``, the tensors are local shards and ``whole``
    supplies the whole-tensor norms (one call per device and dtype). Returns each tensor's gate
    under ``hp.skip_nonfinite`` (1: updated, 0: skipped), else None."""
    gates: list[Tensor | None] = [None] * len(tensors)
    for indices in group_by_device_and_dtype(tensors.params):
        device = tensors.params[indices[0]].device
        group_gates = _mars_elementwise_one_group(
            tensors.select(indices), hyperparams_on_device(hp, device), store_last_grad, whole
        )
        if group_gates is not None:
            for i, gate in zip(indices, group_gates.unbind(), strict=True):
                gates[i] = gate
    return gates if hp.skip_nonfinite else None  # type: ignore[return-value]


def adamw_step_foreach(tensors: StepTensors, hp: AdamWHyperparams) -> None:
    """One AdamW step with multi-tensor kernels; see :func:`~.functional.adamw_step`."""
    for indices in group_by_device_and_dtype(tensors.params):
        group = tensors.select(indices)
        grads = torch._foreach_neg(group.grads) if hp.maximize else group.grads
        hp_here = hyperparams_on_device(hp, group.params[0].device)
        _adam_rule_foreach(grads, group, hp_here, update_coefficients(hp_here))
