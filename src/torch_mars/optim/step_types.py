"""The data of one optimizer step, shared by every layer that runs one: the index-aligned
tensor lists, the hyperparameter dataclasses and their validation, the coefficients of the
update as a type, the whole-tensor operations a sharded step supplies, and index grouping. The
maths on them is in :mod:`.step_math`.

This module imports only torch and :mod:`.settings` (every setting's default and check).
``torch_mars.kernels`` (fused steps) and ``torch_mars.distributed`` (sharded steps) import it,
:mod:`.step_math` and :mod:`.settings`, and nothing else of ``torch_mars.optim``, so the
dependencies point one way: ``optim.mars -> functional paths, kernels, distributed ->
step_math -> this module -> settings``.

Hyperparameters reach the step paths as Python floats or as one-element tensors (a scheduler
that writes into a tensor ``lr`` changes it without a recompile under ``torch.compile``). The
helpers here keep both kinds on the device: nothing reads a tensor value on the host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from torch_mars.optim.settings import (
    DEFAULTS,
    MarsType,
    Scalar,
    SecondMoment,
)

# A tensor's step count: a Python int, or under ``cuda_graph`` a 0-d float32 tensor on the
# tensor's device (as torch.optim keeps it), so that a CUDA graph replays the count too.
StepCount = int | Tensor


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
    amsgrad: bool = DEFAULTS["amsgrad"]
    maximize: bool = DEFAULTS["maximize"]

    def setting(self, name: str) -> Any:
        """The value of the param-group setting ``name`` these hyperparameters run with: their
        own field, or the setting's default where they have none (the 1-D AdamW path has no
        MARS settings)."""
        return getattr(self, name, DEFAULTS[name])


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
        ns_iteration: ``"quintic"`` (``X <- a X + (b G + c G^2) X``, ``G = X X^T``),
            ``"gram"`` (the same polynomial iterated on ``G``, restarted every three steps) or
            ``"polar-express"`` (per-iteration minimax ``a, b, c``):
            :func:`~torch_mars.optim.newton_schulz.newton_schulz_orthogonalize`.
        ns_products: ``"dense"`` (torch's matmuls) or ``"triangle"`` (the symmetric products
            in Triton, :mod:`torch_mars.kernels.triton_symmetric`).
        transposed_matrices: the 2-D weights are stored as ``(in, out)``; ``mars-shampoo``'s
            scale then reads the output dimension from ``shape[1]``.
        skip_nonfinite: a tensor whose ``||c||`` is not finite keeps its parameter and state
            for the step (decided on the device, see
            :func:`~torch_mars.optim.step_math.update_coefficients`).
        clip: scale ``c`` to unit norm when ``||c||_2 > 1`` (the paper's clip); False leaves
            ``c`` as it is.
        one_buffer: keep one momentum-like buffer and no ``g_tilde`` (approximate mode, no
            clip, momentum-only rules; see
            :func:`~torch_mars.optim.step_math.one_buffer_coefficients`).
        cautious: keep only the update's entries whose sign agrees with ``g``'s, rescaled by
            the kept fraction (C-AdamW; see :func:`~torch_mars.optim.step_math.cautious_`).
        second_moment: what the Adam rule's ``v`` averages the square of: ``"corrected"``
            (``c``, clipped as ``m``'s input is; the paper's) or ``"gradient"`` (``g``, as
            AdamW's; an ablation).
    """

    gamma: Scalar = DEFAULTS["gamma"]
    mars_type: MarsType = DEFAULTS["mars_type"]
    ns_steps: int = DEFAULTS["ns_steps"]
    ns_dtype: torch.dtype | None = DEFAULTS["ns_dtype"]
    ns_iteration: str = DEFAULTS["ns_iteration"]
    ns_products: str = DEFAULTS["ns_products"]
    transposed_matrices: bool = DEFAULTS["transposed_matrices"]
    skip_nonfinite: bool = DEFAULTS["skip_nonfinite"]
    clip: bool = DEFAULTS["clip"]
    one_buffer: bool = DEFAULTS["one_buffer"]
    cautious: bool = DEFAULTS["cautious"]
    second_moment: SecondMoment = DEFAULTS["second_moment"]


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
        ns_dtype=group["ns_dtype"],
        ns_iteration=group["ns_iteration"],
        ns_products=group["ns_products"],
        transposed_matrices=group["transposed_matrices"],
        skip_nonfinite=group["skip_nonfinite"],
        clip=group["clip"],
        one_buffer=group["one_buffer"],
        cautious=group["cautious"],
        second_moment=group["second_moment"],
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
        steps: the per-tensor step count ``t``, already incremented (1 on the first step):
            ints, or 0-d float32 device tensors under ``cuda_graph`` (the Triton kernels then
            derive the bias corrections and the first step's ``g_tilde = g`` on the device).
        last_grads: ``g_tilde`` of the MARS rule; empty for the plain AdamW path.
    """

    params: list[Tensor]
    grads: list[Tensor]
    exp_avgs: list[Tensor]
    exp_avg_sqs: list[Tensor | None]
    max_exp_avg_sqs: list[Tensor | None] = field(default_factory=list)
    steps: list[StepCount] = field(default_factory=list)
    last_grads: list[Tensor] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.params)

    def buffers(self) -> list[Tensor | None]:
        """Every tensor of the step, parameters, gradients and state, in one list."""
        return [
            *self.params,
            *self.grads,
            *self.exp_avgs,
            *self.exp_avg_sqs,
            *self.max_exp_avg_sqs,
            *self.last_grads,
        ]

    def select(self, indices: Sequence[int]) -> StepTensors:
        """The entries at ``indices``; lists that are empty stay empty. All of them in order
        (the usual case on every step) is ``self``, not a copy."""
        if list(indices) == list(range(len(self.params))):
            return self

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
