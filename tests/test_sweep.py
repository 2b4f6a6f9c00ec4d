"""`torch-mars sweep` on tiny budgets: grid parsing and its errors, the selection rule, the two
stages and their outputs, resuming after a `kill -9` without rerunning finished runs, parallel
jobs matching one process, and a diverged point recorded without stopping the sweep."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness_helpers import tiny_config, write_synthetic_text
from torch_mars.cli import main
from torch_mars.train.grid import grid_points, parse_grid
from torch_mars.train.optimizers import OPTIMIZER_NAMES
from torch_mars.train.run_archive import ARCHIVE_FILE, read_archive
from torch_mars.train.sweep import (
    PAUSE_AFTER_VARIABLE,
    PointResult,
    SweepPlan,
    format_sweep_table,
    run_sweep,
    select_best,
    validate_plan,
    write_report,
)

TINY = ["--model", "tiny", "--steps", "4", "--batch-size", "4", "--block-size", "16"]
TINY += ["--eval-interval", "2", "--eval-batches", "2"]


@pytest.fixture
def corpus_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


def plan(tmp_path: Path, corpus_file: Path, grid, jobs: int = 1, **changes) -> SweepPlan:
    base = tiny_config(tmp_path / "unused", data=str(corpus_file), steps=4, eval_interval=2)
    return SweepPlan(
        base=base,
        grid=grid,
        search_seeds=changes.pop("search_seeds", (0,)),
        seeds=changes.pop("seeds", (0, 1)),
        sweep_dir=tmp_path / "sweep",
        jobs=jobs,
    )


def test_grids_parse_tuples_and_expand_to_their_product():
    grid = parse_grid(
        ["mars-adamw:lr=3e-3,4e-3", "mars-adamw:betas=(0.9,0.95),(0.95,0.99)", "adamw:lr=1e-3"],
        OPTIMIZER_NAMES,
    )
    assert grid["mars-adamw"]["betas"] == ((0.9, 0.95), (0.95, 0.99))
    points = grid_points(grid["mars-adamw"])
    assert len(points) == 4 and points[1] == {"lr": 3e-3, "betas": (0.95, 0.99)}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("mars-adamw lr=1e-3", "expected OPTIMIZER:KEY=V1,V2,..."),
        ("mars-adamw:lr", "expected OPTIMIZER:KEY=V1,V2,..."),
        ("sgd:lr=1e-3", "unknown optimizer 'sgd'"),
        ("adamw:lr=1e-3,", "empty value"),
        ("adamw:betas=(0.9,0.95", "unbalanced '('"),
        ("adamw:betas=0.9,0.95)", "unbalanced ')'"),
        ("adamw:betas=()", "empty tuple"),
        ("adamw:lr=1e-3,1e-3", "a value is repeated"),
    ],
)
def test_bad_grids_are_value_errors_naming_the_spec(spec, message):
    with pytest.raises(ValueError) as raised:
        parse_grid([spec], OPTIMIZER_NAMES)
    assert str(raised.value).startswith(f"--grid {spec!r}") and message in str(raised.value)


def test_a_repeated_axis_and_bad_points_are_refused_before_anything_trains(tmp_path, corpus_file):
    with pytest.raises(ValueError, match="adamw:lr is given twice"):
        parse_grid(["adamw:lr=1e-3", "adamw:lr=2e-3"], OPTIMIZER_NAMES)
    unknown = plan(tmp_path, corpus_file, {"mars-adamw": {"rho": (1,)}})
    with pytest.raises(ValueError, match=r"mars-adamw:rho=1: unknown hyperparameters"):
        validate_plan(unknown)
    out_of_range = plan(tmp_path, corpus_file, {"mars-adamw": {"betas": ((1.5, 0.9),)}})
    with pytest.raises(ValueError, match=r"betas\[0\] must be in \[0, 1\)"):
        validate_plan(out_of_range)
    assert not (tmp_path / "sweep").exists()


def test_selection_takes_the_best_mean_and_treats_divergence_as_worst():
    points = [
        PointResult("adamw", {"lr": 1}, {0: 2.0, 1: 2.2}),
        PointResult("adamw", {"lr": 2}, {0: math.nan, 1: 1.0}),
        PointResult("adamw", {"lr": 3}, {0: 2.1, 1: 2.1}),
        PointResult("adamw", {"lr": 4}, {0: 1.95, 1: 2.35}),
    ]
    assert select_best(points, [0, 1], lower_is_better=True).hyperparams == {"lr": 1}
    assert select_best(points, [0], lower_is_better=False).hyperparams == {"lr": 3}
    assert select_best(points[1:2], [0], lower_is_better=True).hyperparams == {"lr": 2}


def test_the_cli_sweeps_two_stages_and_writes_table_json_and_figures(tmp_path, corpus_file, capsys):
    args = ["sweep", *TINY, "--data", str(corpus_file), "--out-dir", str(tmp_path)]
    args += ["--name", "s", "--grid", "adamw:lr=1e-3,3e-3", "--grid", "mars-adamw:lr=1e-2"]
    args += ["--grid", "mars-adamw:gamma=0,0.025", "--seeds", "0", "1"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert (
        "| optimizer | best point | seeds | final val loss | vs adamw | seeds 1 only |" in printed
    )
    report = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert len(report["points"]) == 4 and report["search_seeds"] == [0]
    winner = report["winners"]["mars-adamw"]
    runs = tmp_path / "s" / "runs" / "mars-adamw"
    expected = ["lr=0.01_gamma=0-seed0", "lr=0.01_gamma=0.025-seed0"]
    expected.append(f"lr=0.01_gamma={winner['gamma']:g}-seed1")
    assert sorted(p.name for p in runs.iterdir()) == sorted(expected)
    for name in ("summary.md", "lr.png", "winners.png"):
        assert (tmp_path / "s" / name).stat().st_size > 0
    summaries = {s["optimizer"]: s for s in report["summaries"]}
    assert summaries["adamw"]["seeds"] == [0, 1] and summaries["adamw"]["final_std"] > 0


def test_a_killed_sweep_resumes_without_rerunning_finished_runs(tmp_path, corpus_file):
    """The sweep is killed where the test stops it (paused after its first finished run), not
    at a moment guessed by polling: exactly one run is done, and the resume trains only the
    other two."""
    args = [sys.executable, "-m", "torch_mars.cli", "sweep", *TINY, "--data", str(corpus_file)]
    args += ["--out-dir", str(tmp_path), "--name", "k", "--grid", "adamw:lr=1e-3,2e-3,3e-3"]
    args += ["--seeds", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", PAUSE_AFTER_VARIABLE: "1"}
    process = subprocess.Popen(
        args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    said = []
    for line in process.stderr:
        said.append(line)
        if "sweep paused after 1 finished runs" in line:
            break
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert "sweep paused after 1 finished runs" in said[-1], "".join(said)[-2000:]
    archive = tmp_path / "k" / ARCHIVE_FILE
    assert len(read_archive(archive)) == 1
    runs = tmp_path / "k" / "runs" / "adamw"
    finished = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/summary.json")}
    assert len(finished) == 1
    env.pop(PAUSE_AFTER_VARIABLE)
    completed = subprocess.run(args, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-2000:]
    after = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/summary.json")}
    assert len(after) == 3 and len(read_archive(archive)) == 3
    assert all(after[name] == mtime for name, mtime in finished.items())
    assert (tmp_path / "k" / "summary.md").is_file()


def test_a_sweep_resumes_and_redraws_from_its_archive_alone(tmp_path, corpus_file):
    """A study kept in git has its archive, not its run folders: resuming it trains nothing,
    gives the same table, and draws the winners' curves from the archive."""
    grid = {"adamw": {"lr": (1e-3, 3e-3)}, "mars-adamw": {"lr": (1e-2,)}}
    sweep_plan = plan(tmp_path, corpus_file, grid)
    first = run_sweep(sweep_plan)
    archive = tmp_path / "sweep" / ARCHIVE_FILE
    lines = archive.read_text().splitlines()
    assert len(lines) == 5  # three search points on seed 0, then each winner on seed 1
    record = json.loads(lines[0])
    assert record["config"]["optimizer"] == record["summary"]["optimizer"]
    assert record["curve"]["columns"] == ["step", "tokens", "time_s", "train_loss", "val_loss"]
    assert [row[0] for row in record["curve"]["rows"]] == [2, 4]
    shutil.rmtree(tmp_path / "sweep" / "runs")
    again = run_sweep(sweep_plan)
    assert not (tmp_path / "sweep" / "runs").exists()
    assert archive.read_text().splitlines() == lines
    assert [p.finals for p in again.points] == [p.finals for p in first.points]
    assert format_sweep_table(again) == format_sweep_table(first)
    written = write_report(sweep_plan, again)
    assert tmp_path / "sweep" / "winners.png" in written


