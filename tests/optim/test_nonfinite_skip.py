"""A MARS-routed tensor whose ||c|| is not finite keeps its parameter and state for that step,
on every path (per-tensor loop, foreach, compiled, Triton; the sharded path is in
test_fsdp2.py), while the other tensors step; the skip is counted on the device and traced
without a graph break, and the tensor steps again once its gradient is finite."""

from __future__ import annotations

import math

import pytest
import torch

import torch_mars.optim.functional as functional
from torch_mars import MARS, MARS_TYPES
from torch_mars.kernels import TRITON_AVAILABLE

PATHS = {
    "loop": {"foreach": False},
    "foreach": {"foreach": True},
    "compiled": {"fused": True},
    "triton": {"fused": True},
}
SHAPES = [(6, 4), (3, 5), (4, 2, 3), (5,)]
BAD = 0  # the tensor that receives a non-finite gradient entry


def path_params(path: str):
    marks = []
    if path == "triton":
        marks = [
            pytest.mark.skipif(
                not TRITON_AVAILABLE or torch.cuda.is_available(),
                reason="needs triton, and the CPU interpreter (no GPU)",
            )
        ]
    return pytest.param(path, marks=marks)


@pytest.fixture
def use_path(monkeypatch):
    def use(path: str) -> dict:
        if path in ("compiled", "triton"):
            monkeypatch.setattr(functional, "fused_backend", lambda tensors: path)
        return PATHS[path]

    return use


def gradients(step: int, bad_value: float | None) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    grads = [torch.randn(shape, generator=generator) for shape in SHAPES]
    if bad_value is not None:
        grads[BAD][1, 2] = bad_value
    return grads


def snapshot(params, opt) -> list[dict[str, torch.Tensor]]:
    return [
        {"param": p.detach().clone()}
        | {k: v.clone() for k, v in opt.state[p].items() if torch.is_tensor(v)}
        for p in params
    ]


def take_step(params, opt, step: int, bad_value: float | None = None, step_fn=None) -> None:
    for param, grad in zip(params, gradients(step, bad_value), strict=True):
        param.grad = grad
    (step_fn or opt.step)()


def assert_unchanged(before: dict[str, torch.Tensor], param, opt) -> None:
    after = {"param": param.detach()} | dict(opt.state[param])
    for name, value in before.items():
        if name != "nonfinite_skips":
            assert torch.equal(after[name], value), f"{name} changed on a skipped step"


@pytest.mark.parametrize("path", [path_params(p) for p in PATHS])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
@pytest.mark.parametrize("bad_value", [math.nan, math.inf])
def test_a_nonfinite_tensor_keeps_its_state_and_the_others_step(
    use_path, path, mars_type, bad_value
):
    params = [torch.zeros(shape, requires_grad=True) for shape in SHAPES]
    kwargs = dict(lr=0.05, mars_type=mars_type, weight_decay=0.1, amsgrad=True, gamma=0.3)
    opt = MARS(params, **kwargs, **use_path(path))
    for step in range(2):
        take_step(params, opt, step)
    before = snapshot(params, opt)

    take_step(params, opt, 2, bad_value)

    assert_unchanged(before[BAD], params[BAD], opt)
    for index in range(1, len(params)):
        assert not torch.equal(params[index], before[index]["param"])
        assert torch.isfinite(params[index]).all()
    assert [int(opt.state[p].get("nonfinite_skips", 0)) for p in params] == [1, 0, 0, 0]
    assert int(opt.nonfinite_skips()) == 1

    take_step(params, opt, 3)
    assert not torch.equal(params[BAD], before[BAD]["param"])
    for state in opt.state.values():
        assert all(torch.isfinite(v).all() for v in state.values() if torch.is_tensor(v))
    assert int(opt.nonfinite_skips()) == 1


@pytest.mark.parametrize(
    "settings",
    [{"clip": True}, {"clip": False}, {"second_moment": "gradient"}],
    ids=["clip", "no-clip", "v-of-g"],
)
@pytest.mark.parametrize("path", [path_params(p) for p in PATHS])
def test_every_path_skips_like_the_loop(use_path, path, settings):
    """Trajectories with skips agree across paths: they skip the same tensors at the same steps,
    with the clip, without it, and with ``v`` of ``g`` (a skipped ``g`` is non-finite)."""

    def run(options: dict) -> list[torch.Tensor]:
        params = [torch.zeros(shape, requires_grad=True) for shape in SHAPES]
        opt = MARS(params, lr=0.05, gamma=0.3, **settings, **options)
        for step in range(5):
            take_step(params, opt, step, math.nan if step in (0, 2) else None)
        return [p.detach() for p in params]

    reference = run(PATHS["loop"])
    for a, b in zip(reference, run(use_path(path)), strict=True):
        torch.testing.assert_close(b, a)


