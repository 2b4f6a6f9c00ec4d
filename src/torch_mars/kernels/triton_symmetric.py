"""Symmetric products for Newton-Schulz on CUDA: ``beta B + alpha X X^T + d I`` computed one
triangle of tiles at a time and mirrored, half the FLOPs of a general matmul.

Both square products of a Newton-Schulz step are of this form: the Gram matrix ``G = X X^T``
of a ``(short, long)`` matrix, and ``P = b G + c G^2 + a I``, where ``G^2 = G G^T`` since ``G``
is symmetric. Only ``P X`` is a general product. For ``X`` of ``m x n`` a step costs
``2 m^2 n`` (Gram) + ``2 m^3`` (square) + ``2 m^2 n`` FLOPs as dense matmuls and ``m^2 n +
m^3 + 2 m^2 n`` here: 0.67x when ``n = m``, 0.72x when ``n = 4 m`` (GPT-2's MLP matrices).

One program computes one tile ``(i, j)``, ``i >= j``, of the lower triangle with fp32
accumulation, adds ``beta B[i, j]`` and, on diagonal tiles, ``d I``, and stores the tile and
its transpose at ``(j, i)`` (a diagonal tile's lower half mirrored onto its upper): the
result is symmetric to the bit, which ``B`` must be too (it is the previous product).
Programs are numbered along the triangle; a batch of matrices (the same-shape stack
Newton-Schulz already takes) is the grid's second axis.

Triton is optional; the kernel also runs on CPU tensors under ``TRITON_INTERPRET=1``, which is
how CI tests it. What it gains on a GPU is measured by ``benchmarks/perf/newton_schulz_forms.py``
(the ``triangle`` rows), not asserted.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from torch_mars.kernels import TRITON_AVAILABLE, require_triton
from torch_mars.kernels.triton_step import Specialization

# (BLOCK_M, BLOCK_K, num_warps) of the GPU launches, per input dtype: for large Gram matrices
# (512 rows or more), then the rest. fp32 products run in fp32 FMAs, not tensor cores, and
# larger tiles of them spill registers.
_GPU_TILES: dict[torch.dtype, tuple[tuple[int, int, int], ...]] = {
    torch.bfloat16: ((128, 64, 8), (64, 64, 4)),
    torch.float16: ((128, 64, 8), (64, 64, 4)),
    torch.float32: ((64, 32, 8), (32, 32, 4)),
}
# The inner strides, 1 for contiguous matrices: Triton makes an int argument equal to 1 a
# constant of the launch.
_UNIT_STRIDES = ("stride_xk", "stride_bc", "stride_oc")
# The kernel's integer arguments, in order.
_SCALAR_ARGS = ("rows", "depth", "stride_xb", "stride_xr", "stride_xk", "stride_bb", "stride_br",
                "stride_bc", "stride_ob", "stride_or", "stride_oc")  # fmt: skip

if TRITON_AVAILABLE:
    import triton
    import triton.language as tl

    @triton.jit
    def _lower_tile_product_kernel(
        x_ptr,
        base_ptr,
        out_ptr,
        rows,
        depth,
        stride_xb,
        stride_xr,
        stride_xk,
        stride_bb,
        stride_br,
        stride_bc,
        stride_ob,
        stride_or,
        stride_oc,
        alpha,
        beta,
        diagonal,
        HAS_BASE: tl.constexpr,
        PRECISION: tl.constexpr,
        UPCAST: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        tile = tl.program_id(0)
        batch = tl.program_id(1)
        # Tile number t of the lower triangle, row by row: t = i (i + 1) / 2 + j, j <= i. The
        # float root can be one off for large t; the two corrections make i exact.
        i = ((tl.sqrt(8.0 * tile.to(tl.float32) + 1.0) - 1.0) * 0.5).to(tl.int32)
        i = tl.where((i + 1) * (i + 2) // 2 <= tile, i + 1, i)
        i = tl.where(i * (i + 1) // 2 > tile, i - 1, i)
        j = tile - i * (i + 1) // 2

        offs_i = i * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_j = j * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_k = tl.arange(0, BLOCK_K)
        x_batch = x_ptr + batch.to(tl.int64) * stride_xb
        acc = tl.zeros((BLOCK_M, BLOCK_M), dtype=tl.float32)
        for k0 in range(0, depth, BLOCK_K):
            ks = k0 + offs_k
            left = tl.load(
                x_batch + offs_i[:, None] * stride_xr + ks[None, :] * stride_xk,
                mask=(offs_i[:, None] < rows) & (ks[None, :] < depth),
                other=0.0,
            )
            right = tl.load(
                x_batch + offs_j[None, :] * stride_xr + ks[:, None] * stride_xk,
                mask=(offs_j[None, :] < rows) & (ks[:, None] < depth),
                other=0.0,
            )
            if UPCAST:
                left, right = left.to(tl.float32), right.to(tl.float32)
            acc += tl.dot(left, right, input_precision=PRECISION)
        acc = acc * alpha
        inside = (offs_i[:, None] < rows) & (offs_j[None, :] < rows)
        if HAS_BASE:
            base = tl.load(
                base_ptr
                + batch.to(tl.int64) * stride_bb
                + offs_i[:, None] * stride_br
                + offs_j[None, :] * stride_bc,
                mask=inside,
                other=0.0,
            )
            acc += beta * base.to(tl.float32)
        acc += tl.where(offs_i[:, None] == offs_j[None, :], diagonal, 0.0)
        result = acc.to(out_ptr.dtype.element_ty)
        if i == j:
            # A diagonal tile's (r, c) and (c, r) sum the same products, but a dot need not
            # add them in the same order (NumPy's BLAS in the interpreter does not): its lower
            # half is mirrored onto its upper half, so the tile is symmetric to the bit too.
            result = tl.where(offs_i[:, None] >= offs_j[None, :], result, tl.trans(result))
        out_batch = out_ptr + batch.to(tl.int64) * stride_ob
        tl.store(
            out_batch + offs_i[:, None] * stride_or + offs_j[None, :] * stride_oc,
            result,
            mask=inside,
        )
        if i != j:
            # The mirror: element (r, c) of the tile goes to (c, r), the same rounded value.
            tl.store(
                out_batch + offs_j[None, :] * stride_or + offs_i[:, None] * stride_oc,
                result,
                mask=inside,
            )


def launch_specializations() -> list[Specialization]:
    """Every variant :func:`symmetric_product` launches on a GPU: per input dtype, with and
    without ``base``, in each tile configuration of :func:`_tiles`; each as Triton specializes
    a launch on contiguous matrices whose sides are multiples of 16 (GPT-2's: the inner strides
    are the constant 1, pointers and the other sizes divisible by 16), the case it is built
    for."""
    variants = []
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16"), (torch.float32, "fp32")):
        for has_base in (False, True):
            for block_m, block_k, warps in _GPU_TILES[dtype]:
                constexprs = {
                    "HAS_BASE": has_base,
                    "PRECISION": _precision(dtype),
                    "UPCAST": False,
                    "BLOCK_M": block_m,
                    "BLOCK_K": block_k,
                } | dict.fromkeys(_UNIT_STRIDES, 1)
                signature = {"x_ptr": f"*{name}", "base_ptr": f"*{name}", "out_ptr": f"*{name}"}
                signature |= dict.fromkeys(_SCALAR_ARGS, "i32")
                signature |= {"alpha": "fp32", "beta": "fp32", "diagonal": "fp32"}
                signature |= dict.fromkeys(constexprs, "constexpr")
                names = list(signature)
                divisible = [n for n in names if n.endswith("_ptr") or n in _SCALAR_ARGS]
                attrs = {
                    (names.index(n),): [["tt.divisibility", 16]]
                    for n in divisible
                    if n not in _UNIT_STRIDES
                }
                variants.append(
                    Specialization(
                        "_lower_tile_product_kernel",
                        signature,
                        constexprs,
                        {"num_warps": warps},
                        attrs,
                    )
                )
    return variants


def _precision(dtype: torch.dtype) -> str:
    """fp32 products in fp32, as torch's matmul does by default, not TF32."""
    return "ieee" if dtype == torch.float32 else "tf32"


