"""One declaration per setting (optim/settings.py): MARS's signature, ``__setstate__`` and the
hyperparameter dataclasses take their defaults from the table, the plan's settings and the
fused backends' capabilities are read from it, and no module of the optimizer writes a
setting's default anywhere else."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import re
from pathlib import Path

import pytest
import torch

from torch_mars import MARS
from torch_mars.optim import step_plan
from torch_mars.optim.settings import (
    DEFAULTS,
    PLANNED_SETTINGS,
    SETTINGS,
    unsupported,
    validate_group,
)
from torch_mars.optim.step_types import AdamWHyperparams, MarsHyperparams

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "torch_mars"
OPTIMIZER_LAYERS = ("optim", "kernels", "distributed", "integrations")


def test_no_module_reads_a_setting_with_a_default_of_its_own():
    names = "|".join(re.escape(s.name) for s in SETTINGS)
    fallback = re.compile(rf"\.(get|setdefault)\(\s*[\"']({names})[\"']")
    found = [
        f"{path.relative_to(PACKAGE)}: {match.group(0)}"
        for layer in OPTIMIZER_LAYERS
        for path in (PACKAGE / layer).rglob("*.py")
        if path.name != "settings.py"
        for match in fallback.finditer(path.read_text())
    ]
    assert not found, found


def test_the_constructor_s_defaults_are_the_table_s():
    parameters = inspect.signature(MARS).parameters
    for setting in SETTINGS:
        if setting.name in parameters:
            assert parameters[setting.name].default == setting.default, setting.name
    assert MARS([torch.zeros(2, 2, requires_grad=True)]).defaults == DEFAULTS


def test_the_hyperparameter_dataclasses_defaults_are_the_table_s():
    for cls in (AdamWHyperparams, MarsHyperparams):
        for field in dataclasses.fields(cls):
            if field.default is not dataclasses.MISSING and field.name in DEFAULTS:
                assert field.default == DEFAULTS[field.name], (cls.__name__, field.name)


def test_an_optimizer_pickled_before_a_setting_existed_takes_the_table_s_default():
    optimizer = MARS([torch.zeros(2, 2, requires_grad=True)], skip_nonfinite=False)
    state = optimizer.__getstate__()
    for group in state["param_groups"]:
        for name in ("skip_nonfinite", "clip", "second_moment", "cuda_graph"):
            del group[name]
    revived = pickle.loads(pickle.dumps(optimizer))
    revived.__setstate__(state)
    group = revived.param_groups[0]
    assert group["skip_nonfinite"] is DEFAULTS["skip_nonfinite"] is True
    assert group["second_moment"] == DEFAULTS["second_moment"]


def test_the_plan_is_keyed_on_the_planned_settings_only():
    param = torch.zeros(3, 2, requires_grad=True)
    param.grad = torch.ones(3, 2)
    group = MARS([param]).param_groups[0]
    key = step_plan.plan_key(group)
    for setting in SETTINGS:
        changed = dict(group)
        changed[setting.name] = "changed"
        assert (step_plan.plan_key(changed) != key) == setting.planned, setting.name
    assert set(PLANNED_SETTINGS) == {s.name for s in SETTINGS if s.planned}


def test_the_fused_backends_capabilities_come_from_the_table():
    group = dict(DEFAULTS)
    assert unsupported("triton", group.__getitem__) == []
    for name, value in (("cautious", True), ("second_moment", "gradient")):
        assert unsupported("triton", {**group, name: value}.__getitem__) == [name]
    assert unsupported("triton", {**group, "one_buffer": True}.__getitem__) == []
    conflicts = {**group, "is_approx": False, "foreach": True, "cuda_graph": True}
    assert unsupported("cuda_graph", conflicts.__getitem__) == ["is_approx", "foreach"]
    with pytest.raises(ValueError, match=r"conflicts with \['is_approx', 'foreach'\]"):
        validate_group(conflicts)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_s_check_refuses_a_value_of_the_wrong_kind(setting):
    with pytest.raises(ValueError, match=setting.name):
        validate_group({**DEFAULTS, setting.name: "not a value"})
