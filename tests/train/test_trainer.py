"""The training loop: interrupted-and-resumed runs end bitwise where uninterrupted ones do,
checkpoints fail loudly, accumulation matches a large batch, metrics are written."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
import torch

from harness_helpers import synthetic_corpus, tiny_config
from torch_mars.train import Trainer
from torch_mars.train.checkpoint import CheckpointError
from torch_mars.train.metrics import METRIC_COLUMNS, read_metrics

CORPUS = synthetic_corpus()


def train(config):
    return Trainer(config, CORPUS).train()


@pytest.mark.parametrize(
    ("optimizer", "exact"),
    [
        ("mars-adamw", False),
        ("mars-adamw", True),
        ("mars-shampoo", False),
        ("muon", False),
        ("adamw", False),
    ],
)
def test_interrupted_run_resumes_bitwise(tmp_path, optimizer, exact):
    whole = train(tiny_config(tmp_path / "whole", optimizer=optimizer, exact=exact))
    part = tiny_config(tmp_path / "parts", optimizer=optimizer, exact=exact)
    first = train(dataclasses.replace(part, stop_after=3))
    assert first.steps == 3
    resumed = train(dataclasses.replace(part, resume=True))
    assert resumed.final == whole.final
    assert resumed.final_train_loss == whole.final_train_loss
    whole_rows, resumed_rows = read_metrics(tmp_path / "whole"), read_metrics(tmp_path / "parts")
    assert [r["step"] for r in resumed_rows] == list(range(1, 9))
    assert [r["train_loss"] for r in resumed_rows] == [r["train_loss"] for r in whole_rows]


def test_metrics_written_after_the_last_checkpoint_are_replaced_on_resume(tmp_path):
    config = tiny_config(tmp_path, checkpoint_interval=2)
    train(dataclasses.replace(config, stop_after=5))
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4, 5]
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert checkpoint["step"] == 5
    train(dataclasses.replace(config, resume=True))
    assert [r["step"] for r in read_metrics(tmp_path)] == list(range(1, 9))


def test_corrupt_checkpoint_is_an_error_not_a_fresh_start(tmp_path):
    config = tiny_config(tmp_path)
    train(dataclasses.replace(config, stop_after=2))
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        train(dataclasses.replace(config, resume=True))


def test_checkpoint_of_another_run_is_refused(tmp_path):
    train(tiny_config(tmp_path, stop_after=2))
    with pytest.raises(CheckpointError, match="optimizer: checkpoint 'mars-adamw', now 'adamw'"):
        train(tiny_config(tmp_path, optimizer="adamw", resume=True))
    with pytest.raises(CheckpointError, match="lr"):
        train(tiny_config(tmp_path, hyperparams={"lr": 5e-2}, resume=True))


def test_resume_without_a_checkpoint_is_an_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        train(tiny_config(tmp_path, resume=True))


def test_checkpoints_are_written_atomically(tmp_path):
    train(tiny_config(tmp_path, checkpoint_interval=2))
    assert (tmp_path / "checkpoint.pt").is_file()
    assert not list(tmp_path.glob("*.partial"))


def test_gradient_accumulation_matches_one_large_batch(tmp_path):
    large = train(tiny_config(tmp_path / "a", batch_size=8, grad_accum=1, optimizer="adamw"))
    accumulated = train(tiny_config(tmp_path / "b", batch_size=4, grad_accum=2, optimizer="adamw"))
    assert accumulated.budget == large.budget
    assert accumulated.final == pytest.approx(large.final, abs=1e-5)


def test_metrics_files_hold_every_step_and_the_evaluations(tmp_path):
    result = train(tiny_config(tmp_path, diagnostics=True))
    rows = read_metrics(tmp_path)
    assert len(rows) == 8 and rows[-1]["tokens"] == result.budget == 8 * 4 * 16
    assert [r["step"] for r in rows if "val_loss" in r] == [4, 8]
    assert all(0.0 <= r["clipped_fraction"] <= 1.0 and r["update_rms"] > 0 for r in rows)
    assert rows[0]["correction_ratio"] == pytest.approx(1.0)
    with open(tmp_path / "metrics.csv") as file:
        table = list(csv.DictReader(file))
    assert tuple(table[0]) == METRIC_COLUMNS and len(table) == 8
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["optimizer"] == "mars-adamw" and config["tokens_per_step"] == 64


def test_training_reduces_the_validation_loss(tmp_path):
    result = train(tiny_config(tmp_path, steps=40, eval_interval=40))
    assert result.final < 4.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"steps": 0}, "steps must be >= 1"),
        ({"schedule": "step"}, "schedule must be one of"),
        ({"stop_after": 9}, "stop_after must be in"),
        ({"diagnostics": True, "optimizer": "adamw"}, "diagnostics need a MARS optimizer"),
        ({"grad_clip": -1.0}, "grad_clip must be >= 0"),
    ],
)
def test_bad_configs_are_rejected(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(tmp_path, **changes)


def test_unknown_hyperparameters_and_oversized_blocks_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown hyperparameters for adamw: \\['gamma'\\]"):
        Trainer(tiny_config(tmp_path, optimizer="adamw", hyperparams={"gamma": 0.1}), CORPUS)
    with pytest.raises(ValueError, match="block_size must be <= 32"):
        Trainer(tiny_config(tmp_path, block_size=64), CORPUS)


def test_a_diverging_run_stops_with_a_clear_error(tmp_path):
    config = tiny_config(
        tmp_path, optimizer="adamw", grad_clip=0.0, hyperparams={"lr": 1e30, "min_lr": 0.0}
    )
    with pytest.raises(FloatingPointError, match="lower the learning rate"):
        train(config)
