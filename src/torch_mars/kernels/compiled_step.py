"""The fused element-wise step for CPU (and any device without Triton): one ``torch.compile``d
kernel per tensor.

Each tensor's update is a single compiled graph over flat views: a reduction loop for
``||c||`` (reads ``g`` and ``g_tilde``), then one element-wise loop that reads ``p, g, g_tilde,
m, v`` and writes ``p, m, v, g_tilde``; inductor emits vectorised, multi-threaded C++ for both.
The graph is compiled with dynamic shapes and takes the hyperparameters as a float64 tensor, so
one compilation serves every tensor size, learning rate and step; only the rule, the flags and
the dtypes select a new one. Math runs in float32 (float64 for float64 parameters) whatever the
storage dtype of the parameters and state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from torch_mars.optim.step_math import (
    CAUTIOUS_MIN_FRACTION,
    NORM_DTYPE,
    bias_corrections,
    correction_scale,
    elementwise_rule,
    one_buffer_coefficients,
    second_moment_input,
    update_coefficients,
)
from torch_mars.optim.step_types import AdamWHyperparams, MarsHyperparams, StepTensors

# Layout of the coefficient vector handed to the compiled graph. Under one_buffer, _SCALE holds
# the buffer's coefficient ``a`` (step_math.one_buffer_coefficients) and _GAMMA is gamma.
_LR, _BETA1, _BETA2, _EPS, _WD, _SCALE, _BC1, _BC2_SQRT, _GAMMA = range(9)
VARIANT_LIMIT = 256


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def tensor_update(
    param: Tensor,
    grad: Tensor,
    last_grad: Tensor | None,
    exp_avg: Tensor,
    exp_avg_sq: Tensor | None,
    max_exp_avg_sq: Tensor | None,
    coefficients: Tensor,
    inv_grad_scale: Tensor | None,
    rule: str,
    maximize: bool,
    store_last_grad: bool,
    skip_nonfinite: bool = False,
    clip: bool = True,
    cautious: bool = False,
    one_buffer: bool = False,
    second_moment_of_grad: bool = False,
) -> Tensor | None:
    """Update one tensor in place; the body of the compiled kernel. Returns the tensor's gate
    under ``skip_nonfinite`` (1: updated; 0: ``||c||`` not finite, nothing written but the
    unchanged values), else None.

    Args:
        param, grad, exp_avg: tensors of one shape (flat views in the compiled path).
        last_grad: ``g_tilde`` for the MARS rule, or None for plain AdamW (``c = g``, no clip).
        exp_avg_sq, max_exp_avg_sq: ``v`` and its AMSGrad maximum (None when unused).
        coefficients: float64 vector ``[lr, beta1, beta2, eps, wd, scale, bc1, bc2_sqrt,
            gamma]`` with ``scale = gamma beta1/(1-beta1)`` (the buffer's ``a`` under
            ``one_buffer``) and the bias corrections of this step.
        inv_grad_scale: ``1 / grad_scale`` of a GradScaler, or None.
        rule: ``"adam"``, ``"lion"``, or ``"momentum"`` (update ``m`` only: Shampoo matrices).
        skip_nonfinite: leave the tensor as it is when ``||c||`` is not finite (MARS only).
        clip: scale ``c`` to unit norm when ``||c|| > 1`` (MARS only).
        cautious: mask the Adam and Lion updates against ``g`` (C-AdamW; MARS only).
        one_buffer: ``exp_avg`` is the one buffer ``u`` (:func:`one_buffer_update`) and
            ``last_grad``, when given, receives ``m_t`` for Newton-Schulz (rule ``"momentum"``).
        second_moment_of_grad: ``v`` averages ``g^2`` instead of ``c^2`` (MARS's
            ``second_moment="gradient"``).
    """
    compute = _compute_dtype(param.dtype)
    h = coefficients.to(compute)
    g = grad.to(compute)
    if inv_grad_scale is not None:
        g = g * inv_grad_scale.to(compute)
    if maximize:
        g = -g
    if one_buffer:
        return one_buffer_update(param, g, exp_avg, last_grad, h, rule, skip_nonfinite, cautious)
    c = g
    gate = None
    if last_grad is not None:
        c = torch.lerp(g, last_grad.to(compute), -h[_SCALE])
        norm = torch.linalg.vector_norm(c, dtype=NORM_DTYPE)
        if clip:
            c = c / norm.clamp_min(1.0)
        if skip_nonfinite:
            finite = torch.isfinite(norm)
            c = torch.where(finite, c, 0.0)
            gate = finite.to(compute)
        if store_last_grad:
            last_grad.copy_(g if gate is None else torch.where(finite, g, last_grad.to(compute)))
    hp = AdamWHyperparams(h[_LR], h[_BETA1], h[_BETA2], h[_EPS], h[_WD])
    k = update_coefficients(hp, gate)
    m = torch.lerp(exp_avg.to(compute), c, k.momentum_weight)
    exp_avg.copy_(m)
    if rule == "momentum":
        return gate
    p = param.to(compute) * k.weight_decay_factor
    if rule == "lion":
        update = torch.sign(m)
        param.copy_(p - k.lr * (_cautious(update, g) if cautious else update))
        return gate
    assert exp_avg_sq is not None
    y = second_moment_input(g, gate) if second_moment_of_grad else c
    v = exp_avg_sq.to(compute) * k.second_moment_decay + (1.0 - h[_BETA2]) * y * y
    exp_avg_sq.copy_(v)
    if max_exp_avg_sq is not None:
        v = torch.maximum(max_exp_avg_sq.to(compute), v)
        max_exp_avg_sq.copy_(v)
    denom = torch.sqrt(v) / h[_BC2_SQRT] + k.eps
    update = m / denom
    param.copy_(p - (h[_LR] / h[_BC1]) * (_cautious(update, g) if cautious else update))
    return gate


def one_buffer_update(
    param: Tensor,
    g: Tensor,
    buffer: Tensor,
    momentum_out: Tensor | None,
    h: Tensor,
    rule: str,
    skip_nonfinite: bool,
    cautious: bool,
) -> Tensor | None:
    """:func:`tensor_update` under ``one_buffer`` (no clip, no ``g_tilde``): ``u <- beta1 u +
    a g`` and ``m_t = gamma g + beta1 u`` (:func:`~torch_mars.optim.step_math.
    one_buffer_coefficients`), then Lion's update, or ``m_t`` into ``momentum_out`` for
    Newton-Schulz. Under ``skip_nonfinite`` the gate is that of ``||g||``."""
    gate = None
    if skip_nonfinite:
        finite = torch.isfinite(torch.linalg.vector_norm(g, dtype=NORM_DTYPE))
        g = torch.where(finite, g, 0.0)
        gate = finite.to(g.dtype)
    u = buffer.to(g.dtype)
    updated = u * h[_BETA1] + g * h[_SCALE]
    u = updated if gate is None else torch.where(finite, updated, u)
    buffer.copy_(u)
    m = g * h[_GAMMA] + u * h[_BETA1]
    if rule == "momentum":
        assert momentum_out is not None
        momentum_out.copy_(m)
        return gate
    k = update_coefficients(AdamWHyperparams(h[_LR], h[_BETA1], h[_BETA2], h[_EPS], h[_WD]), gate)
    update = torch.sign(m)
    p = param.to(g.dtype) * k.weight_decay_factor
    param.copy_(p - k.lr * (_cautious(update, g) if cautious else update))
    return gate


def _cautious(update: Tensor, grad: Tensor) -> Tensor:
    """Out-of-place :func:`~torch_mars.optim.step_math.cautious_` (the compiled graph
    allocates no buffer for it)."""
    mask = (update * grad > 0).to(update.dtype)
    return update * mask / mask.mean().clamp_min(CAUTIOUS_MIN_FRACTION)


@functools.cache
def compiled_tensor_update() -> Callable[..., None]:
    """:func:`tensor_update` compiled once per process (dynamic shapes, no graph breaks)."""
    return torch.compile(tensor_update, dynamic=True, fullgraph=True)


def coefficient_values(hp: AdamWHyperparams, scale: object, step: int) -> list[object]:
    """``[lr, beta1, beta2, eps, wd, scale, bc1, bc2_sqrt]`` at step ``step``: the coefficients
    of one tensor's update, as floats or one-element tensors (shared with the Triton kernels)."""
    bias_correction1, bias_correction2_sqrt = bias_corrections(hp.beta1, hp.beta2, step)
    return [
        hp.lr,
        hp.beta1,
        hp.beta2,
        hp.eps,
        hp.weight_decay,
        scale,
        bias_correction1,
        bias_correction2_sqrt,
    ]


