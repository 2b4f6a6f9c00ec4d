"""DCP checkpoints of MARS across world sizes: a run saved by two FSDP2 processes (spawned
here) and resumed by one plain process, and a run saved by one process and resumed by two,
both continue exactly as an uninterrupted single-process run, to float32 round-off, for
MARS-AdamW, MARS-Shampoo (owner ranks) and the exact mode (its ``prev_param`` state)."""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from test_fsdp2 import make_model
from torch.distributed.tensor import DTensor

from distributed_helpers import run_on_two_processes
from problems import mse_step
from torch_mars import MARS
from torch_mars.distributed import load_sharded_checkpoint, save_sharded_checkpoint

STEPS_BEFORE = 4
STEPS_AFTER = 4
GLOBAL_BATCH = 8
CASES = (("mars-adamw", True), ("mars-shampoo", True), ("mars-adamw", False))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(GLOBAL_BATCH, 1, 3, 3, generator=generator),
            torch.randn(GLOBAL_BATCH, 1, generator=generator),
        )
        for _ in range(STEPS_BEFORE + STEPS_AFTER)
    ]


def run(
    case: tuple[str, bool],
    rank: int,
    world: int,
    steps: slice,
    load_from: Path | None = None,
    save_to: Path | None = None,
) -> list[torch.Tensor]:
    """Train on ``batches()[steps]`` (after loading ``load_from``), save to ``save_to``;
    return the whole parameters."""
    mars_type, is_approx = case
    model = make_model(world)
    opt = MARS(model.parameters(), lr=0.02, mars_type=mars_type, is_approx=is_approx)
    if load_from is not None:
        load_sharded_checkpoint(load_from, model, opt)
    share = GLOBAL_BATCH // world
    for x, y in batches()[steps]:
        x, y = x[rank * share :][:share], y[rank * share :][:share]
        mse_step(opt, model, x, y, is_approx)
    if save_to is not None:
        save_sharded_checkpoint(save_to, model, opt)
    return [
        (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for p in model.parameters()
    ]


def directory(root: Path, case: tuple[str, bool], saved_by: int) -> Path:
    return root / f"{case[0]}-{'approx' if case[1] else 'exact'}-saved-by-{saved_by}"


def save_on_two(rank: int, world: int, root: Path) -> None:
    for case in CASES:
        run(case, rank, world, slice(0, STEPS_BEFORE), save_to=directory(root, case, 2))


def resume_on_two(rank: int, world: int, root: Path) -> dict:
    return {
        case: run(case, rank, world, slice(STEPS_BEFORE, None), directory(root, case, 1))
        for case in CASES
    }


def test_dcp_checkpoints_resume_across_world_sizes(tmp_path):
    run_on_two_processes(functools.partial(save_on_two, root=tmp_path), tmp_path / "a")
    for case in CASES:
        run(case, 0, 1, slice(0, STEPS_BEFORE), save_to=directory(tmp_path, case, 1))
    resumed_on_two = run_on_two_processes(
        functools.partial(resume_on_two, root=tmp_path), tmp_path / "b"
    )
    for case in CASES:
        uninterrupted = run(case, 0, 1, slice(None))
        resumed_on_one = run(case, 0, 1, slice(STEPS_BEFORE, None), directory(tmp_path, case, 2))
        for expected, two_to_one, one_to_two in zip(
            uninterrupted, resumed_on_one, resumed_on_two[case], strict=True
        ):
            torch.testing.assert_close(two_to_one, expected, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(one_to_two, expected, rtol=1e-5, atol=1e-6)
