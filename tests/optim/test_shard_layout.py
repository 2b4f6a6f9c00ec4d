"""The pure parts of the sharded step: shard sizes follow ``torch.chunk`` (what DTensor's
``Shard`` uses), and MARS-Shampoo's owner ranks balance the Newton-Schulz work."""

from __future__ import annotations

import pytest
import torch

from torch_mars.distributed import assign_owners, newton_schulz_cost, shard_sizes
from torch_mars.models.gpt import GPT, gpt_config
from torch_mars.optim import mars_param_groups


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("length", [0, 1, 2, 5, 9, 16, 17, 50257])
def test_shard_sizes_are_torch_chunk_sizes_padded_with_empty_shards(length, world):
    chunks = [len(c) for c in torch.arange(length).chunk(world)] if length else []
    assert shard_sizes(length, world) == chunks + [0] * (world - len(chunks))


@pytest.mark.parametrize("world", [2, 4, 8])
def test_owner_ranks_balance_gpt2_small_matrices(world):
    groups = mars_param_groups(GPT(gpt_config("gpt2-small", 256)), embeddings="adamw")
    costs = [newton_schulz_cost(p.shape) for g in groups if g["use_mars"] for p in g["params"]]
    owners = assign_owners(costs, world)
    loads = [sum(c for c, o in zip(costs, owners, strict=True) if o == r) for r in range(world)]
    # Largest-first greedy: no rank exceeds the mean by more than one matrix's cost.
    assert max(loads) - sum(loads) / world <= max(costs)
    assert max(loads) / (sum(loads) / world) < 1.25
    assert sorted(set(owners)) == list(range(world))
