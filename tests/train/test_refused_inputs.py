"""Bad inputs that were accepted silently or ended in a traceback (issue #35): each is one
line naming the input (exit 2 on the command line, a ValueError or TypeError in Python), and
nothing changes."""

from __future__ import annotations

import pytest
import torch

from torch_mars import MARS
from torch_mars.cli import main
from torch_mars.models import GPT, gpt_config
from torch_mars.train.optimizers import build_optimizer, default_hyperparams
from torch_mars.train.study.grid import parse_value


def test_a_set_of_parameters_is_refused():
    weight = torch.nn.Parameter(torch.randn(3, 3))
    with pytest.raises(TypeError, match="ordered collection"):
        MARS({weight})


def test_a_tensor_listed_twice_in_one_group_is_refused():
    weight = torch.nn.Parameter(torch.randn(3, 3))
    with pytest.raises(ValueError, match="listed twice"):
        MARS([weight, weight])


def test_an_unknown_group_setting_is_refused_and_adds_no_group():
    opt = MARS([torch.nn.Parameter(torch.randn(3, 3))])
    with pytest.raises(ValueError, match=r"unknown param group settings \['gama'\]"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(2, 2))], "gama": 0.1})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("ns_steps", [0, 101, 10**9])
def test_ns_steps_out_of_range_is_refused(ns_steps):
    with pytest.raises(ValueError, match=r"ns_steps must be an integer in \[1, 100\]"):
        MARS([torch.nn.Parameter(torch.randn(3, 3))], ns_steps=ns_steps)


def test_lr_at_construction_of_zero_is_refused_before_any_tensor_steps():
    """It was a ZeroDivisionError after the first group had stepped."""
    matrix, bias = torch.nn.Parameter(torch.randn(3, 3)), torch.nn.Parameter(torch.randn(3))
    opt = MARS([{"params": [matrix]}, {"params": [bias]}], lr=1e-2)
    opt.param_groups[1]["lr_at_construction"] = 0.0
    matrix.grad, bias.grad = torch.ones(3, 3), torch.ones(3)
    before = [matrix.detach().clone(), bias.detach().clone()]
    with pytest.raises(ValueError, match="param group 1: lr_at_construction must be"):
        opt.step()
    assert torch.equal(matrix, before[0]) and torch.equal(bias, before[1])


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0660", "1e999", "nan"])
def test_numbers_are_ascii_digits_and_finite(text):
    with pytest.raises(ValueError, match=repr(text)):
        parse_value(text)


def test_muon_momentum_outside_its_range_is_refused():
    settings = {**default_hyperparams("muon", "tiny"), "momentum": 1.5}
    with pytest.raises(ValueError, match=r"muon: momentum must be in \[0, 1\), got 1.5"):
        build_optimizer("muon", GPT(gpt_config("tiny", 64)), settings)


def _one_line_refusal(capsys, args: list[str], needle: str) -> None:
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and needle in error, error


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["train", "--run-dir", "/"], "--run-dir: the folder '/' is the file-system root"),
        (["train", "--run-dir", ""], "--run-dir: the folder is empty"),
        (["train-vision", "--data", "x", "--run-dir", "/"], "file-system root"),
        (["compare", "--name", "../x"], "--name: '../x' is not a name"),
        (["sweep", "--name", "a/b"], "--name: 'a/b' is not a name"),
    ],
)
def test_folders_that_cannot_hold_a_run_are_refused(capsys, args, needle):
    _one_line_refusal(capsys, args, needle)


def test_paths_under_a_file_are_refused_before_any_work(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    under = str(a_file / "x")
    _one_line_refusal(capsys, ["train", "--run-dir", under], "which is a file")
    _one_line_refusal(capsys, ["compare", "--out-dir", str(a_file)], "is a file, not a folder")
    _one_line_refusal(capsys, ["bench", "step", "--json", under + "/r.json"], "which is a file")
    _one_line_refusal(capsys, ["doctor", "--out", under + "/r.md"], "which is a file")
    _one_line_refusal(capsys, ["train", "--run-dir", str(tmp_path / ("n" * 300))], "255 bytes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
