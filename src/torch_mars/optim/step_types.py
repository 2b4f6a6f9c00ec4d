"""The vocabulary of one optimizer step, shared by every layer that runs one: the index-aligned
tensor lists, the hyperparameter dataclasses and their validation, the scalar helpers, the
encoding of the element-wise rules and the matrix view of a tensor.

This module imports only torch. ``torch_mars.kernels`` (fused steps) and
``torch_mars.distributed`` (sharded steps) import it and nothing else of ``torch_mars.optim``,
so the dependencies point one way: ``optim.mars -> functional paths, kernels, distributed ->
this module``.

Hyperparameters reach the step paths as Python floats or as one-element tensors (a scheduler
that writes into a tensor ``lr`` changes it without a recompile under ``torch.compile``). The
helpers here keep both kinds on the device: nothing reads a tensor value on the host.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import torch
from torch import Tensor

Scalar = float | Tensor

MarsType = Literal["mars-adamw", "mars-lion", "mars-shampoo", "mars-m"]
MARS_TYPES: tuple[str, ...] = ("mars-adamw", "mars-lion", "mars-shampoo", "mars-m")
# The rules whose matrices step by the Newton-Schulz orthogonalisation of their momentum; they
# differ only in the scale of that step (:func:`orthogonal_update_scale`).
ORTHOGONAL_RULES: tuple[str, ...] = ("mars-shampoo", "mars-m")
MARS_M_SCALE = 0.2
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
        ns_steps: Newton-Schulz iterations of ``mars-shampoo`` and ``mars-m``.
        ns_dtype: the dtype of the Newton-Schulz iterations (``torch.bfloat16`` or
            ``torch.float32``); None: bf16 where the device multiplies it fast, else float32
            (float64 for float64 parameters).
        transposed_matrices: the 2-D weights are stored as ``(in, out)``; ``mars-shampoo``'s
            scale then reads the output dimension from ``shape[1]``.
        skip_nonfinite: a tensor whose ``||c||`` is not finite keeps its parameter and state
            for the step (decided on the device, see :func:`update_coefficients`).
        clip: scale ``c`` to unit norm when ``||c||_2 > 1`` (the paper's clip); False leaves
            ``c`` as it is.
        one_buffer: keep one momentum-like buffer and no ``g_tilde`` (approximate mode, no
            clip, momentum-only rules; see :func:`one_buffer_coefficients`).
        cautious: keep only the update's entries whose sign agrees with ``g``'s, rescaled by
            the kept fraction (C-AdamW; see :func:`cautious_`).
    """

    gamma: Scalar = 0.025
    mars_type: MarsType = "mars-adamw"
    ns_steps: int = 5
    ns_dtype: torch.dtype | None = None
    transposed_matrices: bool = False
    skip_nonfinite: bool = False
    clip: bool = True
    one_buffer: bool = False
    cautious: bool = False


HyperparamsT = TypeVar("HyperparamsT", AdamWHyperparams, MarsHyperparams)


