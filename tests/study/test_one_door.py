"""torch-mars tune and torch_mars.tune go through one door (study/run.py): a study resumed
from Python keeps the starts it began with after the defaults move, as one resumed from the
command line does (test_tune.py), since both call the same function."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

import torch_mars
from torch_mars.cli import _tune
from torch_mars.train.study import objective, run, tune

SMALL = dict(seeds=(0,), heldout_seeds=(1,), heldout_data_seeds=(1,), finalists=0)


def quadratic(make_optimizer, seed, data_seed, report):
    return 1.0 + 0.001 * seed


def stored_starts(folder) -> dict:
    study = optuna.load_study(
        study_name="test_one_door.quadratic", storage=f"sqlite:///{folder}/study.db"
    )
    return tune.stored_starts(study.user_attrs["identity"], [])


def test_a_resumed_python_study_keeps_its_starts_when_the_defaults_move(tmp_path, monkeypatch):
    torch_mars.tune(quadratic, ["adamw"], trials=1, out_dir=tmp_path, progress=False, **SMALL)
    began = stored_starts(tmp_path / "test_one_door.quadratic")["adamw"]
    moved = {**began[0], "lr": began[0]["lr"] + 3}
    monkeypatch.setattr(tune, "start_point", lambda optimizer, model: dict(moved))
    torch_mars.tune(quadratic, ["adamw"], trials=2, out_dir=tmp_path, progress=False, **SMALL)
    assert stored_starts(tmp_path / "test_one_door.quadratic")["adamw"] == began


def test_both_doors_are_the_one_function():
    names = {objective.tune.__code__.co_names, _tune.__code__.co_names}
    assert all("run_study" in n for n in names)
    assert run.run_study.__module__ == "torch_mars.train.study.run"


def test_both_doors_resolve_every_default_they_share_alike(tmp_path, monkeypatch):
    """A default planted in one door only (a literal in the parser or in the signature) fails
    here: the plan each door builds from nothing but the function is the same plan."""
    from torch_mars.cli import _tune_request, build_parser

    built = []

    def capture(plan, **_):
        built.append(plan)
        raise KeyboardInterrupt  # stop before anything runs

    monkeypatch.setattr(run, "run_study", capture)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        torch_mars.tune(quadratic)
    args = build_parser().parse_args(["tune", "--objective", "test_one_door:quadratic"])
    from_cli = _tune_request(args).plan
    from_py = built[0]
    assert from_cli.base.objective.endswith("quadratic") and from_py.study_dir.is_absolute()
    same = {"study_dir", "study_name", "base"}  # the function's path, spelt by each door
    for field in dataclasses.fields(from_py):
        if field.name not in same:
            assert getattr(from_cli, field.name) == getattr(from_py, field.name), field.name
    assert from_cli.selection.peer_winners and from_cli.optimizers == (
        "adamw",
        "nadamw",
        "mars-adamw",
    )


def test_both_doors_build_their_plan_in_one_function():
    from torch_mars.cli import _tune_request

    names = {objective.tune.__code__.co_names, _tune_request.__code__.co_names}
    assert all("tune_plan" in n for n in names) and "TunePlan" not in str(names)


def test_a_finished_study_reads_back_without_its_function(tmp_path):
    """#63: load_study reads the report alone: winners, verdicts, held-out means, paths."""
    two_pairs = {**SMALL, "heldout_seeds": (1, 2)}  # a verdict needs two held-out pairs
    ran = torch_mars.tune(
        quadratic, ["adamw", "mars-adamw"], trials=1, out_dir=tmp_path, progress=False, **two_pairs
    )
    loaded = torch_mars.load_study(tmp_path / "test_one_door.quadratic")
    assert loaded.winners == ran.winners and loaded.verdicts == ran.verdicts
    assert loaded.paths == ran.paths and all(p.is_absolute() for p in loaded.paths)
    assert loaded.heldout_means == pytest.approx(
        {"adamw": 1.0015, "mars-adamw": 1.0015}
    )  # seeds 1, 2
    assert isinstance(loaded.winners["mars-adamw"]["betas"], tuple)
    assert loaded.answer == ran.answer and loaded.answer.startswith("**Answer** (1 trial each")
    assert "- mars-adamw and adamw equivalent (within the margin)" in loaded.answer  # one verdict


def test_a_verdict_with_one_held_out_pair_is_refused_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="a verdict needs at least 2"):
        torch_mars.tune(quadratic, ["adamw", "mars-adamw"], trials=1, out_dir=tmp_path, **SMALL)
    assert not (tmp_path / "test_one_door.quadratic").exists()


def test_help_shows_tunes_real_signature():
    import inspect

    parameters = inspect.signature(torch_mars.tune).parameters
    assert {"train", "trials", "seeds", "search", "finalists", "out_dir"} <= set(parameters)


def test_optunas_info_lines_stay_out_of_the_output(tmp_path, capsys):
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)  # as a user's session has it
    try:
        torch_mars.tune(quadratic, ["adamw"], trials=1, out_dir=tmp_path, progress=False, **SMALL)
        said = capsys.readouterr()
        assert "A new study created" not in said.err + said.out
        assert optuna.logging.get_verbosity() == optuna.logging.INFO  # the user's, restored
    finally:
        optuna.logging.set_verbosity(before)


def test_an_error_names_the_keyword_to_python_and_the_flag_to_the_command_line(tmp_path, capsys):
    from torch_mars.cli import main

    with pytest.raises(ValueError, match=r"^trials must be >= 1, got 0$"):
        torch_mars.tune(quadratic, ["adamw"], trials=0, out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"^final_seeds \[1, 1\]: a seed is named twice$"):
        torch_mars.tune(quadratic, ["adamw"], final_seeds=(1, 1), out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"^ladders gamma=\[1\]: give two or more"):
        torch_mars.tune(quadratic, ["mars-adamw"], ladders={"gamma": [1]}, out_dir=tmp_path)
    code = main(["tune", "--objective", "test_one_door:quadratic", "--final-seeds", "1", "1",
                 "--out-dir", str(tmp_path)])  # fmt: skip
    assert code == 2 and "--final-seeds [1, 1]: a seed is named twice" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
