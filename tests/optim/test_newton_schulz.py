"""Newton-Schulz: batched by shape (a matrix and its transpose's shape together) equals one
matrix at a time (float64), the dtype it runs in follows the device unless ``ns_dtype`` says
otherwise, and that switch reaches the step."""

from __future__ import annotations

import math

import pytest
import torch

import torch_mars.optim.newton_schulz as newton_schulz
from torch_mars import MARS
from torch_mars.optim.newton_schulz import (
    batched_shampoo_directions,
    default_ns_dtype,
    fast_matmul_dtype,
    newton_schulz_orthogonalize,
)
from torch_mars.optim.single_tensor import shampoo_direction

# (6, 4), (4, 6) and the kernels (6, 2, 2), (4, 3, 2) are one batch of 4 x 6 matrices.
SHAPES = [(6, 4), (6, 4), (4, 6), (3, 2, 2), (6, 2, 2), (6, 4), (5, 5), (4, 3, 2), (4, 6)]


@pytest.mark.parametrize("mars_type", ["mars-shampoo", "mars-m"])
@pytest.mark.parametrize("transposed", [False, True])
def test_batched_by_shape_equals_one_matrix_at_a_time_in_float64(mars_type, transposed):
    generator = torch.Generator().manual_seed(0)
    momenta = [torch.randn(s, dtype=torch.float64, generator=generator) for s in SHAPES]
    batched = batched_shampoo_directions(momenta, 5, transposed, mars_type, torch.float64)
    for m, direction in zip(momenta, batched, strict=True):
        single = shampoo_direction(m, 5, transposed, mars_type, torch.float64)
        assert direction.shape == m.shape
        torch.testing.assert_close(direction, single, rtol=1e-12, atol=1e-12)


def test_the_default_dtype_is_bf16_only_where_the_cpu_multiplies_it_in_hardware(monkeypatch):
    monkeypatch.setattr(newton_schulz, "CPU_HAS_FAST_BF16", False)
    assert fast_matmul_dtype(torch.device("cpu")) == torch.float32
    assert default_ns_dtype(torch.zeros(2, 2, dtype=torch.float64)) == torch.float64
    monkeypatch.setattr(newton_schulz, "CPU_HAS_FAST_BF16", True)
    assert fast_matmul_dtype(torch.device("cpu")) == torch.bfloat16
    assert default_ns_dtype(torch.zeros(2, 2)) == torch.bfloat16
    assert default_ns_dtype(torch.zeros(2, 2, dtype=torch.float64)) == torch.float64


def test_an_explicit_dtype_is_what_the_iterations_run_in():
    matrix = torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    in_bf16 = newton_schulz_orthogonalize(matrix, 5, torch.bfloat16)
    in_fp32 = newton_schulz_orthogonalize(matrix, 5, torch.float32)
    assert in_bf16.dtype == in_fp32.dtype == torch.float64
    # bf16 keeps 8 bits of mantissa: its result sits on a coarse grid that float32's does not.
    assert torch.equal(in_bf16, in_bf16.to(torch.bfloat16).to(torch.float64))
    assert not torch.equal(in_fp32, in_fp32.to(torch.bfloat16).to(torch.float64))


@pytest.mark.parametrize("foreach", [False, True])
def test_the_ns_dtype_switch_reaches_the_step(foreach):
    start = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    results = {}
    for dtype in (torch.bfloat16, torch.float32):
        weight = torch.nn.Parameter(start.clone())
        opt = MARS([weight], lr=0.1, mars_type="mars-shampoo", ns_dtype=dtype, foreach=foreach)
        weight.grad = torch.ones_like(weight)
        opt.step()
        results[dtype] = weight.detach().clone()
    assert not torch.equal(results[torch.bfloat16], results[torch.float32])


def test_a_bad_ns_dtype_is_refused():
    with pytest.raises(ValueError, match="ns_dtype must be None"):
        MARS([torch.nn.Parameter(torch.zeros(2, 2))], ns_dtype=torch.float16)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4, 4)])
def test_a_tensor_that_is_neither_a_matrix_nor_a_batch_of_them_is_refused(shape):
    with pytest.raises(ValueError, match=r"matrix must have shape \(rows, cols\)"):
        newton_schulz_orthogonalize(torch.randn(shape), steps=5)


