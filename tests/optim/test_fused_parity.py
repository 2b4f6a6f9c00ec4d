"""Every fused path gives the per-tensor reference path's results, on the mixed shapes of the
foreach tests (zero-size, 0-D, 1-D, 2-D, tall 2-D, 4-D conv, a tensor without a gradient on some
steps): the compiled CPU kernel and the Triton kernels (run by Triton's CPU interpreter when
there is no GPU), in float64 and float32, for every mars_type, both modes, AMSGrad, maximize and
weight decay."""

from __future__ import annotations

import pytest
import torch

import torch_mars.kernels as kernels
import torch_mars.optim.functional as functional
from problems import MIXED_SHAPES, RandomProblem, run_mars
from torch_mars import MARS, MARS_TYPES
from torch_mars.kernels import TRITON_AVAILABLE

# Without a GPU, conftest.py turns on Triton's CPU interpreter and the Triton kernels run on CPU
# tensors here; with one, test_triton_on_cuda_matches_the_loop runs them natively instead.
BACKENDS = [
    "compiled",
    pytest.param(
        "triton",
        marks=pytest.mark.skipif(
            not TRITON_AVAILABLE or torch.cuda.is_available(),
            reason="needs triton, and the CPU interpreter (no GPU)",
        ),
    ),
]
OPTIONS = {
    "plain": {},
    "amsgrad-wd": {"amsgrad": True, "weight_decay": 0.1, "weight_decay_1d": 0.2},
    "maximize-1d": {"maximize": True, "optimize_1d": True},
    "no-clip": {"clip": False},
    "no-clip-no-skip": {"clip": False, "skip_nonfinite": False},
    "cautious": {"cautious": True, "maximize": True, "weight_decay": 0.1},
}
TOLERANCES = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {}}


@pytest.fixture
def short_problem() -> RandomProblem:
    return RandomProblem(MIXED_SHAPES, steps=6)


@pytest.fixture
def force_backend(monkeypatch):
    """Make ``fused=True`` pick the named backend on CPU tensors."""

    def force(backend: str) -> None:
        monkeypatch.setattr(functional, "fused_backend", lambda tensors: backend)

    return force


