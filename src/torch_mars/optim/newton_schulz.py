"""Newton-Schulz orthogonalisation, the preconditioner of ``mars-shampoo`` (as in Muon), and the
step of the Shampoo matrices that every multi-tensor and fused path takes after its element-wise
part."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torch_mars.optim.step_math import (
    foreach_cautious_,
    foreach_step_,
    matrix_shape,
    orthogonal_update_scale,
    reduction_dtype,
    update_coefficients,
)
from torch_mars.optim.step_types import (
    MarsHyperparams,
    StepTensors,
    WholeTensorOps,
    group_by_device_and_dtype,
    hyperparams_on_device,
)

# Quintic iteration X <- a X + b (X X^T) X + c (X X^T)^2 X; these coefficients push every
# singular value of a spectrally normalised matrix towards 1 in few steps (Jordan et al., Muon).
NS_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
NS_NORM_EPS = 1e-7
# ns_iteration="gram" forms X from its Gram matrix every this many iterations: iterating the
# Gram matrix instead of X lets round-off grow, and a restart resets it.
GRAM_RESTART = 3
# ns_iteration="polar-express": each step's odd quintic is the minimax approximation of 1 on the
# interval the singular values are in by then, from [POLAR_EXPRESS_LOWER, 1] (after the
# Frobenius normalisation) on; each is designed on its interval's upper end widened by
# POLAR_EXPRESS_SAFETY, so that round-off pushing a value past the end (bf16) cannot send it
# up the quintic's steep side.
POLAR_EXPRESS_LOWER = 1e-3
POLAR_EXPRESS_SAFETY = 1.02


_CPU_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def _cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AMX or AVX-512 BF16, read from
    ``/proc/cpuinfo``; False where that file does not exist)."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return False
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return bool(_CPU_BF16_FLAGS & set(line.split()))
    return False


# Read once, at import: a compiled step must not trace a file read.
CPU_HAS_FAST_BF16 = _cpu_has_fast_bf16()


def fast_matmul_dtype(device: torch.device) -> torch.dtype:
    """The dtype Newton-Schulz runs in on ``device`` by default: bfloat16 where matrix
    multiplication is fast in it (CUDA from compute capability 8.0, XPU, CPUs with AMX or
    AVX-512 BF16), float32 elsewhere. Without bf16 units a CPU emulates bf16 matmuls, several
    times slower than float32 (docs/benchmarks.md)."""
    if device.type == "cuda":
        fast = torch.cuda.get_device_capability(device) >= (8, 0)
        return torch.bfloat16 if fast else torch.float32
    if device.type == "xpu" or (device.type == "cpu" and CPU_HAS_FAST_BF16):
        return torch.bfloat16
    return torch.float32


def default_ns_dtype(matrix: Tensor) -> torch.dtype:
    """``ns_dtype=None``: float64 for float64 matrices (a float64 model of the maths stays one),
    else :func:`fast_matmul_dtype` of their device."""
    if matrix.dtype == torch.float64:
        return torch.float64
    return fast_matmul_dtype(matrix.device)


def newton_schulz_orthogonalize(
    matrix: Tensor,
    steps: int,
    dtype: torch.dtype | None = None,
    iteration: str = "quintic",
    products: str = "dense",
) -> Tensor:
    """Approximate the orthogonal factor ``U V^T`` of ``matrix = U S V^T``.

    Args:
        matrix: a tensor of shape ``(rows, cols)`` or a batch ``(batch, rows, cols)`` of
            matrices orthogonalised independently (one chain of batched matmuls), any floating
            dtype.
        steps: number of quintic iterations (>= 1).
        dtype: the dtype the iterations run in; None: :func:`default_ns_dtype` (float64 for
            float64 matrices, else the device's fast matmul dtype).
        iteration: ``"quintic"``: ``X <- a X + (b G + c G^2) X`` with ``G = X X^T`` (Muon's
            fixed ``a, b, c``); ``"polar-express"``: the same step with each iteration's
            ``a, b, c`` from :func:`polar_express_coefficients` (Amsel et al. 2025);
            ``"gram"``: the same polynomial iterated on the small Gram matrix (Gram
            Newton-Schulz; Zhang, Amsel, Chen, Dao 2026): ``P = a + b G + c G^2``, ``Q <- P Q``,
            ``G <- P^2 G``, with ``X = Q X`` formed every :data:`GRAM_RESTART` iterations and
            ``G`` recomputed from it. In exact arithmetic the two are equal; the Gram form does
            fewer FLOPs when the long side is well above the short one.
        products: ``"dense"``: torch's matmuls; ``"triangle"``: the symmetric products
            (``G = X X^T``, and ``a I + b G + c G G^T``) by
            :func:`~torch_mars.kernels.triton_symmetric.symmetric_product`, one triangle of
            tiles each (Triton: CUDA tensors, or CPU ones under ``TRITON_INTERPRET=1``), the
            identity term folded in; bf16, fp16 or fp32 iterations.

    Returns:
        A tensor of the same shape and dtype as ``matrix`` whose singular values lie roughly in
        ``[0.7, 1.2]``. The iterations run in ``dtype`` on ``matrix / (||matrix||_F + 1e-7)``,
        on the transpose when ``rows > cols`` so that the Gram matrix is the smaller one.

    >>> q = newton_schulz_orthogonalize(torch.randn(8, 4, dtype=torch.float64), steps=5)
    >>> bool(((torch.linalg.svdvals(q) - 1).abs() < 0.35).all())
    True
    """
    if matrix.ndim not in (2, 3):
        raise ValueError(
            f"matrix must have shape (rows, cols) or (batch, rows, cols), got {tuple(matrix.shape)}"
        )
    dtype = dtype or default_ns_dtype(matrix)
    wide = _orthogonalize_wide([matrix], steps, dtype, iteration, products)
    return (wide.mT if matrix.size(-2) > matrix.size(-1) else wide).to(matrix.dtype)


def _orthogonalize_wide(
    stacks: list[Tensor],
    steps: int,
    dtype: torch.dtype,
    iteration: str = "quintic",
    products: str = "dense",
) -> Tensor:
    """Newton-Schulz of every matrix of ``stacks`` in one chain of matmuls, in ``dtype``.

    Args:
        stacks: tensors of one dtype and device, each a ``(rows, cols)`` matrix or a ``(batch,
            rows, cols)`` stack, ``(rows, cols)`` one ``(short, long)`` shape or its transpose;
            more than one only as stacks.
        steps, dtype, iteration, products: as in :func:`newton_schulz_orthogonalize`.

    Returns:
        The orthogonalised matrices as ``(short, long)`` (the transpose of those with more rows
        than columns: Newton-Schulz commutes with transposition, and the Gram matrix ``X X^T``
        is then the smaller one), in ``dtype``, stacked along dim 0 in the order of ``stacks``.
    """
    short, long = sorted(stacks[0].shape[-2:])
    if len(stacks) == 1:
        x = _normalized(stacks[0], dtype)
        x = x.mT if x.size(-2) > short else x
    else:
        x = torch.empty(
            (sum(len(s) for s in stacks), short, long), dtype=dtype, device=stacks[0].device
        )
        start = 0
        for stack in stacks:
            block = x[start : start + len(stack)]
            if stack.size(-2) > short:
                # Transposed into its place in the batch; a plain stack is divided into it.
                block.copy_(_normalized(stack, dtype).mT)
            else:
                _normalized(stack, dtype, out=block)
            start += len(stack)
    if products == "triangle":
        return _triangle_iterations(x, steps, iteration)
    if iteration == "gram":
        return _gram_iterations(x, steps)
    schedule = (
        polar_express_coefficients(steps)
        if iteration == "polar-express"
        else (NS_COEFFICIENTS,) * steps
    )
    # bmm/mm rather than ``@``: matmul on a batch dispatches expand, view and _unsafe_view
    # around its bmm, host work that a GPU pays per iteration and per shape.
    product = torch.mm if x.ndim == 2 else torch.bmm
    folded = folds_identity_term(x.device)
    for a, b, c in schedule:
        gram = product(x, x.mT)
        # b G + c G^2: the small square product with its sum fused into the matmul.
        polynomial = _add_product(gram, gram, gram, beta=b, alpha=c)
        if folded:
            polynomial.diagonal(dim1=-2, dim2=-1).add_(a)
            x = product(polynomial, x)
        else:
            x = _add_product(x, polynomial, x, beta=a)
    return x


@functools.lru_cache(maxsize=32)
def polar_express_coefficients(steps: int) -> tuple[tuple[float, float, float], ...]:
    """The Polar Express schedule (Amsel, Chen, Goldstein, Musco, Musco 2025, arXiv
    2505.16932), derived here: step ``t``'s ``(a, b, c)`` make ``p(x) = a x + b x^3 + c x^5``
    the minimax approximation of 1 on ``[l_t, u_t * POLAR_EXPRESS_SAFETY]``, and the next
    interval is ``p``'s range there, from ``[POLAR_EXPRESS_LOWER, 1]``. Each ``p`` is found by
    Remez exchange in float64: its error equioscillates at ``l``, the two roots of ``p'`` and
    ``u``, which for an odd quintic are in closed form."""
    lower, upper = POLAR_EXPRESS_LOWER, 1.0
    schedule = []
    for _ in range(steps):
        upper *= POLAR_EXPRESS_SAFETY
        coefficients = _minimax_odd_quintic(lower, upper)
        grid = torch.linspace(lower, upper, 100_001, dtype=torch.float64)
        values = _odd_quintic(coefficients, grid)
        lower, upper = float(values.min()), float(values.max())
        schedule.append(tuple(float(v) for v in coefficients))
    return tuple(schedule)  # type: ignore[return-value]


def _odd_quintic(coefficients: Tensor, x: Tensor) -> Tensor:
    a, b, c = coefficients
    return a * x + b * x**3 + c * x**5


def _minimax_odd_quintic(lower: float, upper: float) -> Tensor:
    """``(a, b, c)`` minimising ``max |1 - p(x)|`` over ``[lower, upper]`` (float64)."""
    references = torch.linspace(lower, upper, 4, dtype=torch.float64)
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    coefficients = torch.zeros(3, dtype=torch.float64)
    for _ in range(100):
        system = torch.stack([references, references**3, references**5, signs], dim=1)
        solution = torch.linalg.solve(system, torch.ones(4, dtype=torch.float64))
        coefficients = solution[:3]
        a, b, c = coefficients
        # p'(x) = a + 3 b x^2 + 5 c x^4: its roots in x^2 are the error's interior extrema.
        discriminant = 9 * b * b - 20 * a * c
        if discriminant <= 0:
            break
        squares = torch.stack([-3 * b - discriminant.sqrt(), -3 * b + discriminant.sqrt()])
        roots = (squares / (10 * c)).clamp_min(0).sqrt().sort().values
        if not (lower < roots[0] < roots[1] < upper):
            break
        updated = torch.stack([references[0], roots[0], roots[1], references[3]])
        if torch.equal(updated, references):
            break
        references = updated
    return coefficients


def _triangle_iterations(x: Tensor, steps: int, iteration: str) -> Tensor:
    """``steps`` iterations with the symmetric products one triangle each
    (:func:`~torch_mars.kernels.triton_symmetric.symmetric_product`): ``G = X X^T``,
    ``P = a I + b G + c G G^T`` (``G`` is symmetric, so ``G^2 = G G^T``), ``X <- P X``; the
    Gram form (``iteration="gram"``) with its ``G`` and ``P`` made so and the rest dense."""
    from torch_mars.kernels.triton_symmetric import symmetric_product

    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"ns_products='triangle' runs bf16, fp16 or fp32 iterations, not {x.dtype}: use "
            "ns_products='dense' (float64 references run there)"
        )
    batch = x if x.ndim == 3 else x.unsqueeze(0)
    if iteration == "gram":
        return _gram_iterations(batch, steps, symmetric_product).view_as(x)
    schedule = (
        polar_express_coefficients(steps)
        if iteration == "polar-express"
        else (NS_COEFFICIENTS,) * steps
    )
    for a, b, c in schedule:
        gram = symmetric_product(batch)
        polynomial = symmetric_product(gram, alpha=c, base=gram, beta=b, diagonal=a)
        batch = torch.bmm(polynomial, batch)
    return batch.view_as(x)


def _gram_iterations(
    x: Tensor, steps: int, symmetric: Callable[..., Tensor] | None = None
) -> Tensor:
    """``steps`` iterations of the quintic polynomial on the Gram matrix of the ``(short,
    long)`` matrices ``x`` (:func:`newton_schulz_orthogonalize`'s ``"gram"``): ``X_k = Q_k X``
    with ``Q`` accumulated from ``P = a I + b G + c G^2`` and ``G <- P^2 G`` (``P`` commutes
    with ``G``), restarted from ``X = Q X`` every :data:`GRAM_RESTART` iterations.
    ``symmetric``: :func:`~torch_mars.kernels.triton_symmetric.symmetric_product`, which then
    forms each ``G`` from ``X`` and each ``P`` (``x`` a batch)."""
    a, b, c = NS_COEFFICIENTS
    product = torch.mm if x.ndim == 2 else torch.bmm
    done = 0
    while done < steps:
        block = min(GRAM_RESTART, steps - done)
        gram = product(x, x.mT) if symmetric is None else symmetric(x)
        accumulated = None
        for k in range(block):
            if symmetric is None:
                polynomial = _add_product(gram, gram, gram, beta=b, alpha=c)
                polynomial.diagonal(dim1=-2, dim2=-1).add_(a)
            else:
                polynomial = symmetric(gram, alpha=c, base=gram, beta=b, diagonal=a)
            accumulated = polynomial if accumulated is None else product(polynomial, accumulated)
            if k < block - 1:
                gram = product(polynomial, product(polynomial, gram))
        x = product(accumulated, x)
        done += block
    return x


def folds_identity_term(device: torch.device) -> bool:
    """Whether the iteration on ``device`` forms ``(a I + b G + c G^2) X`` (``a`` added to the
    small matrix's diagonal, then one plain product) rather than ``a X + (b G + c G^2) X``.

    The same polynomial, rounded differently only in ``a + (b G + c G^2)_ii``. On CUDA the
    fused sum ``baddbmm(X, P, X)`` copies ``X`` into its output first (``X`` is both an
    operand and the sum's input): 19% of Newton-Schulz's time on GPT-2 small's matrices on an
    H200, where the folded form took 3.47 ms against 4.12 (docs/benchmarks.md). Elsewhere the
    fused sum is kept, so CPU results stay those of earlier studies.
    """
    return device.type == "cuda"


def _normalized(matrix: Tensor, dtype: torch.dtype, out: Tensor | None = None) -> Tensor:
    """``matrix / (||matrix||_F + 1e-7)`` per matrix, stored in ``dtype`` (into ``out`` when
    given) as it is formed: one pass, not a quotient in ``matrix``'s precision and its cast."""
    norm = torch.linalg.vector_norm(
        matrix, dim=(-2, -1), keepdim=True, dtype=reduction_dtype(matrix.dtype)
    )
    if out is None:
        out = torch.empty_like(matrix, dtype=dtype)
    return torch.div(matrix, norm + NS_NORM_EPS, out=out)


def _add_product(
    base: Tensor, left: Tensor, right: Tensor, beta: float, alpha: float = 1.0
) -> Tensor:
    """``beta * base + alpha * left @ right`` in one matmul kernel (``addmm``, or ``baddbmm``
    for batches)."""
    fused = torch.addmm if base.ndim == 2 else torch.baddbmm
    return fused(base, left, right, beta=beta, alpha=alpha)


def batched_shampoo_directions(
    exp_avgs: list[Tensor],
    steps: int,
    transposed: bool = False,
    mars_type: str = "mars-shampoo",
    ns_dtype: torch.dtype | None = None,
    ns_iteration: str = "quintic",
    ns_products: str = "dense",
) -> list[Tensor]:
    """``NS(M) * scale`` of each ``M = m.reshape(shape[0], -1)``, the scale of ``mars_type``
    (:func:`~torch_mars.optim.step_math.orthogonal_update_scale`), the iterations in
    ``ns_dtype`` (None: the device's, :func:`fast_matmul_dtype`), by ``ns_iteration`` with
    ``ns_products`` (:func:`newton_schulz_orthogonalize`).

    Matrices are orthogonalised as ``(short, long)``: a ``(rows, cols)`` matrix with ``rows >
    cols`` is taken transposed, since Newton-Schulz commutes with transposition. Those of one
    such shape, dtype and device are stacked (a ``3072 x 768`` and a ``768 x 3072`` matrix
    together) and orthogonalised in one chain of batched matmuls instead of one per tensor.
    ``transposed``: the matrices are stored as ``(in, out)`` (see :func:`shampoo_scale`).
    Returns tensors of the shapes of ``exp_avgs`` (zeros for tensors with no elements).
    """
    directions: list[Tensor | None] = [None] * len(exp_avgs)
    by_shape: dict[tuple, list[int]] = {}
    for index, m in enumerate(exp_avgs):
        by_shape.setdefault((m.shape, m.dtype, m.device), []).append(index)
    # Shapes, not tensors, are looped over in Python below: on a GPU host time is step time.
    batches: dict[tuple, list[tuple[torch.Size, list[int]]]] = {}
    for (shape, dtype, device), indices in by_shape.items():
        rows, cols = matrix_shape(shape)
        key = (min(rows, cols), max(rows, cols), dtype, device)
        batches.setdefault(key, []).append((shape, indices))
    for (short, long, _, _), shapes in batches.items():
        if short * long == 0:
            for _, indices in shapes:
                for index in indices:
                    directions[index] = torch.zeros_like(exp_avgs[index])
            continue
        stacks = [_stacked_matrices(exp_avgs, shape, indices) for shape, indices in shapes]
        dtype = ns_dtype or default_ns_dtype(stacks[0])
        orthogonal = _orthogonalize_wide(stacks, steps, dtype, ns_iteration, ns_products)
        orthogonal = orthogonal.to(stacks[0].dtype)
        start = 0
        for shape, indices in shapes:
            block = orthogonal if len(shapes) == 1 else orthogonal[start : start + len(indices)]
            block.mul_(orthogonal_update_scale(mars_type, shape, transposed))
            for index, matrix in zip(indices, _unstacked(block, shape), strict=True):
                directions[index] = matrix
            start += len(indices)
    return directions  # type: ignore[return-value]


def newton_schulz_settings(hp: MarsHyperparams) -> tuple[Any, ...]:
    """The settings of ``hp`` that a Shampoo direction takes after its momenta, in the order
    :func:`batched_shampoo_directions` and ``single_tensor.shampoo_direction`` take them."""
    return (
        hp.ns_steps,
        hp.transposed_matrices,
        hp.mars_type,
        hp.ns_dtype,
        hp.ns_iteration,
        hp.ns_products,
    )


def _stacked_matrices(tensors: list[Tensor], shape: torch.Size, indices: list[int]) -> Tensor:
    """``tensors[i]`` for ``i`` in ``indices``, all of ``shape``, stacked as ``(batch, rows,
    cols)`` matrices (the ``(shape[0], -1)`` view): one view of the stack, not one per tensor."""
    stacked = torch.stack([tensors[i] for i in indices])
    return stacked if len(shape) == 2 else stacked.view(len(indices), *matrix_shape(shape))


def _unstacked(block: Tensor, shape: torch.Size) -> list[Tensor]:
    """Tensors of ``shape``, one per ``(short, long)`` matrix of ``block`` (transposed back
    where ``shape`` has more rows than columns)."""
    rows, cols = matrix_shape(shape)
    matrices = block.mT if rows > cols else block
    if len(shape) == 2:
        return list(matrices.unbind(0))
    return list(matrices.reshape(-1, *shape).unbind(0))


def apply_shampoo_directions(
    matrices: StepTensors,
    hp: MarsHyperparams,
    whole: WholeTensorOps | None = None,
    gates: list[Tensor] | None = None,
) -> None:
    """``p <- p (1 - lr wd) - lr NS(m) sqrt(max(1, rows/cols))`` for matrices whose ``m`` is up
    to date, with Newton-Schulz batched over same-shape matrices (over the whole matrices of
    local shards when ``whole`` is given). ``gates``: one 0-d tensor per matrix, 0 for those
    whose step is skipped (their ``p`` is left as it is)."""

    def directions_of(momenta: list[Tensor]) -> list[Tensor]:
        return batched_shampoo_directions(momenta, *newton_schulz_settings(hp))

    for indices in group_by_device_and_dtype(matrices.params):
        group = matrices.select(indices)
        hp = hyperparams_on_device(hp, group.params[0].device)
        if gates is None:
            k = update_coefficients(hp)
        else:
            stacked = torch.stack([gates[i] for i in indices]).to(group.params[0].dtype)
            k = update_coefficients(hp, stacked).unbind()
        if hp.weight_decay != 0.0:
            torch._foreach_mul_(group.params, k.weight_decay_factor)
        if whole is None:
            directions = directions_of(group.exp_avgs)
        else:
            directions = whole.shampoo_directions(group.params, group.exp_avgs, directions_of)
        directions = [d.to(p.dtype) for d, p in zip(directions, group.params, strict=True)]
        if hp.cautious:
            grads = torch._foreach_neg(group.grads) if hp.maximize else list(group.grads)
            foreach_cautious_(directions, grads, whole)
        foreach_step_(group.params, directions, k.lr)
