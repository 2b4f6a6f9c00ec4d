"""timm's own optimizer factory builds torch-mars's MARS under the `torchmars-*` names, with
timm's no-decay group for norms and biases honoured, and steps exactly as MARS built by hand."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
import torch
from torch import nn

from torch_mars import MARS
from torch_mars.integrations.timm_registry import TIMM_NAMES, register_with_timm


@pytest.fixture(scope="module")
def timm_optim():
    """timm's real ``timm.optim`` package. timm's top-level ``__init__`` imports its models and
    data pipelines, which need torchvision, and torchvision has no CPU build for our CI. Where
    that import fails, ``timm.optim`` is loaded under a bare ``timm`` package whose ``models``
    module offers only ``group_parameters`` (which timm.optim uses for layer decay alone)."""
    spec = importlib.util.find_spec("timm")
    if spec is None:
        pytest.skip("timm is not installed (pip install --no-deps timm)")
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "timm"}
    try:
        import timm.optim

        yield timm.optim
        return
    except ImportError:
        for name in [n for n in sys.modules if n.split(".")[0] == "timm"]:
            del sys.modules[name]
    package = types.ModuleType("timm")
    package.__path__ = list(spec.submodule_search_locations)
    models = types.ModuleType("timm.models")

    def group_parameters(*args, **kwargs):
        raise NotImplementedError("layer decay needs timm's models (and torchvision)")

    models.group_parameters = group_parameters
    sys.modules.update({"timm": package, "timm.models": models})
    try:
        yield importlib.import_module("timm.optim")
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "timm"]:
            del sys.modules[name]
        sys.modules.update(saved)


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3))


def loss_of(model: nn.Module) -> torch.Tensor:
    inputs = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
    return model(inputs).square().mean()


def test_every_name_builds_our_mars_with_its_rule(timm_optim):
    assert register_with_timm() == tuple(TIMM_NAMES)
    for name, mars_type in TIMM_NAMES.items():
        assert "_" not in name
        optimizer = timm_optim.create_optimizer_v2(small_model(), name, lr=1e-3)
        assert isinstance(optimizer, MARS)
        assert {group["mars_type"] for group in optimizer.param_groups} == {mars_type}
    assert name in timm_optim.list_optimizers("torchmars*")


def test_an_underscore_name_is_timms_own_mars_which_is_why_ours_have_none(timm_optim):
    register_with_timm()
    theirs = timm_optim.create_optimizer_v2(small_model(), "torch_mars", lr=1e-3)
    assert not isinstance(theirs, MARS)


def test_timms_no_decay_group_and_lr_reach_every_tensor(timm_optim):
    register_with_timm()
    model = small_model()
    optimizer = timm_optim.create_optimizer_v2(model, "torchmars-adamw", lr=2e-3, weight_decay=0.05)
    for parameter in model.parameters():
        group = next(g for g in optimizer.param_groups if any(p is parameter for p in g["params"]))
        decay = group["weight_decay"] if parameter.ndim >= 2 else group["weight_decay_1d"]
        assert decay == (0.05 if parameter.ndim >= 2 else 0.0)
        assert optimizer.learning_rate(parameter) == pytest.approx(2e-3)


def test_the_timm_built_optimizer_steps_as_mars_built_by_hand(timm_optim):
    register_with_timm()
    built, by_hand = small_model(), small_model()
    timm_opt = timm_optim.create_optimizer_v2(built, "torchmars-lion", lr=1e-3, weight_decay=0.1)
    matrices = [p for p in by_hand.parameters() if p.ndim >= 2]
    vectors = [p for p in by_hand.parameters() if p.ndim < 2]
    hand_opt = MARS(
        [{"params": vectors, "weight_decay": 0.0}, {"params": matrices, "weight_decay": 0.1}],
        lr=1e-3,
        mars_type="mars-lion",
    )
    for _ in range(3):
        for model, optimizer in ((built, timm_opt), (by_hand, hand_opt)):
            optimizer.zero_grad()
            loss_of(model).backward()
            optimizer.step()
    for ours, theirs in zip(by_hand.parameters(), built.parameters(), strict=True):
        assert torch.equal(ours, theirs)