def test_a_nonfinite_first_step_leaves_a_finite_previous_gradient():
    """On a tensor's first step g_tilde = g; a NaN there must not stay in g_tilde, or every later
    c would be NaN and the tensor would never step again."""
    params = [torch.zeros(shape, requires_grad=True) for shape in SHAPES]
    opt = MARS(params, lr=0.05)
    take_step(params, opt, 0, math.nan)
    assert torch.equal(params[BAD], torch.zeros(SHAPES[BAD]))
    assert torch.isfinite(opt.state[params[BAD]]["last_grad"]).all()
    take_step(params, opt, 1)
    assert torch.isfinite(params[BAD]).all() and params[BAD].abs().sum() > 0


def test_the_skip_is_traced_without_a_graph_break():
    """No host read: the whole step, skip included, compiles as one graph."""
    params = [torch.zeros(shape, requires_grad=True) for shape in SHAPES]
    opt = MARS(params, lr=0.05, foreach=False)
    step = torch.compile(opt.step, backend="eager", fullgraph=True)
    take_step(params, opt, 0, step_fn=step)
    before = snapshot(params, opt)
    take_step(params, opt, 1, math.nan, step_fn=step)
    assert_unchanged(before[BAD], params[BAD], opt)
    assert int(opt.nonfinite_skips()) == 1


def test_skip_nonfinite_false_lets_the_nan_through():
    """The switch acts: without the skip, one NaN entry reaches the whole tensor (through the
    norm of c), as in the authors' code."""
    params = [torch.zeros(shape, requires_grad=True) for shape in SHAPES]
    opt = MARS(params, lr=0.05, skip_nonfinite=False)
    take_step(params, opt, 0)
    take_step(params, opt, 1, math.nan)
    assert torch.isnan(params[BAD]).all()
    assert "nonfinite_skips" not in opt.state[params[BAD]]
    assert int(opt.nonfinite_skips()) == 0


def test_skip_nonfinite_is_validated():
    with pytest.raises(ValueError, match="skip_nonfinite must be True or False"):
        MARS([torch.zeros(2, 2, requires_grad=True)], skip_nonfinite="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("options", [{"foreach": True}, {"fused": True}], ids=["foreach", "triton"])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_on_cuda_skips_match_the_cpu_loop(options, mars_type):
    def run(device: str, path_options: dict) -> list[torch.Tensor]:
        params = [torch.zeros(shape, device=device, requires_grad=True) for shape in SHAPES]
        opt = MARS(params, lr=0.05, gamma=0.3, mars_type=mars_type, **path_options)
        for step in range(5):
            grads = gradients(step, math.nan if step in (0, 2) else None)
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad.to(device)
            opt.step()
        assert int(opt.nonfinite_skips()) == 2
        return [p.detach().cpu() for p in params]

    # Newton-Schulz runs in bf16, whose matmuls round differently on the GPU.
    tolerance = {"rtol": 1e-2, "atol": 2e-3} if mars_type in ("mars-shampoo", "mars-m") else {}
    for a, b in zip(run("cpu", PATHS["loop"]), run("cuda", options), strict=True):
        torch.testing.assert_close(b, a, **tolerance)


def test_a_skip_count_survives_a_round_trip_with_bf16_parameters():
    """Issue #35: torch's loader cast the count to the parameter's dtype, 257 -> 256."""
    weight = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.bfloat16))
    opt = MARS([weight], lr=1e-3)
    weight.grad = torch.randn_like(weight)
    opt.step()
    opt.state[weight]["nonfinite_skips"].fill_(257)
    fresh = MARS([weight], lr=1e-3)
    fresh.load_state_dict(opt.state_dict())
    count = fresh.state[weight]["nonfinite_skips"]
    assert count.dtype == torch.int64 and count.item() == 257


@pytest.mark.parametrize("path", [path_params(p) for p in PATHS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_huge_finite_gradient_is_clipped_not_skipped(use_path, path, dtype):
    """Entries of 1e19 square past float32's and bf16's range; the norm must not overflow to
    inf there (the skip would take the gradient for a bad one): the step clips it and moves
    every tensor, the first one by what a unit-norm c of that direction gives."""
    params = [torch.zeros(shape, dtype=dtype, requires_grad=True) for shape in SHAPES]
    opt = MARS(params, lr=0.05, gamma=0.0, **use_path(path))
    for p in params:
        p.grad = torch.full_like(p, 1e19)
    opt.step()
    assert int(opt.nonfinite_skips()) == 0
    for p in params:
        assert torch.isfinite(p).all() and bool((p < 0).all()), "a tensor did not step"
