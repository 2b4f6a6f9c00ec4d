"""Your space: a dimension held at your value (``fixed``) reaches every run of every optimizer
that has it and is never moved, the others still all move, the report says so, a study with
other fixed values is another study, and a wrong value is refused naming the argument and its
range before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_mars
from harness_helpers import toy_tune_plan, write_synthetic_text
from search_toys import run_search
from torch_mars.cli import main
from torch_mars.train.study.engine import StudyMismatch
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.space import check_fixed, dimensions_of
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.trainer import TrainConfig

SMALL = dict(
    seeds=(0,), heldout_seeds=(1, 2), heldout_data_seeds=(1,), finalists=0, peer_winners=False
)
SEEN: list[dict] = []


def records_its_settings(make_optimizer, seed, data_seed, report):
    """Records the matrix group's settings each run trains with; lowest at a small lr."""
    model = torch.nn.Linear(4, 4)
    group = make_optimizer(model).param_groups[0]
    SEEN.append({k: group.get(k) for k in ("lr", "weight_decay", "gamma")})
    return 1.0 + abs(group["lr"] - 0.003) + 0.001 * seed


def test_a_fixed_dimension_reaches_every_run_and_is_never_moved(tmp_path):
    SEEN.clear()
    result = torch_mars.tune(
        records_its_settings,
        ["adamw", "mars-adamw"],
        trials=6,
        fixed={"weight_decay": 0.05, "gamma": 0.025},
        out_dir=tmp_path,
        progress=False,
        **SMALL,
    )
    assert len(SEEN) == 2 * (6 + 2)  # six trials and two held-out runs each
    assert {s["weight_decay"] for s in SEEN} == {0.05}
    assert {s["gamma"] for s in SEEN if s["gamma"] is not None} == {0.025}
    assert len({s["lr"] for s in SEEN}) > 1  # the lr is still tuned
    assert result.winners["mars-adamw"]["weight_decay"] == 0.05
    assert result.winners["mars-adamw"]["gamma"] == 0.025
    assert "- Fixed for every optimizer that has them, never tuned: gamma 0.025, " in result.table
    assert "weight_decay 0.05." in result.table
    with pytest.raises(StudyMismatch):  # other fixed values: another study, not this one
        torch_mars.tune(
            records_its_settings, ["adamw", "mars-adamw"], trials=6,
            fixed={"weight_decay": 0.1, "gamma": 0.025}, out_dir=tmp_path, progress=False,
            **SMALL,
        )  # fmt: skip


@pytest.mark.parametrize("order_seed", [0, 1])
def test_every_dimension_left_free_still_moves_within_12_trials(order_seed):
    fixed = check_fixed({"beta2": 0.99, "gamma": 0.05}, ["nadamw", "mars-adamw"])
    plan = TunePlan(
        TrainConfig(model="tiny"), ("nadamw", "mars-adamw"), PROTOCOL, Path("unused"),
        trials=12, order_seed=order_seed, fixed=fixed,
    )  # fmt: skip
    for search in plan.searches():
        state, _ = run_search(search, objective=lambda p, seed: 2.0 + 0.01 * sum(p.values()))
        moved = {d for point, _ in state.trials for d in point if point[d] != search.starts[0][d]}
        free = set(dimensions_of(search.optimizer)) - {"beta2", "gamma"}
        assert moved == free and not any("beta2" in p or "gamma" in p for p, _ in state.trials)


@pytest.mark.parametrize(
    ("fixed", "optimizers", "message"),
    [
        ({"lr": 0.01}, ["adamw"], "--fixed lr: the lr is never fixed"),
        ({"beta1": 1.0}, ["adamw"], r"--fixed beta1=1.0: must be a number in \[0, 1\)"),
        ({"weight_decay": -0.1}, ["adamw"], "--fixed weight_decay=-0.1: must be a number >= 0"),
        ({"gamma": 0.1}, ["adamw", "nadamw"], "--fixed gamma: none of adamw, nadamw has"),
        ({"momentum": 0.9}, ["muon"], "--fixed momentum: no such dimension"),
        ({"beta1": float("nan")}, ["adamw"], "--fixed beta1=nan: must be a number"),
    ],
)
def test_a_wrong_fixed_value_is_refused_naming_the_argument_and_its_range(
    fixed, optimizers, message
):
    with pytest.raises(ValueError, match=message):
        check_fixed(fixed, optimizers)


def test_the_command_line_refuses_a_fixed_value_before_any_run(tmp_path, capsys):
    corpus = write_synthetic_text(tmp_path / "corpus.txt")
    args = ["tune", "--data", str(corpus), "--out-dir", str(tmp_path / "o"), "--name", "s"]
    assert main([*args, "--optimizers", "adamw", "--fixed", "gamma=0.1"]) == 2
    assert "--fixed gamma: none of adamw has that dimension" in capsys.readouterr().err
    assert main([*args, "--fixed", "weight_decay"]) == 2
    assert "give NAME=NUMBER" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main([*args, "--direction", "maximize"]) == 2
    assert "--direction and --objective-version apply to --objective" in capsys.readouterr().err
    plan = toy_tune_plan(tmp_path / "p", corpus, ("adamw",), trials=1, study_name="p")
    assert "fixed" not in plan.spec().settings  # none fixed: identities stored before hold


