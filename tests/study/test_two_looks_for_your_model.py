"""The second stage for a user's model (issue "Verdicts that decide", item 6): with
``two_looks`` a study reads every word on 12 independent pairs it draws, and where one is
inconclusive reads more, planned from its spread up to 64, within the budget it states; the
words then come from both looks (Pocock's boundaries)."""

from __future__ import annotations

import json
import random

import pytest
from torch import nn

import torch_mars
from torch_mars.train.study.objective import ObjectiveConfig
from torch_mars.train.study.run import tune_plan
from torch_mars.train.study.two_stage import Design, drawn_pairs

SMALL = dict(trials=2, seeds=(0,), finalists=0, peer_winners=False)


def gap_in_noise(make_optimizer, seed, data_seed, report):
    """MARS-AdamW level with AdamW, each run with noise of its own (sd 0.006): 12 pairs read
    an interval wider than the margin."""
    optimizer = make_optimizer(nn.Linear(2, 1))
    mars = "gamma" in optimizer.param_groups[0]
    noise = random.Random(seed * 7919 + data_seed * 31 + mars).gauss(0.0, 0.006)
    return 1.0 + noise


def far_apart(make_optimizer, seed, data_seed, report):
    """MARS-AdamW 0.05 ahead, with a little noise: the first look decides."""
    optimizer = make_optimizer(nn.Linear(2, 1))
    mars = "gamma" in optimizer.param_groups[0]
    return 1.0 - 0.05 * mars + random.Random(seed + 3 * data_seed + mars).gauss(0.0, 0.001)


def record(tmp_path, name: str) -> dict:
    return json.loads(
        (tmp_path / f"test_two_looks_for_your_model.{name}" / "tune.json").read_text()
    )


def test_a_word_the_first_look_leaves_inconclusive_is_read_on_more_pairs(tmp_path, capsys):
    result = torch_mars.tune(
        gap_in_noise, ["adamw", "mars-adamw"], out_dir=tmp_path, progress=False,
        two_looks=True, **SMALL,
    )  # fmt: skip
    read = record(tmp_path, "gap_in_noise")
    pairs = read["optimizers"][0]["heldout_pairs"]
    assert 12 < len(pairs) <= 64 and [tuple(p) for p in pairs] == list(drawn_pairs(len(pairs)))
    [verdict] = read["verdicts"]
    assert verdict["pairs"] == len(pairs) and verdict["decision"] in (
        "win", "loss", "equivalent", "inconclusive"
    )  # fmt: skip
    assert f"{len(pairs)} independent pairs" in result.table
    capsys.readouterr()  # the second look took its pairs as the study's new protocol
    # reopened, it stays on its pairs and trains nothing
    again = torch_mars.tune(
        gap_in_noise, ["adamw", "mars-adamw"], out_dir=tmp_path, progress=False,
        two_looks=True, **SMALL,
    )  # fmt: skip
    assert again.table == result.table
    assert "takes a new protocol" not in capsys.readouterr().err


def test_a_first_look_that_decides_reads_no_more_pairs(tmp_path):
    result = torch_mars.tune(
        far_apart, ["adamw", "mars-adamw"], out_dir=tmp_path, progress=False,
        two_looks=True, **SMALL,
    )  # fmt: skip
    read = record(tmp_path, "far_apart")
    assert len(read["optimizers"][0]["heldout_pairs"]) == 12
    assert read["verdicts"][0]["decision"] == "win" and "**win**" in result.answer


def test_two_looks_draw_their_own_pairs_and_state_their_budget(tmp_path):
    base = ObjectiveConfig("examples.plain_loop:train")
    plan = tune_plan(base, study_dir=tmp_path / "s", name="s", two_looks=True)
    assert plan.looks == Design() and plan.selection.pairs == drawn_pairs(12)
    assert plan.selection.heldout == () and "--two-looks" in plan.command_line()
    assert "looks" in plan.spec().identity()["search"]
    with pytest.raises(ValueError, match="two_looks: the two looks read independent pairs"):
        tune_plan(base, study_dir=tmp_path / "s", name="s", two_looks=True, pairs=[(7, 7)])
    from torch_mars.train.study.run import announce

    assert "two looks: every word on the first 12 pairs, then on up to 64" in announce(plan, "x")
    assert "(at most 52 more runs an optimizer)" in announce(plan, "x")


