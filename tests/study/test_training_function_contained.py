"""Nothing a training function does ends or moves the study (issue "The study engine holds,
round 2", repros r10-r14 of ../shared/repro/study-engine-2/): ``sys.exit`` fails its run, a
changed working folder is restored and every report path is absolute, a number is any real
number ``float()`` takes (numpy's too) and an int too large for a float fails its run with a
message; ``name`` is checked as ``--name`` is; a module exiting on import is one line; no
password reaches the closing line."""

from __future__ import annotations

import os
import sys

import numpy as np
import optuna
import pytest

import torch_mars
from torch_mars.train.study.objective import ObjectiveFailed, import_objective, number_of
from torch_mars.train.study.store import dashboard_hint

SMALL = dict(
    trials=1,
    seeds=(0,),
    heldout_seeds=(1,),
    heldout_data_seeds=(1,),
    finalists=0,
    peer_winners=False,
)


def stored_errors(folder, name: str) -> dict[str, int]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{folder / name / 'study.db'}")
    errors: dict[str, int] = {}
    for trial in study.get_trials():
        error = trial.user_attrs.get("error")
        if error:
            errors[error] = errors.get(error, 0) + 1
    return errors


def exits_on_seed_1(make_optimizer, seed, data_seed, report):
    if seed == 1:
        sys.exit(0)
    return 1.0 + seed


def test_sys_exit_in_the_function_fails_that_run_and_the_study_goes_on(tmp_path):
    result = torch_mars.tune(exits_on_seed_1, ["adamw"], out_dir=tmp_path, progress=False, **SMALL)
    assert (tmp_path / "test_training_function_contained.exits_on_seed_1" / "summary.md").is_file()
    assert result.winners["adamw"]
    errors = stored_errors(tmp_path, "test_training_function_contained.exits_on_seed_1")
    assert errors == {"the function called sys.exit(0)": 1}  # the held-out run on seed 1


def wanders_off(make_optimizer, seed, data_seed, report):
    os.makedirs("scratch", exist_ok=True)
    os.chdir("scratch")
    return 1.0 + seed


def test_a_function_that_changes_folder_moves_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = torch_mars.tune(wanders_off, ["adamw"], out_dir="runs", progress=False, **SMALL)
    assert os.getcwd() == str(tmp_path)
    assert all(path.is_absolute() and path.is_file() for path in result.paths)
    assert (
        tmp_path / "runs" / "test_training_function_contained.wanders_off" / "summary.md"
    ) in result.paths


def test_numbers_are_what_float_takes_and_nothing_else():
    assert number_of(np.float32(1.5)) == 1.5 and number_of(3) == 3.0
    with pytest.raises(ObjectiveFailed, match="too large for a float"):
        number_of(10**400)
    for not_a_number in (True, "1.5", None, [1.0]):
        with pytest.raises(ObjectiveFailed, match="not a number"):
            number_of(not_a_number)


def huge(make_optimizer, seed, data_seed, report):
    return 10**400


def test_an_int_too_large_fails_its_runs_with_a_message_and_the_study_reports(tmp_path):
    with pytest.raises(ObjectiveFailed, match=r"no run finished: all 2 failed \(first: returned"):
        torch_mars.tune(huge, ["adamw"], out_dir=tmp_path, progress=False, **SMALL)
    # the trial's run and the winner's held-out run, each with its message, in the report too
    assert stored_errors(tmp_path, "test_training_function_contained.huge") == {
        "returned an int of 1329 bits, too large for a float": 2
    }
    summary = (tmp_path / "test_training_function_contained.huge" / "summary.md").read_text()
    assert "FAILED: 2 of adamw's 2 runs (first, seed 0 data order 0: returned an int" in summary


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs", ".hidden", "a/b"])
def test_a_name_that_is_a_path_is_refused_before_anything_is_made(tmp_path, name):
    with pytest.raises(ValueError, match="is not a name"):
        torch_mars.tune(huge, ["adamw"], out_dir=tmp_path / "runs", name=name, **SMALL)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escaped").exists()


def test_a_module_that_exits_on_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"does not import \(it calls sys.exit\(3\)\)"):
        import_objective("exits_on_import:train")


def test_the_closing_dashboard_line_masks_the_password():
    line = dashboard_hint("postgresql://tune:s3cret@db.example/studies")
    assert "s3cret" not in line and line.endswith("postgresql://***@db.example/studies")


def fails_on_seed_1(make_optimizer, seed, data_seed, report):
    if seed == 1:
        raise RuntimeError("out of memory on seed 1")
    return 1.0 + 0.01 * data_seed


def test_a_run_that_fails_on_one_selection_seed_scores_its_point_failed_and_gives_no_verdict(
    tmp_path,
):
    """#63: the point is not scored on its other seed, no verdict is read, and the report
    counts the failures with their message."""
    result = torch_mars.tune(
        fails_on_seed_1,
        ["adamw", "mars-adamw"],
        out_dir=tmp_path,
        progress=False,
        **{**SMALL, "trials": 2, "seeds": (0, 1), "heldout_seeds": (2, 3)},
    )
    assert result.verdicts == []
    summary = (
        tmp_path / "test_training_function_contained.fails_on_seed_1" / "summary.md"
    ).read_text()
    assert "FAILED: 2 of adamw's" in summary and "out of memory on seed 1" in summary
    assert "FAILED: 2 of mars-adamw's" in summary


