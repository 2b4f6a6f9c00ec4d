"""The generic contract torch checks on its own optimizers (the checks of its OptimizerInfo
harness), written for MARS and run over every rule and the flags that change what a step
stores: a step without gradients is a no-op that creates no state; deepcopy and pickle keep
everything; a state_dict round trip through ``torch.save``/``torch.load(weights_only=True)``
resumes bitwise, with the state's dtypes; step and state_dict hooks run as torch documents them;
a tensor lr equals a float one; foreach and fused equal the for-loop; every configuration goes
downhill under an lr scheduler; mixed dtypes keep theirs; bad params are refused.

Fused parity on every option is in tests/optim/test_fused_parity.py (each compiled
configuration costs seconds on CPU); here the fused path runs for one configuration of each rule."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

from problems import MIXED_SHAPES, RandomProblem, mse_step, run_mars, take_step
from torch_mars import MARS

CONFIGS: dict[str, dict] = {
    "adamw": {},
    "adamw-exact": {"is_approx": False},
    "adamw-amsgrad-wd-maximize": {"amsgrad": True, "weight_decay": 0.1, "maximize": True},
    "adamw-bf16-state": {"state_dtype": torch.bfloat16},
    "lion": {"mars_type": "mars-lion", "lr": 1e-3},
    "lion-one-buffer": {"mars_type": "mars-lion", "lr": 1e-3, "clip": False, "one_buffer": True},
    "shampoo-exact": {"mars_type": "mars-shampoo", "is_approx": False},
    "mars-m": {"mars_type": "mars-m", "weight_decay": 0.1},
    "cautious-optimize-1d": {"cautious": True, "optimize_1d": True},
}
FUSED_CONFIGS = ("adamw", "lion", "lion-one-buffer", "shampoo-exact", "mars-m")


def params_and_problem(steps: int = 4) -> tuple[list[torch.Tensor], RandomProblem]:
    problem = RandomProblem(MIXED_SHAPES, steps=steps)
    return [p.clone().requires_grad_() for p in problem.initial], problem


def train(opt: MARS, params: list[torch.Tensor], problem: RandomProblem, steps: range) -> None:
    is_approx = opt.param_groups[0]["is_approx"]
    for step in steps:

        def closure(step: int = step) -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = problem.loss(params, step)
            loss.backward()
            return loss

        take_step(opt, closure, is_approx)


def assert_same_state(a: MARS, b: MARS) -> None:
    for state_a, state_b in zip(a.state.values(), b.state.values(), strict=True):
        assert state_a.keys() == state_b.keys()
        for key, value in state_a.items():
            if isinstance(value, torch.Tensor):
                assert value.dtype == state_b[key].dtype, key
                assert torch.equal(value, state_b[key]), key
            else:
                assert value == state_b[key], key


@pytest.mark.parametrize("name", CONFIGS)
def test_a_step_without_gradients_changes_nothing_and_creates_no_state(name):
    params, _ = params_and_problem()
    before = [p.detach().clone() for p in params]
    opt = MARS(params, **CONFIGS[name])
    loss = opt.step(lambda: torch.zeros(()))
    assert loss == 0
    assert all(torch.equal(p, b) for p, b in zip(params, before, strict=True))
    assert len(opt.state) == 0


@pytest.mark.parametrize("name", CONFIGS)
def test_deepcopy_and_pickle_keep_every_attribute_and_the_state(name):
    params, problem = params_and_problem()
    opt = MARS(params, **CONFIGS[name])
    train(opt, params, problem, range(2))
    copied = copy.deepcopy(opt)
    public = {key for key in vars(opt) if not key.startswith("_")}
    assert public <= vars(copied).keys()
    assert {key: copied.defaults[key] for key in opt.defaults} == opt.defaults
    assert copied._step_supports_amp_scaling == opt._step_supports_amp_scaling
    assert_same_state(opt, copied)
    pickled = pickle.loads(pickle.dumps(opt.state_dict()))
    fresh = MARS([p.detach().clone().requires_grad_() for p in params], **CONFIGS[name])
    fresh.load_state_dict(pickled)
    assert_same_state(opt, fresh)


@pytest.mark.parametrize("name", CONFIGS)
def test_a_saved_state_dict_resumes_bitwise_with_its_dtypes(name):
    params, problem = params_and_problem(steps=6)
    opt = MARS(params, **CONFIGS[name])
    train(opt, params, problem, range(3))
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    resumed_params = [p.detach().clone().requires_grad_() for p in params]
    resumed = MARS(resumed_params, **CONFIGS[name])
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert_same_state(opt, resumed)
    train(opt, params, problem, range(3, 6))
    train(resumed, resumed_params, problem, range(3, 6))
    for a, b in zip(params, resumed_params, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["adamw", "shampoo-exact"])
def test_step_and_state_dict_hooks_run_as_torch_documents(name):
    params, problem = params_and_problem()
    opt = MARS(params, **CONFIGS[name])
    calls: list[str] = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append("step-pre"))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append("step-post"))
    opt.register_state_dict_pre_hook(lambda o: calls.append("save-pre"))

    def tag_on_save(o, state_dict):
        state_dict["tag"] = "saved"
        return state_dict

    opt.register_state_dict_post_hook(tag_on_save)

    def untag_on_load(o, state_dict):
        calls.append(f"load-pre:{state_dict.pop('tag')}")
        return state_dict

    opt.register_load_state_dict_pre_hook(untag_on_load)
    opt.register_load_state_dict_post_hook(lambda o: calls.append("load-post"))
    train(opt, params, problem, range(2))
    saved = opt.state_dict()
    assert saved["tag"] == "saved"
    opt.load_state_dict(saved)
    assert calls == [
        "step-pre",
        "step-post",
        "step-pre",
        "step-post",
        "save-pre",
        "load-pre:saved",
        "load-post",
    ]


@pytest.mark.parametrize("name", CONFIGS)
def test_a_tensor_lr_steps_as_the_float_lr(name):
    config = CONFIGS[name]
    problem = RandomProblem(MIXED_SHAPES, steps=4)
    lr = config.get("lr", 3e-3)
    floats, _ = run_mars(problem, **config)
    tensors, _ = run_mars(problem, **{**config, "lr": torch.tensor(lr, dtype=torch.float64)})
    for a, b in zip(floats, tensors, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", CONFIGS)
def test_foreach_and_fused_equal_the_for_loop(name):
    problem = RandomProblem(MIXED_SHAPES, steps=4)
    config = CONFIGS[name]
    loop, _ = run_mars(problem, foreach=False, **config)
    paths = {"foreach": {"foreach": True}}
    if name in FUSED_CONFIGS:
        paths["fused"] = {"fused": True}
    for flags in paths.values():
        fast, _ = run_mars(problem, **flags, **config)
        for a, b in zip(loop, fast, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_configuration_goes_downhill_under_an_lr_scheduler(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(64, 5)
    y = x @ torch.randn(5, 1)
    orthogonal = CONFIGS[name].get("mars_type") in ("mars-shampoo", "mars-m")
    config = {**CONFIGS[name], "lr": 5e-2 if orthogonal else 1e-2}
    opt = MARS(model.parameters(), **config)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=40)

    def loss() -> float:
        with torch.no_grad():
            return nn.functional.mse_loss(model(x), y).item()

    start = loss()
    for _ in range(40):
        if config.get("maximize"):
            opt.zero_grad()
            (-nn.functional.mse_loss(model(x), y)).backward()  # maximize -loss
            opt.step()
        else:
            mse_step(opt, model, x, y, is_approx=config.get("is_approx", True))
        scheduler.step()
    assert loss() < 0.7 * start
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("name", ["adamw", "shampoo-exact", "lion"])
def test_mixed_dtypes_in_one_group_keep_their_dtypes(name):
    dtypes = (torch.float32, torch.float64, torch.bfloat16)
    # Entries well under 1, seeded: a step of about lr = 3e-3 must show in bf16, whose spacing
    # above 0.5 is 4e-3 (unseeded, a 3-entry bf16 tensor sometimes had all three above it).
    generator = torch.Generator().manual_seed(0)
    shapes = [(4, 3)] * 3 + [(3,)] * 3
    params = [
        (0.1 * torch.randn(s, generator=generator)).to(d).requires_grad_()
        for s, d in zip(shapes, dtypes * 2, strict=True)
    ]
    opt = MARS(params, **CONFIGS[name])
    before = [p.detach().clone() for p in params]

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = sum(p.float().square().sum() for p in params)
        loss.backward()
        return loss

    for _ in range(2):
        take_step(opt, closure, CONFIGS[name].get("is_approx", True))
    for p, b in zip(params, before, strict=True):
        assert p.dtype == b.dtype and not torch.equal(p, b)
        assert all(
            v.dtype == p.dtype for v in opt.state[p].values() if torch.is_tensor(v) and v.ndim
        )


def test_params_torch_refuses_are_refused():
    weight = torch.zeros(3, 2, requires_grad=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        MARS([])
    with pytest.raises(TypeError, match="iterable of Tensors or dicts"):
        MARS(weight)
    with pytest.raises(TypeError, match="ordered collection"):
        MARS([{"params": {weight}}])
    with pytest.raises(ValueError, match="non-leaf"):
        MARS([weight * 2])
    with pytest.raises(ValueError, match="more than one parameter group"):
        MARS([{"params": [weight]}, {"params": [weight]}])
    with pytest.raises(ValueError, match="listed twice"):  # torch only warns; it would step twice
        MARS([weight, weight])


def test_a_group_added_later_takes_the_defaults_and_steps():
    first = torch.zeros(3, 2, requires_grad=True)
    later = torch.ones(4, 2, requires_grad=True)
    opt = MARS([first], lr=1e-2, mars_type="mars-lion", weight_decay=0.1)
    opt.add_param_group({"params": [later], "lr": 2e-2})
    group = opt.param_groups[1]
    assert group["lr"] == 2e-2 and group["mars_type"] == "mars-lion"
    assert group["weight_decay"] == 0.1
    later.sum().backward()
    opt.step()
    assert first not in opt.state and opt.state[later]["step"] == 1
    assert not torch.equal(later, torch.ones(4, 2))


def test_repr_names_the_optimizer_and_its_hyperparameters():
    text = repr(MARS([torch.zeros(2, 2, requires_grad=True)], lr=1e-3, gamma=0.05))
    assert text.startswith("MARS (")
    assert "lr: 0.001" in text and "gamma: 0.05" in text


def named(params: list[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    return [(f"p{i}", p) for i, p in enumerate(params)]


@pytest.mark.parametrize("name", CONFIGS)
def test_named_parameters_step_as_unnamed_ones_and_keep_their_names(name):
    """``MARS(model.named_parameters())``, as torch.optim takes it since 2.6: the same steps,
    and the names in the group and the state dict."""
    params, problem = params_and_problem()
    unnamed = [p.detach().clone().requires_grad_() for p in params]
    opt = MARS(named(params), **CONFIGS[name])
    reference = MARS(unnamed, **CONFIGS[name])
    train(opt, params, problem, range(3))
    train(reference, unnamed, problem, range(3))
    assert all(torch.equal(a, b) for a, b in zip(params, unnamed, strict=True))
    names = [f"p{i}" for i in range(len(params))]
    assert opt.param_groups[0]["param_names"] == names
    assert opt.state_dict()["param_groups"][0]["param_names"] == names


@pytest.mark.parametrize("name", ["adamw", "lion-one-buffer", "shampoo-exact"])
@pytest.mark.parametrize(
    ("saved_named", "loaded_named"), [(True, True), (True, False), (False, True)]
)
def test_named_and_unnamed_state_dicts_load_into_each_other_and_resume_bitwise(
    name, saved_named, loaded_named
):
    params, problem = params_and_problem(steps=6)
    opt = MARS(named(params) if saved_named else params, **CONFIGS[name])
    train(opt, params, problem, range(3))
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    resumed_params = [p.detach().clone().requires_grad_() for p in params]
    resumed = MARS(named(resumed_params) if loaded_named else resumed_params, **CONFIGS[name])
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert_same_state(opt, resumed)
    train(opt, params, problem, range(3, 6))
    train(resumed, resumed_params, problem, range(3, 6))
    assert all(torch.equal(a, b) for a, b in zip(params, resumed_params, strict=True))


def test_a_named_state_dict_is_deterministic():
    """Two optimizers built and trained the same way give equal state dicts, names included
    (torch's state-dict determinism check, on named parameters)."""
    dicts = []
    for _ in range(2):
        params, problem = params_and_problem()
        opt = MARS([{"params": named(params)[:2]}, {"params": named(params)[2:], "lr": 1e-3}])
        train(opt, params, problem, range(3))
        dicts.append(opt.state_dict())
    first, second = dicts
    assert first["param_groups"] == second["param_groups"]
    assert first["param_groups"][1]["param_names"] == [f"p{i}" for i in range(2, len(MIXED_SHAPES))]
    for index, state in first["state"].items():
        assert_same_state_entry(state, second["state"][index])


def assert_same_state_entry(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert torch.equal(value, b[key]) if isinstance(value, torch.Tensor) else value == b[key]


def test_parameters_that_cannot_step_are_refused_before_anything_changes():
    for dtype in (torch.int64, torch.bool, torch.complex64):
        with pytest.raises(ValueError, match=r"MARS takes (floating-point|real) parameters"):
            MARS([torch.zeros(3, 3, dtype=dtype)])
    weight = torch.zeros(3, 2, requires_grad=True)
    opt = MARS([weight])
    with pytest.raises(ValueError, match="floating-point"):
        opt.add_param_group({"params": [("ids", torch.zeros(2, dtype=torch.int32))]})
    with pytest.raises(TypeError, match=r"tensors or \(name, tensor\) pairs"):
        MARS([("w", "not a tensor")])
    assert len(opt.param_groups) == 1
