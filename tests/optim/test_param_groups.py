"""mars_param_groups puts every parameter in exactly one group, by the documented rules."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from torch_mars import MARS, mars_param_groups


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(16, 8)
        self.block = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
        self.conv = nn.Conv1d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm1d(8)
        self.scale = nn.Parameter(torch.ones(8))
        self.lm_head = nn.Linear(8, 16, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)


def names(model: nn.Module, group: dict) -> set[str]:
    ids = {id(p) for p in group["params"]}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def test_default_rules_cover_every_parameter_once():
    model = TinyLM()
    groups = mars_param_groups(model)
    all_ids = [id(p) for g in groups for p in g["params"]]
    assert len(all_ids) == len(set(all_ids)) == len(list(model.parameters()))
    mars, adamw = groups
    assert mars["use_mars"] is True and adamw["use_mars"] is False
    assert names(model, mars) == {
        "wte.weight",
        "block.1.weight",
        "block.3.weight",
        "conv.weight",
        "frozen.weight",
    }
    assert names(model, adamw) == {
        "block.0.weight", "block.0.bias", "block.1.bias", "block.3.bias", "conv.bias",
        "bn.weight", "bn.bias", "scale", "frozen.bias",
    }  # fmt: skip


def test_overrides_by_embedding_choice_module_type_and_name():
    model = TinyLM()
    mars, adamw = mars_param_groups(
        model,
        embeddings="adamw",
        adamw_module_types=(nn.LayerNorm, nn.Conv1d),
        mars_names=["scale"],
        adamw_names=["block.3.*"],
        mars_options={"weight_decay": 0.1},
        adamw_options={"weight_decay_1d": 0.0},
    )
    assert names(model, mars) == {"block.1.weight", "scale", "frozen.weight"}
    assert {"wte.weight", "conv.weight", "block.3.weight"} <= names(model, adamw)
    assert mars["weight_decay"] == 0.1 and adamw["weight_decay_1d"] == 0.0
    MARS([mars, adamw])


def test_conflicting_name_rules_and_bad_arguments_raise():
    model = TinyLM()
    with pytest.raises(ValueError, match="matches both mars_names and adamw_names"):
        mars_param_groups(model, mars_names=["block.*"], adamw_names=["*.bias"])
    with pytest.raises(ValueError, match="embeddings must be"):
        mars_param_groups(model, embeddings="sgd")
    with pytest.raises(ValueError, match="may not set 'params' or 'use_mars'"):
        mars_param_groups(model, mars_options={"use_mars": False})


class Conv1D(torch.nn.Module):
    """transformers' Conv1D as GPT-2 uses it: ``y = x @ W + b`` with ``W`` stored (in, out)."""

    def __init__(self, out_features: int, in_features: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(in_features, out_features) * 0.02)
        self.bias = torch.nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


Conv1D.__module__ = "transformers.pytorch_utils"


def test_conv1d_weights_take_mars_shampoo_steps_of_the_linear_they_stand_for():
    """An MLP up-projection (out = 4 in) as transformers' Conv1D and as nn.Linear, with the same
    gradients: the Conv1D group is marked transposed, and MARS-Shampoo then moves both weights
    by the same step (without the mark, the Conv1D step is half as long)."""
    torch.manual_seed(0)
    conv = torch.nn.Sequential(Conv1D(32, 8))
    linear = torch.nn.Sequential(torch.nn.Linear(8, 32))
    with torch.no_grad():
        linear[0].weight.copy_(conv[0].weight.T)
        linear[0].bias.zero_()
    plain = copy.deepcopy(conv)
    groups = mars_param_groups(conv)
    assert [g.get("transposed_matrices", False) for g in groups] == [True, False]
    x = torch.randn(16, 8)

    def step_norm(model, params) -> float:
        before = [p.detach().clone() for p in model.parameters()]
        opt = MARS(params, lr=0.1, mars_type="mars-shampoo", foreach=False)
        model(x).pow(2).mean().backward()
        opt.step()
        return float((model[0].weight - before[0]).detach().norm())

    conv_step = step_norm(conv, groups)
    linear_step = step_norm(linear, mars_param_groups(linear))
    assert conv_step == pytest.approx(linear_step, rel=1e-2)
    unmarked = [{"params": [plain[0].weight], "use_mars": True}]
    assert step_norm(plain, unmarked) == pytest.approx(linear_step / 2, rel=1e-2)


def test_named_groups_hold_name_parameter_pairs_that_mars_keeps():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    plain = mars_param_groups(model)
    named = mars_param_groups(model, named=True)
    for a, b in zip(plain, named, strict=True):
        assert [p for _, p in b["params"]] == a["params"]
    assert [name for name, _ in named[0]["params"]] == ["0.weight", "1.weight"]
    opt = MARS(named, lr=1e-3)
    assert opt.param_groups[1]["param_names"] == ["1.bias", "2.weight", "2.bias"]
