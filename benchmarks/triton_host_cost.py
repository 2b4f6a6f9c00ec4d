"""The host's share of an eager Triton-path MARS step, measured on any CPU (issue #26).

On a GPU an eager step cannot be faster than the Python that queues its kernels. This script
runs the step that ``MARS(fused=True)`` takes on CUDA (the Triton path, chosen by hand here)
with its two kernels stubbed out, over GPT-2 small's 148 tensors (each cut to at most 8 per
dimension: the host's work depends on how many tensors there are, not on their size), and
reports the median host time of a step over ``--repeats`` steps, and the Python function
calls and aten ops one step makes. MARS-Shampoo's Newton-Schulz runs for real, on those small
matrices, so its row counts that part's dispatches, not its arithmetic.

    python benchmarks/triton_host_cost.py [--repeats 300] [--rules mars-adamw mars-shampoo]

Prints a Markdown table. Give it a quiet machine: it times the host.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_mars.kernels.triton_step as triton_step
import torch_mars.optim.functional as functional
from torch_mars import MARS, mars_param_groups
from torch_mars.bench.op_count import count_aten_ops, count_python_calls
from torch_mars.models import GPT, gpt_config


class _LaunchNothing:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` launches nothing."""

    def __getitem__(self, grid: object) -> object:
        return lambda *args, **kwargs: None


def small_gpt2_parameters() -> torch.nn.Module:
    """GPT-2 small's module tree with every tensor cut to at most 8 per dimension, with
    gradients."""
    with torch.device("meta"):
        model = GPT(gpt_config("gpt2-small", 50304))
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            shape = tuple(min(size, 8) for size in param.shape)
            small = torch.nn.Parameter(torch.randn(shape) * 0.02)
            small.grad = torch.randn(shape) * 1e-3
            setattr(module, name, small)
    return model


def measure(rule: str, repeats: int) -> dict[str, float]:
    model = small_gpt2_parameters()
    optimizer = MARS(mars_param_groups(model), fused=True, mars_type=rule)
    optimizer.step()
    optimizer.step()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return {
        "tensors": sum(1 for _ in model.parameters()),
        "host_us": 1e6 * statistics.median(seconds),
        "python_calls": count_python_calls(optimizer.step),
        "aten_ops": sum(count_aten_ops(optimizer.step).values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--rules", nargs="+", default=["mars-adamw", "mars-shampoo"])
    args = parser.parse_args()
    functional.fused_backend = lambda tensors: "triton"
    triton_step._mars_update_kernel = _LaunchNothing()
    triton_step._mars_norm_kernel = _LaunchNothing()
    torch.manual_seed(0)
    # The host's Python is one thread; intra-op threads would only time the OS scheduler's
    # handling of the small CPU ops (Newton-Schulz on 8 x 8 matrices) on a busy machine.
    torch.set_num_threads(1)
    print("| rule | tensors | host µs per step (median) | Python calls/step | aten ops/step |")
    print("|---|---:|---:|---:|---:|")
    for rule in args.rules:
        row = measure(rule, args.repeats)
        print(
            f"| {rule} | {row['tensors']} | {row['host_us']:.0f} | {row['python_calls']} | "
            f"{row['aten_ops']} |"
        )


if __name__ == "__main__":
    main()