def returns_a_tensor(make_optimizer, seed, data_seed, report):
    import torch

    return torch.tensor(1.0)


def test_a_function_that_returns_a_tensor_fails_every_run_and_the_study_says_so(tmp_path):
    with pytest.raises(ObjectiveFailed, match="no run finished: all 2 failed"):
        torch_mars.tune(returns_a_tensor, ["adamw"], out_dir=tmp_path, progress=False, **SMALL)
    summary = (
        tmp_path / "test_training_function_contained.returns_a_tensor" / "summary.md"
    ).read_text()
    assert "returned Tensor tensor(1.), not a number (return float(loss))" in summary


def test_the_command_line_exits_1_with_one_line_when_nothing_trained(tmp_path, monkeypatch, capsys):
    from torch_mars.cli import main

    (tmp_path / "broken.py").write_text(
        "def train(make_optimizer, seed, data_seed, report):\n    raise ValueError('boom')\n"
    )
    monkeypatch.chdir(tmp_path)
    args = ["tune", "--objective", "broken:train", "--optimizers", "adamw", "--trials", "1"]
    args += ["--seeds", "0", "--heldout-seeds", "1", "--heldout-data-seeds", "1"]
    args += ["--finalists", "0", "--out-dir", "o", "--name", "b"]
    assert main(args) == 1
    said = capsys.readouterr()
    assert "torch-mars tune: no run finished: all 2 failed (first: ValueError: boom)" in said.err
    assert "seed 0 data 0: FAILED: ValueError: boom" in said.out  # as it happened
    assert "FAILED: 2 of adamw's 2 runs" in said.out


def test_a_helper_edited_in_the_objectives_module_is_another_study_said_by_file(
    tmp_path, monkeypatch
):
    """#63: the fingerprint is the module's file, so editing a helper the function calls does
    not silently reuse old results; the refusal names the file and the fix for Python."""
    import importlib

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "helped.py"
    module.write_text(
        "def helper():\n    return 1.0\n\n"
        "def train(make_optimizer, seed, data_seed, report):\n    return helper() + seed\n"
    )
    helped = importlib.import_module("helped")
    torch_mars.tune(helped.train, ["adamw"], out_dir="o", progress=False, **SMALL)
    module.write_text(module.read_text().replace("return 1.0", "return 2.0"))
    with pytest.raises(ValueError, match=r"data: 'helped.py sha256:\w+' there, 'helped.py sha256"):
        torch_mars.tune(helped.train, ["adamw"], out_dir="o", progress=False, **SMALL)


def test_a_declared_version_keeps_the_study_through_an_edit_until_it_changes(tmp_path, monkeypatch):
    """#63: with ``version=``, the study knows the code by the version its author declares: an
    edit that changes no result keeps it (nothing trains again); a new version is refused
    naming both."""
    import importlib

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "versioned.py"
    module.write_text(
        "def train(make_optimizer, seed, data_seed, report):\n    return 1.0 + seed\n"
    )
    versioned = importlib.import_module("versioned")
    calls = []
    monkeypatch.setattr(versioned, "train", versioned.train)

    def counted(make_optimizer, seed, data_seed, report):  # stands for versioned.train
        calls.append(seed)
        return 1.0 + seed

    counted.__module__, counted.__qualname__ = "versioned", "train"
    torch_mars.tune(counted, ["adamw"], out_dir="o", progress=False, version="1", **SMALL)
    trained = len(calls)
    module.write_text("# a comment\n" + module.read_text())
    torch_mars.tune(counted, ["adamw"], out_dir="o", progress=False, version="1", **SMALL)
    assert trained > 0 and len(calls) == trained  # resumed: nothing trained again
    with pytest.raises(ValueError, match="data: 'declared version 1' there, 'declared version 2'"):
        torch_mars.tune(counted, ["adamw"], out_dir="o", progress=False, version="2", **SMALL)


def test_a_script_run_as_main_records_its_file_so_the_study_reopens(tmp_path, monkeypatch):
    import subprocess

    script = tmp_path / "my_script.py"
    script.write_text(
        "import torch_mars\n"
        "def train(make_optimizer, seed, data_seed, report):\n    return 1.0 + seed\n"
        "if __name__ == '__main__':\n"
        "    torch_mars.tune(train, ['adamw'], trials=1, seeds=(0,), heldout_seeds=(1,),\n"
        "                    heldout_data_seeds=(1,), finalists=0, out_dir='o', progress=False)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    loaded = torch_mars.load_study(tmp_path / "o" / "my_script.train")
    assert loaded.winners["adamw"]
    from torch_mars.cli import main

    args = ["tune", "--objective", "my_script:train", "--optimizers", "adamw", "--trials", "1"]
    args += ["--seeds", "0", "--heldout-seeds", "1", "--heldout-data-seeds", "1"]
    args += ["--finalists", "0", "--out-dir", "o", "--report"]  # the same default name
    assert main(args) == 0  # the script's study, reopened from the command line
