"""``torch.compile(optimizer.step)`` traces the whole step as one graph (``fullgraph=True``: no
graph breaks), compiles at most three times while the state is created and the step count
becomes dynamic, and never again while a scheduler moves tensor-valued ``lr`` and ``gamma``;
and the inductor-compiled step computes what the eager step computes. (A traced step takes
the per-tensor loop whatever ``foreach`` says; see ``torch_mars.optim.step_plan.step_path``.)"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from torch_mars import MARS, MARS_TYPES


def model_and_batches(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 1)
    )
    batches = [torch.randn(4, 8) for _ in range(10)]
    return model, batches


def backward(model: torch.nn.Module, opt: MARS, batch: torch.Tensor) -> None:
    opt.zero_grad()
    model(batch).pow(2).mean().backward()


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "loop"])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_compiled_step_has_no_graph_breaks_and_no_recompiles_on_lr_or_gamma(mars_type, foreach):
    torch._dynamo.reset()
    model, batches = model_and_batches()
    lr, gamma = torch.tensor(1e-2), torch.tensor(0.025)
    opt = MARS(model.parameters(), lr=lr, gamma=gamma, mars_type=mars_type, foreach=foreach)
    counter = CompileCounter()
    step = torch.compile(opt.step, backend=counter, fullgraph=True)
    frames = []
    for index, batch in enumerate(batches):
        backward(model, opt, batch)
        if index >= 3:
            lr.fill_(1e-2 / index)
            gamma.fill_(0.01 * index)
        step()
        frames.append(counter.frame_count)
    # Steps 1-3 compile the state's creation, then the step count as a constant, then as a
    # dynamic value; lr and gamma change from step 4 on and nothing compiles again.
    assert frames[2] <= 3
    assert frames[2:] == [frames[2]] * (len(frames) - 2)


def test_inductor_compiled_step_matches_eager_with_a_scheduled_lr():
    torch._dynamo.reset()
    results = []
    for compiled in (False, True):
        model, batches = model_and_batches()
        lr = torch.tensor(1e-2)
        opt = MARS(model.parameters(), lr=lr, foreach=True, weight_decay=0.1)
        step = torch.compile(opt.step, fullgraph=True) if compiled else opt.step
        for index, batch in enumerate(batches[:5]):
            backward(model, opt, batch)
            lr.fill_(1e-2 * (1 + index))
            step()
        results.append([p.detach().clone() for p in model.parameters()])
    for eager, compiled in zip(*results, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
