"""The host cost of a step, counted as dispatched aten ops on GPT-2-small's shapes (meta tensors:
no memory, no arithmetic): on a GPU each op is at least one launch, so these counts are what a
step pays before any byte moves. Limits from the issue "Fast by default on a GPU"."""

from __future__ import annotations

import torch

from torch_mars import MARS, mars_param_groups
from torch_mars.bench.op_count import count_aten_ops, matmul_ops
from torch_mars.models import GPT, gpt_config
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
    shapes = {matrix_shape(p.shape) for g in groups if g["use_mars"] for p in g["params"]}
    optimizer = MARS(groups, mars_type="mars-shampoo", ns_steps=5, foreach=True)
    optimizer.step()
    matmuls = matmul_ops(count_aten_ops(optimizer.step))
    assert matmuls <= 3 * 5 * len(shapes), (matmuls, len(shapes))


def test_the_default_path_is_triton_on_cuda_when_it_imports_and_foreach_or_loop_elsewhere(
    monkeypatch,
):
    """Where each device's default step goes (docs/algorithm.md's table), decided in one
    place; CUDA tensors are stood in for by objects that say they are on CUDA."""
    from types import SimpleNamespace

    import torch_mars.optim.step_plan as step_plan

    group = MARS([torch.nn.Parameter(torch.zeros(2, 2))]).param_groups[0]
    on_cuda = [SimpleNamespace(is_cuda=True, device=torch.device("cuda"))]
    on_cpu = [torch.zeros(2, 2)]
    monkeypatch.setattr(step_plan, "TRITON_AVAILABLE", True)
    assert step_plan.step_path(group, on_cuda) == "fused"
    assert step_plan.step_path(group, on_cpu) == "single_tensor"
    assert step_plan.step_path({**group, "foreach": True}, on_cuda) == "foreach"
    assert step_plan.step_path({**group, "cautious": True}, on_cuda) == "foreach"
    monkeypatch.setattr(step_plan, "TRITON_AVAILABLE", False)
    assert step_plan.step_path(group, on_cuda) == "foreach"
