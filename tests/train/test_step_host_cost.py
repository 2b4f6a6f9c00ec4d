"""The host cost of a step, counted as dispatched aten ops on GPT-2-small's shapes (meta tensors:
no memory, no arithmetic): on a GPU each op is at least one launch, so these counts are what a
step pays before any byte moves. Limits from the issue "Fast by default on a GPU"."""

from __future__ import annotations

import pytest
import torch

from torch_mars import MARS, mars_param_groups
from torch_mars.bench.op_count import count_aten_ops, count_python_calls, matmul_ops
from torch_mars.kernels import TRITON_AVAILABLE
from torch_mars.models import GPT, gpt_config
from torch_mars.optim.functional import CPU_FOREACH_MAX_ELEMENTS
from torch_mars.optim.step_math import matrix_shape


def gpt2_small_with_gradients() -> GPT:
    with torch.device("meta"):
        model = GPT(gpt_config("gpt2-small", 50304))
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    return model


def ops_of_second_step(optimizer: torch.optim.Optimizer) -> int:
    optimizer.step()  # the first step creates the state
    return sum(count_aten_ops(optimizer.step).values())


def test_a_default_foreach_mars_adamw_step_costs_at_most_three_adamw_foreach_steps():
    model = gpt2_small_with_gradients()
    adamw = ops_of_second_step(torch.optim.AdamW(model.parameters(), foreach=True))
    mars = ops_of_second_step(MARS(mars_param_groups(model), foreach=True))
    assert mars <= 3 * adamw, (mars, adamw)


def test_mars_shampoo_multiplies_matrices_once_per_shape_and_iteration():
    model = gpt2_small_with_gradients()
    groups = mars_param_groups(model, embeddings="adamw")
    # Distinct shapes as the issue counts them: viewed as (shape[0], -1), then transposed to
    # (short, long); GPT-2 small has three (768 x 768, 768 x 2304, 768 x 3072).
    shapes = {
        tuple(sorted(matrix_shape(p.shape))) for g in groups if g["use_mars"] for p in g["params"]
    }
    assert len(shapes) == 3
    optimizer = MARS(groups, mars_type="mars-shampoo", ns_steps=5, foreach=True)
    optimizer.step()
    matmuls = matmul_ops(count_aten_ops(optimizer.step))
    assert matmuls <= 3 * 5 * len(shapes), (matmuls, len(shapes))


def test_the_default_path_is_triton_on_cuda_foreach_on_small_cpu_models_and_loop_on_large(
    monkeypatch,
):
    """Where each device's default step goes (docs/algorithm.md's table), decided in one
    place; CUDA tensors are stood in for by objects that say they are on CUDA."""
    from types import SimpleNamespace

    import torch_mars.optim.step_plan as step_plan

    group = MARS([torch.nn.Parameter(torch.zeros(2, 2))]).param_groups[0]

    def cuda_tensor(contiguous: bool = True) -> SimpleNamespace:
        return SimpleNamespace(
            is_cuda=True, device=torch.device("cuda"), grad=None, is_contiguous=lambda: contiguous
        )

    on_cuda = [cuda_tensor()]
    on_cpu = [torch.zeros(2, 2)]
    monkeypatch.setattr(step_plan, "TRITON_AVAILABLE", True)
    assert step_plan.step_path(group, on_cuda) == "triton"
    assert step_plan.step_path(group, on_cpu) == "foreach"  # small on CPU: fewer ops win
    big_on_cpu = [
        SimpleNamespace(
            is_cuda=False, device=torch.device("cpu"), numel=lambda: CPU_FOREACH_MAX_ELEMENTS + 1
        )
    ]
    assert step_plan.step_path(group, big_on_cpu) == "single_tensor"
    assert step_plan.step_path({**group, "fused": True}, on_cuda) == "triton"
    assert step_plan.step_path({**group, "fused": True}, on_cpu) == "compiled"
    assert step_plan.step_path({**group, "foreach": True}, on_cuda) == "foreach"
    assert step_plan.step_path({**group, "cautious": True}, on_cuda) == "foreach"
    # what the Triton kernels do not run takes the compiled kernel, decided here too
    assert step_plan.step_path({**group, "fused": True, "cautious": True}, on_cuda) == "compiled"
    strided = [cuda_tensor(), cuda_tensor(contiguous=False)]
    assert step_plan.step_path({**group, "fused": True}, strided) == "compiled"
    monkeypatch.setattr(step_plan, "TRITON_AVAILABLE", False)
    assert step_plan.step_path(group, on_cuda) == "foreach"


class _LaunchNothing:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@pytest.mark.skipif(not TRITON_AVAILABLE, reason="needs triton")
@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"skip_nonfinite": False},
        {"cuda_graph": True},
        {"mars_type": "mars-lion", "one_buffer": True, "clip": False},
    ],
    ids=["default", "no-skip", "cuda-graph", "one-buffer-lion"],
)
def test_a_triton_step_dispatches_as_many_ops_for_64_tensors_as_for_16(monkeypatch, flags):
    """Besides its kernel launches (stubbed here), a step on the Triton path dispatches a fixed
    number of ops, however many tensors it updates: no per-tensor gate or step-count op."""
    counts = [
        ops_of_second_step(optimizer) for optimizer in stubbed_triton_steps(monkeypatch, flags)
    ]
    assert counts[0] == counts[1], counts


@pytest.mark.skipif(not TRITON_AVAILABLE, reason="needs triton")
@pytest.mark.parametrize(
    "flags",
    [{}, {"skip_nonfinite": False}, {"cuda_graph": True}, {"mars_type": "mars-shampoo"}],
    ids=["default", "no-skip", "cuda-graph", "mars-shampoo"],
)
def test_a_triton_steps_python_work_per_tensor_is_its_state_lookups(monkeypatch, flags):
    """Eagerly on a GPU the host's Python is the step's time until the kernels are queued. The
    Python functions a step calls grow with the number of tensors only by ``Tensor.__hash__``
    of the state lookups every torch.optim optimizer makes (one per tensor, one more per MARS
    tensor under the skip): tables, pointers and contiguity are list comprehensions, not a
    call per tensor (this was about 20 calls per tensor)."""
    counts = []
    for optimizer in stubbed_triton_steps(monkeypatch, flags):
        optimizer.step()
        counts.append(count_python_calls(optimizer.step))
    added_tensors = 2 * (32 - 8)
    assert counts[1] - counts[0] <= 2 * added_tensors, counts


def stubbed_triton_steps(monkeypatch, flags: dict) -> list[MARS]:
    """MARS on the Triton path with its kernels stubbed, over 8 and over 32 (matrix, vector)
    pairs."""
    import torch_mars.kernels.triton_step as triton_step
    import torch_mars.optim.functional as functional

    monkeypatch.setattr(functional, "fused_backend", lambda tensors: "triton")
    monkeypatch.setattr(triton_step, "_mars_update_kernel", _LaunchNothing())
    monkeypatch.setattr(triton_step, "_mars_norm_kernel", _LaunchNothing())
    optimizers = []
    for n in (8, 32):
        matrices = [torch.zeros(4, 4, requires_grad=True) for _ in range(n)]
        vectors = [torch.zeros(4, requires_grad=True) for _ in range(n)]
        for param in matrices + vectors:
            param.grad = torch.ones_like(param)
        optimizers.append(MARS(matrices + vectors, fused=True, **flags))
    return optimizers
