"""Where MARS-Shampoo's Newton-Schulz time goes, and whether a cheaper form of the same
polynomial keeps its accuracy: a study for issue #26's unmet H100 targets.

Three parts, on GPT-2 small's hidden matrices (12 layers of 768 x 2304, 768 x 768 and two
768 x 3072, taken as ``(short, long)``), ``--scale`` shrinking every side for a slow device:

1. **Profile** of the library's Newton-Schulz (``batched_shampoo_directions``, 5 iterations)
   with ``torch.profiler``: device time per aten op, and for the matmuls the TFLOP/s they reach.
   On a GPU this says whether the matmuls or the element-wise work around them (stacking,
   normalising, casting) hold the time.
2. **Accuracy** of each form in bf16 and float32, as the relative Frobenius distance to the
   standard form in float64, on three kinds of matrices: Gaussian (flat spectrum), a spectrum
   falling as ``1/i``, and eight large directions over a noise floor 1e-3 (the shape of a
   momentum matrix late in training).
3. **Time** of each form on the device, with the matmul FLOPs each one does.

The forms:
- ``standard``: ``X <- a X + (b G + c G^2) X`` with ``G = X X^T``, the library's
  (:func:`torch_mars.optim.newton_schulz.newton_schulz_orthogonalize`): per iteration
  ``4 m^2 n + 2 m^3`` FLOPs for an ``m x n`` matrix, ``m <= n``.
- ``muon-reference``: the same, written as Muon's reference writes it (``a X + B X`` with each
  term rounded to the iteration dtype): the accuracy the field trains with.
- ``folded``: the standard form with ``a`` added to the diagonal of ``b G + c G^2``, so the
  product with ``X`` is a plain matmul: the same FLOPs, two fewer passes over ``X`` per
  iteration (the fused sum copies ``X`` into its output, and its epilogue reads it again).
- ``gram-rK``: the same polynomial iterated on the small ``m x m`` Gram matrix (Amsel, Chen,
  Dao et al., "Gram Newton-Schulz", 2026): ``X_k = Q_k X_0`` with ``Q_{k+1} = P_k Q_k``,
  ``P_k = a + b A_k + c A_k^2`` and ``A_{k+1} = P_k^2 A_k``, where ``A_k = X_k X_k^T``; ``X``
  is formed only at the end. Iterating ``A`` instead of recomputing it from ``X`` lets
  round-off grow, so every ``K`` iterations it restarts: ``X = Q X``, ``A = X X^T`` again.
  It does fewer FLOPs when ``n`` is well above ``m``, more dispatches per iteration.
- ``triangle`` (CUDA with Triton, ``ns_products="triangle"``): the folded form with ``X X^T``
  and ``b G + c G G^T + a I`` each computed one triangle of tiles at a time and mirrored
  (:mod:`torch_mars.kernels.triton_symmetric`): ``3 m^2 n + m^3`` FLOPs per iteration, 0.72x
  the standard form's on a ``768 x 3072`` matrix. Its TFLOP/s count the FLOPs it does; its
  time against ``folded``'s is the answer.

    python benchmarks/perf/newton_schulz_forms.py --device cuda          # full shapes
    python benchmarks/perf/newton_schulz_forms.py --device cpu --scale 4 # a quarter of every side

Tables go to stdout; ``--json`` writes them too.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
from torch import Tensor

from torch_mars.bench.step import synchronize, time_steps
from torch_mars.cli import _positive_int
from torch_mars.kernels import TRITON_AVAILABLE
from torch_mars.optim.newton_schulz import (
    NS_COEFFICIENTS,
    NS_NORM_EPS,
    batched_shampoo_directions,
    newton_schulz_orthogonalize,
)

STEPS = 5
# GPT-2 small's hidden matrices per layer, as (short, long): c_attn, attn c_proj, mlp c_fc and
# mlp c_proj (the last two one shape once taken as (short, long)).
LAYER_SHAPES = [(768, 2304), (768, 768), (768, 3072), (768, 3072)]
LAYERS = 12
MATMULS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}


def normalized(matrix: Tensor, dtype: torch.dtype) -> Tensor:
    """Every form's start, the library's: each matrix over its Frobenius norm, in ``dtype``."""
    norm = torch.linalg.vector_norm(matrix, dim=(-2, -1), keepdim=True)
    return (matrix / (norm + NS_NORM_EPS)).to(dtype)


def muon_reference_newton_schulz(matrix: Tensor, steps: int, dtype: torch.dtype) -> Tensor:
    """Muon's reference form, each product and sum rounded to ``dtype`` as it goes:
    ``A = X X^T; B = b A + c A A; X = a X + B X``."""
    a, b, c = NS_COEFFICIENTS
    x = normalized(matrix, dtype)
    for _ in range(steps):
        gram = x @ x.mT
        polynomial = b * gram + c * gram @ gram
        x = a * x + polynomial @ x
    return x.to(matrix.dtype)


def folded_newton_schulz(matrix: Tensor, steps: int, dtype: torch.dtype) -> Tensor:
    """The standard form with ``a`` folded into the small matrix: ``X <- (a I + b G + c G^2) X``,
    one plain matmul with ``X`` per iteration (no copy of ``X`` into the output for a fused
    sum, no read of it in the matmul's epilogue); ``a + (b G + c G^2)_ii`` is rounded to
    ``dtype``. ``matrix`` is a ``(batch, m, n)`` stack with ``m <= n``."""
    a, b, c = NS_COEFFICIENTS
    x = normalized(matrix, dtype)
    for _ in range(steps):
        gram = torch.bmm(x, x.mT)
        polynomial = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        polynomial.diagonal(dim1=-2, dim2=-1).add_(a)
        x = torch.bmm(polynomial, x)
    return x.to(matrix.dtype)


def gram_newton_schulz(matrix: Tensor, steps: int, dtype: torch.dtype, restart: int) -> Tensor:
    """The standard form's polynomial iterated on ``X X^T`` (module docstring), restarted from
    ``X`` every ``restart`` iterations; ``matrix`` is a ``(batch, m, n)`` stack with ``m <= n``."""
    a, b, c = NS_COEFFICIENTS
    x = normalized(matrix, dtype)
    done = 0
    while done < steps:
        block = min(restart, steps - done)
        gram = torch.bmm(x, x.mT)
        q = None
        for k in range(block):
            p = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
            p.diagonal(dim1=-2, dim2=-1).add_(a)
            q = p if q is None else torch.bmm(p, q)
            if k < block - 1:
                gram = torch.bmm(p, torch.bmm(p, gram))
        x = torch.bmm(q, x)
        done += block
    return x.to(matrix.dtype)


def standard_flops(m: int, n: int, steps: int) -> int:
    return steps * (4 * m * m * n + 2 * m**3)


def gram_flops(m: int, n: int, steps: int, restart: int) -> int:
    """Matmul FLOPs of :func:`gram_newton_schulz` on one ``m x n`` matrix."""
    flops, done = 0, 0
    while done < steps:
        block = min(restart, steps - done)
        # X X^T, and Q X at the end; per iteration P (one m^3 product), Q (all but the first),
        # and A (two products, all but the last).
        cubes = block + (block - 1) + 2 * (block - 1)
        flops += 4 * m * m * n + 2 * m**3 * cubes
        done += block
    return flops


def triangle_flops(m: int, n: int, steps: int) -> int:
    """Matmul FLOPs of the triangle form on one ``m x n`` matrix, ``m <= n``: half of ``X X^T``
    and of ``G G^T``, all of ``P X``."""
    return steps * (3 * m * m * n + m**3)


def forms(
    restarts: list[int], device: torch.device
) -> dict[str, tuple[Callable[[Tensor, torch.dtype], Tensor], Callable]]:
    """Each form: (orthogonalise a stack in a dtype, FLOPs of one ``m x n`` matrix); the
    triangle form where its Triton kernel runs (CUDA)."""
    table = {
        "standard": (
            lambda x, dtype: newton_schulz_orthogonalize(x, STEPS, dtype),
            lambda m, n: standard_flops(m, n, STEPS),
        ),
        "muon-reference": (
            lambda x, dtype: muon_reference_newton_schulz(x, STEPS, dtype),
            lambda m, n: standard_flops(m, n, STEPS),
        ),
        "folded": (
            lambda x, dtype: folded_newton_schulz(x, STEPS, dtype),
            lambda m, n: standard_flops(m, n, STEPS),
        ),
    }
    if device.type == "cuda" and TRITON_AVAILABLE:
        table["triangle"] = (
            lambda x, dtype: newton_schulz_orthogonalize(x, STEPS, dtype, "quintic", "triangle"),
            lambda m, n: triangle_flops(m, n, STEPS),
        )
    for k in restarts:
        table[f"gram-r{k}"] = (
            lambda x, dtype, k=k: gram_newton_schulz(x, STEPS, dtype, k),
            lambda m, n, k=k: gram_flops(m, n, STEPS, k),
        )
    return table


def test_matrices(kind: str, batch: int, m: int, n: int, generator: torch.Generator) -> Tensor:
    """``batch`` float64 matrices of ``m x n`` with the spectrum ``kind`` names."""
    if kind == "gaussian":
        return torch.randn(batch, m, n, generator=generator, dtype=torch.float64)
    left = torch.linalg.qr(torch.randn(batch, m, m, generator=generator, dtype=torch.float64))[0]
    right = torch.linalg.qr(torch.randn(batch, n, m, generator=generator, dtype=torch.float64))[0]
    if kind == "one-over-i":
        spectrum = 1.0 / torch.arange(1, m + 1, dtype=torch.float64)
    else:
        spectrum = torch.full((m,), 1e-3, dtype=torch.float64)
        spectrum[:8] = torch.tensor([100.0, 50, 20, 10, 5, 2, 1, 1], dtype=torch.float64)
    return left @ torch.diag_embed(spectrum.expand(batch, m)) @ right.mT


def accuracy_rows(table: dict, scale: int, device: torch.device) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    rows = []
    for kind in ("gaussian", "one-over-i", "low-rank"):
        for m, n in sorted(set(LAYER_SHAPES)):
            m, n = m // scale, n // scale
            x = test_matrices(kind, 2, m, n, generator).to(device)
            exact = newton_schulz_orthogonalize(x, STEPS, torch.float64)
            row = {"matrices": kind, "shape": f"{m} x {n}"}
            for name, (orthogonalize, _) in table.items():
                for dtype in (torch.bfloat16, torch.float32):
                    error = (orthogonalize(x, dtype) - exact).norm() / exact.norm()
                    row[f"{name} {str(dtype)[6:]}"] = float(error)
            rows.append(row)
    return rows


def gpt2_small_stacks(scale: int, device: torch.device) -> list[Tensor]:
    """The hidden matrices' momenta as one float32 stack per ``(short, long)`` shape."""
    counts: dict[tuple[int, int], int] = {}
    for shape in LAYER_SHAPES:
        counts[shape] = counts.get(shape, 0) + LAYERS
    generator = torch.Generator().manual_seed(1)
    return [
        torch.randn(count, m // scale, n // scale, generator=generator).to(device)
        for (m, n), count in counts.items()
    ]


def timing_rows(table: dict, stacks: list[Tensor], dtype: torch.dtype, repeats: int) -> list[dict]:
    device = stacks[0].device
    rows = []
    for name, (orthogonalize, flops_of) in table.items():

        def run(orthogonalize: Callable = orthogonalize) -> None:
            for stack in stacks:
                orthogonalize(stack, dtype)

        ms = time_steps(run, device, warmup=1, repeats=repeats)
        flops = sum(s.size(0) * flops_of(s.size(1), s.size(2)) for s in stacks)
        rows.append(
            {"form": name, "ms": ms, "TFLOP": flops / 1e12, "TFLOP/s": flops / 1e12 / (ms / 1e3)}
        )
    return rows


def profile_rows(stacks: list[Tensor], dtype: torch.dtype) -> list[dict]:
    """Device time per aten op of the library's batched Newton-Schulz directions, from stacks
    unbound into the per-matrix momenta a step holds."""
    momenta = [matrix.contiguous() for stack in stacks for matrix in stack.unbind(0)]
    device = momenta[0].device

    def directions() -> None:
        batched_shampoo_directions(momenta, STEPS, ns_dtype=dtype)

    directions()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    synchronize(device)
    with torch.profiler.profile(activities=activities) as profiler:
        directions()
        synchronize(device)
    attribute = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    rows = []
    total = 0.0
    for event in profiler.key_averages():
        us = getattr(event, attribute)
        if us <= 0 or not event.key.startswith("aten::"):
            continue
        total += us
        rows.append({"op": event.key, "calls": event.count, "ms": us / 1e3})
    rows.sort(key=lambda r: -r["ms"])
    for row in rows:
        row["share"] = row["ms"] / (total / 1e3)
    flops = sum(s.size(0) * standard_flops(s.size(1), s.size(2), STEPS) for s in stacks)
    matmul_ms = sum(r["ms"] for r in rows if r["op"] in MATMULS)
    rows.append(
        {
            "op": "matmuls, all",
            "calls": sum(r["calls"] for r in rows if r["op"] in MATMULS),
            "ms": matmul_ms,
            "share": matmul_ms / (total / 1e3),
            "TFLOP/s": flops / 1e12 / (matmul_ms / 1e3) if matmul_ms else 0.0,
        }
    )
    return rows


def markdown(rows: list[dict]) -> str:
    headers = list(rows[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--scale", type=int, choices=(1, 2, 4, 8, 16), default=1, help="divide every side by this"
    )
    parser.add_argument("--restarts", type=_positive_int, nargs="+", default=[2, 3, 5])
    parser.add_argument("--repeats", type=_positive_int, default=20)
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        default=None,
        help="of the profile and timing (default: bf16 on CUDA, float32 else)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = (
        getattr(torch, args.dtype)
        if args.dtype
        else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    )
    table = forms(args.restarts, device)
    stacks = gpt2_small_stacks(args.scale, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"Newton-Schulz forms on {name}, torch {torch.__version__}, sides / {args.scale}, "
        f"{STEPS} iterations, profile and timing in {str(dtype)[6:]}\n"
    )
    results = {"device": name, "scale": args.scale, "dtype": str(dtype)}
    results["profile"] = profile_rows(stacks, dtype)
    print("Profile of the library's form, per aten op:\n" + markdown(results["profile"]) + "\n")
    results["accuracy"] = accuracy_rows(table, args.scale, device)
    print(
        "Relative distance to the standard form in float64:\n"
        + markdown(results["accuracy"])
        + "\n"
    )
    results["timing"] = timing_rows(table, stacks, dtype, args.repeats)
    print(f"Time of the 48 matrices, median of {args.repeats}:\n" + markdown(results["timing"]))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
