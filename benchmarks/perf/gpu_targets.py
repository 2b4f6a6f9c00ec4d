"""The GPU targets of issue #66 ("Fast on the GPUs users train on, round 2"; #49's, with the MFU
bound raised from 0.40 to 0.45) beside what one run of ``benchmarks/gpu_bench.sh`` measured: one
Markdown table, each row a target, its bound, the figure and whether it is met (``missing``
where the run did not produce the file).

    python benchmarks/perf/gpu_targets.py runs/gpu      # the folder gpu_bench.sh wrote

Ratios are within one bench run (each against fused AdamW or torch Muon timed beside it).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from torch_mars.bench.table import markdown_table

Figure = Callable[[dict[str, dict]], float]


def _row(results: dict[str, dict], file: str, name: str, field: str) -> float:
    rows = {r["name"]: r for r in results[file]["results"]}
    return float(rows[name][field])


def _ratio(file: str, name: str, baseline: str) -> Figure:
    return lambda r: _row(r, file, name, "median_ms") / _row(r, file, baseline, "median_ms")


SMALL, LARGE = "step-gpt2-small.json", "step-gpt2-large.json"
COMPILED = "iteration-compiled-gpt2-small.json"

# (target, bound, "max" or "min", figure)
TARGETS: tuple[tuple[str, float, str, Figure], ...] = (
    (
        "mars-adamw default / fused AdamW, GPT-2 small",
        1.35,
        "max",
        _ratio(SMALL, "mars-adamw-default", "adamw-fused"),
    ),
    (
        "mars-adamw default / fused AdamW, GPT-2 large",
        1.30,
        "max",
        _ratio(LARGE, "mars-adamw-default", "adamw-fused"),
    ),
    (
        "CUDA graph mars-adamw / adamw, GPT-2 small",
        1.30,
        "max",
        _ratio(SMALL, "mars-adamw-graph", "adamw-fused-graph"),
    ),
    (
        "CUDA graph mars-adamw / adamw, GPT-2 large",
        1.30,
        "max",
        _ratio(LARGE, "mars-adamw-graph", "adamw-fused-graph"),
    ),
    (
        "Newton-Schulz of GPT-2 large's hidden matrices (ms)",
        32.0,
        "max",
        lambda r: float(r[LARGE]["newton_schulz_ms"]),
    ),
    (
        "the same with ns_products='triangle' (GPT-2 large, ms)",
        32.0,
        "max",
        lambda r: float(r[LARGE]["newton_schulz_triangle_ms"]),
    ),
    (
        "mars-shampoo default / torch Muon, GPT-2 large",
        0.55,
        "max",
        _ratio(LARGE, "mars-shampoo-default", "muon"),
    ),
    (
        "mars-shampoo ns_products='triangle' / torch Muon, GPT-2 large",
        0.55,
        "max",
        _ratio(LARGE, "mars-shampoo-triangle", "muon"),
    ),
    (
        "mars-shampoo default / fused AdamW, GPT-2 small",
        3.0,
        "max",
        _ratio(SMALL, "mars-shampoo-default", "adamw-fused"),
    ),
    (
        "mars-lion-fused-one-buffer ops per step",
        20,
        "max",
        lambda r: _row(r, SMALL, "mars-lion-fused-one-buffer", "ops_per_step"),
    ),
    (
        "MFU, GPT-2 small compiled, bf16 autocast, AdamW",
        0.45,
        "min",
        lambda r: _row(r, COMPILED, "adamw", "mfu"),
    ),
    (
        "MFU, GPT-2 small compiled, bf16 autocast, MARS-AdamW",
        0.45,
        "min",
        lambda r: _row(r, COMPILED, "mars-adamw", "mfu"),
    ),
)


def target_rows(folder: Path) -> list[list[str]]:
    """One row per target: name, bound, figure, met (yes/no/missing)."""
    results = {path.name: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}
    rows = []
    for name, bound, sense, figure in TARGETS:
        bound_text = f"{'≤' if sense == 'max' else '≥'} {bound:g}"
        try:
            value = figure(results)
        except KeyError:
            rows.append([name, bound_text, "n/a", "missing"])
            continue
        met = value <= bound if sense == "max" else value >= bound
        shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
        rows.append([name, bound_text, shown, "yes" if met else "no"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the folder gpu_bench.sh wrote its JSON to")
    folder = parser.parse_args().folder
    print(markdown_table(["target", "bound", "measured", "met"], target_rows(folder)))


if __name__ == "__main__":
    main()
