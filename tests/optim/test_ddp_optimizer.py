"""MARS under DistributedDataParallel needs nothing special: gradients arrive averaged. With
``gradient_as_bucket_view=True`` every ``p.grad`` is a view into a communication bucket that the
next backward overwrites, so an optimizer that kept a reference to it (as the authors' code
does) would read a corrupted previous gradient. Two gloo processes, spawned here, each on half
of the global batch, must match one process on the whole batch after 12 steps, for every rule
and for the exact mode, and ``last_grad`` must not share storage with the bucket."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from distributed_helpers import RULE_CASES, run_on_two_processes
from problems import mse_step
from torch_mars import MARS

STEPS = 12
GLOBAL_BATCH = 8
CASES = RULE_CASES


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
        mse_step(opt, model, x, y, is_approx)
    aliased = any(
        p.grad is not None
        and "last_grad" in opt.state[p]
        and opt.state[p]["last_grad"].untyped_storage().data_ptr()
        == p.grad.untyped_storage().data_ptr()
        for p in model.parameters()
    )
    return [p.detach().clone() for p in model.parameters()], aliased


def train_every_case(rank: int, world: int) -> dict:
    return {case: train(*case, rank, world) for case in CASES}


def test_two_ddp_processes_with_bucket_views_match_one_process(tmp_path):
    distributed = run_on_two_processes(train_every_case, tmp_path)
    for case in CASES:
        single, _ = train(*case, rank=0, world=1)
        params, aliased = distributed[case]
        assert not aliased, f"{case}: last_grad shares storage with a DDP bucket view"
        for a, b in zip(single, params, strict=True):
            torch.testing.assert_close(
                b, a, rtol=1e-5, atol=1e-6, msg=lambda m, c=case: f"{c}: {m}"
            )
