"""``one_buffer=True``: the unclipped approximate momentum kept in one buffer, without
``last_grad``, equals the two-buffer form in float64 to round-off (the momentum itself for the
Newton-Schulz rules, whose bf16 orthogonalisation would amplify round-off; the whole trajectory
for Lion), on the loop, foreach and fused paths (the compiled kernel, and the Triton kernels,
interpreted on CPU), with and without non-finite steps; it holds a third less state; and what
it cannot do is refused."""

from __future__ import annotations

import math

import pytest
import torch

import torch_mars.optim.functional as functional
from torch_mars import MARS
from torch_mars.kernels import TRITON_AVAILABLE

SHAPES = [(6, 4), (5, 3), (4, 2, 3)]
PATHS = {
    "loop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
    "triton": {"fused": True},
}


def gradients(step: int, nan_at: set[int]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    grads = [torch.randn(s, generator=generator, dtype=torch.float64) for s in SHAPES]
    if step in nan_at:
        grads[0][0, 0] = math.nan
    return grads


def momenta(opt: MARS, params, grads, one_buffer: bool) -> list[torch.Tensor]:
    """``m_t`` after a step: ``exp_avg`` (two buffers) or ``gamma g + beta1 u`` (one)."""
    group = opt.param_groups[0]
    beta1 = group["betas"][0]
    result = []
    for p, g in zip(params, grads, strict=True):
        u = opt.state[p]["exp_avg"]
        result.append(group["gamma"] * g.nan_to_num(0.0) + beta1 * u if one_buffer else u.clone())
    return result


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("mars_type", ["mars-lion", "mars-shampoo", "mars-m"])
@pytest.mark.parametrize("nan_at", [set(), {3}], ids=["finite", "a-nan-step"])
def test_one_buffer_equals_two_buffers_in_float64(monkeypatch, path, mars_type, nan_at):
    if path == "triton":
        if not TRITON_AVAILABLE:
            pytest.skip("needs triton")
        monkeypatch.setattr(functional, "fused_backend", lambda tensors: "triton")
    lr = 0.01 if mars_type == "mars-lion" else 0.0  # lr 0: compare the momenta themselves
    runs = {}
    for one_buffer in (False, True):
        params = [torch.ones(s, dtype=torch.float64, requires_grad=True) for s in SHAPES]
        opt = MARS(
            params, lr=lr, gamma=0.3, betas=(0.9, 0.99), weight_decay=0.1, mars_type=mars_type,
            clip=False, one_buffer=one_buffer, **PATHS[path],
        )  # fmt: skip
        trace = []
        for step in range(8):
            grads = gradients(step, nan_at)
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            opt.step()
            if step not in nan_at:
                trace.append(momenta(opt, params, grads, one_buffer))
        runs[one_buffer] = (trace, [p.detach() for p in params], opt)
    (two_trace, two_params, _), (one_trace, one_params, one_opt) = runs[False], runs[True]
    for two, one in zip(two_trace, one_trace, strict=True):
        for a, b in zip(two, one, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    for a, b in zip(two_params, one_params, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert all("last_grad" not in state for state in one_opt.state.values())
    assert int(one_opt.nonfinite_skips()) == len(nan_at)
    if path == "triton":
        assert one_opt._plans[0].path == "triton"


def test_one_buffer_keeps_a_third_less_state():
    def state_bytes(one_buffer: bool) -> int:
        params = [torch.zeros(64, 32, requires_grad=True)]
        opt = MARS(params, mars_type="mars-m", clip=False, one_buffer=one_buffer)
        params[0].grad = torch.randn(64, 32)
        opt.step()
        return sum(t.numel() * t.element_size() for t in opt.state[params[0]].values()
                   if torch.is_tensor(t) and t.ndim > 0)  # fmt: skip

    assert state_bytes(True) * 2 == state_bytes(False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mars_type": "mars-adamw", "clip": False}, "momentum-only rule"),
        ({"mars_type": "mars-lion"}, "clip=False"),
        ({"mars_type": "mars-lion", "clip": False, "is_approx": False}, "is_approx=True"),
        ({"mars_type": "mars-m", "clip": False, "optimize_1d": True}, "Adam rule on c"),
        ({"mars_type": "mars-lion", "clip": False, "betas": (0.0, 0.9)}, "betas\\[0\\] > 0"),
    ],
)
def test_what_one_buffer_cannot_do_is_refused(kwargs, message):
    params = [torch.zeros(4, 3, requires_grad=True), torch.zeros(3, requires_grad=True)]
    with pytest.raises(ValueError, match=message):
        MARS(params, one_buffer=True, **kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mars_type", ["mars-lion", "mars-shampoo"])
def test_one_buffer_on_cuda_takes_triton_and_matches_the_loop(mars_type):
    results = []
    for device, flags in (("cpu", {"foreach": False}), ("cuda", {"fused": True})):
        params = [torch.ones(s, device=device, requires_grad=True) for s in SHAPES]
        opt = MARS(
            params, lr=0.01, gamma=0.3, weight_decay=0.1, mars_type=mars_type, clip=False,
            one_buffer=True, ns_dtype=torch.float32, **flags,
        )  # fmt: skip
        for step in range(6):
            for p, g in zip(params, gradients(step, {3}), strict=True):
                p.grad = g.float().to(device)
            opt.step()
        if device == "cuda":
            assert opt._plans[0].path == "triton"
        results.append([p.detach().cpu() for p in params])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
