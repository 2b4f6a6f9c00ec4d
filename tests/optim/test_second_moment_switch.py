"""``second_moment="gradient"``, the ablation of MARS-AdamW's second moment: ``v`` averages
``g^2`` instead of ``c^2`` while ``m`` still averages ``c``. It follows the float64 model of the
formulas on every rule with an Adam tensor, every path agrees with the loop across non-finite
steps (test_nonfinite_skip.py), and bad values are refused before anything changes."""

from __future__ import annotations

import pytest
import torch
from test_mars_reference import run_reference, warmup_and_gamma_schedule

from problems import run_mars
from torch_mars import MARS
from torch_mars.cli import build_parser
from torch_mars.train.optimizers import build_optimizer, default_hyperparams
from torch_mars.train.trainer import TrainConfig


@pytest.mark.parametrize("is_approx", [True, False], ids=["approx", "exact"])
@pytest.mark.parametrize(
    ("mars_type", "optimize_1d"),
    [("mars-adamw", False), ("mars-adamw", True), ("mars-shampoo", True), ("mars-m", True)],
)
def test_the_second_moment_of_the_gradient_follows_the_float64_formulas(
    problem, mars_type, optimize_1d, is_approx
):
    kwargs = dict(
        mars_type=mars_type,
        optimize_1d=optimize_1d,
        lr=0.02,
        amsgrad=True,
        weight_decay=0.1,
        second_moment="gradient",
    )
    ours, _ = run_mars(problem, warmup_and_gamma_schedule, is_approx=is_approx, **kwargs)
    expected = run_reference(problem, warmup_and_gamma_schedule, is_approx, **kwargs)
    for i, (a, b) in enumerate(zip(ours, expected, strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=f"tensor {i}")
    # The switch changes the run: v of c is another trajectory on the same problem.
    corrected, _ = run_mars(
        problem,
        warmup_and_gamma_schedule,
        is_approx=is_approx,
        **{**kwargs, "second_moment": "corrected"},
    )
    assert any(not torch.allclose(a, b) for a, b in zip(ours, corrected, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"second_moment": "g"}, "second_moment must be one of"),
        ({"second_moment": "gradient", "mars_type": "mars-lion"}, "mars-lion has none"),
        ({"second_moment": "gradient", "cuda_graph": True}, "second_moment"),
    ],
)
def test_bad_second_moments_are_refused_and_nothing_changes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MARS([torch.nn.Parameter(torch.zeros(2, 2))], **kwargs)
    opt = MARS([torch.nn.Parameter(torch.zeros(2, 2))])
    with pytest.raises(ValueError, match=message):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3, 3))], **kwargs})
    assert len(opt.param_groups) == 1
    assert opt.param_groups[0]["second_moment"] == "corrected"


def test_the_harness_passes_second_moment_by_name():
    args = build_parser().parse_args(
        ["compare", "--optimizers", "mars-adamw", "--opt-arg", "mars-adamw:second_moment=gradient"]
    )
    assert (
        args.command_entry.configure(args).hyperparams["mars-adamw"]["second_moment"] == "gradient"
    )
    config = TrainConfig(
        optimizer="mars-adamw", model="tiny", hyperparams={"second_moment": "gradient"}
    )
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    built = build_optimizer("mars-adamw", model, config.resolved_hyperparams())
    assert {g["second_moment"] for g in built.optimizer.param_groups} == {"gradient"}
    default = build_optimizer("mars-adamw", model, default_hyperparams("mars-adamw", "tiny"))
    assert {g["second_moment"] for g in default.optimizer.param_groups} == {"corrected"}