def _tiles(rows: int, x: Tensor) -> tuple[int, int, int]:
    """``(BLOCK_M, BLOCK_K, num_warps)`` for ``x``: on a GPU, its dtype's (:data:`_GPU_TILES`;
    128 x 64 bf16 tiles with 8 warps for the Gram matrices of GPT-2's layers, 768 or 1280
    rows); 16 x 16 in the CPU interpreter, whose cost grows with the tile."""
    if x.device.type != "cuda":
        return 16, 16, 1
    large, small = _GPU_TILES[x.dtype]
    return large if rows >= 512 else small


def symmetric_product(
    x: Tensor,
    alpha: float = 1.0,
    base: Tensor | None = None,
    beta: float = 0.0,
    diagonal: float = 0.0,
) -> Tensor:
    """``beta * base + alpha * x @ x^T + diagonal * I`` for a batch of matrices, one triangle of
    tiles computed and mirrored (see the module's docstring).

    Args:
        x: ``(batch, rows, depth)``, bf16, fp16 or fp32 (products in fp32, not TF32); strided
            views are read in place.
        alpha, beta, diagonal: Python floats.
        base: ``(batch, rows, rows)``, symmetric (the mirror copies its lower triangle's sum
            to the upper), or None.

    Returns:
        ``(batch, rows, rows)`` in ``x``'s dtype, symmetric to the bit; accumulated in fp32.
    """
    require_triton()
    if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            f"ns_products='triangle' runs a Triton kernel: CUDA tensors (CPU ones only under "
            f"TRITON_INTERPRET=1), got a {x.device.type} tensor; use ns_products='dense'"
        )
    if x.ndim != 3:
        raise ValueError(f"x must have shape (batch, rows, depth), got {tuple(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"x must be bf16, fp16 or fp32 (tl.dot's inputs), got {x.dtype}")
    batch, rows, depth = x.shape
    if base is not None and base.shape != (batch, rows, rows):
        raise ValueError(f"base must have shape {(batch, rows, rows)}, got {tuple(base.shape)}")
    out = torch.empty((batch, rows, rows), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    block_m, block_k, warps = _tiles(rows, x)
    tiles = triton.cdiv(rows, block_m)
    held = base if base is not None else out  # an address only: HAS_BASE=False never reads it
    _lower_tile_product_kernel[(tiles * (tiles + 1) // 2, batch)](
        x,
        held,
        out,
        rows,
        depth,
        *x.stride(),
        *held.stride(),
        *out.stride(),
        float(alpha),
        float(beta),
        float(diagonal),
        HAS_BASE=base is not None,
        PRECISION=_precision(x.dtype),
        # the CPU interpreter's bf16/fp16 tl.dot returns garbage (Triton 3.x); its products of
        # the upcast values are the exact products a GPU's tensor cores sum in fp32
        UPCAST=x.device.type != "cuda",
        BLOCK_M=block_m,
        BLOCK_K=block_k,
        num_warps=warps,
    )
    return out
