"""The run shell (train/run_shell.py) that every task's run goes through: a vision run killed
with SIGKILL mid-epoch resumes bitwise, a locked or used run folder is refused, and the task
record is the only place that tells the tasks apart."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_vision_harness import write_easy_folder

from harness_helpers import kill_when_paused
from torch_mars.cli import main
from torch_mars.train.run_record import run_folder_lock

SOURCE = Path(__file__).resolve().parents[2] / "src" / "torch_mars"


def vision_args(data: Path, run_dir: Path, *extra: str) -> list[str]:
    """Two epochs of ten steps (300 images, 32 per step) of a width-2 ResNet, augmented."""
    return [
        "train-vision",
        "--data",
        f"folder:{data}",
        "--width",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "32",
        "--device",
        "cpu",
        "--quiet",
        "--opt-arg",
        "lr=0.01",
        "--checkpoint-interval",
        "8",
        "--run-dir",
        str(run_dir),
        *extra,
    ]


def cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch_mars.cli", *args]


def metric_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "time_s"} for row in rows]


def test_a_vision_run_killed_mid_epoch_resumes_bitwise(tmp_path):
    """Killed after step 11 (its last checkpoint at step 8, mid-epoch 1; the epoch-1 row at
    step 9 written after it: 270 training images once the validation split is carved, 9 steps
    of 32 an epoch): the resumed run ends with the uninterrupted run's weights,
    optimizer state and metric rows exactly, each epoch's row once."""
    data = tmp_path / "data"
    write_easy_folder(data, per_class=150)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    one_thread = {**os.environ, "OMP_NUM_THREADS": "1"}
    # The uninterrupted run trains beside the killed one (one thread each; nothing waits on
    # their relative speed): it is only read once both have ended.
    whole_run = subprocess.Popen(cli(vision_args(data, whole)), env=one_thread)
    env = kill_when_paused(cli(vision_args(data, killed)), 11, what="steps")
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["step"] == 8
    assert [row["epoch"] for row in metric_rows(killed)] == [1]  # the row past the checkpoint
    subprocess.run(cli(vision_args(data, killed, "--resume")), env=env, check=True)
    assert whole_run.wait() == 0

    resumed = torch.load(killed / "checkpoint.pt", weights_only=True)
    uninterrupted = torch.load(whole / "checkpoint.pt", weights_only=True)
    assert resumed["step"] == uninterrupted["step"] == 18
    for name, tensor in uninterrupted["model"].items():
        assert torch.equal(resumed["model"][name], tensor), name
    for index, state in uninterrupted["optimizer"]["state"].items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(resumed["optimizer"]["state"][index][key], value), key
    assert metric_rows(killed) == metric_rows(whole)
    assert [row["epoch"] for row in metric_rows(killed)] == [1, 2]
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["final"] == json.loads((whole / "summary.json").read_text())["final"]


def test_a_second_train_vision_on_a_locked_folder_is_refused(tmp_path, capsys):
    data = tmp_path / "data"
    write_easy_folder(data, per_class=4)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with run_folder_lock(run_dir):
        assert main(vision_args(data, run_dir)) == 2
    assert "in use by process" in capsys.readouterr().err
    assert not (run_dir / "config.json").exists()


def test_a_new_vision_run_over_a_checkpointed_folder_is_refused(tmp_path, capsys):
    data = tmp_path / "data"
    write_easy_folder(data, per_class=4)
    run_dir = tmp_path / "run"
    assert main(vision_args(data, run_dir, "--stop-after", "1")) == 0
    rows = (run_dir / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(vision_args(data, run_dir)) == 2
    assert "--resume to continue it" in capsys.readouterr().err
    assert (run_dir / "metrics.jsonl").read_text() == rows
    assert main(vision_args(data, run_dir, "--overwrite")) == 0
    assert main(vision_args(data, run_dir, "--resume")) == 0  # at its end: nothing to train


def test_resume_refuses_other_images_under_the_same_path(tmp_path, capsys):
    data = tmp_path / "data"
    write_easy_folder(data, per_class=4)
    run_dir = tmp_path / "run"
    assert main(vision_args(data, run_dir, "--stop-after", "1")) == 0
    image = next((data / "train" / "dark").iterdir())
    image.write_bytes((data / "train" / "bright" / "0.png").read_bytes())
    capsys.readouterr()
    assert main(vision_args(data, run_dir, "--resume")) == 2
    assert "data_fingerprint" in capsys.readouterr().err


def _python_sources() -> dict[Path, str]:
    return {path: path.read_text() for path in SOURCE.rglob("*.py")}


def test_only_the_task_record_tells_the_tasks_apart():
    config_test = re.compile(
        r"isinstance\(\s*[\w.]*(config|base)\b|isinstance\([^)]*(TrainConfig|VisionConfig)"
    )
    found = [
        f"{path.relative_to(SOURCE)}:{text[: m.start()].count(chr(10)) + 1}"
        for path, text in _python_sources().items()
        if path.name != "task.py"
        for m in config_test.finditer(text)
    ]
    assert not found, found


def test_a_run_result_is_built_in_one_place():
    built = [
        str(path.relative_to(SOURCE))
        for path, text in _python_sources().items()
        for _ in re.finditer(r"\bRunResult\(", text)
    ]
    assert built == ["train/run_shell.py"]


def test_the_vision_task_does_not_import_the_text_trainer():
    source = (SOURCE / "train" / "vision.py").read_text()
    assert "torch_mars.train.trainer" not in source


@pytest.mark.parametrize("name", ["text", "vision"])
def test_each_task_names_its_metric_and_budget(name):
    from torch_mars.train import task_named

    task = task_named(name)
    assert task.name == name and task.metric.key in ("val_loss", "val_accuracy")
    assert task.budget_unit == {"text": "tokens", "vision": "images"}[name]
