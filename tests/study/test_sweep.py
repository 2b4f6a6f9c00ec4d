"""`torch-mars sweep` on tiny budgets: grid parsing and its errors, the selection rule, the two
stages and their outputs, resuming after a `kill -9` without rerunning finished runs, from the
study alone and from a pre-engine archive, parallel jobs matching one process, a diverged point
recorded without stopping the sweep, and run folders the sweep never clobbers (issue #35)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch

from harness_helpers import kill_when_paused, tiny_config, write_synthetic_text
from torch_mars.cli import main
from torch_mars.train.optimizers import OPTIMIZER_NAMES
from torch_mars.train.study.grid import grid_points, parse_grid
from torch_mars.train.study.store import open_storage
from torch_mars.train.study.sweep import (
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


def trials(sweep_dir: Path) -> list[optuna.trial.FrozenTrial]:
    storage = open_storage(f"sqlite:///{sweep_dir / 'study.db'}")
    return optuna.load_study(study_name=sweep_dir.name, storage=storage).get_trials()


def runs_of(sweep_dir: Path) -> dict[str, int]:
    """Each finished run's name and trial number."""
    return {
        f"{t.user_attrs['optimizer']}/{t.user_attrs['point']}-seed{t.user_attrs['seed']}": t.number
        for t in trials(sweep_dir)
        if t.state == optuna.trial.TrialState.COMPLETE
    }


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
    # each run's line counts it against the plan: 2 + 2 points on seed 0, each winner on seed 1
    counted = re.findall(r"^(\d+)/(\d+) runs · ", printed, flags=re.M)
    assert counted == [(str(k), "6") for k in range(1, 7)]
    report = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert len(report["points"]) == 4 and report["search_seeds"] == [0]
    winner = report["winners"]["mars-adamw"]
    expected = ["mars-adamw/lr=0.01_gamma=0-seed0", "mars-adamw/lr=0.01_gamma=0.025-seed0"]
    expected.append(f"mars-adamw/lr=0.01_gamma={winner['gamma']:g}-seed1")
    ran = sorted(name for name in runs_of(tmp_path / "s") if name.startswith("mars-adamw"))
    assert ran == sorted(expected)
    assert list((tmp_path / "s" / "runs").iterdir()) == []  # work folders go
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
    env = kill_when_paused(args, 1)
    finished = runs_of(tmp_path / "k")
    assert len(finished) == 1
    completed = subprocess.run(args, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-2000:]
    after = runs_of(tmp_path / "k")
    assert len(after) == 3 and len(trials(tmp_path / "k")) == 3
    assert all(after[name] == number for name, number in finished.items())
    assert (tmp_path / "k" / "summary.md").is_file()


def test_a_sweep_resumes_and_redraws_from_its_study_alone(tmp_path, corpus_file):
    """A study kept in git has its study file, not its work folders: resuming it trains
    nothing, gives the same table, and draws the winners' curves from the study."""
    grid = {"adamw": {"lr": (1e-3, 3e-3)}, "mars-adamw": {"lr": (1e-2,)}}
    sweep_plan = plan(tmp_path, corpus_file, grid)
    first = run_sweep(sweep_plan)
    assert len(trials(tmp_path / "sweep")) == 5  # three points on seed 0, each winner on seed 1
    curves = first.curves["adamw"]
    assert [row["step"] for row in curves[0]] == [2, 4]
    shutil.rmtree(tmp_path / "sweep" / "runs")
    again = run_sweep(sweep_plan)
    assert len(trials(tmp_path / "sweep")) == 5
    assert [p.finals for p in again.points] == [p.finals for p in first.points]
    assert format_sweep_table(again) == format_sweep_table(first)
    written = write_report(sweep_plan, again)
    assert tmp_path / "sweep" / "winners.png" in written


def test_a_sweep_counts_its_runs_against_its_plan_when_it_opens_and_on_resume(
    tmp_path, corpus_file
):
    """The sweep's bar has its total: ``opened`` gets the runs so far and the runs planned
    (two adamw points and one mars-adamw point on seed 0, each winner on seed 1)."""
    sweep_plan = plan(tmp_path, corpus_file, {"adamw": {"lr": (1e-3, 3e-3)}, "mars-adamw": {}})
    counts: list[tuple[int, int]] = []
    lines: list[str] = []
    run_sweep(sweep_plan, lines.append, lambda done, planned: counts.append((done, planned)))
    run_sweep(sweep_plan, lines.append, lambda done, planned: counts.append((done, planned)))
    assert counts == [(0, 5), (5, 5)]
    assert len(lines) == 5


