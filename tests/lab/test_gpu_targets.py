"""benchmarks/perf/gpu_targets.py: each of issue #66's targets is read from the file of the run
that measures it, judged against its bound in the right direction, and 'missing' (not a pass)
where that run left no file."""

from __future__ import annotations

import json
from pathlib import Path

from benchmark_scripts import load_benchmark_script

targets = load_benchmark_script("perf/gpu_targets.py")


def _write(folder: Path, name: str, rows: list[dict], **extra: float) -> None:
    (folder / name).write_text(json.dumps({"results": rows, **extra}))


def test_targets_are_met_missed_and_missing_as_measured(tmp_path):
    _write(
        tmp_path,
        targets.SMALL,
        [
            {"name": "adamw-fused", "median_ms": 2.0, "ops_per_step": 4},
            {"name": "mars-adamw-default", "median_ms": 2.6, "ops_per_step": 18},
            {"name": "mars-shampoo-default", "median_ms": 8.0, "ops_per_step": 130},
            {"name": "mars-lion-fused-one-buffer", "median_ms": 3.0, "ops_per_step": 12},
            {"name": "adamw-fused-graph", "median_ms": 1.0, "ops_per_step": 0},
            {"name": "mars-adamw-graph", "median_ms": 1.4, "ops_per_step": 0},
        ],
    )
    _write(
        tmp_path,
        targets.COMPILED,
        [{"name": "adamw", "mfu": 0.46}, {"name": "mars-adamw", "mfu": 0.41}],
    )
    met = {row[0]: row[3] for row in targets.target_rows(tmp_path)}
    assert met["mars-adamw default / fused AdamW, GPT-2 small"] == "yes"  # 1.30 <= 1.35
    assert met["CUDA graph mars-adamw / adamw, GPT-2 small"] == "no"  # 1.40 > 1.30
    assert met["mars-shampoo default / fused AdamW, GPT-2 small"] == "no"  # 4.0 > 3.0
    assert met["mars-lion-fused-one-buffer ops per step"] == "yes"
    assert met["MFU, GPT-2 small compiled, bf16 autocast, AdamW"] == "yes"  # a lower bound
    assert met["MFU, GPT-2 small compiled, bf16 autocast, MARS-AdamW"] == "no"  # 0.41 < 0.45
    large = [name for name in met if "GPT-2 large" in name]
    assert len(large) == 6 and all(met[name] == "missing" for name in large)
    assert len(met) == len(targets.TARGETS)
