"""benchmarks/perf/newton_schulz_forms.py compares other ways of computing the library's
Newton-Schulz polynomial; its accuracy and FLOP columns mean something only if each form is
that polynomial (equal in float64) and its FLOP count is that of the products it forms."""

from __future__ import annotations

import pytest
import torch

from benchmark_scripts import load_benchmark_script
from torch_mars.optim.newton_schulz import newton_schulz_orthogonalize


@pytest.fixture(scope="module")
def study():
    return load_benchmark_script("perf/newton_schulz_forms.py")


@pytest.mark.parametrize("shape", [(3, 6, 6), (3, 6, 18)])
def test_every_form_is_the_librarys_polynomial_in_float64(study, shape):
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    exact = newton_schulz_orthogonalize(x, study.STEPS, torch.float64)
    for name, (orthogonalize, _) in study.forms([1, 2, 3, 5], torch.device("cpu")).items():
        torch.testing.assert_close(
            orthogonalize(x, torch.float64), exact, rtol=1e-9, atol=1e-11, msg=name
        )


def test_the_gram_form_counts_the_products_it_forms(study):
    m, n = 4, 12
    # One iteration per block is the standard iteration: X X^T, P, then P X.
    assert study.gram_flops(m, n, 5, restart=1) == study.standard_flops(m, n, 5)
    # No restart: X X^T and Q X once, 5 P, 4 Q and 8 A products of m x m.
    assert study.gram_flops(m, n, 5, restart=5) == 4 * m * m * n + 2 * m**3 * 17


def test_the_triangle_form_counts_half_of_each_symmetric_product(study):
    m, n = 768, 3072
    assert study.triangle_flops(m, n, 5) == 5 * (m * m * n + m**3 + 2 * m * m * n)
    assert 0.71 < study.triangle_flops(m, n, 5) / study.standard_flops(m, n, 5) < 0.73
