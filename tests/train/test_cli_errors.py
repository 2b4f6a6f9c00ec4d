"""Bad command-line values end with exit code 2 and one line on stderr that names the flag,
before anything trains: the red-team inputs of issue #14 and their neighbours."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness_helpers import TINY_CLI
from torch_mars.cli import main

TINY = [flag for flag in TINY_CLI if flag != "--quiet"]
TINY = [*TINY[:2], *TINY[4:]]  # without --steps: some cases set the length themselves


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--steps", "inf"], "--steps"),
        (["--steps", "1.5"], "--steps"),
        (["--steps", "nan"], "--steps"),
        (["--steps", "0"], "--steps"),
        (["--tokens", "-3"], "--tokens"),
        (["--opt-arg", "lr=abc"], "--opt-arg"),
        (["--opt-arg", "lr=nan"], "--opt-arg"),
        (["--opt-arg", "lr"], "--opt-arg"),
        (["--device", "cuda"], "--device"),
        (["--device", "tpu"], "--device"),
        (["--grad-clip", "nan"], "--grad-clip"),
        (["--grad-clip", "-1"], "--grad-clip"),
        (["--warmup-steps", "-1"], "--warmup-steps"),
        (["--tokens", "300", "--steps", "5"], "--tokens and --steps"),
        (["--checkpoint-interval", "2.5"], "--checkpoint-interval"),
        (["--seed", "-1"], "--seed"),
    ],
)
def test_bad_train_values_are_one_line_errors_naming_the_flag(tmp_path, capsys, args, flag):
    code = main(["train", *TINY, "--data", "unused.txt", "--run-dir", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("torch-mars train: error:") and flag in err
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["compare", "--opt-arg", "mars-adamw:lr=abc"], "--opt-arg"),
        (["compare", "--lr", "adamw=inf"], "--lr"),
        (["compare-vision", "--data", "x:y", "--milestones", "1.5"], "--milestones"),
        (["sweep", "--grid", "adamw:lr=1e-3,,2e-3"], "--grid"),
        (["sweep", "--jobs", "0"], "--jobs"),
        (["bench", "step", "--repeats", "0"], "--repeats"),
        (["prepare", "a.txt", "--out", "o", "--val-fraction", "2"], "--val-fraction"),
    ],
)
def test_other_commands_refuse_bad_values_the_same_way(capsys, args, flag):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err


def _cli_without(modules: list[str], args: list[str]) -> subprocess.CompletedProcess:
    """``torch-mars ARGS`` in a process where ``modules`` cannot be imported (as on a machine
    that lacks them: ``importlib.util.find_spec`` finds nothing, ``import`` fails)."""
    code = (
        "import sys\n"
        f"for name in {modules!r}: sys.modules[name] = None\n"
        "from torch_mars.cli import main\n"
        f"sys.exit(main({args!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


@pytest.mark.parametrize("args", [["--help"], ["compare", "--steps", "5"]])
def test_without_the_harness_extra_every_command_says_so_in_one_line(args):
    """Issue #35: a bare `pip install torch-mars` met two chained tracebacks."""
    completed = _cli_without(["matplotlib", "optuna"], args)
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1, completed.stderr
    assert "harness extra (matplotlib, optuna missing): pip install 'torch-mars[harness]'" in (
        completed.stderr
    )


def test_export_and_eval_without_transformers_name_the_extra_before_any_work(tmp_path):
    """Issue #35: they said "No module named 'tokenizers'". Both commands in one process."""
    run, out = str(tmp_path / "none"), str(tmp_path / "out")
    code = (
        "import sys\n"
        "sys.modules['tokenizers'] = None\n"
        "from torch_mars.cli import main\n"
        f"codes = [main(['export-hf', {run!r}, {out!r}]),\n"
        f"         main(['eval', {run!r}, '--tasks', 'x'])]\n"
        "sys.exit(0 if codes == [2, 2] else 1)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 2, completed.stderr
    assert all("(tokenizers is missing): pip install 'torch-mars[eval]'" in line for line in lines)
    assert not (tmp_path / "out").exists()