def test_a_pre_engine_archive_is_taken_into_the_study_and_not_trained_again(tmp_path, corpus_file):
    """Nothing measured is lost: a sweep folder with only a runs.jsonl (the archive of the
    sweeps before the study engine) resumes from it."""
    sweep_plan = plan(tmp_path, corpus_file, {"adamw": {"lr": (1e-3, 3e-3)}}, seeds=(0,))
    first = run_sweep(sweep_plan)
    records = [
        {
            "run": "{optimizer}/{point}-seed{seed}".format(**t.user_attrs),
            "config": {"optimizer": "adamw", **sweep_plan.spec().identity()["budget"]},
            "summary": t.user_attrs["summary"],
            "curve": {"columns": ["step", "val_loss"], "rows": []},
        }
        for t in trials(tmp_path / "sweep")
    ]
    shutil.rmtree(tmp_path / "sweep")
    (tmp_path / "sweep").mkdir()
    archive = tmp_path / "sweep" / "runs.jsonl"
    archive.write_text("".join(json.dumps(r) + "\n" for r in records))
    again = run_sweep(sweep_plan)
    assert [p.finals for p in again.points] == [p.finals for p in first.points]
    assert all("work_dir" not in str(t.system_attrs) for t in trials(tmp_path / "sweep"))


def test_a_sweep_is_not_reused_with_other_settings(tmp_path, corpus_file, capsys):
    """Issue #35: `sweep --name X` again with another budget reused every archived result. The
    refusal runs as a real process."""
    args = ["sweep", *TINY, "--data", str(corpus_file), "--out-dir", str(tmp_path)]
    args += ["--name", "x", "--grid", "adamw:lr=1e-3", "--seeds", "0"]
    assert main(args) == 0
    longer = [a if a != "4" else "6" for a in args]  # --steps 6, --batch-size 6
    refused = subprocess.run(
        [sys.executable, "-m", "torch_mars.cli", *longer], capture_output=True, text=True
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "steps: 4 there, 6 here" in refused.stderr
    assert len(trials(tmp_path / "x")) == 1
    assert main([*longer, "--overwrite"]) == 0
    summary = json.loads((tmp_path / "x" / "sweep.json").read_text())["summaries"][0]
    assert summary["budget"] == 6 * 6 * 16


def test_a_sweep_never_touches_a_run_folder_it_did_not_make(tmp_path, corpus_file):
    """Issue #35: a sweep removed a point's folder before taking its lock, under a `train`
    writing there. A folder in the sweep's tree that another process holds keeps every file,
    and its holder keeps its lock, while a real sweep process runs beside it."""
    foreign = tmp_path / "x" / "runs" / "adamw" / "lr=0.001-seed0"
    foreign.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            "from torch_mars.train.run_record import run_folder_lock\n"
            "with run_folder_lock(Path(sys.argv[1])):\n"
            "    (Path(sys.argv[1]) / 'metrics.jsonl').write_text('{\"step\": 1}\\n')\n"
            "    print('held', flush=True); sys.stdin.readline()",
            str(foreign),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        lock_inode = (foreign / ".lock").stat().st_ino
        args = ["sweep", *TINY, "--data", str(corpus_file), "--out-dir", str(tmp_path)]
        args += ["--name", "x", "--grid", "adamw:lr=1e-3", "--seeds", "0"]
        sweep = subprocess.run(
            [sys.executable, "-m", "torch_mars.cli", *args], capture_output=True, text=True
        )
        assert sweep.returncode == 0, sweep.stderr[-2000:]
        assert sorted(p.name for p in foreign.iterdir()) == [".lock", "metrics.jsonl"]
        assert (foreign / ".lock").stat().st_ino == lock_inode
        assert (foreign / "metrics.jsonl").read_text() == '{"step": 1}\n'
    finally:
        holder.stdin.close()
        holder.wait()


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
    diverged_trial = next(
        t for t in trials(tmp_path / "sweep") if t.user_attrs["point"] == "lr=1e+09"
    )
    assert diverged_trial.user_attrs["final"] is None and diverged_trial.value == math.inf


def test_a_bad_line_in_an_archive_is_one_error_naming_the_file_and_line(
    tmp_path, corpus_file, capsys
):
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "runs.jsonl").write_text('{"run": "adamw/lr=0.001-seed0"}\nnot json\n')
    args = ["sweep", *TINY, "--data", str(corpus_file), "--out-dir", str(tmp_path)]
    args += ["--name", "x", "--grid", "adamw:lr=1e-3", "--seeds", "0"]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{folder / 'runs.jsonl'}:2: not a run record" in error
    assert sorted(p.name for p in folder.iterdir()) == ["runs.jsonl"]  # nothing else made