def nadamw_behind(make_optimizer, seed, data_seed, report):
    """As :func:`gap_in_noise`, NAdamW 0.05 behind: AdamW is MARS-AdamW's strongest control,
    and NAdamW no side of the inconclusive word."""
    optimizer = make_optimizer(nn.Linear(2, 1))
    mars = "gamma" in optimizer.param_groups[0]
    behind = 0.05 * (type(optimizer).__name__ == "NAdamW")
    noise = random.Random(seed * 7919 + data_seed * 31 + mars).gauss(0.0, 0.006)
    return 1.0 + behind + noise


def test_a_second_look_trains_only_the_sides_of_its_inconclusive_words(tmp_path, capsys):
    three = ["adamw", "nadamw", "mars-adamw"]
    result = torch_mars.tune(
        nadamw_behind, three, out_dir=tmp_path, progress=False, two_looks=True, **SMALL
    )
    read = record(tmp_path, "nadamw_behind")
    pairs = {o["optimizer"]: len(o["heldout_pairs"]) for o in read["optimizers"]}
    assert pairs["nadamw"] == 12 and 12 < pairs["adamw"] == pairs["mars-adamw"] <= 64
    [verdict] = read["verdicts"]
    assert verdict["control"] == "adamw" and verdict["pairs"] == pairs["adamw"]
    assert "nadamw their first 12" in result.table
    capsys.readouterr()
    again = torch_mars.tune(
        nadamw_behind, three, out_dir=tmp_path, progress=False, two_looks=True, **SMALL
    )  # reopened: the same pairs for each, nothing trained, no new protocol
    assert again.table == result.table
    assert "takes a new protocol" not in capsys.readouterr().err


def test_pairs_read_names_an_optimizer_of_the_study_and_at_least_two_pairs(tmp_path):
    base = ObjectiveConfig("examples.plain_loop:train")
    four = [(1000 + k, 2000 + k) for k in range(4)]
    plan = tune_plan(
        base, study_dir=tmp_path / "s", name="s", optimizers=["adamw", "mars-adamw"],
        pairs=four, pairs_read={"adamw": 2},
    )  # fmt: skip
    assert plan.selection.heldout_pairs("adamw") == four[:2]
    assert plan.selection.heldout_pairs("mars-adamw") == four
    line = plan.command_line()
    assert line[line.index("--pairs-read") + 1] == "adamw=2"
    with pytest.raises(ValueError, match=r"--pairs-read names muon: not an optimizer"):
        tune_plan(base, study_dir=tmp_path / "s", name="s", optimizers=["adamw"],
                  pairs=four, pairs_read={"muon": 2})  # fmt: skip
    with pytest.raises(ValueError, match=r"--pairs-read adamw=5: an optimizer reads 2 to 4"):
        tune_plan(base, study_dir=tmp_path / "s", name="s", optimizers=["adamw"],
                  pairs=four, pairs_read={"adamw": 5})  # fmt: skip


def test_the_command_line_maps_pairs_read_onto_the_plan():
    from torch_mars.cli import _tune_request, build_parser

    flags = ["tune", "--objective", "examples.plain_loop:train", "--optimizers", "adamw",
             "mars-adamw", "--pairs", "1000:2000", "1001:2001", "1002:2002",
             "--pairs-read", "adamw=2"]  # fmt: skip
    plan = _tune_request(build_parser().parse_args(flags)).plan
    assert plan.selection.pairs_read == (("adamw", 2),)
    again = _tune_request(build_parser().parse_args(["tune", *plan.command_line()])).plan
    assert again.selection == plan.selection
