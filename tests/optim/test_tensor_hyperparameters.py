"""One-element tensors for ``lr``, ``gamma`` and the betas give the float results on every step
path, and ``torch.optim.lr_scheduler`` schedules a tensor ``lr`` in place."""

from __future__ import annotations

import pytest
import torch

import torch_mars.optim.functional as functional
from problems import MIXED_SHAPES, RandomProblem, run_mars
from torch_mars import MARS, MARS_TYPES
from torch_mars.kernels import TRITON_AVAILABLE

PATHS = {
    "loop": ({"foreach": False}, None),
    "foreach": ({"foreach": True}, None),
    "compiled": ({"fused": True}, "compiled"),
    "triton": ({"fused": True}, "triton"),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_tensor_hyperparameters_match_floats(monkeypatch, path, mars_type):
    flags, backend = PATHS[path]
    if backend == "triton" and not TRITON_AVAILABLE:
        pytest.skip("triton not installed")
    if backend is not None:
        monkeypatch.setattr(functional, "fused_backend", lambda tensors: backend)
    problem = RandomProblem(MIXED_SHAPES, steps=5)
    floats = dict(lr=0.02, gamma=0.3, betas=(0.9, 0.98))
    tensors = dict(
        lr=torch.tensor(0.02, dtype=torch.float64),
        gamma=torch.tensor(0.3, dtype=torch.float64),
        betas=(torch.tensor(0.9, dtype=torch.float64), torch.tensor(0.98, dtype=torch.float64)),
    )
    options = dict(mars_type=mars_type, amsgrad=True, weight_decay=0.1, **flags)
    expected, _ = run_mars(problem, **floats, **options)
    got, _ = run_mars(problem, **tensors, **options)
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


def test_lr_scheduler_fills_a_tensor_lr_in_place():
    lr = torch.tensor(0.1)
    weight = torch.nn.Parameter(torch.ones(2, 2))
    opt = MARS([weight], lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        weight.grad = torch.ones(2, 2)
        opt.step()
        scheduler.step()
    assert opt.param_groups[0]["lr"] is lr
    assert float(lr) == pytest.approx(0.1 * 0.5**3)