def assert_same_run(reference, fused, dtype: torch.dtype) -> None:
    (ref_params, ref_opt), (fused_params, fused_opt) = reference, fused
    for a, b in zip(ref_params, fused_params, strict=True):
        torch.testing.assert_close(b, a, **TOLERANCES[dtype])
    for a, b in zip(ref_opt.state.values(), fused_opt.state.values(), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if torch.is_tensor(a[key]):
                torch.testing.assert_close(b[key], a[key], **TOLERANCES[dtype])
            else:
                assert a[key] == b[key]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_fused_matches_single_tensor_float64(
    short_problem, force_backend, backend, mars_type, options
):
    force_backend(backend)
    kwargs = dict(mars_type=mars_type, lr=0.02, gamma=0.3, **options)
    reference = run_mars(short_problem, foreach=False, **kwargs)
    fused = run_mars(short_problem, fused=True, **kwargs)
    assert_same_run(reference, fused, torch.float64)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_fused_matches_single_tensor_float32_exact_mode(
    short_problem, force_backend, backend, mars_type
):
    force_backend(backend)
    kwargs = dict(mars_type=mars_type, lr=0.02, gamma=0.3, is_approx=False, dtype=torch.float32)
    reference = run_mars(short_problem, foreach=False, **kwargs)
    fused = run_mars(short_problem, fused=True, **kwargs)
    assert_same_run(reference, fused, torch.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("dtype", "state_dtype"),
    [(torch.bfloat16, torch.bfloat16), (torch.float16, None), (torch.float32, torch.bfloat16)],
    ids=["bf16-params-bf16-state", "fp16-params", "fp32-params-bf16-state"],
)
def test_low_precision_tracks_a_float32_run(
    short_problem, force_backend, backend, dtype, state_dtype
):
    """Half-precision parameters or bf16 state: the fused step computes in fp32 and stays within
    half-precision round-off of an all-fp32 run."""
    force_backend(backend)
    kwargs = dict(lr=0.02, gamma=0.3)
    reference, _ = run_mars(short_problem, foreach=False, dtype=torch.float32, **kwargs)
    low, opt = run_mars(short_problem, fused=True, dtype=dtype, state_dtype=state_dtype, **kwargs)
    buffers = [
        t
        for state in opt.state.values()
        for t in state.values()
        if torch.is_tensor(t) and t.is_floating_point()
    ]
    assert {t.dtype for t in buffers} == {state_dtype or dtype}
    assert any("last_grad" in state for state in opt.state.values())
    for a, b in zip(reference, low, strict=True):
        assert b.dtype == dtype
        torch.testing.assert_close(b.float(), a, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_grad_scaler_unscales_in_the_kernel_and_skips_inf_steps(force_backend, backend):
    force_backend(backend)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    twin = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    twin.load_state_dict(model.state_dict())
    fused = MARS(model.parameters(), lr=1e-2, fused=True)
    plain = MARS(twin.parameters(), lr=1e-2, foreach=False)
    assert fused._step_supports_amp_scaling and not plain._step_supports_amp_scaling
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = torch.randn(16, 6), torch.randn(16, 2)
    for step in range(4):
        for net, opt in ((model, fused), (twin, plain)):
            opt.zero_grad()
            (net(x) - y).pow(2).mean().backward() if opt is plain else scaler.scale(
                (net(x) - y).pow(2).mean()
            ).backward()
            if step == 2:
                net[0].weight.grad[0, 0] = float("inf")
            if opt is fused:
                scaler.step(opt)
                scaler.update()
            elif step != 2:
                opt.step()
    assert fused.state[model[0].weight]["step"] == 3
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_non_contiguous_parameters_take_the_per_tensor_path(force_backend, backend, mars_type):
    """A transposed leaf has transposed gradients and state: flat indexing would be wrong, so
    the fused step updates it tensor by tensor, with the same result as the loop."""
    force_backend(backend)
    torch.manual_seed(0)
    initial_weight, initial_other = torch.randn(4, 6), torch.randn(3, 3)
    results = []
    for flags in ({"foreach": False}, {"fused": True}):
        weight = initial_weight.clone().t().requires_grad_()
        other = initial_other.clone().requires_grad_()
        assert not weight.is_contiguous()
        opt = MARS([weight, other], lr=0.05, gamma=0.3, mars_type=mars_type, **flags)
        for step in range(4):
            opt.zero_grad()
            ((weight - step) ** 3).sum().add((other * step).sin().sum()).backward()
            opt.step()
        results.append((weight.detach(), other.detach()))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(b, a)


def test_fused_rejects_foreach_too():
    with pytest.raises(ValueError, match="foreach and fused"):
        MARS([torch.zeros(2, 2, requires_grad=True)], foreach=True, fused=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_triton_on_cuda_matches_the_loop(short_problem, mars_type):
    kwargs = dict(mars_type=mars_type, lr=0.02, gamma=0.3, amsgrad=True, weight_decay=0.1)
    reference = run_mars(short_problem, foreach=False, dtype=torch.float32, **kwargs)
    fused = run_mars(short_problem, fused=True, dtype=torch.float32, device="cuda", **kwargs)
    for a, b in zip(reference[0], fused[0], strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)


def test_fused_on_cuda_without_triton_fails_at_construction(monkeypatch):
    monkeypatch.setattr(kernels, "TRITON_AVAILABLE", False)
    monkeypatch.setattr(functional, "fused_backend", lambda tensors: "triton")
    with pytest.raises(RuntimeError, match=r"fused=True on CUDA needs Triton: pip install"):
        MARS([torch.zeros(2, 2, requires_grad=True)], fused=True)
    MARS([torch.zeros(2, 2, requires_grad=True)], foreach=True)
