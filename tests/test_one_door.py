"""torch-mars tune and torch_mars.tune go through one door (study/run.py): a study resumed
from Python keeps the starts it began with after the defaults move, as one resumed from the
command line does (test_tune.py), since both call the same function."""

from __future__ import annotations

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


def test_both_doors_resolve_every_default_they_share_alike():
    """A default planted in one door only (a literal in the parser or in the signature) fails
    here: each shared setting, left unset, resolves to the same value from both."""
    import inspect

    from torch_mars.cli import build_parser
    from torch_mars.train.study.selection import protocol_selection
    from torch_mars.train.study.tune import DEFAULT_SEARCH, DEFAULT_TRIALS, default_optimizers

    cli = build_parser().parse_args(["tune", "--objective", "fn:train"])
    py = {k: v.default for k, v in inspect.signature(torch_mars.tune).parameters.items()}
    assert (cli.optimizers or default_optimizers(True)) == (
        py["optimizers"] or default_optimizers(True)
    )
    assert cli.trials == (py["trials"] or DEFAULT_TRIALS)
    assert cli.search == (py["search"] or DEFAULT_SEARCH)
    assert cli.jobs == py["jobs"] and cli.direction == py["direction"]
    from_cli = protocol_selection(
        cli.seeds, cli.heldout_seeds, cli.data_seed, cli.heldout_data_seeds, cli.finalists,
        cli.final_seeds, cli.final_data_seeds, cli.pairs,
    )  # fmt: skip
    from_py = protocol_selection(
        py["seeds"], py["heldout_seeds"], py["data_seed"], py["heldout_data_seeds"],
        py["finalists"], py["final_seeds"], py["final_data_seeds"], py["pairs"],
    )  # fmt: skip
    assert from_cli == from_py


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
