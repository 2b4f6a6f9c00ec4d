"""The tensors of one functional step, index-aligned, and the scalar helpers every path shares.

Hyperparameters reach the step paths as Python floats or as one-element tensors (a scheduler
that writes into a tensor ``lr`` changes it without a recompile under ``torch.compile``). The
helpers here keep both kinds on the device: nothing reads a tensor value on the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

Scalar = float | Tensor


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


class WholeTensorOps(Protocol):
    """The two places where a MARS step running on local shards needs the whole logical tensor.

    Everything else in the step is elementwise and runs on each rank's shard as it is; a sharded
    caller (:mod:`torch_mars.distributed`) supplies these so that the clip uses the norm of the
    whole tensor and Newton-Schulz sees whole matrices.
    """

    def whole_norms(self, local_norms: list[Tensor]) -> list[Tensor]:
        """The 2-norms of the whole tensors, given the 0-d norms of the local shards."""
        ...

    def shampoo_directions(
        self, params: list[Tensor], exp_avgs: list[Tensor], ns_steps: int
    ) -> list[Tensor]:
        """The local shards of ``NS(M) * sqrt(max(1, rows/cols))`` of the whole matrices whose
        local shards of ``m`` are ``exp_avgs``; ``params`` are the parameters' local shards,
        which identify the whole tensors."""
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
