"""The collectives of a MARS step on local shards of tensors row-sharded over one 1-D mesh.

Per step and per (device, dtype) group of tensors:

- one ``all_reduce`` of the stacked squared local norms of ``c`` gives every tensor's whole
  norm (instead of one collective per tensor, as plain ``DTensor`` ops pay);
- MARS-Shampoo adds two ``all_to_all``: every rank sends its shard of each matrix's momentum to
  the matrix's owner rank (:func:`~torch_mars.distributed.owners.assign_owners`), the owners run
  Newton-Schulz on whole matrices, and the second ``all_to_all`` returns each rank its shard of
  the directions.

The number of collectives does not grow with the number of tensors; a mesh of one rank needs
none.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.device_mesh import DeviceMesh

from torch_mars.distributed.layout import shard_sizes
from torch_mars.distributed.owners import assign_owners, newton_schulz_cost


class ShardedMeshOps:
    """Whole-tensor norms and Newton-Schulz directions for local shards over ``mesh``
    (implements :class:`torch_mars.optim.step_types.WholeTensorOps`). Made once per param
    group; :meth:`bind` tells it, each step, which whole tensor each local shard belongs to.

    Args:
        mesh: the 1-D device mesh of the shards.
    """

    def __init__(self, mesh: DeviceMesh) -> None:
        self.group = mesh.get_group()
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        self._layouts: dict[int, tuple[torch.Size, int]] = {}

    def bind(
        self, local_params: list[Tensor], global_shapes: list[torch.Size], dims: list[int]
    ) -> ShardedMeshOps:
        """Record each local parameter shard's whole (logical) shape and shard dimension, where
        the Newton-Schulz call finds a matrix's layout; returns ``self``."""
        self._layouts = {
            id(param): (shape, dim)
            for param, shape, dim in zip(local_params, global_shapes, dims, strict=True)
        }
        return self

    def whole_norms(self, local_norms: list[Tensor]) -> list[Tensor]:
        """The whole tensors' 2-norms from the local ones: one ``all_reduce`` of their squares."""
        if self.world == 1:
            return local_norms
        squares = torch.stack(local_norms).square_()
        dist.all_reduce(squares, group=self.group)
        return list(squares.sqrt_().unbind())

    def whole_sums(self, local_sums: Tensor) -> Tensor:
        """Per-tensor sums over the whole tensors: one ``all_reduce`` of the local rows."""
        if self.world == 1:
            return local_sums
        total = local_sums.clone()
        dist.all_reduce(total, group=self.group)
        return total

    def shampoo_directions(
        self,
        params: list[Tensor],
        exp_avgs: list[Tensor],
        orthogonalize: Callable[[list[Tensor]], list[Tensor]],
    ) -> list[Tensor]:
        """The local shards of ``orthogonalize(M)`` for the whole momentum matrices ``M`` whose
        local shards are ``exp_avgs`` (one dtype and device), each orthogonalised on one owner
        rank; ``params``: the matching local parameter shards."""
        if self.world == 1:
            return orthogonalize(exp_avgs)
        layouts = [self._layouts[id(p)] for p in params]
        shard_shapes = [_shard_shapes(shape, dim, self.world) for shape, dim in layouts]
        owners = assign_owners([newton_schulz_cost(shape) for shape, _ in layouts], self.world)
        # Both all_to_alls list the matrices by owner rank, then by index.
        by_owner = [[i for i in range(len(exp_avgs)) if owners[i] == r] for r in range(self.world)]
        order = [i for owned in by_owner for i in owned]
        mine = by_owner[self.rank]
        my_sizes = [sum(exp_avgs[i].numel() for i in owned) for owned in by_owner]
        owner_sizes = [sum(shard_shapes[i][r].numel() for i in mine) for r in range(self.world)]

        # Gather: every rank sends its shard of each matrix to the matrix's owner.
        gathered = self._all_to_all(
            [exp_avgs[i].reshape(-1) for i in order], my_sizes, owner_sizes, exp_avgs[0]
        )
        from_rank = [
            chunk.split([shard_shapes[i][r].numel() for i in mine])
            for r, chunk in enumerate(gathered.split(owner_sizes))
        ]
        whole = [
            torch.cat(
                [from_rank[r][k].view(shard_shapes[i][r]) for r in range(self.world)],
                dim=layouts[i][1],
            )
            for k, i in enumerate(mine)
        ]
        directions = orthogonalize(whole)

        # Scatter: every owner sends each rank that rank's shard of the directions.
        to_rank = [
            _rank_shard(direction, shard_shapes[i], layouts[i][1], r).reshape(-1)
            for r in range(self.world)
            for i, direction in zip(mine, directions, strict=True)
        ]
        returned = self._all_to_all(to_rank, owner_sizes, my_sizes, exp_avgs[0])
        mine_back = dict(
            zip(order, returned.split([exp_avgs[i].numel() for i in order]), strict=True)
        )
        return [mine_back[i].view_as(m) for i, m in enumerate(exp_avgs)]

    def _all_to_all(
        self,
        chunks: list[Tensor],
        send_sizes: list[int],
        receive_sizes: list[int],
        like: Tensor,
    ) -> Tensor:
        """One ``all_to_all_single`` of the concatenated ``chunks`` (``send_sizes[r]`` elements
        to rank ``r``); returns the ``sum(receive_sizes)`` received elements, dtype and device
        of ``like``."""
        send = torch.cat(chunks) if chunks else like.new_empty(0)
        received = send.new_empty(sum(receive_sizes))
        dist.all_to_all_single(received, send, receive_sizes, send_sizes, group=self.group)
        return received


def _shard_shapes(shape: torch.Size, dim: int, world: int) -> list[torch.Size]:
    """The local shape on each rank of a tensor of ``shape`` split along ``dim``."""
    return [
        torch.Size([*shape[:dim], size, *shape[dim + 1 :]])
        for size in shard_sizes(shape[dim], world)
    ]


def _rank_shard(whole: Tensor, shard_shapes: list[torch.Size], dim: int, rank: int) -> Tensor:
    """Rank ``rank``'s shard of ``whole``, split along ``dim`` into ``shard_shapes``."""
    return whole.split([shape[dim] for shape in shard_shapes], dim=dim)[rank]
