"""How a param group of ``DTensor`` parameters is stepped, chosen once per group by
:func:`group_sharding` on the group's first step (when FSDP2 has made its ``DTensor``s):

- :class:`RowShardedGroup`: every tensor is an FSDP2 shard, split along one dimension of one 1-D
  mesh. The step runs the multi-tensor kernels on each rank's local shards; the MARS clip takes
  whole-tensor norms from one ``all_reduce`` per step and MARS-Shampoo orthogonalises whole
  matrices on owner ranks (:class:`~torch_mars.distributed.mesh_ops.ShardedMeshOps`).
- :class:`DTensorOpsGroup`: any other mix (2-D meshes, replicated or partial placements, plain
  tensors beside ``DTensor``s). The per-tensor loop runs on the ``DTensor``s themselves: correct,
  one collective per tensor and operation.

A group of plain tensors has no sharding (``None``): its step never reaches this package. The
maths is not here: the optimizer hands the tensors this module prepares to the functional step
paths of :mod:`torch_mars.optim`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor

from torch_mars.distributed.layout import (
    check_gradient_layout,
    local_shards,
    local_tensor,
    shard_dim,
)
from torch_mars.distributed.mesh_ops import ShardedMeshOps
from torch_mars.optim.step_types import StepTensors, WholeTensorOps


def _unscale(grads: list[Tensor], inv_grad_scale: Tensor | None) -> None:
    """Divide a GradScaler's scale out of ``grads`` in place, shard by shard (right for any
    placement). Only the fused kernels divide it out themselves, and these paths take none."""
    if inv_grad_scale is not None and grads:
        local_grads = [local_tensor(g) for g in grads]
        torch._foreach_mul_(local_grads, inv_grad_scale.to(local_grads[0].dtype))


class RowShardedGroup:
    """A group of FSDP2 parameters: ``DTensor``s each split along one dimension of ``mesh``.

    Attributes:
        mars_implementation: the MARS tensors' path on the local shards (multi-tensor, with
            :attr:`whole` supplying the collectives).
    """

    mars_implementation: Literal["foreach"] = "foreach"

    def __init__(self, params: Sequence[DTensor]) -> None:
        self.mesh_ops = ShardedMeshOps(params[0].device_mesh)

    # The AdamW (1-D) tensors' local shards take the group's own path (the plan's), as AdamW
    # needs no whole-tensor collective.
    adamw_takes_group_path: bool = True

    def local(
        self, tensors: StepTensors, inv_grad_scale: Tensor | None
    ) -> tuple[StepTensors, WholeTensorOps]:
        """The step's tensors as local shards (no copies, gradients unscaled), and the
        whole-tensor operations bound to them."""
        _unscale(tensors.grads, inv_grad_scale)
        shards = local_shards(tensors)
        whole = self.mesh_ops.bind(
            shards.params,
            [p.shape for p in tensors.params],
            [shard_dim(p) for p in tensors.params],  # type: ignore[misc]
        )
        return shards, whole


class DTensorOpsGroup:
    """A group with any other layout: the per-tensor loop on the ``DTensor``s themselves."""

    mars_implementation: Literal["single_tensor"] = "single_tensor"
    # The AdamW tensors too: the per-tensor loop on the ``DTensor``s.
    adamw_takes_group_path: bool = False

    def local(
        self, tensors: StepTensors, inv_grad_scale: Tensor | None
    ) -> tuple[StepTensors, None]:
        """The step's tensors unchanged (gradients unscaled), and no whole-tensor operations:
        ``DTensor`` ops see whole tensors already."""
        _unscale(tensors.grads, inv_grad_scale)
        return tensors, None


GroupSharding = RowShardedGroup | DTensorOpsGroup


def check_gradients(params: Sequence[Tensor]) -> None:
    """Raise ``ValueError`` if a parameter's gradient is not sharded like the parameter (the
    local shards would not line up); called before the step changes any state."""
    for param in params:
        check_gradient_layout(param)


def group_sharding(params: Sequence[Tensor]) -> GroupSharding | None:
    """The sharding kind of a param group: None when no parameter is a ``DTensor``,
    :class:`RowShardedGroup` when all are row shards over one 1-D mesh, :class:`DTensorOpsGroup`
    otherwise."""
    if not any(isinstance(p, DTensor) for p in params):
        return None
    meshes = {p.device_mesh for p in params if isinstance(p, DTensor)}
    if len(meshes) == 1 and all(shard_dim(p) is not None for p in params):
        return RowShardedGroup(params)  # type: ignore[arg-type]
    return DTensorOpsGroup()
