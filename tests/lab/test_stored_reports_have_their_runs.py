"""A stored report can be re-read from a clean checkout: each held-out final a tracked tune.json
reports is a run of the tracked journal it was read from (the study's own snapshot, or the
nearest folder above it that holds one: an extended study's earlier-budget report), the same
seed, data order and value. A report written from a live journal newer than its snapshot, which
a fresh checkout loses, fails here."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from benchmark_scripts import tracked
from torch_mars.train.study.store import run_of, stored_study

ROOT = Path(__file__).resolve().parents[2]


def snapshot_of(report: Path, journals: set[str]) -> Path | None:
    """The tracked journal snapshot ``report`` (a tune.json's path) was read from."""
    for folder in report.parents:
        if str(folder / "study.log.gz") in journals:
            return folder / "study.log.gz"
    return None


def finals_by_run(snapshot: Path, tmp_path: Path) -> dict[tuple[str, int, int], list[float | None]]:
    """Each run's final loss in ``snapshot`` (its optimizer, seed and data order), read from a
    copy that holds the snapshot only (a live journal beside it would be read first)."""
    copy = tmp_path / snapshot.parent.name
    copy.mkdir(parents=True)
    shutil.copyfile(snapshot, copy / "study.log.gz")
    trials, _, _ = stored_study(copy)
    runs: dict[tuple[str, int, int], list[float | None]] = {}
    for trial in trials:
        run = run_of(trial)
        if run is not None:
            runs.setdefault((run[0], run[2], run[3]), []).append(trial.value)
    return runs


def reported(value: float | None, stored: list[float | None]) -> bool:
    if value is None or not math.isfinite(value):
        return any(v is None or not math.isfinite(v) for v in stored)
    return any(v is not None and abs(v - value) < 1e-6 for v in stored)


def test_each_stored_reports_held_out_finals_are_runs_of_its_tracked_journal(tmp_path):
    files = tracked("benchmarks/results")
    journals = {path for path in files if path.endswith("study.log.gz")}
    reports = [Path(path) for path in files if path.endswith("/tune.json")]
    missing: list[str] = []
    checked = 0
    for number, report in enumerate(reports):
        record = json.loads((ROOT / report).read_text())
        entries = [e for e in record.get("optimizers", []) if e.get("heldout_pairs")]
        if not entries:
            continue
        snapshot = snapshot_of(report, journals)
        if snapshot is None:
            missing.append(f"{report}: no tracked journal in its folder or above it")
            continue
        runs = finals_by_run(ROOT / snapshot, tmp_path / str(number))
        for entry in entries:
            for (seed, order), final in zip(
                entry["heldout_pairs"], entry["heldout_finals"], strict=False
            ):
                checked += 1
                if not reported(final, runs.get((entry["optimizer"], seed, order), [])):
                    missing.append(f"{report}: {entry['optimizer']} seed {seed} data {order}")
    if not checked:
        pytest.skip("no stored report with held-out pairs")
    assert not missing, f"{len(missing)} reported finals not in their journal: {missing[:5]}"
