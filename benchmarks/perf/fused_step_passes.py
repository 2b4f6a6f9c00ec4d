"""What the fused MARS-AdamW step costs off CUDA, pass by pass, on one tensor: the compiled
per-tensor kernel (``torch_mars.kernels.compiled_step``) against torch's fused AdamW on the same
tensor, with the kernel's two passes told apart.

Rows, each timed in a new random order every round, median over rounds:
- ``adamw-fused``: ``torch._fused_adamw_``, one pass, 28 B per element (read p, g, m, v; write
  p, m, v);
- ``mars-adamw``: the default kernel: a pass for ``||c||`` (reads g, g~: 8 B), then the update
  (reads p, g, g~, m, v; writes p, g~, m, v: 36 B);
- ``mars-adamw, no skip``: the same without the non-finite gate;
- ``mars-adamw, no clip or skip``: ``||c||`` unused, so the kernel is one pass (36 B);
- ``norm pass alone``: the first pass (``||c||``) compiled by itself;
- ``adamw, compiled``: the kernel's plain-AdamW variant (``c = g``), one pass of 28 B.

    python benchmarks/perf/fused_step_passes.py [--elements 38633472] [--rounds 21]

The default size is GPT-2 small's embedding (50,257 x 768), the step's largest tensor.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

from torch_mars.cli import _positive_int
from torch_mars.kernels.compiled_step import VARIANT_LIMIT, compiled_tensor_update

GAMMA, BETA1 = 0.025, 0.9
SCALE = GAMMA * BETA1 / (1 - BETA1)


def candidates(elements: int) -> dict[str, Callable[[], object]]:
    generator = torch.Generator().manual_seed(0)
    param = torch.randn(elements, generator=generator)
    grad, last_grad = (1e-3 * torch.randn(elements, generator=generator) for _ in range(2))
    exp_avg, exp_avg_sq = torch.zeros(elements), torch.zeros(elements)
    # [lr, beta1, beta2, eps, wd, scale, bias corrections 1 and sqrt 2, gamma] of step 1
    coefficients = torch.tensor(
        [3e-3, BETA1, 0.99, 1e-8, 0.1, SCALE, 1 - BETA1, 0.01**0.5, GAMMA], dtype=torch.float64
    )
    kernel = compiled_tensor_update()
    step = torch.tensor(1.0)

    def mars(last: torch.Tensor | None, skip: bool, clip: bool) -> Callable[[], object]:
        tensors = (param, grad, last, exp_avg, exp_avg_sq, None, coefficients, None, "adam")
        return lambda: kernel(*tensors, False, last is not None, skip, clip, False, False, False)

    @torch.compile(dynamic=True, fullgraph=True)
    def norm_pass(grad: torch.Tensor, last_grad: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(torch.lerp(grad, last_grad, -SCALE))

    return {
        "adamw-fused": lambda: torch._fused_adamw_(
            [param],
            [grad],
            [exp_avg],
            [exp_avg_sq],
            [],
            [step],
            lr=3e-3,
            beta1=BETA1,
            beta2=0.99,
            weight_decay=0.1,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
        ),
        "mars-adamw": mars(last_grad, skip=True, clip=True),
        "mars-adamw, no skip": mars(last_grad, skip=False, clip=True),
        "mars-adamw, no clip or skip": mars(last_grad, skip=False, clip=False),
        "norm pass alone": lambda: norm_pass(grad, last_grad),
        "adamw, compiled": mars(None, skip=False, clip=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=_positive_int, default=50257 * 768)
    parser.add_argument("--rounds", type=_positive_int, default=21)
    args = parser.parse_args()
    rows = candidates(args.elements)
    times: dict[str, list[float]] = {name: [] for name in rows}
    with torch._dynamo.config.patch(recompile_limit=VARIANT_LIMIT):
        for run in rows.values():
            run()
            run()
        order = list(rows)
        for _ in range(args.rounds):
            random.shuffle(order)
            for name in order:
                start = time.perf_counter()
                rows[name]()
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["adamw-fused"])
    print(
        f"{args.elements:,} elements, {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}, median of {args.rounds} rounds\n"
    )
    print("| row | ms | ratio to adamw-fused |\n|---|---:|---:|")
    for name, values in times.items():
        ms = statistics.median(values)
        print(f"| {name} | {1e3 * ms:.2f} | {ms / base:.2f} |")


if __name__ == "__main__":
    main()
