"""A tune plan is data with one function that prints its command line (issue "The study wing,
round 2", item 1): the command line read back builds the same plan, for a study of a function
and of the text task, with every protocol setting moved from its default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torch_mars.cli import _tune_request, build_parser
from torch_mars.train.study.objective import ObjectiveConfig
from torch_mars.train.study.run import tune_plan
from torch_mars.train.trainer import TrainConfig

EXAMPLE = "examples.tabular_mlp:train"


def read_back(plan):
    args = build_parser().parse_args(["tune", *plan.command_line()])
    return _tune_request(args).plan


def same(a, b) -> None:
    for field in dataclasses.fields(a):
        assert getattr(a, field.name) == getattr(b, field.name), field.name


@pytest.mark.parametrize(
    "settings",
    [
        {},
        dict(
            optimizers=("adamw", "mars-adamw"),
            trials=7,
            search="surface-2",
            seeds=(0, 9),
            data_seed=2,
            pairs=((1000, 1000), (1001, 1001)),
            finalists=2,
            final_seeds=(5, 6),
            final_data_seeds=(5, 6),
            peer_winners=False,
            stable_winners=False,
            fixed={"weight_decay": 0.013},
            ladders={"gamma": (0.05, 0.1, 0.2)},
            extra_space={"dropout": (0.0, 0.1, 0.25)},
            prune=True,
            order_seed=3,
            max_rounds=2,
            jobs=2,
            overwrite=True,
        ),
    ],
)
def test_a_function_studys_command_line_builds_the_same_plan(tmp_path, monkeypatch, settings):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    base = ObjectiveConfig(EXAMPLE, model="tiny", direction="maximize", version="3")
    plan = tune_plan(base, study_dir=tmp_path / "mine", name="mine", **settings)
    same(read_back(plan), plan)


def test_a_text_studys_command_line_builds_the_same_plan(tmp_path):
    base = TrainConfig(
        model="tiny",
        steps=11,
        batch_size=3,
        block_size=32,
        warmup_steps=2,
        eval_interval=11,
        eval_tokens=4096,
        validation_slices=4,
        quiet=True,
        data_seed=0,
        grad_clip=0.5,
    )
    plan = tune_plan(
        base,
        study_dir=tmp_path / "t",
        name="t",
        heldout_seeds=(7, 8),
        heldout_data_seeds=(4,),
        finalists=0,
        storage=f"journal:{tmp_path / 'j.log'}",
    )
    back = read_back(plan)
    same(dataclasses.replace(back, base=dataclasses.replace(back.base, run_dir=base.run_dir)), plan)


def test_a_studys_record_carries_the_command_that_reopens_it(tmp_path):
    import torch_mars

    def flat(make_optimizer, seed, data_seed, report):
        return 1.0

    result = torch_mars.tune(
        flat, ["adamw"], trials=1, out_dir=tmp_path, progress=False, finalists=0,
        heldout_seeds=(1,), heldout_data_seeds=(1,),
    )  # fmt: skip
    assert result.command[:2] == ["torch-mars", "tune"]
    assert result.command[result.command.index("--out-dir") + 1] == str(tmp_path)
    assert torch_mars.load_study(result.paths[0].parent).command == result.command
