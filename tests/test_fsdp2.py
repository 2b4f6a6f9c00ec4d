"""MARS on FSDP2 (``fully_shard``) parameters through plain DTensor ops, the per-tensor path: two
gloo processes, spawned here, match one process on the same global batch for MARS-AdamW and
MARS-Lion, with uneven shards and an empty shard on one rank; and a tensor whose corrected
gradient has norm > 1 overall but <= 1 on each shard is clipped as a whole. (This is the correct,
unoptimised path: one collective per tensor. The batched fast path of issue #5 is not built.)"""

from __future__ import annotations

import math

import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

from distributed_helpers import run_on_two_processes
from torch_mars import MARS

STEPS = 10
GLOBAL_BATCH = 8
MARS_TYPES = ("mars-adamw", "mars-lion")


def make_model() -> torch.nn.Sequential:
    """First dims 9, 9, 9, 3 and 1 shard unevenly over 2 ranks; the last one is empty on rank 1."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 9),
        torch.nn.Tanh(),
        torch.nn.LayerNorm(9),
        torch.nn.Linear(9, 3),
        torch.nn.Tanh(),
        torch.nn.Linear(3, 1),
    )


def train(mars_type: str, rank: int, world: int) -> list[torch.Tensor]:
    model = make_model()
    if world > 1:
        for layer in model:
            if any(True for _ in layer.parameters()):
                fully_shard(layer)
        fully_shard(model)
    opt = MARS(model.parameters(), lr=0.02, mars_type=mars_type, foreach=False)
    generator = torch.Generator().manual_seed(1)
    share = GLOBAL_BATCH // world
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 6, generator=generator)[rank * share : (rank + 1) * share]
        y = torch.randn(GLOBAL_BATCH, 1, generator=generator)[rank * share : (rank + 1) * share]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [
        (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for p in model.parameters()
    ]


def clipped_momentum(world: int) -> torch.Tensor:
    """MARS-Lion's momentum after one step on a (4, 3) weight whose gradient has norm 0.9 on
    each of two row shards and 0.9 * sqrt(2) > 1 in all: a whole-tensor clip scales it, a
    per-shard clip would not."""
    grad = torch.full((4, 3), 0.9 / math.sqrt(6))
    weight = torch.zeros(4, 3)
    if world > 1:
        mesh = init_device_mesh("cpu", (world,))
        weight = distribute_tensor(weight, mesh, [Shard(0)])
        grad = distribute_tensor(grad, mesh, [Shard(0)])
    param = torch.nn.Parameter(weight)
    param.grad = grad
    opt = MARS([param], lr=0.1, betas=(0.5, 0.99), mars_type="mars-lion")
    opt.step()
    momentum = opt.state[param]["exp_avg"]
    return (momentum.full_tensor() if hasattr(momentum, "full_tensor") else momentum).detach()


def train_and_clip(rank: int, world: int) -> dict:
    results = {name: train(name, rank, world) for name in MARS_TYPES}
    results["clip"] = clipped_momentum(world)
    return results


def test_fsdp2_matches_one_process_and_clips_the_whole_tensor(tmp_path):
    sharded = run_on_two_processes(train_and_clip, tmp_path)
    for name in MARS_TYPES:
        for a, b in zip(train(name, 0, 1), sharded[name], strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    total_norm = 0.9 * math.sqrt(2)  # each shard's norm is 0.9, below the clip threshold
    expected = torch.full((4, 3), 0.5 * (0.9 / math.sqrt(6)) / total_norm)
    torch.testing.assert_close(clipped_momentum(1), expected)
    torch.testing.assert_close(sharded["clip"], expected)
