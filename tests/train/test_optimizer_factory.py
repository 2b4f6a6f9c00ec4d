"""Optimizers by name: the paper's defaults, the parameter split of Muon and MARS-Shampoo, and
clear errors."""

from __future__ import annotations

import pytest
import torch

from torch_mars.models import GPT, gpt_config
from torch_mars.optim import MARS
from torch_mars.train import OPTIMIZER_NAMES, build_optimizer, default_hyperparams
from torch_mars.train.lion import Lion
from torch_mars.train.optimizers import CombinedOptimizer
from torch_mars.train.trainer import TrainConfig


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(gpt_config("tiny", 256))


def test_gpt2_small_defaults_are_the_papers():
    assert default_hyperparams("adamw", "gpt2-small") == {
        "lr": 6e-4,
        "betas": (0.9, 0.95),
        "weight_decay": 0.1,
        "min_lr": 3e-5,
    }
    mars = default_hyperparams("mars-adamw", "gpt2-small")
    assert {k: mars[k] for k in ("lr", "betas", "gamma", "weight_decay", "lr_1d")} == {
        "lr": 6e-3,
        "betas": (0.95, 0.99),
        "gamma": 0.025,
        "weight_decay": 1e-2,
        "lr_1d": 3e-3,
    }
    muon = default_hyperparams("muon", "gpt2-small")
    assert (muon["lr"], muon["adamw_lr"], muon["weight_decay"]) == (2e-2, 3e-3, 0.0)
    assert default_hyperparams("mars-adamw", "gpt2-large")["lr"] == 2e-3


