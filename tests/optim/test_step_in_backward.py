"""MARS stepped inside backward equals the normal step bitwise in float64 on CPU, frees every
gradient, and refuses what it cannot do."""

from __future__ import annotations

import pytest
import torch

from torch_mars import MARS, StepInBackward


def model_and_batches(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(48, 4)
    ).double()
    batches = [torch.randn(5, 3, 8, dtype=torch.float64) for _ in range(6)]
    return model, batches


@pytest.mark.parametrize("mars_type", ["mars-adamw", "mars-lion", "mars-shampoo"])
def test_step_in_backward_is_bitwise_the_normal_step(mars_type):
    kwargs = dict(lr=1e-2, mars_type=mars_type, weight_decay=0.1, gamma=0.05)
    normal, batches = model_and_batches()
    in_backward, _ = model_and_batches()
    opt = MARS(normal.parameters(), foreach=False, **kwargs)
    StepInBackward(in_backward.parameters(), **kwargs)
    for batch in batches:
        opt.zero_grad()
        normal(batch).pow(2).mean().backward()
        opt.step()
        in_backward(batch).pow(2).mean().backward()
        assert all(p.grad is None for p in in_backward.parameters())
    for a, b in zip(normal.parameters(), in_backward.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_schedule_reaches_every_parameter_and_state_round_trips():
    model, batches = model_and_batches()
    hooked = StepInBackward(model.parameters(), lr=1e-2)
    for group in hooked.param_groups:
        group["lr"] = 5e-3
    model(batches[0]).sum().backward()
    saved = hooked.state_dict()
    again, _ = model_and_batches()
    restored = StepInBackward(again.parameters(), lr=5e-3)
    restored.load_state_dict(saved)
    assert len(hooked.param_groups) == len(list(model.parameters()))
    assert all(opt.state for opt in restored.optimizers)
    hooked.remove()
    model(batches[1]).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"is_approx": False}, "is_approx=True"), ({"foreach": True}, "one tensor at a time")],
)
def test_what_a_backward_hook_cannot_do_is_refused(kwargs, message):
    model, _ = model_and_batches()
    with pytest.raises(ValueError, match=message):
        StepInBackward(model.parameters(), **kwargs)


def test_named_parameters_step_in_backward_as_unnamed_ones_and_keep_their_names():
    plain, batches = model_and_batches()
    named, _ = model_and_batches()
    StepInBackward(plain.parameters(), lr=1e-2)
    hooked = StepInBackward(named.named_parameters(), lr=1e-2)
    for batch in batches:
        plain(batch).pow(2).mean().backward()
        named(batch).pow(2).mean().backward()
    assert all(
        torch.equal(a, b) for a, b in zip(plain.parameters(), named.parameters(), strict=True)
    )
    assert [g["param_names"] for g in hooked.param_groups] == [
        [name] for name, _ in named.named_parameters()
    ]
