"""``cuda_graph=True``: step counts are device tensors and the Triton kernels derive the bias
corrections and the first step's ``g_tilde = g`` on the device, so a step can be captured in a
CUDA graph. On CPU the Triton kernels run under Triton's interpreter (conftest.py) and are
checked against the float64 loop, non-finite steps included; with a GPU, a captured step is
replayed against eager steps."""

from __future__ import annotations

import math

import pytest
import torch

import torch_mars.optim.functional as functional
from problems import MIXED_SHAPES
from torch_mars import MARS, MARS_TYPES
from torch_mars.kernels import TRITON_AVAILABLE

needs_interpreter = pytest.mark.skipif(
    not TRITON_AVAILABLE or torch.cuda.is_available(),
    reason="needs triton, and the CPU interpreter (no GPU)",
)
STEPS = 5
OPTIONS = {
    "plain": {},
    "amsgrad-wd-maximize": {"amsgrad": True, "weight_decay": 0.1, "maximize": True},
    "no-clip": {"clip": False},
}


@pytest.fixture
def triton_on_cpu(monkeypatch):
    """Make ``fused=True`` take the Triton kernels on CPU tensors."""
    monkeypatch.setattr(functional, "fused_backend", lambda tensors: "triton")


def gradient_sequence(nonfinite: bool) -> list[list[torch.Tensor | None]]:
    """Float64 gradients for MIXED_SHAPES, large enough that some ``c`` get clipped; the last
    tensor has none on step 1. With ``nonfinite``, tensor 0's first gradient holds a NaN and
    tensor 1's third an inf."""
    generator = torch.Generator().manual_seed(0)
    steps = []
    for step in range(STEPS):
        grads: list[torch.Tensor | None] = [
            (0.2 + index / 3) * torch.randn(shape, generator=generator, dtype=torch.float64)
            for index, shape in enumerate(MIXED_SHAPES)
        ]
        if step == 1:
            grads[-1] = None
        steps.append(grads)
    if nonfinite:
        steps[0][0][0, 0] = math.nan
        steps[2][1][1, 1] = math.inf
    return steps


def run(grads: list[list[torch.Tensor | None]], **kwargs) -> tuple[list[torch.Tensor], MARS]:
    generator = torch.Generator().manual_seed(1)
    params = [
        torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_()
        for shape in MIXED_SHAPES
    ]
    if kwargs.get("cuda_graph"):
        kwargs.setdefault("fused", True)  # None takes the Triton kernels on CUDA tensors only
    opt = MARS(params, lr=0.02, gamma=0.3, **kwargs)
    for step_grads in grads:
        for param, grad in zip(params, step_grads, strict=True):
            param.grad = None if grad is None else grad.clone()
        opt.step()
    return params, opt


def assert_same(reference: tuple, on_device: tuple) -> None:
    (ref_params, ref_opt), (cap_params, cap_opt) = reference, on_device
    for a, b in zip(ref_params, cap_params, strict=True):
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-12, atol=1e-14)
    for a, b in zip(ref_opt.state.values(), cap_opt.state.values(), strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if key == "step":
                assert b[key].dtype == torch.float32 and b[key].ndim == 0
                assert float(b[key]) == value
            else:
                torch.testing.assert_close(b[key], value, rtol=1e-12, atol=1e-14)


@needs_interpreter
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_cuda_graph_triton_step_matches_the_loop(triton_on_cpu, mars_type, options):
    grads = gradient_sequence(nonfinite=False)
    kwargs = {"mars_type": mars_type, **options}
    assert_same(run(grads, foreach=False, **kwargs), run(grads, cuda_graph=True, **kwargs))


@needs_interpreter
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_cuda_graph_skips_nonfinite_steps_as_the_loop_does(triton_on_cpu, mars_type):
    """A NaN in a tensor's first gradient (handled on the host without ``cuda_graph``, in the
    kernel with it) and an inf later: the same parameters, buffers and skip counts."""
    grads = gradient_sequence(nonfinite=True)
    reference = run(grads, foreach=False, mars_type=mars_type)
    on_device = run(grads, cuda_graph=True, mars_type=mars_type)
    assert_same(reference, on_device)
    assert int(on_device[1].nonfinite_skips()) == 2
    assert torch.isfinite(on_device[1].state[on_device[0][0]]["last_grad"]).all()


@needs_interpreter
def test_cuda_graph_can_be_switched_between_steps(triton_on_cpu):
    """A state dict keeps its groups' ``cuda_graph`` (torch.optim's rule for every setting) and
    its step counts' form; switched on a group afterwards, the counts change form at the next
    step and the run goes on as one uninterrupted run."""
    grads = gradient_sequence(nonfinite=False)
    straight_params, _ = run(grads, foreach=False)
    for before, after in (True, False), (False, True):
        params, opt = run(grads[:2], cuda_graph=before, fused=True)
        resumed = MARS(params, lr=0.02, gamma=0.3, fused=True, cuda_graph=after)
        resumed.load_state_dict(opt.state_dict())
        assert resumed.param_groups[0]["cuda_graph"] is before
        resumed.param_groups[0]["cuda_graph"] = after
        for step_grads in grads[2:]:
            for param, grad in zip(params, step_grads, strict=True):
                param.grad = None if grad is None else grad.clone()
            resumed.step()
        steps = [state["step"] for state in resumed.state.values()]
        if after:
            assert all(torch.is_tensor(s) and s.dtype == torch.float32 for s in steps)
        else:
            assert all(isinstance(s, int) for s in steps)
        for a, b in zip(straight_params, params, strict=True):
            torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "conflict",
    [
        {"foreach": True},
        {"fused": False},
        {"is_approx": False},
        {"one_buffer": True, "mars_type": "mars-lion", "clip": False},
        {"cautious": True},
    ],
    ids=["foreach", "fused-false", "exact-mode", "one-buffer", "cautious"],
)
def test_cuda_graph_refuses_settings_it_cannot_capture(conflict):
    with pytest.raises(ValueError, match="cuda_graph=True runs the multi-tensor Triton"):
        MARS([torch.zeros(2, 2, requires_grad=True)], cuda_graph=True, **conflict)


