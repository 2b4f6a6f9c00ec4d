"""``tune --reuse-runs``: a study takes the finished runs another tune study trained with the
same budget, data, hyperparameters, seed and data order instead of training them again, marks
each with where it came from and counts it apart from its own; a donor of another budget, other
hyperparameter values or another thread count gives nothing, and a folder with no study is
refused in one line."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import optuna
import pytest
import torch

from torch_mars.cli import main
from torch_mars.train.study.reuse import COPIED_ATTR

MODULES = itertools.count()
FUNCTION = """
from pathlib import Path


def train(make_optimizer, seed, data_seed, report):
    import math

    import torch

    group = make_optimizer(torch.nn.Linear(2, 2)).param_groups[0]
    with Path(__file__).with_name("calls.txt").open("a") as calls:
        calls.write("x\\n")
    noise = 0.1 * seed + 0.01 * data_seed
    return (math.log10(group["lr"]) + 2.5) ** 2 + group["weight_decay"] + noise
"""


@pytest.fixture
def function(tmp_path, monkeypatch):
    # a module name of its own: a process keeps the function a study loaded by its name
    name = f"counted_{next(MODULES)}"
    (tmp_path / f"{name}.py").write_text(FUNCTION)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COUNTED_MODULE", name)
    return tmp_path


def calls(folder: Path) -> int:
    path = folder / "calls.txt"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def tune(folder: Path, name: str, *extra: str, trials: int = 6) -> int:
    module = os.environ["COUNTED_MODULE"]
    args = ["tune", "--objective", f"{module}:train", "--optimizers", "adamw", "nadamw"]
    args += ["--trials", str(trials), "--seeds", "0", "--heldout-seeds", "1"]
    args += ["--heldout-data-seeds", "1"]
    args += ["--finalists", "0", "--name", name, "--out-dir", str(folder / "out"), *extra]
    return main(args)


def finished(folder: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    storage = f"sqlite:///{folder / 'out' / name / 'study.db'}"
    study = optuna.load_study(study_name=name, storage=storage)
    return [t for t in study.get_trials() if t.state.name == "COMPLETE"]


def run_of(trial: optuna.trial.FrozenTrial) -> tuple:
    return tuple(trial.user_attrs[k] for k in ("optimizer", "point", "seed", "data_seed"))


def test_a_second_design_takes_the_runs_the_first_trained_and_trains_only_the_rest(function):
    # 20 trials: the designs share their start and screen, then part
    assert tune(function, "first", "--search", "surface-3", trials=20) == 0
    trained_first = calls(function)
    donor = {run_of(t): t for t in finished(function, "first")}
    assert trained_first == len(donor)

    reuse = ["--reuse-runs", "out/first"]
    assert tune(function, "second", "--search", "surface-4", *reuse, trials=20) == 0
    trials = finished(function, "second")
    copied = [t for t in trials if COPIED_ATTR in t.system_attrs]
    trained = [t for t in trials if COPIED_ATTR not in t.system_attrs]
    assert copied and trained
    assert calls(function) - trained_first == len(trained)
    for trial in copied:
        source = donor[run_of(trial)]
        assert trial.system_attrs[COPIED_ATTR] == {
            "study": str((function / "out" / "first").resolve()),
            "trial": source.number,
        }
        assert trial.value == source.value and trial.params == source.params
        assert trial.user_attrs["final"] == source.user_attrs["final"]
    report = json.loads((function / "out" / "second" / "tune.json").read_text())
    assert report["copied_runs"] == len(copied)
    assert sum(c["runs"] for c in report["cost"].values()) == len(trained)
    assert (
        f"{len(copied)} runs taken from other studies"
        in (function / "out" / "second" / "summary.md").read_text()
    )


@pytest.mark.parametrize(
    "changed",
    [
        ["--objective-version", "2"],  # another budget: the function's code as declared
        ["--ladder", "weight_decay=0.5,0.6"],  # the same point keys, other values
    ],
)
def test_a_donor_whose_runs_train_otherwise_gives_nothing(function, changed):
    assert tune(function, "first") == 0
    before = calls(function)
    assert tune(function, "second", "--reuse-runs", "out/first", *changed) == 0
    trials = finished(function, "second")
    assert not [t for t in trials if COPIED_ATTR in t.system_attrs]
    assert calls(function) - before == len(trials)


def test_a_folder_with_no_study_is_refused_in_one_line_before_any_run(function, capsys):
    (function / "empty").mkdir()
    assert tune(function, "second", "--reuse-runs", "empty") == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "--reuse-runs" in error and "holds no study" in error
    assert calls(function) == 0 and not (function / "out" / "second").exists()


def test_a_run_trained_on_another_thread_count_is_not_taken(function):
    # the same run on one thread and on two differs in its last digits, then in its loss
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert tune(function, "first") == 0
        torch.set_num_threads(2)
        before = calls(function)
        assert tune(function, "second", "--reuse-runs", "out/first") == 0
    finally:
        torch.set_num_threads(threads)
    trials = finished(function, "second")
    assert not [t for t in trials if COPIED_ATTR in t.system_attrs]
    assert calls(function) - before == len(trials)


def test_a_worker_joining_a_study_takes_the_donors_runs_too(function):
    assert tune(function, "first") == 0
    before = calls(function)
    # the study is made and stopped after one run of its own, then a worker joins it
    assert tune(function, "second", "--max-trials", "1") == 0
    assert calls(function) - before == 1
    module = os.environ["COUNTED_MODULE"]
    joined = ["tune", "--worker", "--objective", f"{module}:train", "--name", "second"]
    joined += ["--out-dir", str(function / "out"), "--reuse-runs", "out/first"]
    assert main(joined) == 0
    trials = finished(function, "second")
    copied = [t for t in trials if COPIED_ATTR in t.system_attrs]
    assert len(copied) == len(trials) - 1 and calls(function) - before == 1


def test_the_python_door_takes_the_donors_runs_as_the_command_line_does(function):
    import importlib

    import torch_mars

    assert tune(function, "first") == 0
    before = calls(function)
    train = importlib.import_module(os.environ["COUNTED_MODULE"]).train
    with pytest.raises(ValueError, match=r"^reuse_runs: .* holds no study"):  # its keyword
        torch_mars.tune(train, ("adamw",), reuse_runs=[function / "nowhere"], progress=False)
    torch_mars.tune(
        train,
        ("adamw", "nadamw"),
        trials=6,
        seeds=(0,),
        heldout_seeds=(1,),
        heldout_data_seeds=(1,),
        finalists=0,
        out_dir=function / "out",
        name="second",
        progress=False,
        reuse_runs=[function / "out" / "first"],
    )
    trials = finished(function, "second")
    assert trials and all(COPIED_ATTR in t.system_attrs for t in trials)
    assert calls(function) == before


def test_a_reread_walks_the_stored_selection_again_and_trains_the_rest_here(function, monkeypatch):
    # the stored study began from other starts (the defaults of its day) on one thread (another
    # machine); its re-read begins from those starts and takes every selection run (seed 0 on
    # order 0) whichever machine trained it; the finalists' other seed and the held-out reads
    # train here
    import torch_mars.train.study.tune as tune_module

    def earlier_defaults(optimizer, model):
        point = START_POINT(optimizer, model)
        return {**point, "lr": point["lr"] - 2}

    START_POINT = tune_module.start_point
    threads = torch.get_num_threads()
    finalists = ["--finalists", "2", "--final-seeds", "2"]
    try:
        torch.set_num_threads(1)
        with monkeypatch.context() as patched:
            patched.setattr(tune_module, "start_point", earlier_defaults)
            assert tune(function, "first", *finalists) == 0
        torch.set_num_threads(2)
        assert tune(function, "second", *finalists, "--reread", "out/first") == 0
    finally:
        torch.set_num_threads(threads)
    trials = finished(function, "second")
    copied = [t for t in trials if COPIED_ATTR in t.system_attrs]
    selection = [t for t in trials if (t.user_attrs["seed"], t.user_attrs["data_seed"]) == (0, 0)]
    first = [t for t in finished(function, "first") if t.user_attrs["seed"] == 0]
    assert len(selection) == len(first)
    assert sorted(t.number for t in copied) == sorted(t.number for t in selection)
    assert {t.user_attrs["seed"] for t in trials if t not in copied} == {1, 2}


def test_a_reread_of_a_folder_with_no_study_is_refused_before_any_run(function, capsys):
    (function / "empty").mkdir()
    assert tune(function, "second", "--reread", "empty") == 2
    error = capsys.readouterr().err
    assert "\n" not in error.strip() and "--reread" in error and "holds no study" in error
    assert calls(function) == 0 and not (function / "out" / "second").exists()
