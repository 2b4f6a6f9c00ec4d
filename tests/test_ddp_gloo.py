"""Two gloo processes under torchrun train like one process with the same global batch."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from harness_helpers import TINY_CLI, write_synthetic_text
from torch_mars.train.metrics import read_metrics


def run_cli(args, env_extra=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    completed = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


@pytest.mark.parametrize("optimizer", ["mars-adamw", "muon"])
def test_two_gloo_processes_match_one_process(tmp_path, optimizer):
    text = write_synthetic_text(tmp_path / "corpus.txt")
    common = [
        "train",
        "--optimizer",
        optimizer,
        *TINY_CLI,
        "--data",
        str(text),
        *shlex.split("--grad-accum 2 --device cpu"),
    ]
    run_cli(["-m", "torch_mars.cli", *common, "--run-dir", str(tmp_path / "one")])
    run_cli(
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "torch_mars.cli",
            *common,
            "--run-dir",
            str(tmp_path / "two"),
        ]
    )
    one, two = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert len(one) == len(two) == 6
    for a, b in zip(one, two, strict=True):
        assert b["train_loss"] == pytest.approx(a["train_loss"], abs=2e-5)
    assert two[-1]["val_loss"] == pytest.approx(one[-1]["val_loss"], abs=2e-5)
    assert two[-1]["tokens"] == one[-1]["tokens"]
    assert json.loads((tmp_path / "two" / "config.json").read_text())["processes"] == 2
