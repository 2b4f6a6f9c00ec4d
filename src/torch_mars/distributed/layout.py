"""Which parameters are sharded how: FSDP2 (``fully_shard``) parameters are ``DTensor``s, each
rank holding one ``torch.chunk`` of every tensor along one dimension of a 1-D device mesh.

The MARS step takes those on a fast path that works on the local shards
(:mod:`torch_mars.distributed.group_sharding`). Other ``DTensor`` layouts (2-D meshes,
replicated or partial placements) take the per-tensor loop through ``DTensor`` ops: correct, one
collective per tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor, Shard

from torch_mars.optim.step_types import StepTensors


def shard_dim(tensor: Tensor) -> int | None:
    """The dimension along which ``tensor`` is split over a 1-D mesh (FSDP2's layout), or None
    for a plain tensor or any other ``DTensor`` layout."""
    if not isinstance(tensor, DTensor) or tensor.device_mesh.ndim != 1:
        return None
    (placement,) = tensor.placements
    if not isinstance(placement, Shard):
        return None
    return placement.dim % tensor.ndim


def shard_sizes(length: int, world: int) -> list[int]:
    """The sizes of the ``world`` shards of a dimension of ``length``: ``torch.chunk``'s split
    (chunks of ``ceil(length / world)``), with empty shards on the last ranks when it runs out.

    >>> shard_sizes(9, 2), shard_sizes(1, 2), shard_sizes(5, 4)
    ([5, 4], [1, 0], [2, 2, 1, 0])
    """
    chunk = -(-length // world)
    return [max(0, min(length, (rank + 1) * chunk) - rank * chunk) for rank in range(world)]


def local_tensor(tensor: Tensor | None) -> Tensor | None:
    """The local shard of a ``DTensor`` (call under ``no_grad``: then it is the shard itself,
    not a copy, so in-place updates reach the ``DTensor``); any other value unchanged."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def check_gradient_layout(param: Tensor) -> None:
    """Raise ``ValueError`` if ``param`` is a ``DTensor`` whose gradient is not sharded like it
    (the local shards would not line up)."""
    grad = param.grad
    if not isinstance(param, DTensor) or grad is None:
        return
    if not isinstance(grad, DTensor) or grad.placements != param.placements:
        placements = grad.placements if isinstance(grad, DTensor) else "a plain tensor"
        raise ValueError(
            f"the gradient of a sharded parameter must be sharded like it "
            f"({param.placements}), got {placements}"
        )


def local_shards(tensors: StepTensors) -> StepTensors:
    """The same step with every ``DTensor`` replaced by its local shard (no copies)."""
    with torch.no_grad():
        return StepTensors(
            params=[local_tensor(t) for t in tensors.params],
            grads=[local_tensor(t) for t in tensors.grads],
            exp_avgs=[local_tensor(t) for t in tensors.exp_avgs],
            exp_avg_sqs=[local_tensor(t) for t in tensors.exp_avg_sqs],
            max_exp_avg_sqs=[local_tensor(t) for t in tensors.max_exp_avg_sqs],
            steps=tensors.steps,
            last_grads=[local_tensor(t) for t in tensors.last_grads],
        )
