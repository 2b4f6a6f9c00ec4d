"""Run a function on two gloo processes spawned by the test itself (no torchrun, no free port:
the process group meets through a file)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
# (mars_type, is_approx): every rule in the approximate mode, and the exact mode once.
RULE_CASES = (
    ("mars-adamw", True),
    ("mars-lion", True),
    ("mars-shampoo", True),
    ("mars-m", True),
    ("mars-adamw", False),
)


def _worker(rank: int, fn: Callable[[int, int], Any], init_file: str, out_file: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    result = fn(rank, WORLD)
    if rank == 0:
        torch.save(result, out_file)
    # Both ranks leave together: a rank that tears gloo down while its peer is still inside the
    # group can make the peer's next collective or its own teardown abort (seen as a rare
    # SIGABRT in CI).
    dist.barrier()
    dist.destroy_process_group()


def run_on_two_processes(fn: Callable[[int, int], Any], tmp_path: Path) -> Any:
    """``fn(rank, world)`` on each of two processes; returns rank 0's result. ``fn`` must be a
    module-level function or a ``functools.partial`` of one (it is pickled into the children)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out_file = tmp_path / "rank0.pt"
    mp.spawn(_worker, args=(fn, str(tmp_path / "init"), str(out_file)), nprocs=WORLD, join=True)
    torch.set_num_threads(1)
    return torch.load(out_file)
