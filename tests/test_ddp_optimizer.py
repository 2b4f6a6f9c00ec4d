"""MARS under DistributedDataParallel needs nothing special: gradients arrive averaged. With
``gradient_as_bucket_view=True`` every ``p.grad`` is a view into a communication bucket that the
next backward overwrites, so an optimizer that kept a reference to it (as the authors' code
does) would read a corrupted previous gradient. Two gloo processes, spawned here, each on half
of the global batch, must match one process on the whole batch after 12 steps, for every rule
and for the exact mode, and ``last_grad`` must not share storage with the bucket."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from torch_mars import MARS

STEPS = 12
GLOBAL_BATCH = 8
CASES = (
    ("mars-adamw", True),
    ("mars-lion", True),
    ("mars-shampoo", True),
    ("mars-adamw", False),
)


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.LayerNorm(10), torch.nn.Linear(10, 3)
    )


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(GLOBAL_BATCH, 6, generator=generator),
            torch.randn(GLOBAL_BATCH, 3, generator=generator),
        )
        for _ in range(STEPS)
    ]


def train(mars_type: str, is_approx: bool, rank: int, world: int) -> tuple[list, bool]:
    """Train; return the final parameters and whether any ``last_grad`` aliases a gradient."""
    model = make_model()
    if world > 1:
        model = DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = MARS(model.parameters(), lr=0.02, mars_type=mars_type, is_approx=is_approx)
    share = GLOBAL_BATCH // world
    for x, y in batches():
        x, y = x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]

        def closure(x=x, y=y) -> torch.Tensor:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        if is_approx:
            closure()
            opt.step()
        else:
            opt.step(closure)
    aliased = any(
        p.grad is not None
        and "last_grad" in opt.state[p]
        and opt.state[p]["last_grad"].untyped_storage().data_ptr()
        == p.grad.untyped_storage().data_ptr()
        for p in model.parameters()
    )
    return [p.detach().clone() for p in model.parameters()], aliased


def worker(rank: int, world: int, init_file: str, out_file: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    results = {case: train(*case, rank, world) for case in CASES}
    if rank == 0:
        torch.save(results, out_file)
    dist.destroy_process_group()


def test_two_ddp_processes_with_bucket_views_match_one_process(tmp_path):
    out_file = tmp_path / "ddp.pt"
    mp.spawn(worker, args=(2, str(tmp_path / "init"), str(out_file)), nprocs=2, join=True)
    distributed = torch.load(out_file)
    torch.set_num_threads(1)
    for case in CASES:
        single, _ = train(*case, rank=0, world=1)
        params, aliased = distributed[case]
        assert not aliased, f"{case}: last_grad shares storage with a DDP bucket view"
        for a, b in zip(single, params, strict=True):
            torch.testing.assert_close(
                b, a, rtol=1e-5, atol=1e-6, msg=lambda m, c=case: f"{c}: {m}"
            )
