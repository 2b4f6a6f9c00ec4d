"""Your own dimensions beside the optimizer's (issue "Your model, round 2", item 5):
``extra_space`` is declared once, tuned for every optimizer alike from its middle value, passed
to your function by name, part of the study's identity, and reported with each winner."""

from __future__ import annotations

import json

import pytest
from torch import nn

import torch_mars
from torch_mars.train.study.space import check_extra, extra_start, point_key

SMALL = dict(seeds=(0,), heldout_seeds=(1, 2), heldout_data_seeds=(1,), finalists=0)
CALLS: list[tuple[str, int]] = []


def bowl(make_optimizer, seed, data_seed, report, width=0):
    """A loss whose floor is at width 4, whatever the optimizer."""
    make_optimizer(nn.Linear(2, 1))
    CALLS.append(("width", width))
    return 1.0 + 0.01 * (width - 4) ** 2 + 0.001 * seed


def test_your_dimension_is_tuned_for_every_optimizer_and_passed_by_name(tmp_path):
    CALLS.clear()
    result = torch_mars.tune(
        bowl,
        ["adamw", "nadamw"],
        trials=20,
        out_dir=tmp_path,
        progress=False,
        extra_space={"width": [1, 2, 3, 4, 5]},
        peer_winners=False,
        **SMALL,
    )
    widths = {w for _, w in CALLS}
    assert (
        widths <= {1, 2, 3, 4, 5} and len(widths) >= 2 and all(isinstance(w, int) for w in widths)
    )
    assert set(result.extra_winners) == {"adamw", "nadamw"}
    assert all(w["width"] in (3, 4, 5) for w in result.extra_winners.values())
    assert all("width" not in hp for hp in result.winners.values())  # the optimizer's only
    summary = (tmp_path / "test_your_dimensions.bowl" / "summary.md").read_text()
    assert "Your own dimensions, tuned for every optimizer alike: width 1, 2, 3, 4, 5." in summary
    identity = json.loads((tmp_path / "test_your_dimensions.bowl" / "tune.json").read_text())[
        "optimizers"
    ][0]
    assert "width" in identity["winner"] and "width" in identity["values_scored"]


def test_your_dimensions_are_checked_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="extra_space 'lr': taken"):
        check_extra({"lr": [1, 2]})
    with pytest.raises(ValueError, match="extra_space 'seed': taken"):
        check_extra({"seed": [1, 2]})
    with pytest.raises(ValueError, match="two or more ascending finite numbers"):
        check_extra({"width": [2, 1]})
    with pytest.raises(ValueError, match="two or more ascending finite numbers"):
        check_extra({"width": [1]})
    with pytest.raises(ValueError, match="a Python identifier"):
        check_extra({"drop out": [0.0, 0.1]})
    assert check_extra({"b": [1, 2], "a": [0.5, 1]}) == (("a", (0.5, 1.0)), ("b", (1, 2)))
    assert extra_start((0, 50, 100, 200)) == 1 and extra_start((1, 2, 3)) == 1

    def no_width(make_optimizer, seed, data_seed, report):
        return 1.0

    with pytest.raises(ValueError, match="extra_space names width, which the function does not"):
        torch_mars.tune(no_width, ["adamw"], out_dir=tmp_path, extra_space={"width": [1, 2]})
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_the_text_task_refuses_your_dimensions(tmp_path, capsys):
    from torch_mars.cli import main

    args = ["tune", "--extra-space", "width=1,2", "--out-dir", str(tmp_path), "--trials", "1"]
    assert main(args) == 2
    assert "the text task has no dimensions of yours" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_point_key_orders_yours_after_ours():
    assert point_key({"width": 1, "lr": 3, "alpha": 0}) == "lr:3,alpha:0,width:1"