def test_cuda_graph_is_validated():
    with pytest.raises(ValueError, match="cuda_graph must be True or False"):
        MARS([torch.zeros(2, 2, requires_grad=True)], cuda_graph=1)


def test_cuda_graph_off_the_triton_kernels_fails_before_anything_changes():
    """On CPU tensors the group would take the compiled or loop path: the step refuses, and
    neither the parameter nor the state changes."""
    param = torch.ones(3, 3, requires_grad=True)
    opt = MARS([param], cuda_graph=True)
    param.grad = torch.ones(3, 3)
    with pytest.raises(ValueError, match="needs plain CUDA tensors"):
        opt.step()
    assert torch.equal(param.detach(), torch.ones(3, 3))
    assert not opt.state


needs_cuda_triton = pytest.mark.skipif(
    not (torch.cuda.is_available() and TRITON_AVAILABLE), reason="needs CUDA and Triton"
)


@needs_cuda_triton
@pytest.mark.parametrize("mars_type", ["mars-adamw", "mars-lion", "mars-shampoo"])
def test_a_captured_step_replays_like_eager_steps(mars_type):
    """Three eager steps on a side stream, one captured, then five replays with new gradients
    copied into the static ones and a new tensor ``lr`` written in place: the parameters match
    an eager twin's after each replay (the step counts and bias corrections advanced too)."""
    torch.manual_seed(0)
    shapes = [(256, 128), (128, 384), (384,), (64, 3, 3, 3)]
    params = [torch.randn(s, device="cuda").requires_grad_() for s in shapes]
    twin = [p.detach().clone().requires_grad_() for p in params]
    lr = torch.tensor(1e-2, device="cuda")
    # Newton-Schulz in float32: bf16 products of a captured and an eager step may take
    # different cuBLAS kernels, whose round-off differs by about 1% of the step.
    flags = {"mars_type": mars_type, "ns_dtype": torch.float32}
    opt = MARS(params, lr=lr, cuda_graph=True, **flags)
    eager = MARS(twin, lr=1e-2, fused=True, **flags)
    grads = [[torch.randn_like(p) for p in params] for _ in range(8)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for step in range(3):
            for p, g in zip(params, grads[step], strict=True):
                p.grad = g.clone()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    for step in range(3):
        for p, g in zip(twin, grads[step], strict=True):
            p.grad = g.clone()
        eager.step()
    static = [g.clone() for g in grads[3]]
    for p, g in zip(params, static, strict=True):
        p.grad = g
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    for step in range(3, 8):
        rate = 1e-2 * (1.0 - 0.1 * (step - 3))
        lr.fill_(rate)
        for buffer, g in zip(static, grads[step], strict=True):
            buffer.copy_(g)
        graph.replay()
        eager.param_groups[0]["lr"] = rate
        for p, g in zip(twin, grads[step], strict=True):
            p.grad = g.clone()
        eager.step()
        for a, b in zip(twin, params, strict=True):
            torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-6)
    assert all(float(opt.state[p]["step"]) == 8 for p in params)


@needs_interpreter
def test_cuda_graph_runs_bf16_state_as_the_eager_triton_step_does(triton_on_cpu):
    """The ``mars-adamw-graph-bf16-state`` bench row's settings: a ``cuda_graph`` step on bf16
    state ends where the eager Triton step on bf16 state does (float32 parameters), bit for bit:
    on a tensor's first step both take ``c = g`` (the graph's kernel zeroes the correction's
    scale on the device, the eager step runs that tensor with ``gamma = 0``), not
    ``g + s (g - bf16(g))``."""
    grads = [[g if g is None else g.float() for g in step] for step in gradient_sequence(False)]

    def run_bf16(**flags) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(1)
        params = [torch.randn(s, generator=generator).requires_grad_() for s in MIXED_SHAPES]
        opt = MARS(params, lr=0.02, gamma=0.3, state_dtype=torch.bfloat16, fused=True, **flags)
        for step_grads in grads:
            for param, grad in zip(params, step_grads, strict=True):
                param.grad = None if grad is None else grad.clone()
            opt.step()
        assert all(s["exp_avg"].dtype == torch.bfloat16 for s in opt.state.values())
        return params

    for a, b in zip(run_bf16(), run_bf16(cuda_graph=True), strict=True):
        assert torch.equal(b.detach(), a.detach())