def _coefficients(hp: AdamWHyperparams, scale: object, step: int, device: torch.device) -> Tensor:
    """The kernel's coefficient vector at step ``step``, on ``device`` (a CUDA kernel cannot
    read a CPU tensor), without a host read of a tensor hyperparameter."""
    gamma = hp.gamma if isinstance(hp, MarsHyperparams) else 0.0
    if isinstance(hp, MarsHyperparams) and hp.one_buffer:
        scale, _ = one_buffer_coefficients(hp, step == 1)
    values = [*coefficient_values(hp, scale, step), gamma]
    if not any(isinstance(v, Tensor) for v in values):
        return torch.tensor(values, dtype=NORM_DTYPE).to(device, non_blocking=True)
    return torch.stack(
        [torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in values]
    )


def _flat(tensor: Tensor | None) -> Tensor | None:
    return None if tensor is None else tensor.view(-1)


def _run(
    tensors: StepTensors,
    hp: AdamWHyperparams,
    scale: object,
    rule_of: Callable[[Tensor], str],
    store_last_grad: bool,
    inv_grad_scale: Tensor | None,
) -> list[Tensor] | None:
    kernel = compiled_tensor_update()
    coefficients = {
        (step, device): _coefficients(hp, scale, step, device)
        for step, device in set(zip(tensors.steps, [p.device for p in tensors.params], strict=True))
    }
    skip = isinstance(hp, MarsHyperparams) and hp.skip_nonfinite
    # Each combination of rule, flags and dtypes is one specialisation of the same function;
    # dynamo's default limit of 8 per function is too low for a process that uses several.
    with torch._dynamo.config.patch(recompile_limit=VARIANT_LIMIT):
        gates = [
            _update_one(
                kernel, tensors, i, hp, coefficients, rule_of, store_last_grad, inv_grad_scale
            )
            for i in range(len(tensors))
        ]
    return gates if skip else None  # type: ignore[return-value]


