"""A study knows a training function by the code its results depend on: its source, the
helpers and constants of its module it reads, and every other module of the user's it reaches;
a driver's other lines (a print, a __main__ block) are no part of it (issue "Your model,
round 2")."""

from __future__ import annotations

import importlib
import linecache

import torch_mars
from torch_mars.train.study.objective import fingerprint

SMALL = dict(trials=1, seeds=(0,), heldout_seeds=(1, 2), heldout_data_seeds=(1,), finalists=0)


def _write(folder, name, text):
    (folder / f"{name}.py").write_text(text)
    linecache.checkcache()


def test_an_edit_to_an_imported_helper_module_changes_the_identity_a_print_does_not(
    tmp_path, monkeypatch
):
    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path, "scales", "def scale():\n    return 2.0\n")
    driver = (
        "import scales\nSTEPS = 4\n\ndef helper():\n    return 1.0\n\n"
        "def train(make_optimizer, seed, data_seed, report):\n"
        "    return helper() * scales.scale() + seed + STEPS\n\nprint('hello')\n"
    )
    _write(tmp_path, "driver_a", driver)
    module = importlib.import_module("driver_a")
    first = fingerprint(module.train)
    _write(tmp_path, "driver_a", driver.replace("print('hello')", "print('bye')"))
    assert fingerprint(module.train) == first  # a driver's own line
    _write(tmp_path, "driver_a", driver.replace("return 1.0", "return 1.5"))
    assert fingerprint(module.train) != first  # a helper of its module
    _write(tmp_path, "driver_a", driver)
    _write(tmp_path, "scales", "def scale():\n    return 3.0\n")
    assert fingerprint(module.train) != first  # another module of the user's it imports
    _write(tmp_path, "scales", "def scale():\n    return 2.0\n")
    monkeypatch.setattr(module, "STEPS", 5)
    assert fingerprint(module.train) != first  # a constant it reads, at its value now


def test_a_study_resumes_through_an_edit_of_the_drivers_own_lines(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = "def train(make_optimizer, seed, data_seed, report):\n    return 1.0 + seed\n"
    _write(tmp_path, "driver_b", text + "\nprint('first')\n")
    module = importlib.import_module("driver_b")
    torch_mars.tune(module.train, ["adamw"], out_dir="o", progress=False, **SMALL)
    _write(tmp_path, "driver_b", text + "\nprint('second')\n")
    again = torch_mars.tune(module.train, ["adamw"], out_dir="o", progress=False, **SMALL)
    assert again.winners["adamw"]  # the same study, read back: nothing refused


def test_a_refused_command_writes_nothing_into_the_study(tmp_path, monkeypatch):
    import optuna
    import pytest

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _write(tmp_path, "driver_c", "def train(make_optimizer, seed, data_seed, report):\n"
           "    return 1.0 + seed\n")  # fmt: skip
    module = importlib.import_module("driver_c")
    torch_mars.tune(module.train, ["adamw", "nadamw"], out_dir="o", progress=False, **SMALL)
    url = "sqlite:///o/driver_c.train/study.db"
    before = optuna.load_study(study_name="driver_c.train", storage=url).user_attrs
    with pytest.raises(ValueError, match="declared its family before its first run"):
        torch_mars.tune(
            module.train, ["adamw", "nadamw", "mars-adamw"], out_dir="o", progress=False, **SMALL
        )
    after = optuna.load_study(study_name="driver_c.train", storage=url).user_attrs
    assert after == before  # no optimizer list, no protocol taken


def test_ctrl_c_ends_tune_in_one_line_saying_the_same_command_resumes(monkeypatch, capsys):
    import dataclasses

    from torch_mars import cli

    def interrupted(config):
        raise KeyboardInterrupt

    commands = tuple(
        dataclasses.replace(c, configure=lambda args: None, run=interrupted)
        if c.words == ("tune",)
        else c
        for c in cli.COMMANDS
    )
    monkeypatch.setattr(cli, "COMMANDS", commands)
    assert cli.main(["tune", "--model", "tiny"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["torch-mars tune: interrupted (a study: the same command resumes it)"]