@pytest.mark.parametrize("name", OPTIMIZER_NAMES)
def test_every_optimizer_trains_the_tiny_gpt(name):
    model = tiny_gpt()
    built = build_optimizer(name, model, default_hyperparams(name, "tiny"))
    idx = torch.randint(0, 256, (4, 17), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(15):
        built.optimizer.zero_grad()
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        built.optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.98 * losses[0]
    assert 0.0 < built.min_ratio <= 1.0


def test_muon_orthogonalises_hidden_matrices_only():
    model = tiny_gpt()
    built = build_optimizer("muon", model, default_hyperparams("muon", "tiny"))
    assert isinstance(built.optimizer, CombinedOptimizer)
    muon, adamw = built.optimizer.optimizers
    muon_params = {id(p) for g in muon.param_groups for p in g["params"]}
    assert id(model.wte.weight) not in muon_params and id(model.wpe.weight) not in muon_params
    assert muon_params == {
        id(p) for n, p in model.named_parameters() if p.ndim == 2 and n.startswith("blocks.")
    }
    assert len(muon_params) + sum(len(g["params"]) for g in adamw.param_groups) == len(
        list(model.parameters())
    )


def test_mars_shampoo_sends_embeddings_to_adamw_and_mars_adamw_keeps_them():
    model = tiny_gpt()
    shampoo = build_optimizer("mars-shampoo", model, default_hyperparams("mars-shampoo", "tiny"))
    groups = {g["use_mars"]: {id(p) for p in g["params"]} for g in shampoo.optimizer.param_groups}
    assert id(model.wte.weight) in groups[False]
    adamw_kind = build_optimizer("mars-adamw", model, default_hyperparams("mars-adamw", "tiny"))
    groups = {
        g["use_mars"]: {id(p) for p in g["params"]} for g in adamw_kind.optimizer.param_groups
    }
    assert id(model.wte.weight) in groups[True]
    assert isinstance(adamw_kind.optimizer, MARS)
    assert isinstance(build_optimizer("lion", model, {"lr": 1e-4}).optimizer, Lion)


def test_schedule_floor_follows_an_overridden_lr_on_cpu_models():
    settings = {**default_hyperparams("muon", "mini"), "lr": 1e-3}
    assert build_optimizer("muon", tiny_gpt(), settings).min_ratio == pytest.approx(0.1)
    paper = default_hyperparams("adamw", "gpt2-small")
    assert build_optimizer("adamw", tiny_gpt(), paper).min_ratio == pytest.approx(3e-5 / 6e-4)


def test_exact_mode_needs_a_closure_and_a_mars_optimizer():
    model = tiny_gpt()
    assert build_optimizer("mars-adamw", model, {"lr": 1e-3}, exact=True).needs_closure
    with pytest.raises(ValueError, match="exact mode is a MARS option"):
        build_optimizer("adamw", model, {"lr": 1e-3}, exact=True)


def test_bad_names_and_floors_are_rejected():
    model = tiny_gpt()
    with pytest.raises(ValueError, match="optimizer must be one of"):
        default_hyperparams("sgd", "tiny")
    with pytest.raises(ValueError, match="optimizer must be one of"):
        build_optimizer("sgd", model, {"lr": 1e-3})
    with pytest.raises(ValueError, match="min_lr must be in"):
        build_optimizer("adamw", model, {"lr": 1e-3, "min_lr": 1e-2})


def test_combined_optimizer_round_trips_its_state():
    model = tiny_gpt()
    built = build_optimizer("muon", model, default_hyperparams("muon", "tiny"))
    _, loss = model(torch.zeros(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
    loss.backward()
    built.optimizer.step()
    state = built.optimizer.state_dict()
    fresh = build_optimizer("muon", model, default_hyperparams("muon", "tiny")).optimizer
    fresh.load_state_dict(state)
    assert (
        fresh.state_dict()["optimizers"][0]["state"].keys()
        == state["optimizers"][0]["state"].keys()
    )
    with pytest.raises(ValueError, match="holds 1 optimizers"):
        fresh.load_state_dict({"optimizers": [state["optimizers"][0]]})


def test_mars_takes_implementation_flags_as_hyperparameters_and_others_do_not():
    config = TrainConfig(optimizer="mars-lion", model="tiny", hyperparams={"fused": True})
    settings = config.resolved_hyperparams()
    assert settings["fused"] is True
    model = GPT(gpt_config("tiny", 256))
    optimizer = build_optimizer("mars-lion", model, settings).optimizer
    assert all(group["fused"] for group in optimizer.param_groups)
    with pytest.raises(ValueError, match=r"unknown hyperparameters for adamw: \['fused'\]"):
        TrainConfig(
            optimizer="adamw", model="tiny", hyperparams={"fused": True}
        ).resolved_hyperparams()


def test_every_name_builds_for_both_tasks_and_nadam_decays_decoupled():
    from torch_mars.models import resnet18
    from torch_mars.train.vision import vision_hyperparams

    for name in OPTIMIZER_NAMES:
        build_optimizer(name, tiny_gpt(), default_hyperparams(name, "tiny"))
        build_optimizer(name, resnet18(width=2), vision_hyperparams(name, {}))
    nadam = build_optimizer("nadam", tiny_gpt(), default_hyperparams("nadam", "mini"))
    assert isinstance(nadam.optimizer, torch.optim.NAdam)
    assert all(g["decoupled_weight_decay"] for g in nadam.optimizer.param_groups)


def test_the_harness_builds_mars_m_and_takes_the_new_mars_flags():
    """`--optimizers mars-m` and `--opt-arg mars-adamw:cautious=True` (and clip, one_buffer)
    reach the optimizer."""
    from torch_mars.cli import build_parser

    args = build_parser().parse_args(
        ["compare", "--optimizers", "mars-m", "mars-adamw", "--opt-arg", "mars-adamw:cautious=True",
         "--opt-arg", "mars-m:clip=False", "--opt-arg", "mars-m:one_buffer=True"]
    )  # fmt: skip
    plan = args.command_entry.configure(args)
    settings = plan.hyperparams
    mars_m = build_optimizer(
        "mars-m", tiny_gpt(), {**default_hyperparams("mars-m", "tiny"), **settings["mars-m"]}
    )
    cautious = build_optimizer(
        "mars-adamw",
        tiny_gpt(),
        {**default_hyperparams("mars-adamw", "tiny"), **settings["mars-adamw"]},
    )
    assert {g["mars_type"] for g in mars_m.optimizer.param_groups} == {"mars-m"}
    assert all(g["one_buffer"] and not g["clip"] for g in mars_m.optimizer.param_groups)
    assert all(g["cautious"] for g in cautious.optimizer.param_groups)


def test_a_run_config_accepts_the_mars_options_and_state_dtype_by_name():
    """`--opt-arg cautious=True`, `clip`, `one_buffer`, `skip_nonfinite` and
    `state_dtype=bfloat16` pass the run's validation and reach MARS."""
    from torch_mars.train.trainer import TrainConfig

    options = {"cautious": True, "skip_nonfinite": False, "state_dtype": "bfloat16"}
    settings = TrainConfig(optimizer="mars-adamw", model="tiny", hyperparams=options)
    built = build_optimizer("mars-adamw", tiny_gpt(), settings.resolved_hyperparams())
    group = built.optimizer.param_groups[0]
    assert group["cautious"] and not group["skip_nonfinite"]
    assert group["state_dtype"] == torch.bfloat16
    with pytest.raises(ValueError, match="state_dtype must be one of"):
        build_optimizer(
            "mars-adamw",
            tiny_gpt(),
            {**default_hyperparams("mars-adamw", "tiny"), "state_dtype": "int8"},
        )
    with pytest.raises(ValueError, match="unknown hyperparameters"):
        TrainConfig(optimizer="adamw", hyperparams={"cautious": True}).resolved_hyperparams()


def test_a_run_config_passes_nesterov_on_to_torchs_muon_and_no_other_optimizer():
    """`--opt-arg nesterov=false` turns torch.optim.Muon's Nesterov form off (its default is
    on); anything but true/false is refused; for any other optimizer the key is unknown."""
    for nesterov in (True, False):
        settings = TrainConfig(optimizer="muon", model="tiny", hyperparams={"nesterov": nesterov})
        built = build_optimizer("muon", tiny_gpt(), settings.resolved_hyperparams())
        assert built.optimizer.optimizers[0].param_groups[0]["nesterov"] is nesterov
    built = build_optimizer("muon", tiny_gpt(), default_hyperparams("muon", "tiny"))
    assert built.optimizer.optimizers[0].param_groups[0]["nesterov"] is True
    with pytest.raises(ValueError, match="muon: nesterov must be true or false, got 2"):
        build_optimizer("muon", tiny_gpt(), {**default_hyperparams("muon", "tiny"), "nesterov": 2})
    with pytest.raises(ValueError, match="unknown hyperparameters"):
        TrainConfig(
            optimizer="mars-shampoo", hyperparams={"nesterov": False}
        ).resolved_hyperparams()
