"""MARS under torch.amp.GradScaler (an inf gradient skips the step and leaves the state alone),
with bfloat16/float16 parameters (state in the parameter dtype), and on the meta device, where
any host read of a tensor value would raise: proof that a step never syncs host and device."""

from __future__ import annotations

import copy

import pytest
import torch

from torch_mars import MARS, MARS_TYPES


def small_model(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(
        dtype
    )


def snapshot(model: torch.nn.Module, opt: MARS) -> tuple[list[torch.Tensor], dict]:
    return [p.detach().clone() for p in model.parameters()], copy.deepcopy(opt.state_dict())


def assert_same_snapshot(a, b) -> None:
    for x, y in zip(a[0], b[0], strict=True):
        assert torch.equal(x, y)
    assert a[1]["state"].keys() == b[1]["state"].keys()
    for index, state in a[1]["state"].items():
        for key, value in state.items():
            other = b[1]["state"][index][key]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other


@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_grad_scaler_skips_a_step_with_an_inf_gradient(mars_type):
    model = small_model()
    opt = MARS(model.parameters(), lr=1e-2, mars_type=mars_type)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = torch.randn(16, 6), torch.randn(16, 2)

    def backward() -> None:
        opt.zero_grad()
        scaler.scale((model(x) - y).pow(2).mean()).backward()

    for _ in range(3):
        backward()
        scaler.step(opt)
        scaler.update()
    before = snapshot(model, opt)
    backward()
    model[0].weight.grad[0, 0] = float("inf")
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 512.0
    assert_same_snapshot(before, snapshot(model, opt))
    backward()
    scaler.step(opt)
    assert opt.state[model[0].weight]["step"] == 4


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_low_precision_parameters_keep_state_in_their_dtype_and_learn(mars_type, dtype, foreach):
    model = small_model(dtype)
    opt = MARS(model.parameters(), lr=1e-2, mars_type=mars_type, amsgrad=True, foreach=foreach)
    x = torch.randn(32, 6).to(dtype)
    y = torch.tanh(x[:, :2] * 2)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = (model(x) - y).float().pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    for p in model.parameters():
        assert all(
            t.dtype == dtype
            for t in opt.state[p].values()
            if torch.is_tensor(t) and t.is_floating_point()
        )
        assert torch.isfinite(p).all()


@pytest.mark.parametrize("is_approx", [True, False], ids=["approx", "exact"])
@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("mars_type", MARS_TYPES)
def test_a_step_never_reads_a_tensor_value_on_the_host(mars_type, foreach, is_approx):
    shapes = [(4, 3), (5,), (2, 3, 2, 2), (0, 3)]
    params = [torch.empty(s, device="meta", requires_grad=True) for s in shapes]
    opt = MARS(params, mars_type=mars_type, foreach=foreach, amsgrad=True, is_approx=is_approx)

    def closure() -> None:
        for p in params:
            p.grad = torch.empty_like(p)

    for _ in range(3):
        closure()
        opt.step(closure)
    assert opt.state[params[0]]["step"] == 3
    assert opt.state[params[0]]["exp_avg"].device.type == "meta"
