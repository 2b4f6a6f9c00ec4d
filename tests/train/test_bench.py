"""``torch-mars bench``: the step table and JSON (ratios to fused AdamW from the same run), the
iteration mode, the distributed mode (two spawned gloo processes on FSDP2 shards), the byte model
behind "effective GB/s", and the CLI's errors."""

from __future__ import annotations

import json

import pytest
import torch

from torch_mars import MARS
from torch_mars.bench.step import (
    Candidate,
    bytes_per_step,
    default_candidates,
    run_step_benchmark,
    state_bytes,
    uses_newton_schulz,
)
from torch_mars.cli import main


def test_step_mode_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "step.json"
    only = ["adamw-fused", "mars-adamw-loop", "mars-adamw-foreach", "mars-lion-loop"]
    args = ["bench", "step", "--model", "tiny", "--repeats", "2", "--warmup", "1"]
    args += ["--json", str(out)]
    assert main([*args, "--only", *only]) == 0
    printed = capsys.readouterr().out
    header = "| optimizer | step (ms) | ratio to fused AdamW | ops/step | Python calls/step |"
    assert header in printed
    record = json.loads(out.read_text())
    rows = {row["name"]: row for row in record["results"]}
    assert list(rows) == only
    assert rows["adamw-fused"]["ratio_to_fused_adamw"] == 1.0
    for row in rows.values():
        assert row["median_ms"] > 0 and row["effective_gb_per_s"] > 0
    # The host cost: fused AdamW is one multi-tensor op per buffer update; the per-tensor loop
    # dispatches ops for every tensor.
    assert 0 < rows["adamw-fused"]["ops_per_step"] < rows["mars-adamw-loop"]["ops_per_step"]
    assert all(row["python_calls_per_step"] > 0 for row in rows.values())
    # MARS-AdamW keeps m, v and g_tilde where AdamW keeps m and v; Lion keeps m and g_tilde.
    assert rows["mars-adamw-loop"]["state_mib"] > rows["adamw-fused"]["state_mib"]
    assert rows["mars-lion-loop"]["state_mib"] < rows["mars-adamw-loop"]["state_mib"]


def test_iteration_mode_reports_the_step_share(tmp_path, capsys):
    out = tmp_path / "iteration.json"
    args = ["bench", "iteration", "--model", "tiny", "--batch-size", "2"]
    args += ["--repeats", "2", "--warmup", "1", "--only", "adamw", "mars-adamw", "--json", str(out)]
    assert main(args) == 0
    assert "| optimizer | iteration (ms) | step (ms) | step share |" in capsys.readouterr().out
    rows = json.loads(out.read_text())["results"]
    assert [row["name"] for row in rows] == ["adamw", "mars-adamw"]
    for row in rows:
        assert 0 < row["step_share"] < 1
        assert row["step_ms"] < row["iteration_ms"]


def test_distributed_mode_times_the_sharded_step_and_counts_collectives(tmp_path, capsys):
    out = tmp_path / "distributed.json"
    only = ["adamw-foreach", "mars-adamw", "mars-adamw-dtensor-ops", "mars-shampoo"]
    args = ["bench", "distributed", "--model", "tiny", "--repeats", "2"]
    assert main([*args, "--warmup", "1", "--only", *only, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "FSDP2 over 2 processes" in printed
    assert "| optimizer | step (ms) | ratio to AdamW foreach | collectives per step |" in printed
    rows = {row["name"]: row for row in json.loads(out.read_text())["results"]}
    assert list(rows) == only
    assert rows["adamw-foreach"]["ratio_to_adamw_foreach"] == 1.0
    assert all(row["median_ms"] > 0 for row in rows.values())
    # tiny has 15 tensors: one all_reduce for all of them on the sharded path (plus
    # Shampoo's two all_to_all), at least one collective per tensor through DTensor ops.
    assert rows["mars-adamw"]["collectives_per_step"] == 1
    assert rows["mars-shampoo"]["collectives_per_step"] == 3
    assert rows["mars-adamw-dtensor-ops"]["collectives_per_step"] >= 15


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["step", "--only", "sgd"], "unknown ['sgd']"),
        (["distributed", "--only", "sgd"], "unknown distributed rows ['sgd']"),
        (["step", "--repeats", "0"], "argument --repeats: must be a whole number in [1, 1e+12]"),
        (["step", "--device", "mps"], "--device must be cpu or cuda"),
        (["iteration", "--device", "gpu0"], "--device must be cpu or cuda"),
    ],
)
def test_bad_arguments_are_one_line_errors(capsys, args, message):
    assert main(["bench", *args, "--model", "tiny"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "bytes_per_element"),
    [
        (lambda ps: torch.optim.AdamW(ps), 12 + 2 * 8),
        (lambda ps: MARS(ps), 12 + 2 * 12),
        (lambda ps: MARS(ps, mars_type="mars-lion"), 12 + 2 * 8),
        (lambda ps: MARS(ps, state_dtype=torch.bfloat16), 12 + 2 * 6),
    ],
    ids=["adamw", "mars-adamw", "mars-lion", "mars-adamw-bf16-state"],
)
def test_bytes_per_step_counts_every_state_buffer_read_and_written(make, bytes_per_element):
    param = torch.nn.Parameter(torch.randn(5, 4))
    param.grad = torch.randn(5, 4)
    optimizer = make([param])
    optimizer.step()
    assert bytes_per_step(optimizer, [param]) == 20 * bytes_per_element
    assert state_bytes(optimizer) == 20 * (bytes_per_element - 12) // 2


def test_iteration_rows_take_the_fused_suffix_only_for_mars(capsys):
    args = ["bench", "iteration", "--model", "tiny", "--only", "adamw-fused"]
    assert main(args) == 2
    assert "only MARS rows take the '-fused' suffix" in capsys.readouterr().err


def test_newton_schulz_rows_are_the_muon_and_shampoo_ones():
    slow = [c.name for c in default_candidates() if uses_newton_schulz(c)]
    assert sorted(slow) == [
        "mars-shampoo-default",
        "mars-shampoo-foreach",
        "mars-shampoo-fused",
        "mars-shampoo-loop",
        "muon",
    ]


def test_step_rounds_time_the_candidates_in_a_new_order_each_round():
    """No row is always timed right after the same other one (an order effect looked like a
    1 ms gap between two rows that run the same code on an H100); every row is still timed
    once per round."""
    timed: list[str] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name
            self.param_groups: list[dict] = []
            self.state: dict = {}

        def step(self) -> None:
            timed.append(self.name)

    names = ["a", "b", "c", "d"]
    candidates = [Candidate(name, lambda model, n=name: Recorder(n)) for name in names]
    run_step_benchmark(torch.nn.Linear(4, 4), candidates, warmup=0, repeats=6)
    rounds = [timed[4 * k : 4 * k + 4] for k in range(6)]
    assert all(sorted(order) == names for order in rounds)
    assert len({tuple(order) for order in rounds}) > 1
    assert len({order[0] for order in rounds}) > 1
