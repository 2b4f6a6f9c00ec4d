"""Median wall time of one optimizer step, MARS (each rule, both implementations) against
torch.optim.AdamW, on the parameter shapes of a small GPT-2-like model with random gradients.

Usage: python benchmarks/optimizer_step.py [--device cpu|cuda] [--repeats N] [--width W]
Prints a Markdown table for docs/benchmarks.md; ratios are to torch AdamW(foreach=True) measured
in the same run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

from torch_mars import MARS


def gpt_like_parameters(width: int, layers: int, vocab: int, device: str) -> list[torch.Tensor]:
    """Token embedding, per block: 2 LayerNorm gains and biases, qkv, proj, 2 MLP weights."""
    shapes: list[tuple[int, ...]] = [(vocab, width)]
    for _ in range(layers):
        shapes += [(width,), (width,), (3 * width, width), (width, width)]
        shapes += [(width,), (width,), (4 * width, width), (width, 4 * width)]
    gen = torch.Generator().manual_seed(0)
    params = []
    for shape in shapes:
        p = (0.02 * torch.randn(shape, generator=gen)).to(device).requires_grad_()
        p.grad = (1e-3 * torch.randn(shape, generator=gen)).to(device)
        params.append(p)
    return params


def median_step_ms(
    make: Callable[[list[torch.Tensor]], torch.optim.Optimizer], params, repeats: int
) -> float:
    opt = make(params)
    sync = torch.cuda.synchronize if params[0].is_cuda else (lambda: None)
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        opt.step()
        sync()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    args = parser.parse_args()
    params = gpt_like_parameters(args.width, args.layers, args.vocab, args.device)
    numel = sum(p.numel() for p in params)
    candidates: dict[str, Callable] = {
        "torch AdamW foreach": lambda ps: torch.optim.AdamW(ps, foreach=True),
        "torch AdamW loop": lambda ps: torch.optim.AdamW(ps, foreach=False),
    }
    for rule in ("mars-adamw", "mars-lion", "mars-shampoo"):
        for foreach in (True, False):
            name = f"MARS {rule} {'foreach' if foreach else 'loop'}"
            candidates[name] = lambda ps, r=rule, f=foreach: MARS(ps, mars_type=r, foreach=f)
    results = {
        name: median_step_ms(make, params, args.repeats) for name, make in candidates.items()
    }
    baseline = results["torch AdamW foreach"]
    device = device_name(args.device)
    print(
        f"{len(params)} tensors, {numel / 1e6:.2f} M parameters, device {args.device} ({device}), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats}\n"
    )
    print("| optimizer | step (ms) | ratio to torch AdamW foreach |")
    print("|---|---:|---:|")
    for name, ms in results.items():
        print(f"| {name} | {ms:.2f} | {ms / baseline:.2f} |")


if __name__ == "__main__":
    main()
