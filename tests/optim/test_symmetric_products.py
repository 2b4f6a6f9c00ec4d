"""Newton-Schulz's symmetric products one triangle of tiles at a time
(``ns_products="triangle"``, :mod:`torch_mars.kernels.triton_symmetric`), run in Triton's CPU
interpreter (on the GPU where there is one): each product against float64's, symmetric to the
bit, and the iterations and the optimizer's step equal to the dense ones within their dtype's
rounding."""

from __future__ import annotations

import pytest
import torch

from torch_mars import MARS
from torch_mars.kernels import TRITON_AVAILABLE
from torch_mars.optim.newton_schulz import newton_schulz_orthogonalize

pytestmark = pytest.mark.skipif(not TRITON_AVAILABLE, reason="needs triton")
# The kernel runs on CUDA tensors, and on CPU ones in the interpreter (conftest sets it there).
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _product(*args, **kwargs):
    from torch_mars.kernels.triton_symmetric import symmetric_product

    return symmetric_product(*args, **kwargs)


@pytest.mark.parametrize("shape", [(2, 40, 70), (3, 33, 5), (1, 16, 16), (1, 1, 7)])
def test_the_triangle_product_is_x_xt_and_symmetric_to_the_bit(shape):
    """Sides that are and are not multiples of the tile; one row."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    gram = _product(x)
    exact = x.double() @ x.double().mT
    assert torch.equal(gram, gram.mT)
    torch.testing.assert_close(gram.double(), exact, rtol=1e-5, atol=1e-5)
    polynomial = _product(gram, alpha=2.0315, base=gram, beta=-4.775, diagonal=3.4445)
    eye = torch.eye(shape[1], dtype=torch.float64, device=DEVICE)
    expected = -4.775 * gram.double() + 2.0315 * gram.double() @ gram.double() + 3.4445 * eye
    assert torch.equal(polynomial, polynomial.mT)
    torch.testing.assert_close(polynomial.double(), expected, rtol=1e-5, atol=1e-4)


def test_the_triangle_product_reads_strided_and_bf16_matrices():
    x = torch.randn(2, 70, 40, generator=torch.Generator().manual_seed(1)).to(DEVICE).mT
    torch.testing.assert_close(
        _product(x).double(), x.double() @ x.double().mT, rtol=1e-5, atol=1e-5
    )
    low = x.contiguous().bfloat16()
    gram = _product(low)
    assert gram.dtype == torch.bfloat16 and torch.equal(gram, gram.mT)
    exact = low.double() @ low.double().mT
    assert ((gram.double() - exact).abs().max() / exact.abs().max()) < 2**-7  # bf16's rounding


def test_the_triangle_product_refuses_what_it_cannot_run(monkeypatch):
    with pytest.raises(ValueError, match="batch, rows, depth"):
        _product(torch.randn(4, 5, device=DEVICE))
    with pytest.raises(ValueError, match="base must have shape"):
        _product(torch.randn(2, 4, 5, device=DEVICE), base=torch.randn(2, 5, 5, device=DEVICE))
    with pytest.raises(ValueError, match="bf16, fp16 or fp32"):
        _product(torch.randn(2, 4, 5, dtype=torch.float64, device=DEVICE))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="CUDA tensors"):
        _product(torch.randn(2, 4, 5))


@pytest.mark.parametrize("iteration", ["quintic", "polar-express", "gram"])
@pytest.mark.parametrize("shape", [(24, 56), (3, 40, 24)])
def test_newton_schulz_with_triangle_products_is_the_dense_iteration(iteration, shape):
    """Same polynomial, rounded differently in fp32: equal to the dense form far inside the
    distance either has to the polar factor."""
    matrix = torch.randn(shape, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    dense = newton_schulz_orthogonalize(matrix, 5, torch.float32, iteration)
    triangle = newton_schulz_orthogonalize(matrix, 5, torch.float32, iteration, "triangle")
    assert triangle.shape == matrix.shape
    torch.testing.assert_close(triangle, dense, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="ns_products='dense'"):
        newton_schulz_orthogonalize(matrix, 5, torch.float64, iteration, "triangle")


def test_mars_shampoo_steps_the_same_with_triangle_products():
    def run(products: str) -> list[torch.Tensor]:
        torch.manual_seed(3)
        shapes = [(20, 36), (36, 20), (20,)]
        params = [torch.randn(s, device=DEVICE, requires_grad=True) for s in shapes]
        optimizer = MARS(params, mars_type="mars-shampoo", ns_dtype=torch.float32,
                         ns_products=products)  # fmt: skip
        for _ in range(3):
            for p in params:
                p.grad = torch.randn_like(p)
            optimizer.step()
        return [p.detach() for p in params]

    for triangle, dense in zip(run("triangle"), run("dense"), strict=True):
        torch.testing.assert_close(triangle, dense, rtol=1e-5, atol=1e-6)


def test_ns_products_takes_only_its_values():
    before = [torch.zeros(3, 4, requires_grad=True)]
    with pytest.raises(ValueError, match=r"ns_products must be one of \('dense', 'triangle'\)"):
        MARS(before, mars_type="mars-shampoo", ns_products="upper")
