"""Model FLOPs utilisation: 6 x parameters per token over the device's datasheet bf16 rate, NaN
where the rate is unknown (never a guess), and where it shows (train's summary line, the bench)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from torch_mars.train import mfu
from torch_mars.train.run_record import RunResult


@pytest.mark.parametrize(
    "name, tflops",
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.4),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L40S", 362.1),
        ("NVIDIA L40", 181.0),
        ("NVIDIA L4", 121.0),
    ],
)
def test_the_peak_is_the_datasheet_rate_of_the_named_card(monkeypatch, name, tflops):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert mfu.peak_bf16_flops(torch.device("cuda")) == tflops * 1e12


def test_a_card_or_device_the_table_does_not_name_has_no_peak(monkeypatch):
    monkeypatch.setattr(
        torch.cuda, "get_device_name", lambda device=None: "NVIDIA GeForce GTX 1080"
    )
    assert math.isnan(mfu.peak_bf16_flops(torch.device("cuda")))
    assert math.isnan(mfu.peak_bf16_flops(torch.device("cpu")))


def test_utilization_is_six_flops_per_parameter_and_token_over_the_peak():
    # 124M parameters, 170,000 tokens/s on a 989.4 TFLOP/s card: 12.8%
    flops = mfu.training_flops_per_token(124_000_000) * 170_000
    assert mfu.model_flops_utilization(flops, 1.0, 989.4e12) == pytest.approx(0.1278, abs=1e-4)
    assert math.isnan(mfu.model_flops_utilization(flops, 1.0, math.nan))
    assert math.isnan(mfu.model_flops_utilization(flops, 0.0, 989.4e12))


def _result(utilization: float) -> RunResult:
    return RunResult(
        "text",
        "adamw",
        0,
        "val_loss",
        2.0,
        1.9,
        2.1,
        1000,
        "tokens",
        2.0,
        10,
        Path("r"),
        utilization,
    )


def test_the_train_summary_line_shows_mfu_only_where_it_is_known():
    from torch_mars.cli import _summary_line

    assert "MFU 41.2%" in _summary_line(_result(0.412))
    assert "MFU" not in _summary_line(_result(math.nan))


def test_a_summary_written_before_mfu_existed_reads_as_unknown():
    record = _result(0.3).as_dict()
    del record["mfu"]
    assert math.isnan(RunResult.from_dict(record).mfu)


def test_the_iteration_bench_reports_mfu_from_the_peak(monkeypatch):
    from torch_mars.bench import iteration

    monkeypatch.setattr(iteration, "peak_bf16_flops", lambda device: 1e12)
    (row,) = iteration.run_iteration_benchmark("tiny", ["adamw"], torch.device("cpu"), 2, 1, 1)
    model = iteration.GPT(iteration.gpt_config("tiny", iteration.BYTE_VOCAB))
    expected = 6 * model.num_parameters() * row.tokens_per_s / 1e12
    assert row.mfu == pytest.approx(expected)
    assert f"{row.mfu:.1%}" in iteration.format_iteration_table([row])


def test_a_training_run_reports_its_mfu_per_step_and_overall(tmp_path, monkeypatch):
    from harness_helpers import synthetic_corpus, tiny_config
    from torch_mars.train import Trainer, trainer
    from torch_mars.train.metrics import read_metrics

    monkeypatch.setattr(trainer, "peak_bf16_flops", lambda device: 1e9)
    run = Trainer(tiny_config(tmp_path), synthetic_corpus())
    result = run.train()
    rows = read_metrics(tmp_path)
    per_step = run.flops_per_step / 1e9
    assert all(r["mfu"] == pytest.approx(per_step * r["tokens_per_s"] / 64) for r in rows)
    assert result.mfu == pytest.approx(per_step * result.steps / result.train_time_s)
    assert run.flops_per_step == 6 * run.model.num_parameters() * 64
