"""The host cost of one step on GPT-2 small's 75 tensors: the Python function calls a step makes
and the aten ops it dispatches (counts that do not depend on the machine), and the median host
time of a step (which does). Each tensor is a 2 x 2 (or 4-element) stand-in of the same rank, so
the step does no arithmetic to speak of; what is left is what a GPU's host pays before any
kernel runs.

The ``triton`` rows take the step ``MARS(fused=True)`` takes on CUDA, with its two kernels
stubbed out (they launch nothing), so a CPU shows the Python that queues them: on a GPU an
eager step is no faster than that. MARS-Shampoo's Newton-Schulz runs for real on the 2 x 2
stand-ins, so its row counts that part's dispatches, not its arithmetic.

    python benchmarks/perf/host_calls.py [--repeats 300]

Give the timing column a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch

import torch_mars.kernels.triton_step as triton_step
import torch_mars.optim.functional as functional
from torch_mars import MARS
from torch_mars.bench.op_count import count_aten_ops, count_python_calls
from torch_mars.models import GPT, gpt_config


def stand_in_parameters() -> list[torch.nn.Parameter]:
    """GPT-2 small's parameter list, each tensor a small one of the same rank with a gradient."""
    with torch.device("meta"):
        model = GPT(gpt_config("gpt2-small", 50304))
    params = [
        torch.nn.Parameter(torch.zeros((2, 2) if p.ndim >= 2 else (4,))) for p in model.parameters()
    ]
    for param in params:
        param.grad = torch.ones_like(param)
    return params


class _LaunchNothing:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` launches nothing."""

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def triton_path_without_kernels() -> Iterator[None]:
    """``fused=True`` takes the Triton path on any device, and its kernels do nothing."""
    saved = functional.fused_backend, triton_step._mars_update_kernel, triton_step._mars_norm_kernel
    functional.fused_backend = lambda tensors: "triton"
    triton_step._mars_update_kernel = triton_step._mars_norm_kernel = _LaunchNothing()
    try:
        yield
    finally:
        functional.fused_backend, triton_step._mars_update_kernel = saved[:2]
        triton_step._mars_norm_kernel = saved[2]


def host_microseconds(step: Callable[[], object], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return 1e6 * statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    # The host's Python is one thread; intra-op threads would only time the scheduler.
    torch.set_num_threads(1)
    params = stand_in_parameters()
    candidates: dict[str, tuple[Callable[[], torch.optim.Optimizer], bool]] = {
        "AdamW(foreach=True)": (lambda: torch.optim.AdamW(params, foreach=True), False),
        "MARS(foreach=True)": (lambda: MARS(params, foreach=True), False),
        "MARS(foreach=True, skip_nonfinite=False)": (
            lambda: MARS(params, foreach=True, skip_nonfinite=False),
            False,
        ),
        "MARS() (the loop)": (lambda: MARS(params), False),
        "MARS(fused=True), triton": (lambda: MARS(params, fused=True), True),
        "MARS(fused=True, mars_type='mars-shampoo'), triton": (
            lambda: MARS(params, fused=True, mars_type="mars-shampoo"),
            True,
        ),
        "MARS(fused=True, mars_type='mars-lion', one_buffer=True, clip=False), triton": (
            lambda: MARS(params, fused=True, mars_type="mars-lion", one_buffer=True, clip=False),
            True,
        ),
    }
    print(f"{len(params)} tensors")
    print("| optimizer | Python calls/step | ops/step | host µs/step (median) |")
    print("|---|---:|---:|---:|")
    for name, (build, stubbed) in candidates.items():
        with triton_path_without_kernels() if stubbed else contextlib.nullcontext():
            optimizer = build()
            optimizer.step()  # the first step creates the state
            calls = count_python_calls(optimizer.step)
            ops = sum(count_aten_ops(optimizer.step).values())
            micros = host_microseconds(optimizer.step, args.repeats)
        print(f"| {name} | {calls} | {ops} | {micros:.0f} |")


if __name__ == "__main__":
    main()
