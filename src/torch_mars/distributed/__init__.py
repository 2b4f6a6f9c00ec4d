"""What sharding needs from a MARS step: the sharding kind of a param group, the layout of FSDP2
parameters, whole-tensor norms with one collective per step, MARS-Shampoo's owner ranks, and DCP
checkpoints. It imports only the step vocabulary of ``torch_mars.optim``
(:mod:`torch_mars.optim.step_types`), never the optimizer or its step paths."""

from torch_mars.distributed.checkpoint import load_sharded_checkpoint, save_sharded_checkpoint
from torch_mars.distributed.group_sharding import (
    DTensorOpsGroup,
    GroupSharding,
    RowShardedGroup,
    check_gradients,
    group_sharding,
)
from torch_mars.distributed.layout import (
    check_gradient_layout,
    local_shards,
    local_tensor,
    shard_dim,
    shard_sizes,
)
from torch_mars.distributed.mesh_ops import ShardedMeshOps
from torch_mars.distributed.owners import assign_owners, newton_schulz_cost

__all__ = [
    "DTensorOpsGroup",
    "GroupSharding",
    "RowShardedGroup",
    "ShardedMeshOps",
    "assign_owners",
    "check_gradient_layout",
    "check_gradients",
    "group_sharding",
    "load_sharded_checkpoint",
    "local_shards",
    "local_tensor",
    "newton_schulz_cost",
    "save_sharded_checkpoint",
    "shard_dim",
    "shard_sizes",
]
