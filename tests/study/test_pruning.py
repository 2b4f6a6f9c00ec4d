"""Pruning on report() values (issue "Your model, round 2", item 5): a trial's run stops where
Optuna's median pruner, over its own optimizer's finished trial runs, says so; it scores worst
and is not trained again; finalists', peers' and held-out runs always finish."""

from __future__ import annotations

import json
import math

import optuna
import pytest
from torch import nn

import torch_mars
from torch_mars.train.study.pruning import STARTUP_RUNS, OwnTrials, RunPruned, check_report, pruning

SMALL = dict(
    seeds=(0,), heldout_seeds=(1, 2), heldout_data_seeds=(1,), finalists=2, final_seeds=(3,)
)


def finished(study: optuna.Study, curve: dict[int, float], optimizer: str = "adamw"):
    trial = study.ask()
    trial.set_user_attr("optimizer", optimizer)
    for step, value in curve.items():
        trial.report(value, step)
    study.tell(trial, curve[max(curve)])
    return study.trials[-1]


def test_a_run_worse_than_its_optimizers_median_is_pruned_and_a_good_one_is_not():
    study = optuna.create_study()
    own = [finished(study, {1: 1.0 + i / 10, 2: 0.9 + i / 10}) for i in range(STARTUP_RUNS)]
    good = study.ask()
    with pruning(good, own):
        check_report(1, 1.05)
        check_report(2, 0.95)  # below the median (1.1 at step 2): goes on
    bad = study.ask()
    with pruning(bad, own), pytest.raises(RunPruned, match="pruned at step 1"):
        check_report(1, 1.9)
    check_report(1, 9.9)  # outside a pruned run: nothing happens


def test_before_its_optimizer_has_enough_finished_runs_nothing_is_pruned():
    study = optuna.create_study()
    own = [finished(study, {1: 1.0}) for _ in range(STARTUP_RUNS - 1)]
    with pruning(study.ask(), own):
        check_report(1, 100.0)


def test_the_pruner_sees_only_the_trials_it_is_given():
    study = optuna.create_study()
    trials = [finished(study, {1: 1.0}, "adamw"), finished(study, {1: 1.0}, "muon")]
    view = OwnTrials([t for t in trials if t.user_attrs["optimizer"] == "adamw"])
    assert [t.user_attrs["optimizer"] for t in view.get_trials()] == ["adamw"]
    assert view.get_trials(states=(optuna.trial.TrialState.PRUNED,)) == []


def steep(make_optimizer, seed, data_seed, report):
    """A run whose reported losses say early how it ends: its lr far from 0.01 is bad."""
    optimizer = make_optimizer(nn.Linear(2, 1))
    lr = optimizer.param_groups[0]["lr"]
    end = 1.0 + abs(math.log(lr / 0.01)) + 0.001 * seed
    for step in range(1, 5):
        report(step, end + 1.0 / step)
    return end


def test_a_study_that_prunes_stops_trials_runs_only_and_says_how_many(tmp_path):
    result = torch_mars.tune(
        steep, ["adamw"], trials=16, out_dir=tmp_path, progress=False, prune=True, **SMALL
    )
    record = json.loads((tmp_path / "test_pruning.steep" / "tune.json").read_text())
    [entry] = record["optimizers"]
    assert entry["pruned_trials"] > 0  # an lr profile far from 0.01 stops early
    assert all(v is not None for v in entry["heldout_finals"])  # held-out runs finish
    assert all(f["score"] is not None for f in entry["finalists"])  # so do finalists'
    assert f"adamw {entry['pruned_trials']} of 16" in result.table
    study = optuna.load_study(
        study_name="test_pruning.steep",
        storage=f"sqlite:///{tmp_path / 'test_pruning.steep' / 'study.db'}",
    )
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert len(pruned) == entry["pruned_trials"] and all(t.user_attrs["seed"] == 0 for t in pruned)
    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    # a pruned run's cost counts: it trained until it was stopped
    assert sum(c["runs"] for c in record["cost"].values()) == len(finished) + len(pruned)
    # resumed, nothing pruned is trained again
    again = torch_mars.tune(
        steep, ["adamw"], trials=16, out_dir=tmp_path, progress=False, prune=True, **SMALL
    )
    assert again.table == result.table


def test_without_prune_no_run_is_pruned(tmp_path):
    torch_mars.tune(steep, ["adamw"], trials=8, out_dir=tmp_path, progress=False, **SMALL)
    record = json.loads((tmp_path / "test_pruning.steep" / "tune.json").read_text())
    assert "pruned_trials" not in record["optimizers"][0]
    summary = (tmp_path / "test_pruning.steep" / "summary.md").read_text()
    assert "Pruned trials" not in summary
