"""The host cost of one step on GPT-2 small's 75 tensors, as counts that do not depend on the
machine: the Python function calls a step makes and the aten ops it dispatches. Each tensor is
a 2 x 2 (or 4-element) stand-in of the same rank, so the step does no arithmetic to speak of;
what is left is what a GPU's host pays before any kernel runs.

    python benchmarks/host_calls.py
"""

from __future__ import annotations

from collections.abc import Callable

import torch

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


def main() -> None:
    params = stand_in_parameters()
    candidates: dict[str, Callable[[], torch.optim.Optimizer]] = {
        "AdamW(foreach=True)": lambda: torch.optim.AdamW(params, foreach=True),
        "MARS(foreach=True)": lambda: MARS(params, foreach=True),
        "MARS(foreach=True, skip_nonfinite=False)": lambda: MARS(
            params, foreach=True, skip_nonfinite=False
        ),
        "MARS() (the loop)": lambda: MARS(params),
    }
    print(f"{len(params)} tensors")
    print("| optimizer | Python calls/step | ops/step |\n|---|---:|---:|")
    for name, build in candidates.items():
        optimizer = build()
        optimizer.step()  # the first step creates the state
        calls = count_python_calls(optimizer.step)
        ops = sum(count_aten_ops(optimizer.step).values())
        print(f"| {name} | {calls} | {ops} |")


if __name__ == "__main__":
    main()
