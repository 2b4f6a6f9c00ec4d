"""Distributed step benchmark: ``optimizer.step()`` on FSDP2-sharded GPT parameters, MARS's
sharded path next to MARS through plain ``DTensor`` ops and ``torch.optim.AdamW`` under the same
``fully_shard`` wrapping (each transformer block, then the root).

Under ``torchrun`` it runs on the launched processes (NCCL on CUDA, gloo on CPU); otherwise it
spawns ``processes`` gloo processes on the CPU. Every rank holds random gradients of the same
global values. Rows are timed round-robin; a step's time is the slowest rank's, and a row
reports the median over the repeats, the ratio to ``adamw-foreach``, and the collectives one
step issues on each rank (counted by ``CommDebugMode``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

from torch_mars.bench.step import synchronize
from torch_mars.bench.table import markdown_table
from torch_mars.models.gpt import GPT, gpt_config
from torch_mars.optim import MARS, MarsHyperparams, StepTensors, mars_step

BASELINE = "adamw-foreach"
# Vocabulary of the benchmark model when the config leaves it to the data (tiny, mini).
BYTE_VOCAB = 256


class DTensorOpsMars:
    """MARS-AdamW on every tensor by plain ``DTensor`` ops: the per-tensor functional step run
    on the ``DTensor`` parameters and state, as an implementation unaware of sharding would
    (correct; one collective per tensor for the norm, ``DTensor`` dispatch per op)."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params
        self.exp_avgs = [torch.zeros_like(p) for p in params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in params]
        self.last_grads = [p.grad.clone() for p in params]
        self.steps = 0
        self.hp = MarsHyperparams(lr=1e-3, beta1=0.95, beta2=0.99, eps=1e-8, weight_decay=0.0)

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        tensors = StepTensors(
            params=list(self.params),
            grads=[p.grad for p in self.params],
            exp_avgs=self.exp_avgs,
            exp_avg_sqs=list(self.exp_avg_sqs),
            steps=[self.steps] * len(self.params),
            last_grads=self.last_grads,
        )
        mars_step(tensors, self.hp, store_last_grad=True, implementation="single_tensor")


ROWS: dict[str, Callable[[list[nn.Parameter]], object]] = {
    "adamw-foreach": lambda ps: torch.optim.AdamW(ps, foreach=True),
    "adamw-loop": lambda ps: torch.optim.AdamW(ps, foreach=False),
    "mars-adamw": lambda ps: MARS(ps, optimize_1d=True),
    "mars-adamw-dtensor-ops": DTensorOpsMars,
    "mars-lion": lambda ps: MARS(ps, mars_type="mars-lion", optimize_1d=True),
    "mars-shampoo": lambda ps: MARS(ps, mars_type="mars-shampoo"),
}
DEFAULT_ROWS = tuple(ROWS)


@dataclass
class DistributedStepResult:
    """One row: the median over repeats of the slowest rank's step (ms)."""

    name: str
    median_ms: float
    ratio_to_adamw_foreach: float
    collectives_per_step: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def sharded_model(model_name: str, device: torch.device) -> nn.Module:
    """The GPT ``model_name`` on ``device``, ``fully_shard``-ed per block and at the root, with
    random gradients (the same global values on every rank)."""
    torch.manual_seed(0)
    model = GPT(gpt_config(model_name, BYTE_VOCAB)).to(device)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    generator = torch.Generator().manual_seed(1)
    for param in model.parameters():
        assert isinstance(param, DTensor)
        grad = 1e-3 * torch.randn(param.shape, generator=generator)
        param.grad = distribute_tensor(grad.to(device), param.device_mesh, param.placements)
    return model


def _timed_step(optimizer: object, device: torch.device) -> float:
    """The slowest rank's seconds for one step."""
    dist.barrier()
    synchronize(device)
    start = time.perf_counter()
    optimizer.step()  # type: ignore[attr-defined]
    synchronize(device)
    elapsed = torch.tensor([time.perf_counter() - start], device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed)


def _collectives(optimizer: object) -> int:
    with CommDebugMode() as comm:
        optimizer.step()  # type: ignore[attr-defined]
    return comm.get_total_counts()


def benchmark_on_this_process(
    model_name: str, rows: list[str], device: torch.device, warmup: int, repeats: int
) -> list[DistributedStepResult]:
    """Run the benchmark on the current process group (every rank calls it; all get the rows)."""
    model = sharded_model(model_name, device)
    params = list(model.parameters())
    optimizers = []
    for row in rows:
        optimizer = ROWS[row](params)
        for _ in range(warmup):
            optimizer.step()
        optimizers.append(optimizer)
    times: list[list[float]] = [[] for _ in rows]
    for _ in range(repeats):
        for index, optimizer in enumerate(optimizers):
            times[index].append(_timed_step(optimizer, device))
    counts = [_collectives(optimizer) for optimizer in optimizers]
    medians = [1e3 * statistics.median(t) for t in times]
    baseline = medians[rows.index(BASELINE)] if BASELINE in rows else float("nan")
    return [
        DistributedStepResult(row, ms, ms / baseline, count)
        for row, ms, count in zip(rows, medians, counts, strict=True)
    ]


def _spawned_worker(
    rank: int,
    world: int,
    init_file: str,
    out_file: str,
    args: tuple[str, list[str], int, int],
) -> None:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model_name, rows, warmup, repeats = args
        results = benchmark_on_this_process(model_name, rows, torch.device("cpu"), warmup, repeats)
        if rank == 0:
            torch.save([r.as_dict() for r in results], out_file)
    finally:
        dist.destroy_process_group()


def run_distributed_benchmark(
    model_name: str, rows: list[str], processes: int, warmup: int, repeats: int
) -> list[DistributedStepResult] | None:
    """The distributed step benchmark. Under ``torchrun`` (``WORLD_SIZE`` set) it runs on the
    launched processes and returns the rows on rank 0, None elsewhere; otherwise it spawns
    ``processes`` CPU processes (gloo) and returns the rows."""
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        raise ValueError(f"unknown distributed rows {unknown}; choose from {', '.join(ROWS)}")
    if "WORLD_SIZE" in os.environ:
        on_cuda = torch.cuda.is_available()
        if not dist.is_initialized():
            dist.init_process_group("nccl" if on_cuda else "gloo")
        device = torch.device("cpu")
        if on_cuda:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        results = benchmark_on_this_process(model_name, rows, device, warmup, repeats)
        return results if dist.get_rank() == 0 else None
    if processes < 2:
        raise ValueError(f"--processes must be >= 2, got {processes}")
    with tempfile.TemporaryDirectory() as scratch:
        out_file = Path(scratch) / "results.pt"
        mp.spawn(
            _spawned_worker,
            args=(
                processes,
                str(Path(scratch) / "init"),
                str(out_file),
                (model_name, rows, warmup, repeats),
            ),
            nprocs=processes,
            join=True,
        )
        rows_out = torch.load(out_file)
    return [DistributedStepResult(**row) for row in rows_out]


def format_distributed_table(results: list[DistributedStepResult]) -> str:
    """A Markdown table of the distributed step benchmark."""
    headers = ["optimizer", "step (ms)", "ratio to AdamW foreach", "collectives per step"]
    return markdown_table(
        headers,
        (
            [
                r.name,
                f"{r.median_ms:.2f}",
                f"{r.ratio_to_adamw_foreach:.2f}",
                str(r.collectives_per_step),
            ]
            for r in results
        ),
    )