def test_an_archive_line_cut_short_by_a_kill_is_ignored_and_its_run_trained_again(
    tmp_path, corpus_file
):
    sweep_plan = plan(tmp_path, corpus_file, {"adamw": {"lr": (1e-3, 3e-3)}}, seeds=(0,))
    run_sweep(sweep_plan)
    archive = tmp_path / "sweep" / ARCHIVE_FILE
    first, second = archive.read_text().splitlines()
    archive.write_text(first + "\n" + second[: len(second) // 2])
    shutil.rmtree(tmp_path / "sweep" / "runs")
    report = run_sweep(sweep_plan)
    assert sorted(read_archive(archive)) == ["adamw/lr=0.001-seed0", "adamw/lr=0.003-seed0"]
    assert (tmp_path / "sweep" / "runs" / "adamw" / "lr=0.003-seed0" / "summary.json").is_file()
    assert not (tmp_path / "sweep" / "runs" / "adamw" / "lr=0.001-seed0").exists()
    assert all(not math.isnan(p.finals[0]) for p in report.points)


def test_parallel_jobs_match_one_process(tmp_path, corpus_file):
    """Each of two workers gets one of the two cores: with one thread here too, the runs match
    to round-off (with two threads here, the reduction order, and the losses, may differ)."""
    grid = {"adamw": {"lr": (1e-3, 3e-3)}, "mars-adamw": {"lr": (1e-2,)}}
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    try:
        one = run_sweep(plan(tmp_path / "one", corpus_file, grid, jobs=1, seeds=(0,)))
    finally:
        torch.set_num_threads(threads)
    two = run_sweep(plan(tmp_path / "two", corpus_file, grid, jobs=2, seeds=(0,)))
    for a, b in zip(one.points, two.points, strict=True):
        assert a.hyperparams == b.hyperparams
        assert a.finals[0] == pytest.approx(b.finals[0], abs=1e-5)


def test_a_diverged_point_is_recorded_and_never_wins(tmp_path, corpus_file):
    grid = {"adamw": {"lr": (1e-3, 1e9)}}
    report = run_sweep(plan(tmp_path, corpus_file, grid, seeds=(0,)))
    diverged = next(p for p in report.points if p.hyperparams["lr"] == 1e9)
    assert math.isnan(diverged.finals[0])
    assert report.winners["adamw"].hyperparams == {"lr": 1e-3}
    log = (tmp_path / "sweep" / "runs" / "adamw" / "lr=1e+09-seed0" / "log.txt").read_text()
    assert "diverged" in log