def test_the_direction_is_in_a_studys_identity_only_when_it_maximizes():
    from torch_mars.train.study.objective import ObjectiveConfig

    def budget(**settings):
        config = ObjectiveConfig("test_your_space:records_its_settings", **settings)
        plan = TunePlan(config, ("adamw",), PROTOCOL, Path("u"))
        return plan.spec().identity()["budget"]

    assert "direction" not in budget()  # the identities stored before it still match
    assert budget(direction="maximize")["direction"] == "maximize"


def accuracy_peaks_at_a_small_lr(make_optimizer, seed, data_seed, report):
    """A score, higher better: best at lr 0.003."""
    group = make_optimizer(torch.nn.Linear(4, 4)).param_groups[0]
    return 0.9 - abs(group["lr"] - 0.003) - 0.001 * seed


def test_a_score_to_maximize_is_read_negated_and_its_best_wins(tmp_path):
    scored = torch_mars.tune(
        accuracy_peaks_at_a_small_lr, ["adamw"], trials=6, direction="maximize",
        out_dir=tmp_path, progress=False, **SMALL,
    )  # fmt: skip
    losses = torch_mars.tune(
        accuracy_peaks_at_a_small_lr, ["adamw"], trials=6, out_dir=tmp_path, name="as_loss",
        progress=False, **SMALL,
    )  # fmt: skip
    best_lr = scored.winners["adamw"]["lr"]
    assert abs(best_lr - 0.003) < abs(losses.winners["adamw"]["lr"] - 0.003)
    assert scored.heldout_means["adamw"] < 0  # the negated score
    assert "held-out mean of the score negated, lower is better" in scored.answer
    assert "Every value below is the function's score negated (direction maximize)" in scored.table
    with pytest.raises(ValueError, match="direction must be one of minimize, maximize"):
        torch_mars.tune(accuracy_peaks_at_a_small_lr, ["adamw"], direction="max", **SMALL)


def test_a_time_budget_stops_the_work_and_the_same_call_resumes_it(tmp_path, monkeypatch, capsys):
    """The clock is the test's: the budget is spent after the third look at it (no sleeps)."""
    from torch_mars.train.study import workers

    looks = iter(range(10_000))
    monkeypatch.setattr(workers, "past", lambda stop_at: stop_at is not None and next(looks) >= 3)
    SEEN.clear()
    first = torch_mars.tune(
        records_its_settings, ["adamw"], trials=4, time_budget_s=60.0, out_dir=tmp_path,
        progress=False, **SMALL,
    )  # fmt: skip
    assert len(SEEN) == 3  # three runs begun before the budget ended, none after
    assert "the time budget ended the work at 3 of 6 runs" in capsys.readouterr().err
    assert first.answer.startswith("**Answer:** not yet")
    monkeypatch.setattr(workers, "past", lambda stop_at: False)
    done = torch_mars.tune(
        records_its_settings, ["adamw"], trials=4, out_dir=tmp_path, progress=False, **SMALL
    )
    assert len(SEEN) == 6 and done.heldout_means["adamw"] == done.heldout_means["adamw"]
    with pytest.raises(ValueError, match="the time budget must be > 0 seconds, got 0"):
        torch_mars.tune(records_its_settings, ["adamw"], time_budget_s=0, **SMALL)


def test_your_ladder_is_the_only_values_a_dimension_takes(tmp_path):
    SEEN.clear()
    result = torch_mars.tune(
        records_its_settings, ["adamw", "mars-adamw"], trials=8,
        ladders={"weight_decay": (0.0, 0.05, 0.2), "gamma": (0.02, 0.3)}, out_dir=tmp_path,
        progress=False, **SMALL,
    )  # fmt: skip
    assert {s["weight_decay"] for s in SEEN} <= {0.0, 0.05, 0.2}
    assert len({s["weight_decay"] for s in SEEN}) > 1  # still searched
    assert {s["gamma"] for s in SEEN if s["gamma"] is not None} <= {0.02, 0.3}
    assert result.winners["adamw"]["weight_decay"] in (0.0, 0.05, 0.2)
    assert "- Searched on your values: gamma 0.02, 0.3; weight_decay 0, 0.05, 0.2." in result.table
    assert "weight_decay: 0, 0.05, 0.2" in result.table  # the ladders line
    with pytest.raises(StudyMismatch):  # other ladders: another study
        torch_mars.tune(
            records_its_settings, ["adamw", "mars-adamw"], trials=8,
            ladders={"weight_decay": (0.0, 0.1)}, out_dir=tmp_path, progress=False, **SMALL,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("ladders", "message"),
    [
        ({"lr": (0.001, 0.01)}, "--ladder lr: it steps on a 1.5x ladder"),
        ({"beta1": (0.9,)}, r"--ladder beta1=\[0.9\]: give two or more ascending numbers"),
        ({"beta1": (0.95, 0.9)}, "give two or more ascending numbers in"),
        ({"weight_decay": (-1.0, 0.1)}, "give two or more ascending numbers >= 0"),
        ({"gamma": (0.1, 0.2)}, "--ladder gamma: none of adamw has that dimension"),
    ],
)
def test_a_wrong_ladder_is_refused_naming_the_argument(ladders, message):
    from torch_mars.train.study.space import check_ladders

    with pytest.raises(ValueError, match=message):
        check_ladders(ladders, ["adamw"])