def hyperparams_on_device(hp: HyperparamsT, device: torch.device) -> HyperparamsT:
    """``hp`` with its tensor-valued fields on ``device`` (multi-tensor kernels take scalar
    tensors from their own device only); a non-blocking copy, never a host read."""
    moved = {
        f.name: value.to(device, non_blocking=True)
        for f in dataclasses.fields(hp)
        if isinstance(value := getattr(hp, f.name), Tensor) and value.device != device
    }
    return dataclasses.replace(hp, **moved) if moved else hp


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
    for name in ("eps", "weight_decay", "weight_decay_1d"):
        _check_nonnegative_finite(name, group[name])
    if group["lr_1d"] is not None:  # None: the group's lr, resolved when the group is added
        _check_nonnegative_finite("lr_1d", group["lr_1d"])
    _check_betas("betas", group["betas"])
    _check_betas("betas_1d", group["betas_1d"])
    if group["mars_type"] not in MARS_TYPES:
        raise ValueError(f"mars_type must be one of {MARS_TYPES}, got {group['mars_type']!r}")
    ns_steps = group["ns_steps"]
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1:
        raise ValueError(f"ns_steps must be an integer >= 1, got {ns_steps!r}")
    if group.get("ns_dtype") not in (None, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError(
            "ns_dtype must be None (bf16 where the device multiplies it fast, else float32), "
            "torch.float64 (for float64 references), "
            f"torch.bfloat16 or torch.float32, got {group.get('ns_dtype')!r}"
        )
    for name in ("amsgrad", "is_approx", "optimize_1d", "reference_routing", "maximize"):
        _check_flag(name, group[name])
    _check_flag("transposed_matrices", group.get("transposed_matrices", False))
    _check_flag("skip_nonfinite", group.get("skip_nonfinite", False))
    _check_flag("clip", group.get("clip", True))
    _check_flag("one_buffer", group.get("one_buffer", False))
    _check_flag("cautious", group.get("cautious", False))
    if group.get("one_buffer", False):
        if group["mars_type"] == "mars-adamw" or not group["is_approx"] or group["clip"]:
            raise ValueError(
                "one_buffer needs is_approx=True, clip=False and a momentum-only rule "
                "(mars-lion, mars-shampoo, mars-m): it rebuilds the unclipped c from g and "
                f"one buffer, got mars_type={group['mars_type']!r}, is_approx="
                f"{group['is_approx']}, clip={group['clip']}"
            )
        beta1 = group["betas"][0]
        if not isinstance(beta1, Tensor) and beta1 == 0.0:
            raise ValueError("one_buffer needs betas[0] > 0 (its buffer is scaled by 1/beta1)")
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


def _scalar(value: Scalar) -> Scalar:
    """A one-element tensor hyperparameter as a 0-d view (shape ``(1,)`` or ``(1, 1)`` would
    broadcast the update to a new shape); a float unchanged. A scheduler writing into the
    original tensor still moves the view."""
    return value.reshape(()) if isinstance(value, Tensor) else value


def mars_hyperparams(group: Mapping[str, Any]) -> MarsHyperparams:
    """The MARS-rule hyperparameters of a validated param group."""
    beta1, beta2 = group["betas"]
    return MarsHyperparams(
        lr=_scalar(group["lr"]),
        beta1=_scalar(beta1),
        beta2=_scalar(beta2),
        eps=group["eps"],
        weight_decay=group["weight_decay"],
        amsgrad=group["amsgrad"],
        maximize=group["maximize"],
        gamma=_scalar(group["gamma"]),
        mars_type=group["mars_type"],
        ns_steps=group["ns_steps"],
        ns_dtype=group.get("ns_dtype"),
        transposed_matrices=group.get("transposed_matrices", False),
        skip_nonfinite=group.get("skip_nonfinite", False),
        clip=group.get("clip", True),
        one_buffer=group.get("one_buffer", False),
        cautious=group.get("cautious", False),
    )


def adamw_1d_hyperparams(group: Mapping[str, Any]) -> AdamWHyperparams:
    """The hyperparameters of the plain-AdamW path for tensors not routed to MARS.

    Its learning rate is ``lr * lr_1d / lr_at_construction``, so a schedule applied to ``lr``
    moves it in proportion.
    """
    beta1, beta2 = group["betas_1d"]
    return AdamWHyperparams(
        lr=_scalar(group["lr"]) * group["lr_1d"] / group["lr_at_construction"],
        beta1=beta1,
        beta2=beta2,
        eps=group["eps"],
        weight_decay=group["weight_decay_1d"],
        amsgrad=group["amsgrad"],
        maximize=group["maximize"],
    )


@dataclass
class StepTensors:
    """Per-parameter tensors of one step; entry ``i`` of every list belongs to parameter ``i``.

    Attributes:
        params: the parameters, updated in place.
        grads: their gradients ``g`` (read only).
        exp_avgs: first moments ``m``, shape of the parameter.
        exp_avg_sqs: second moments ``v``; None for tensors without one (``mars-lion`` and the
            Shampoo matrices).
        max_exp_avg_sqs: AMSGrad maxima of ``v``; empty unless AMSGrad is on.
        steps: the per-tensor step count ``t``, already incremented (1 on the first step).
        last_grads: ``g_tilde`` of the MARS rule; empty for the plain AdamW path.
    """

    params: list[Tensor]
    grads: list[Tensor]
    exp_avgs: list[Tensor]
    exp_avg_sqs: list[Tensor | None]
    max_exp_avg_sqs: list[Tensor | None] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    last_grads: list[Tensor] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.params)

    def select(self, indices: Sequence[int]) -> StepTensors:
        """The entries at ``indices``; lists that are empty stay empty."""

        def pick(values: list) -> list:
            return [values[i] for i in indices] if values else []

        return StepTensors(
            params=pick(self.params),
            grads=pick(self.grads),
            exp_avgs=pick(self.exp_avgs),
            exp_avg_sqs=pick(self.exp_avg_sqs),
            max_exp_avg_sqs=pick(self.max_exp_avg_sqs),
            steps=pick(self.steps),
            last_grads=pick(self.last_grads),
        )

    def with_grads(self, grads: list[Tensor]) -> StepTensors:
        """The same tensors with ``grads`` replaced (a negated copy when maximising)."""
        return StepTensors(
            self.params,
            grads,
            self.exp_avgs,
            self.exp_avg_sqs,
            self.max_exp_avg_sqs,
            self.steps,
            self.last_grads,
        )