def _wide_batch(generator: torch.Generator) -> torch.Tensor:
    """Gaussian matrices and one with a decaying spectrum, (batch, short, long)."""
    gaussian = torch.randn(3, 16, 48, dtype=torch.float64, generator=generator)
    u, _ = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64, generator=generator))
    v, _ = torch.linalg.qr(torch.randn(48, 16, dtype=torch.float64, generator=generator))
    decaying = (u * (1.0 / torch.arange(1, 17, dtype=torch.float64))) @ v.T
    return torch.cat([gaussian, decaying[None]])


def test_the_folded_iteration_is_the_standard_one_in_float64(monkeypatch):
    stack = _wide_batch(torch.Generator().manual_seed(1))
    standard = newton_schulz_orthogonalize(stack, 5, torch.float64)
    monkeypatch.setattr(newton_schulz, "folds_identity_term", lambda device: True)
    folded = newton_schulz_orthogonalize(stack, 5, torch.float64)
    torch.testing.assert_close(folded, standard, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "dtype, device",
    [
        (torch.float32, "cpu"),
        pytest.param(
            torch.bfloat16,
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ),
    ],
)
def test_the_folded_iteration_rounds_no_worse_than_the_standard_one(monkeypatch, dtype, device):
    """Each form's relative distance to the float64 result, per matrix: the folded form's stays
    within 1.5x the standard form's. bf16 is checked where the folded form is the default (CUDA):
    emulated bf16 on a CPU rounds the small matrix's diagonal differently."""
    stack = _wide_batch(torch.Generator().manual_seed(2))
    exact = newton_schulz_orthogonalize(stack, 5, torch.float64)

    def distance(result: torch.Tensor) -> torch.Tensor:
        error = torch.linalg.matrix_norm(result.cpu().double() - exact)
        return error / torch.linalg.matrix_norm(exact)

    single = stack.float().to(device)
    monkeypatch.setattr(newton_schulz, "folds_identity_term", lambda device: False)
    standard = distance(newton_schulz_orthogonalize(single, 5, dtype))
    monkeypatch.setattr(newton_schulz, "folds_identity_term", lambda device: True)
    folded = distance(newton_schulz_orthogonalize(single, 5, dtype))
    assert (folded <= 1.5 * standard + 1e-6).all(), (folded, standard)
    assert (folded < (0.05 if dtype == torch.bfloat16 else 1e-5)).all(), folded


def test_cuda_alone_folds_the_identity_term():
    assert newton_schulz.folds_identity_term(torch.device("cuda"))
    assert not newton_schulz.folds_identity_term(torch.device("cpu"))


def test_the_gram_iteration_is_the_quintic_one_in_float64():
    """Gram Newton-Schulz iterates the same polynomial on X X^T: equal in exact arithmetic, so
    to round-off in float64, across restarts (7 steps: blocks of 3, 3 and 1)."""
    stack = _wide_batch(torch.Generator().manual_seed(3))
    for steps in (1, 5, 7):
        quintic = newton_schulz_orthogonalize(stack, steps, torch.float64)
        gram = newton_schulz_orthogonalize(stack, steps, torch.float64, "gram")
        torch.testing.assert_close(gram, quintic, rtol=1e-10, atol=1e-10)


