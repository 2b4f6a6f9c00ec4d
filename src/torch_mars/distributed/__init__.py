"""What sharding needs from a MARS step: the layout of FSDP2 parameters, whole-tensor norms
with one collective per step, MARS-Shampoo's owner ranks, and DCP checkpoints."""

from torch_mars.distributed.checkpoint import load_sharded_checkpoint, save_sharded_checkpoint
from torch_mars.distributed.layout import (
    ShardedPart,
    local_shards,
    local_tensor,
    partition_by_sharding,
    shard_dim,
    shard_sizes,
)
from torch_mars.distributed.mesh_ops import ShardedMeshOps
from torch_mars.distributed.owners import assign_owners, newton_schulz_cost

__all__ = [
    "ShardedMeshOps",
    "ShardedPart",
    "assign_owners",
    "load_sharded_checkpoint",
    "local_shards",
    "local_tensor",
    "newton_schulz_cost",
    "partition_by_sharding",
    "save_sharded_checkpoint",
    "shard_dim",
    "shard_sizes",
]
