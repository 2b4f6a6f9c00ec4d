"""The maths every step path shares, on the vocabulary of :mod:`.step_types`: the update's
coefficients with the non-finite gates folded in, MARS's correction and Adam's bias
corrections, scaled in-place updates that take a float or a one-element tensor, C-AdamW's mask,
which element-wise rule a tensor takes, and the matrix view and scale of the Newton-Schulz
rules.

This module imports only torch and :mod:`.step_types`; ``torch_mars.kernels`` and
``torch_mars.distributed`` import these two and nothing else of ``torch_mars.optim``. Nothing
here reads a tensor value on the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from torch_mars.optim.step_types import (
    AdamWHyperparams,
    MarsHyperparams,
    Scalar,
    UpdateCoefficients,
    WholeTensorOps,
)

# The rules whose matrices step by the Newton-Schulz orthogonalisation of their momentum; they
# differ only in the scale of that step (:func:`orthogonal_update_scale`).
ORTHOGONAL_RULES: tuple[str, ...] = ("mars-shampoo", "mars-m")
MARS_M_SCALE = 0.2


def update_coefficients(hp: AdamWHyperparams, gates: Tensor | None = None) -> UpdateCoefficients:
    """The update's coefficients under ``gates`` (1: apply, 0: skip; a 0-d tensor or a vector),
    or shared by every tensor when ``gates`` is None.

    >>> k = update_coefficients(AdamWHyperparams(0.1, 0.9, 0.99, 1e-8, 0.0), torch.tensor([1., 0.]))
    >>> k.momentum_weight, k.eps
    (tensor([0.1000, 0.0000]), tensor([1.0000e-08,        inf]))
    """
    if gates is None:
        return UpdateCoefficients(
            1.0 - hp.beta1, hp.beta2, hp.lr, hp.eps, 1.0 - hp.lr * hp.weight_decay
        )
    lr = hp.lr * gates
    return UpdateCoefficients(
        momentum_weight=(1.0 - hp.beta1) * gates,
        second_moment_decay=1.0 - (1.0 - hp.beta2) * gates,
        lr=lr,
        eps=torch.where(gates > 0, gates * hp.eps, math.inf),
        weight_decay_factor=1.0 - lr * hp.weight_decay,
    )


def one_buffer_coefficients(hp: MarsHyperparams, first: bool) -> tuple[Scalar, Scalar]:
    """``(a, beta1)`` of MARS's unclipped approximate momentum kept in one buffer ``u``::

        u_t = beta1 u_{t-1} + a g_t,      m_t = gamma g_t + beta1 u_t

    with ``a = (1 - gamma)(1 - beta1) / beta1``. Unrolled, ``m_t = beta1 m_{t-1} +
    (1 - beta1 + gamma beta1) g_t - gamma beta1 g_{t-1}``, which is ``beta1 m_{t-1} +
    (1 - beta1) c_t`` for ``c_t = g_t + gamma beta1/(1 - beta1) (g_t - g_{t-1})``: the two-buffer
    momentum, without ``g_{t-1}``. On a tensor's first step (``u_0 = 0``) ``a = (1 - beta1 -
    gamma) / beta1``, so that ``m_1 = (1 - beta1) g_1``, as ``g_tilde = g`` gives.
    """
    if first:
        return (1.0 - hp.beta1 - hp.gamma) / hp.beta1, hp.beta1
    return (1.0 - hp.gamma) * (1.0 - hp.beta1) / hp.beta1, hp.beta1


CAUTIOUS_MIN_FRACTION = 1e-3


def cautious_(update: Tensor, grad: Tensor) -> Tensor:
    """C-AdamW's mask, in place: zero the entries of ``update`` whose sign differs from ``g``'s
    and divide the rest by the kept fraction (at least :data:`CAUTIOUS_MIN_FRACTION`), so the
    update's size is kept. The sign of ``update`` is that of the momentum for the Adam and Lion
    rules, and of ``NS(m)`` for the Newton-Schulz rules.

    >>> cautious_(torch.tensor([1.0, -2.0, 3.0, 4.0]), torch.tensor([1.0, 1.0, -1.0, 1.0]))
    tensor([2., -0., 0., 8.])
    """
    mask = (update * grad > 0).to(update.dtype)
    fraction = mask.mean(dtype=reduction_dtype(update.dtype)).clamp_min(CAUTIOUS_MIN_FRACTION)
    return update.mul_(mask).div_(fraction.to(update.dtype))


def foreach_cautious_(
    updates: list[Tensor], grads: list[Tensor], whole: WholeTensorOps | None = None
) -> None:
    """:func:`cautious_` on lists (local shards with ``whole``, whose kept fraction is that of
    the whole tensor)."""
    masks = torch._foreach_mul(updates, grads)
    torch._foreach_sign_(masks)
    torch._foreach_clamp_min_(masks, 0.0)
    kept = torch.stack(torch._foreach_norm(masks, 1, dtype=reduction_dtype(masks[0].dtype)))
    sizes = torch.tensor([float(u.numel()) for u in updates], dtype=kept.dtype)
    sizes = sizes.to(kept.device, non_blocking=True)
    counts = torch.stack([kept, sizes], dim=1)
    if whole is not None:
        counts = whole.whole_sums(counts)
    fractions = (counts[:, 0] / counts[:, 1].clamp_min(1.0)).clamp_min(CAUTIOUS_MIN_FRACTION)
    torch._foreach_mul_(updates, masks)
    torch._foreach_div_(updates, list(fractions.to(updates[0].dtype).unbind()))


def second_moment_input(grad: Tensor, gate: Tensor | None) -> Tensor:
    """``g`` as ``v`` averages it under ``second_moment="gradient"``: zero where the tensor's
    gate skips the step (``v`` keeps its value there; a non-finite ``g`` would not)."""
    return grad if gate is None else torch.where(gate > 0, grad, 0.0)


def finite_gates(norms: Tensor, dtype: torch.dtype) -> Tensor:
    """1 where ``norms`` is finite, 0 where it is not (NaN, inf), in ``dtype``. A norm (or a
    squared one) is non-negative or NaN, so ``norms < inf`` is ``isfinite`` in one op rather than
    the four ``isfinite`` dispatches, which a GPU pays as launches on every step."""
    return (norms < math.inf).to(dtype)


def correction_scale(gamma: Scalar, beta1: Scalar) -> Scalar:
    """The factor ``gamma * beta1 / (1 - beta1)`` that multiplies ``g - g_tilde`` in MARS."""
    return gamma * beta1 / (1.0 - beta1)


def scalar_sqrt(value: Scalar) -> Scalar:
    """``sqrt`` of a float (as ``math.sqrt``) or of a one-element tensor (on its device)."""
    return value.sqrt() if isinstance(value, Tensor) else math.sqrt(value)


def bias_corrections(beta1: Scalar, beta2: Scalar, step: int) -> tuple[Scalar, Scalar]:
    """``(1 - beta1^t, sqrt(1 - beta2^t))``, the Adam bias corrections at step ``t``."""
    return 1.0 - beta1**step, scalar_sqrt(1.0 - beta2**step)


def add_scaled_(target: Tensor, tensor: Tensor, scale: Scalar) -> Tensor:
    """``target += scale * tensor`` in place, without a host read when ``scale`` is a tensor."""
    if isinstance(scale, Tensor):
        return target.add_(tensor * scale)
    return target.add_(tensor, alpha=scale)


def foreach_add_scaled_(targets: list[Tensor], tensors: list[Tensor], scale: Scalar) -> None:
    """``targets[i] += scale * tensors[i]`` for all ``i``, in place."""
    if isinstance(scale, Tensor):
        torch._foreach_add_(targets, torch._foreach_mul(tensors, scale))
    else:
        torch._foreach_add_(targets, tensors, alpha=scale)


def foreach_step_(
    targets: list[Tensor], directions: list[Tensor], lr: Scalar | list[Tensor]
) -> None:
    """``targets[i] -= lr * directions[i]``, with ``lr`` shared or one gated 0-d tensor per
    entry (:meth:`UpdateCoefficients.unbind`); ``directions`` are temporaries, scaled in place
    in the per-entry case."""
    if isinstance(lr, list):
        torch._foreach_mul_(directions, lr)
        torch._foreach_sub_(targets, directions)
    else:
        foreach_add_scaled_(targets, directions, -lr)


def addcmul_scaled_(target: Tensor, tensor1: Tensor, tensor2: Tensor, scale: Scalar) -> Tensor:
    """``target += scale * tensor1 * tensor2`` in place (``addcmul_`` for a float ``scale``)."""
    if isinstance(scale, Tensor):
        return target.add_(tensor1 * tensor2 * scale)
    return target.addcmul_(tensor1, tensor2, value=scale)


def addcdiv_scaled_(target: Tensor, tensor1: Tensor, tensor2: Tensor, scale: Scalar) -> Tensor:
    """``target += scale * tensor1 / tensor2`` in place (``addcdiv_`` for a float ``scale``)."""
    if isinstance(scale, Tensor):
        return target.add_(tensor1 / tensor2 * scale)
    return target.addcdiv_(tensor1, tensor2, value=scale)


# The element-wise rules of the fused kernels, by code (the index in this tuple): Adam on ``c``
# (or on ``g`` for the plain AdamW path), Lion's sign step, and the momentum update alone (the
# Shampoo matrices, whose Newton-Schulz step follows the element-wise pass).
ELEMENTWISE_RULES: tuple[str, ...] = ("adam", "lion", "momentum")


def elementwise_rule(mars_type: str, ndim: int) -> str:
    """The element-wise rule of a MARS-routed tensor of ``ndim`` dimensions, one of
    :data:`ELEMENTWISE_RULES`.

    >>> elementwise_rule("mars-shampoo", 2), elementwise_rule("mars-shampoo", 1)
    ('momentum', 'adam')
    """
    if mars_type == "mars-lion":
        return "lion"
    return "momentum" if is_shampoo_matrix(mars_type, ndim) else "adam"


def is_shampoo_matrix(mars_type: str, ndim: int) -> bool:
    """Whether a MARS-routed tensor takes the Newton-Schulz step (``mars-shampoo`` or
    ``mars-m``, ndim >= 2)."""
    return mars_type in ORTHOGONAL_RULES and ndim >= 2


def matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """``(rows, cols)`` of a tensor of ``shape`` viewed as ``(shape[0], -1)``.

    >>> matrix_shape((8, 3, 2, 2))
    (8, 12)
    """
    return shape[0], math.prod(shape[1:])


def shampoo_scale(shape: Sequence[int], transposed: bool = False) -> float:
    """``sqrt(max(1, rows/cols))`` for a tensor of ``shape`` viewed as ``(shape[0], -1)``, where
    ``rows`` is the output dimension: ``shape[0]``, or ``shape[1]`` for a matrix stored as
    ``(in, out)`` (``transposed``, as transformers' ``Conv1D`` stores its weight).

    >>> shampoo_scale((3072, 768)), shampoo_scale((768, 3072), transposed=True)
    (2.0, 2.0)
    """
    rows, cols = matrix_shape(shape)
    if transposed:
        rows, cols = cols, rows
    return math.sqrt(max(1.0, rows / cols)) if cols and rows else 1.0


def orthogonal_update_scale(
    mars_type: str, shape: Sequence[int], transposed: bool = False
) -> float:
    """The factor of ``NS(M)`` in the step of a matrix of ``shape`` (viewed as
    ``(shape[0], -1)``, ``(rows, cols)``): ``sqrt(max(1, rows/cols))`` for ``mars-shampoo`` (as
    in Muon; see :func:`shampoo_scale`), ``0.2 * sqrt(max(rows, cols))`` for ``mars-m`` (as in
    Moonlight and the MARS-M paper, which gives the update an RMS close to AdamW's).

    >>> round(orthogonal_update_scale("mars-m", (3072, 768)), 3)
    11.085
    """
    if mars_type == "mars-m":
        return MARS_M_SCALE * math.sqrt(max(matrix_shape(shape))) if math.prod(shape) else 1.0
    return shampoo_scale(shape, transposed)


def reduction_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype in which sums over ``dtype`` tensors are accumulated (float32 for half types)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


# The dtype of ``||c||`` and ``||g||``, which the clip and the non-finite skip read: float64
# whatever the tensor's dtype, so that the squares of a finite float32 or bf16 tensor (entries
# past about 1e19 square beyond float32's range) do not overflow to an infinite norm that the
# skip would take for a bad gradient. ``torch.linalg.vector_norm`` squares in its accumulation
# dtype without scaling first. A float64 tensor's norm overflows only past about 1e154 per
# entry.
NORM_DTYPE = torch.float64
