"""`torch-mars compare` end to end on a tiny budget, `plot`, and the CLI's error handling."""

from __future__ import annotations

import json

import pytest

from harness_helpers import TINY_CLI, write_synthetic_text
from torch_mars.cli import main, parse_value

TINY = TINY_CLI


@pytest.fixture
def text_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


def test_compare_writes_table_figure_and_per_run_metrics(tmp_path, text_file, capsys):
    code = main(
        [
            "compare",
            *TINY,
            "--data",
            str(text_file),
            "--optimizers",
            "mars-adamw",
            "adamw",
            "--seeds",
            "0",
            "1",
            "--out-dir",
            str(tmp_path),
            "--name",
            "c",
            "--lr",
            "adamw=2e-3",
            "--opt-arg",
            "mars-adamw:gamma=0.05",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    header = "| optimizer | seeds | final val loss | best val loss | tokens | time (s) | tokens/s |"
    assert header in out
    assert "| mars-adamw | " in out and "| adamw | " in out and " ± " in out
    run = tmp_path / "c"
    assert (run / "curves.png").stat().st_size > 10_000
    for name in ("mars-adamw", "adamw"):
        for seed in (0, 1):
            assert (run / f"{name}-seed{seed}" / "metrics.csv").is_file()
    summary = {s["optimizer"]: s for s in json.loads((run / "summary.json").read_text())}
    assert summary["adamw"]["seeds"] == [0, 1] and summary["adamw"]["budget"] == 6 * 4 * 16
    config = json.loads((run / "adamw-seed1" / "config.json").read_text())
    assert config["hyperparams"]["lr"] == 2e-3 and config["seed"] == 1
    mars_config = json.loads((run / "mars-adamw-seed0" / "config.json").read_text())
    assert mars_config["hyperparams"]["gamma"] == 0.05
    assert (run / "summary.md").read_text().strip() in out

    (run / "curves.png").unlink()
    assert main(["plot", str(run)]) == 0
    assert (run / "curves.png").is_file()
    assert main(["plot", str(run / "adamw-seed0"), "--out", str(tmp_path / "one.png")]) == 0
    assert (tmp_path / "one.png").is_file()


def test_cli_errors_are_one_line_with_exit_code_2(tmp_path, text_file, capsys):
    assert main(["compare", *TINY, "--data", str(text_file), "--optimizers", "sgd"]) == 2
    assert "unknown ['sgd']" in capsys.readouterr().err
    assert main(["compare", *TINY, "--data", str(tmp_path / "nothing.txt")]) == 2
    assert "nothing.txt: no such file or folder" in capsys.readouterr().err
    assert (
        main(
            ["train", *TINY, "--data", str(text_file), "--run-dir", str(tmp_path / "r"), "--resume"]
        )
        == 2
    )
    assert "no checkpoint to resume from" in capsys.readouterr().err
    assert main(["plot", str(tmp_path)]) == 2
    # Vision flags are not text flags.
    assert main(["compare", *TINY, "--data", str(text_file), "--epochs", "2"]) == 2


def test_train_stops_and_resumes_from_the_command_line(tmp_path, text_file, capsys):
    args = ["train", *TINY, "--data", str(text_file), "--run-dir", str(tmp_path / "r")]
    assert main([*args, "--stop-after", "2"]) == 0
    assert "stopped after step 2" in capsys.readouterr().out
    assert main([*args, "--resume"]) == 0
    assert "final val loss" in capsys.readouterr().out
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == 6


def test_token_budget_sets_the_step_count(tmp_path, text_file):
    at = TINY.index("--steps")
    without_steps = [*TINY[:at], *TINY[at + 2 :]]  # --tokens and --steps exclude each other
    assert (
        main(
            [
                "train",
                *without_steps,
                "--data",
                str(text_file),
                "--tokens",
                "300",
                "--run-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "config.json").read_text())["steps"] == 5


def test_values_parse_to_python_types():
    assert parse_value("3e-3") == 0.003 and parse_value("4") == 4
    assert parse_value("(0.9,0.95)") == (0.9, 0.95) and parse_value("True") is True
    assert parse_value("mars-adamw") == "mars-adamw" and parse_value("bfloat16") == "bfloat16"
