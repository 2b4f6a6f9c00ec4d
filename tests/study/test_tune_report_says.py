"""What tune's report says, in words and in its figure: its answer first (the best optimizer
held out, and one sentence per comparison with its interval, word and budget), which
dimensions each search moved, a warning where only the lr moved (a search that tuned nothing
else), each winner's worst held-out run and its runs far from the median; the held-out runs
keep the curves the function reported, and the figure draws each winner's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torch_mars.train.study.outcomes import OptimizerOutcome, moved_dimensions
from torch_mars.train.study.report_text import format_tune_table
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.space import dimensions_of, start_point
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.trainer import TrainConfig

PLAN = TunePlan(TrainConfig(model="tiny"), ("nadamw", "mars-adamw"), PROTOCOL, Path("unused"))


def outcome(name: str, points: list[dict[str, int]], finals: list[float]) -> OptimizerOutcome:
    start = start_point(name, "tiny")
    return OptimizerOutcome(
        name, True, start, [2.0] * len(points), [2.0], finals, 0, [],
        moved=moved_dimensions(start, points), dimensions=dimensions_of(name),
    )  # fmt: skip


def test_the_report_names_the_dimensions_moved_and_warns_when_only_lr_moved():
    nadamw = start_point("nadamw", "tiny")
    only_lr = [{**nadamw, "lr": nadamw["lr"] + k} for k in (-1, 0, 1)]
    mars = start_point("mars-adamw", "tiny")
    everything = [{**mars, d: mars[d] + 1} for d in mars]
    found = [outcome("nadamw", only_lr, [2.0] * 12), outcome("mars-adamw", everything, [1.9] * 12)]
    text = format_tune_table(PLAN, found)
    assert "WARNING: nadamw's search moved only the lr in 3 trials" in text
    assert "| only lr |" in text and "| 7 of 7 |" in text
    assert "mars-adamw's search moved lr, beta1, beta2" in text and "(every dimension)" in text


def test_a_search_with_only_the_lr_free_is_not_warned_for_moving_only_the_lr():
    mars = start_point("mars-adamw", "tiny")  # every other dimension fixed: only the lr free
    lrs = [{**mars, "lr": mars["lr"] + k} for k in (0, 1)]
    alone = dataclasses.replace(outcome("mars-adamw", lrs, [2.0] * 12), dimensions=("lr",))
    text = format_tune_table(PLAN, [alone])
    assert "WARNING: mars-adamw's search moved only the lr" not in text
    assert "mars-adamw's search moved lr (every dimension)." in text and "| 1 of 1 |" in text


def test_the_report_gives_each_winners_worst_held_out_run_and_its_outliers():
    finals = [2.0 + 0.001 * (i % 3) for i in range(12)]
    finals[7] = 2.5  # one run blew up: seed 6 of data order 2 (pairs are data orders outer)
    text = format_tune_table(PLAN, [outcome("mars-adamw", [], finals)])
    assert "mars-adamw's worst held-out run: 2.5000 (seed 6, data order 2)" in text
    assert "runs over 3 std from the median: 1;" in text
    # counted by the declared rule too (0.5 above the median), never dropped from the mean
    assert "diverged (more than 0.05 above its median, or not finite): 1 of 12." in text


def test_the_report_answers_first_in_a_sentence_per_comparison():
    def scored(name, finals):  # a winner its search scored: a verdict is read
        return dataclasses.replace(outcome(name, [], finals), winner_score=2.0)

    spread = [0.001 * ((i * 7) % 5) for i in range(12)]
    nadamw = scored("nadamw", [2.0 + d for d in spread])
    ahead = scored("mars-adamw", [1.9 + d for d in spread])
    level = scored("mars-adamw", [2.0 + d + 0.001 * (i % 2) for i, d in enumerate(spread)])
    won = format_tune_table(PLAN, [nadamw, ahead]).split("\n")
    assert won[0].startswith("**Answer** (40 trials each, 12 held-out runs; held-out mean")
    assert "best overall **mars-adamw**, 1.9018, 0.1000 ahead of nadamw." in won[0]
    assert won[1].startswith("- mars-adamw beat nadamw on this model at this budget: ")
    assert won[1].endswith("held out, **win**.")
    tied = format_tune_table(PLAN, [nadamw, level]).split("\n")[1]
    assert tied.startswith("- mars-adamw and nadamw equivalent (within the margin)")
    assert "**equivalent**" in tied and " at 95.00%, 3 dof held out" in tied  # crossed
    waiting = scored("nadamw", [2.0] * 11 + [float("nan")])
    assert format_tune_table(PLAN, [waiting, ahead]).startswith(
        "**Answer:** not yet: nadamw still without every held-out run"
    )


def reports_a_falling_curve(make_optimizer, seed, data_seed, report):
    for step in (1, 2, 3):
        report(step, 2.0 / step + 0.01 * seed)
    return 2.0 / 3 + 0.01 * seed


def test_the_held_out_runs_keep_their_reported_curves_and_the_figure_draws_them(tmp_path):
    import optuna

    import torch_mars
    from torch_mars.train.study.outcomes import curves_of
    from torch_mars.train.study.report_plot import _mean_curve

    small = dict(seeds=(0,), heldout_seeds=(1, 2), heldout_data_seeds=(1,), finalists=0)
    result = torch_mars.tune(
        reports_a_falling_curve, ["adamw"], trials=2, out_dir=tmp_path, progress=False, **small
    )
    folder = tmp_path / "test_tune_report_says.reports_a_falling_curve"  # module.function
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder}/study.db")
    curves = curves_of(study.get_trials(), "value")
    assert sorted(run[2] for run in curves) == [1, 2]  # the held-out runs only
    assert all([step for step, _ in c] == [1, 2, 3] for c in curves.values())
    mean = _mean_curve(list(curves.values()))
    assert mean[0] == (1, pytest.approx(2.0 + 0.015)) and mean[-1][0] == 3
    assert folder / "tune.png" in result.paths


def test_a_dimension_scored_at_fewer_than_the_declared_depth_is_warned_not_tuned():
    from torch_mars.train.study.report_text import TUNED_DEPTH, depth_sentences

    short = dataclasses.replace(
        outcome("mars-adamw", [start_point("mars-adamw", "tiny")], [2.0] * 12),
        values_scored={"lr": 9, "beta1": 3, "gamma": 2},
    )
    deep = dataclasses.replace(
        outcome("nadamw", [start_point("nadamw", "tiny")], [2.0] * 12), values_scored={"lr": 5}
    )
    lines = depth_sentences([short, deep])
    assert lines[0] == "- mars-adamw: values scored per dimension: lr 9, beta1 3, gamma 2."
    assert lines[1].startswith("- WARNING: mars-adamw's search is short: gamma scored at fewer")
    assert f"than {TUNED_DEPTH} values, not tuned" in lines[1]
    assert lines[2:] == ["- nadamw: values scored per dimension: lr 5."]  # no warning
