"""Parts of torch.optim's contract that MARS must keep (issue #15): state in ``state_dtype``
survives ``load_state_dict`` and resumes bitwise; one-element tensor hyperparameters of any
shape; complex parameters refused; an old state dict keeps the 1-D lr; another optimizer's
state dict refused before anything changes."""

from __future__ import annotations

import copy

import pytest
import torch

from torch_mars import MARS


def model_and_batches(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    batches = [(torch.randn(8, 6), torch.randn(8, 1)) for _ in range(6)]
    return model, batches


def take_steps(model, opt, batches):
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


@pytest.mark.parametrize("foreach", [False, True])
def test_bf16_state_survives_load_state_dict_and_resumes_bitwise(foreach):
    model, batches = model_and_batches()
    whole = copy.deepcopy(model)
    opt = MARS(model.parameters(), lr=1e-2, state_dtype=torch.bfloat16, foreach=foreach)
    take_steps(model, opt, batches[:3])
    saved = copy.deepcopy(opt.state_dict())
    resumed_model = copy.deepcopy(model)
    resumed = MARS(resumed_model.parameters(), lr=1e-2, state_dtype=torch.bfloat16, foreach=foreach)
    resumed.load_state_dict(saved)
    dtypes = {
        v.dtype
        for s in resumed.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.is_floating_point()
    }
    assert dtypes == {torch.bfloat16}
    take_steps(resumed_model, resumed, batches[3:])
    reference = MARS(whole.parameters(), lr=1e-2, state_dtype=torch.bfloat16, foreach=foreach)
    take_steps(whole, reference, batches)
    for a, b in zip(whole.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
@pytest.mark.parametrize("foreach", [False, True])
def test_one_element_tensor_hyperparameters_of_any_shape(shape, foreach):
    model, batches = model_and_batches()
    floats = copy.deepcopy(model)
    lr, gamma = torch.full(shape, 1e-2), torch.full(shape, 0.05)
    betas = (torch.full(shape, 0.9), torch.full(shape, 0.99))
    take_steps(model, MARS(model.parameters(), lr=lr, gamma=gamma, betas=betas), batches)
    opt = MARS(floats.parameters(), lr=1e-2, gamma=0.05, betas=(0.9, 0.99), foreach=foreach)
    take_steps(floats, opt, batches)
    for a, b in zip(model.parameters(), floats.parameters(), strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_complex_parameters_are_refused():
    with pytest.raises(ValueError, match="real parameters"):
        MARS([torch.zeros(2, 2, dtype=torch.complex64, requires_grad=True)])


def test_an_old_state_dict_keeps_the_1d_learning_rate_mid_schedule():
    model, batches = model_and_batches()
    opt = MARS(model.parameters(), lr=1e-2, lr_1d=2e-3)
    take_steps(model, opt, batches[:2])
    saved = opt.state_dict()
    for group in saved["param_groups"]:
        del group["lr_at_construction"]  # as written before it existed
        group["lr"] = 5e-3  # halfway down a schedule
    fresh = MARS(model.parameters(), lr=1e-2, lr_1d=2e-3)
    fresh.load_state_dict(saved)
    group = fresh.param_groups[0]
    assert group["lr_at_construction"] == 1e-2
    assert group["lr"] * group["lr_1d"] / group["lr_at_construction"] == pytest.approx(1e-3)


def test_another_optimizers_state_dict_is_refused_before_anything_changes():
    model, batches = model_and_batches()
    opt = MARS(model.parameters(), lr=1e-2)
    take_steps(model, opt, batches[:1])
    before = copy.deepcopy(opt.state_dict())
    foreign = torch.optim.AdamW(model.parameters()).state_dict()
    with pytest.raises(ValueError, match=r"lacks MARS's \['gamma', 'is_approx'"):
        opt.load_state_dict(foreign)
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    assert all(
        torch.equal(after["state"][k]["exp_avg"], before["state"][k]["exp_avg"])
        for k in before["state"]
    )


def exact_run(model, batches, zero_in_closure: bool):
    opt = MARS(model.parameters(), lr=1e-2, is_approx=False)
    losses = []
    for x, y in batches:

        def closure(x=x, y=y):
            if zero_in_closure:
                opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        losses.append(opt.step(closure).item())
    return losses


def test_exact_mode_zeroes_gradients_before_each_closure_call():
    """A closure that accumulates into .grad (Lightning's with accumulate_grad_batches) gives
    the same run as one that zeroes them, and the loss returned is the one at x_t."""
    model, batches = model_and_batches()
    accumulating = copy.deepcopy(model)
    zeroing = exact_run(model, batches, zero_in_closure=True)
    assert exact_run(accumulating, batches, zero_in_closure=False) == zeroing
    for a, b in zip(model.parameters(), accumulating.parameters(), strict=True):
        assert torch.equal(a, b)
    fresh, _ = model_and_batches()
    x, y = batches[0]
    assert zeroing[0] == pytest.approx(torch.nn.functional.mse_loss(fresh(x), y).item())


def test_exact_mode_never_writes_a_gradient_in_place():
    model, batches = model_and_batches()
    opt = MARS(model.parameters(), lr=1e-2, is_approx=False)
    x, y = batches[0]

    def closure():
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)
    held = [p.grad for p in model.parameters()]
    snapshots = [g.clone() for g in held]
    opt.step(closure)  # evaluates at x_t and at x_{t-1}
    for grad, snapshot in zip(held, snapshots, strict=True):
        assert torch.equal(grad, snapshot)
    assert all(p.grad is not g for p, g in zip(model.parameters(), held, strict=True))


def test_exact_mode_says_which_loops_can_drive_it():
    model, _ = model_and_batches()
    opt = MARS(model.parameters(), is_approx=False)
    with pytest.raises(ValueError, match="Hugging Face's Trainer, need is_approx=True"):
        opt.step()
    opt.grad_scale = torch.tensor(1024.0)
    with pytest.raises(ValueError, match="cannot step through a GradScaler"):
        opt.step(lambda: torch.zeros(()))


def test_framework_no_decay_groups_decay_nothing_and_the_1d_lr_follows_lr():
    """Hugging Face's Trainer and timm pass a constructor lr and two groups, one with
    weight_decay=0 for norms and biases; those take no decay and the constructor's lr."""
    model, _ = model_and_batches()
    matrices = [p for p in model.parameters() if p.ndim == 2]
    vectors = [p for p in model.parameters() if p.ndim < 2]
    opt = MARS(
        [{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
        lr=1e-3,
    )
    assert [g["weight_decay_1d"] for g in opt.param_groups] == [0.1, 0.0]
    assert all(opt.learning_rate(p) == pytest.approx(1e-3) for p in model.parameters())
    explicit = MARS([{"params": vectors, "weight_decay": 0.0, "weight_decay_1d": 0.2}], lr=1e-3)
    assert explicit.param_groups[0]["weight_decay_1d"] == 0.2
    paper = MARS(model.parameters(), lr=6e-3, lr_1d=3e-3)
    for group in paper.param_groups:
        group["lr"] = 3e-3  # a schedule at half the peak
    assert paper.learning_rate(vectors[0]) == pytest.approx(1.5e-3)
    assert paper.learning_rate(matrices[0]) == pytest.approx(3e-3)
    with pytest.raises(ValueError, match="not a parameter of this optimizer"):
        paper.learning_rate(torch.zeros(1))


@pytest.mark.parametrize("paths", [{"foreach": False}, {"foreach": True}, {"fused": True}])
def test_a_first_step_on_bf16_state_takes_c_equal_to_g_on_every_eager_path(paths):
    """``g_tilde = g`` on a tensor's first step, so ``c = g``: with ``g_tilde`` stored in bf16,
    ``g + s (g - g_tilde)`` would keep ``s (g - bf16(g))``; the step equals gamma 0's bit for
    bit, and the second step (a real correction) does not."""
    generator = torch.Generator().manual_seed(3)
    grads = [torch.randn(8, 8, generator=generator) * 0.01 for _ in range(2)]
    start = torch.randn(8, 8, generator=generator)

    def run(gamma: float, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        param = torch.nn.Parameter(start.clone())
        opt = MARS([param], lr=1e-2, gamma=gamma, state_dtype=torch.bfloat16, **paths)
        for grad in grads[:steps]:
            param.grad = grad.clone()
            opt.step()
        return param.detach(), opt.state[param]["exp_avg"]

    corrected, uncorrected = run(0.5, 1), run(0.0, 1)
    assert torch.equal(corrected[0], uncorrected[0])
    assert torch.equal(corrected[1], uncorrected[1])
    assert not torch.equal(run(0.5, 2)[1], run(0.0, 2)[1])


def test_a_tensor_whose_first_step_comes_later_in_its_group_also_takes_c_equal_to_g():
    """A tensor without a gradient on the group's first step has its own first step later,
    beside tensors on their second: it alone is stepped with gamma 0 (bf16 state, foreach)."""
    generator = torch.Generator().manual_seed(5)
    start = [torch.randn(6, 6, generator=generator) for _ in range(2)]
    grads = [torch.randn(6, 6, generator=generator) * 0.01 for _ in range(3)]
    params = [torch.nn.Parameter(s.clone()) for s in start]
    opt = MARS(params, lr=1e-2, gamma=0.5, state_dtype=torch.bfloat16, foreach=True)
    params[0].grad = grads[0].clone()
    opt.step()
    params[0].grad, params[1].grad = grads[1].clone(), grads[2].clone()
    opt.step()
    alone = torch.nn.Parameter(start[1].clone())
    uncorrected = MARS([alone], lr=1e-2, gamma=0.0, state_dtype=torch.bfloat16, foreach=True)
    alone.grad = grads[2].clone()
    uncorrected.step()
    assert opt.state[params[0]]["step"] == 2 and opt.state[params[1]]["step"] == 1
    assert torch.equal(params[1].detach(), alone.detach())
    assert torch.equal(opt.state[params[1]]["exp_avg"], uncorrected.state[alone]["exp_avg"])