def test_the_gram_iteration_s_singular_values_in_float32_are_the_quintic_ones():
    """Against float64's polar factor U V^T: the float32 Gram result's singular values (those of
    the quintic polynomial applied to the spectrum) and its distance to U V^T are the float64
    quintic's, to float32's round-off grown over the iterations."""
    stack = _wide_batch(torch.Generator().manual_seed(4))
    u, _, vh = torch.linalg.svd(stack, full_matrices=False)
    polar = u @ vh
    exact = newton_schulz_orthogonalize(stack, 5, torch.float64)
    gram = newton_schulz_orthogonalize(stack.float(), 5, torch.float32, "gram").double()
    torch.testing.assert_close(
        torch.linalg.svdvals(gram), torch.linalg.svdvals(exact), rtol=1e-4, atol=1e-4
    )

    def distance(x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_norm(x - polar) / torch.linalg.matrix_norm(polar)

    torch.testing.assert_close(distance(gram), distance(exact), rtol=1e-3, atol=1e-5)


def test_ns_iteration_reaches_the_step():
    """MARS-Shampoo with ns_iteration="gram" steps as the quintic iteration in float64, on the
    loop and foreach paths, and refuses an unknown iteration by name."""
    results = {}
    for iteration in ("quintic", "gram"):
        for foreach in (False, True):
            torch.manual_seed(0)
            params = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in SHAPES]
            opt = MARS(
                params, lr=0.02, mars_type="mars-shampoo", ns_iteration=iteration, foreach=foreach
            )
            for step in range(3):
                for p in params:
                    p.grad = torch.sin(p * (step + 1))
                opt.step()
            results[iteration, foreach] = params
    for foreach in (False, True):
        for a, b in zip(results["quintic", foreach], results["gram", foreach], strict=True):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="ns_iteration"):
        MARS([torch.zeros(2, 2, requires_grad=True)], ns_iteration="polar")


def _spectrum(low: float, size: int = 16, long: int = 48, seed: int = 5) -> torch.Tensor:
    """A (size, long) float64 matrix with singular values log-spaced from ``low`` to 1."""
    generator = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(size, size, dtype=torch.float64, generator=generator))
    v, _ = torch.linalg.qr(torch.randn(long, size, dtype=torch.float64, generator=generator))
    sigma = torch.logspace(math.log10(low), 0, size, dtype=torch.float64)
    return (u * sigma) @ v.T


def test_each_polar_express_step_is_its_interval_s_minimax_quintic():
    """Remez's optimum equioscillates: the error 1 - p(x) reaches its maximum, alternating in
    sign, at the interval's ends and at p's two interior extrema; the intervals shrink to 1."""
    lower, upper = newton_schulz.POLAR_EXPRESS_LOWER, 1.0
    for a, b, c in newton_schulz.polar_express_coefficients(6):
        upper *= newton_schulz.POLAR_EXPRESS_SAFETY
        x = torch.linspace(lower, upper, 200_001, dtype=torch.float64)
        error = 1 - (a * x + b * x**3 + c * x**5)
        worst = float(error.abs().max())
        assert float(error[0]) == pytest.approx(worst, rel=1e-6)
        assert float(error[-1]) == pytest.approx(-worst, rel=1e-6)
        assert float(error.min()) == pytest.approx(-worst, rel=1e-6)
        lower, upper = 1 - worst, 1 + worst
    assert upper - lower < 0.01


def test_polar_express_is_closer_to_the_polar_factor_than_the_quintic():
    """On singular values from 3e-3 to 1 (above the schedule's 1e-3 after the Frobenius
    normalisation), five Polar Express steps in float64 bring every one within 0.14 of 1, where
    Muon's fixed quintic leaves one 0.28 away; the result is half as far from the polar factor
    U V^T."""
    matrix = _spectrum(3e-3)
    u, _, vh = torch.linalg.svd(matrix, full_matrices=False)
    polar = u @ vh
    express = newton_schulz_orthogonalize(matrix, 5, torch.float64, "polar-express")
    quintic = newton_schulz_orthogonalize(matrix, 5, torch.float64)
    assert (torch.linalg.svdvals(express) - 1).abs().max() < 0.14
    assert (torch.linalg.svdvals(quintic) - 1).abs().max() > 0.25
    assert torch.linalg.matrix_norm(express - polar) < 0.55 * torch.linalg.matrix_norm(
        quintic - polar
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_polar_express_stays_bounded_in_low_precision(dtype):
    """Round-off that pushes a singular value past a step's interval (the normalisation's, in
    bf16) meets the safety margin, not the quintic's steep side: the result stays near 1."""
    matrix = _spectrum(1e-2, seed=6)
    express = newton_schulz_orthogonalize(matrix.float(), 5, dtype, "polar-express")
    sigma = torch.linalg.svdvals(express.double())
    assert torch.isfinite(sigma).all() and (sigma - 1).abs().max() < 0.25, sigma