def _update_one(
    kernel: Callable[..., Tensor | None],
    tensors: StepTensors,
    i: int,
    hp: AdamWHyperparams,
    coefficients: dict[tuple[int, torch.device], Tensor],
    rule_of: Callable[[Tensor], str],
    store_last_grad: bool,
    inv_grad_scale: Tensor | None,
) -> Tensor | None:
    """One tensor's update; its gate under ``skip_nonfinite`` (1 for a tensor with no
    elements), else None."""
    param = tensors.params[i]
    skip = isinstance(hp, MarsHyperparams) and hp.skip_nonfinite
    clip = not isinstance(hp, MarsHyperparams) or hp.clip
    cautious = isinstance(hp, MarsHyperparams) and hp.cautious
    one_buffer = isinstance(hp, MarsHyperparams) and hp.one_buffer
    of_grad = isinstance(hp, MarsHyperparams) and hp.second_moment == "gradient"
    if param.numel() == 0:
        return param.new_ones(()) if skip else None
    operands = (
        param,
        tensors.grads[i],
        tensors.last_grads[i] if tensors.last_grads else None,
        tensors.exp_avgs[i],
        tensors.exp_avg_sqs[i] if tensors.exp_avg_sqs else None,
        tensors.max_exp_avg_sqs[i] if hp.amsgrad else None,
    )
    contiguous = all(t is None or t.is_contiguous() for t in operands)
    update = kernel if contiguous else tensor_update
    flat = [_flat(t) for t in operands] if contiguous else list(operands)
    return update(
        *flat,
        coefficients[(tensors.steps[i], param.device)],
        inv_grad_scale,
        rule_of(param),
        hp.maximize,
        store_last_grad,
        skip,
        clip,
        cautious,
        one_buffer,
        of_grad,
    )


def mars_elementwise_compiled(
    tensors: StepTensors,
    hp: MarsHyperparams,
    store_last_grad: bool,
    inv_grad_scale: Tensor | None = None,
) -> list[Tensor] | None:
    """The element-wise part of a MARS step, tensor by tensor: everything but Newton-Schulz
    (Shampoo matrices get their momentum only; see :func:`~torch_mars.optim.functional.mars_step`).
    Under ``hp.one_buffer``, ``tensors.last_grads`` are the outputs of ``m_t`` for the
    Newton-Schulz matrices (None for the others). Non-contiguous tensors run the same function
    eagerly. Returns each tensor's gate under ``hp.skip_nonfinite``, else None."""
    scale = correction_scale(hp.gamma, hp.beta1)
    return _run(
        tensors,
        hp,
        scale,
        lambda param: elementwise_rule(hp.mars_type, param.ndim),
        store_last_grad,
        inv_grad_scale,
    )


def adamw_step_compiled(
    tensors: StepTensors, hp: AdamWHyperparams, inv_grad_scale: Tensor | None = None
) -> None:
    """One AdamW step with the compiled per-tensor kernel; see :func:`~.functional.adamw_step`."""
    _run(tensors, hp, 0.0, lambda _: "adam", False, inv_grad_scale)