@dataclass(frozen=True)
class UpdateCoefficients:
    """The coefficients of the element-wise update with each tensor's gate folded in.

    A gate is 1 where the tensor's ``||c||`` is finite and 0 where it is not; with gate 0 (and
    ``c`` zeroed) every update below leaves the tensor's parameter and buffers as they were, so
    a skip costs no branch and no host read. Each field is a float or tensor shared by all the
    tensors (no gates), a 0-d tensor (one gate) or a vector of one entry per tensor (stacked
    gates; :meth:`unbind` turns it into the per-tensor lists of the multi-tensor kernels).

    Attributes:
        momentum_weight: ``(1 - beta1) gate``, in ``m <- lerp(m, c, momentum_weight)``.
        second_moment_decay: ``1 - (1 - beta2) gate``, in
            ``v <- second_moment_decay v + (1 - beta2) c^2``.
        lr: ``lr gate``, the rate of the sign and Newton-Schulz steps.
        eps: ``eps``, or ``inf`` where the gate is 0, so that Adam's ``m / (sqrt(v) + eps)``
            is 0 there.
        weight_decay_factor: ``1 - lr wd gate``, in ``p <- weight_decay_factor p``.
    """

    momentum_weight: Any
    second_moment_decay: Any
    lr: Any
    eps: Any
    weight_decay_factor: Any

    def _fields(self) -> tuple[Any, ...]:
        # Not dataclasses.astuple, which deep-copies every tensor (five ops per field and
        # tensor: most of a gated step's host cost before this was found).
        return tuple(getattr(self, field.name) for field in dataclasses.fields(self))

    def unbind(self) -> UpdateCoefficients:
        """Vector fields as lists of per-tensor 0-d tensors (views, no copies)."""
        return UpdateCoefficients(*(list(value.unbind()) for value in self._fields()))

    def select(self, indices: Sequence[int]) -> UpdateCoefficients:
        """List fields restricted to ``indices``; shared scalars unchanged."""
        return UpdateCoefficients(
            *(
                [value[i] for i in indices] if isinstance(value, list) else value
                for value in self._fields()
            )
        )


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


def finite_gates(norms: Tensor, dtype: torch.dtype) -> Tensor:
    """1 where ``norms`` is finite, 0 where it is not (NaN, inf), in ``dtype``."""
    return torch.isfinite(norms).to(dtype)


class WholeTensorOps(Protocol):
    """The two places where a MARS step running on local shards needs the whole logical tensor.

    Everything else in the step is elementwise and runs on each rank's shard as it is; a sharded
    caller (:mod:`torch_mars.distributed`) supplies these so that the clip uses the norm of the
    whole tensor and Newton-Schulz sees whole matrices. It moves data only: the maths is handed
    in (``orthogonalize``), so the sharded code never imports the step paths.
    """

    def whole_norms(self, local_norms: list[Tensor]) -> list[Tensor]:
        """The 2-norms of the whole tensors, given the 0-d norms of the local shards."""
        ...

    def whole_sums(self, local_sums: Tensor) -> Tensor:
        """Sums over the whole tensors of per-shard sums: ``local_sums`` has one row of values
        per tensor (any number of columns); the result has its shape."""
        ...

    def shampoo_directions(
        self,
        params: list[Tensor],
        exp_avgs: list[Tensor],
        orthogonalize: Callable[[list[Tensor]], list[Tensor]],
    ) -> list[Tensor]:
        """The local shards of ``orthogonalize(M)`` for the whole matrices ``M`` whose local
        shards of ``m`` are ``exp_avgs``; ``params`` are the parameters' local shards, which
        identify the whole tensors. ``orthogonalize`` maps whole momenta to whole directions."""
        ...


def group_indices(keys: Sequence[object]) -> list[list[int]]:
    """Indices of equal ``keys`` grouped together, groups in first-seen order.

    >>> group_indices(["a", "b", "a"])
    [[0, 2], [1]]
    """
    groups: dict[object, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def group_by_device_and_dtype(tensors: Sequence[Tensor]) -> list[list[int]]:
    """Indices of ``tensors`` split by (device, dtype), groups in first-seen order."""
    return group_indices([(t.device, t.dtype) for t in tensors])


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
    """The dtype in which norms of ``dtype`` tensors are accumulated (float32 for half types)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
