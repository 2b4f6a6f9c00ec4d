"""``torch-mars tune`` on a toy budget: a killed study resumes without rerunning a finished
trial and workers share one study without a duplicated trial (in a SQLite or journal file, and
on a PostgreSQL server the test starts), and a study is never reused with other settings."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch

from harness_helpers import kill_when_paused, toy_tune_plan, write_synthetic_text
from torch_mars.cli import main
from torch_mars.train.runtime import describe_device
from torch_mars.train.study import outcomes, report_text, run, tune
from torch_mars.train.study.engine import finished_results, open_study, study_storage
from torch_mars.train.study.store import open_storage
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.study.workers import claim, work

TOY = ["--model", "tiny", "--steps", "4", "--batch-size", "4", "--block-size", "16"]
TOY += ["--eval-interval", "2", "--eval-batches", "2", "--optimizers", "adamw"]
TOY += ["--seeds", "0", "--heldout-seeds", "1", "--heldout-data-seeds", "1", "--trials", "3"]
TOY += ["--finalists", "0"]


@pytest.fixture
def corpus_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


def toy_plan(tmp_path: Path, corpus_file: Path, **changes) -> TunePlan:
    plan = toy_tune_plan(tmp_path / "toy", corpus_file, ("adamw",), trials=3)
    return dataclasses.replace(plan, **changes)


def trials_of(plan: TunePlan) -> list[optuna.trial.FrozenTrial]:
    storage = open_storage(plan.spec().url)
    return optuna.load_study(study_name=plan.study_name, storage=storage).get_trials()


def assert_each_run_once(trials: list[optuna.trial.FrozenTrial]) -> None:
    runs = collections.Counter(
        tuple(t.user_attrs[k] for k in ("optimizer", "point", "seed", "data_seed")) for t in trials
    )
    assert runs and max(runs.values()) == 1, runs.most_common(3)
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}


@pytest.mark.parametrize("storage", ["sqlite", "postgresql"])
def test_a_killed_tune_resumes_without_rerunning_a_finished_trial(
    tmp_path, corpus_file, storage, request
):
    """Killed where the test stops it (paused after its third finished trial), not at a moment
    guessed by polling; in the default SQLite file under the run folder, and on a PostgreSQL
    server the test starts."""
    url = request.getfixturevalue("postgres_url") if storage == "postgresql" else None
    args = [sys.executable, "-m", "torch_mars.cli", "tune", *TOY, "--data", str(corpus_file)]
    args += ["--out-dir", str(tmp_path), "--name", "k"]
    args += ["--storage", url] if url else []
    env = kill_when_paused(args, 3)
    plan = toy_plan(tmp_path, corpus_file, study_dir=tmp_path / "k", study_name="k", storage=url)
    before = {t.number: (t.user_attrs["point"], t.value) for t in trials_of(plan)}
    assert len(before) == 3
    completed = subprocess.run(args, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-2000:]
    after = trials_of(plan)
    assert_each_run_once(after)
    assert len(after) > 3
    assert {t.number: (t.user_attrs["point"], t.value) for t in after[:3]} == before
    summary = (tmp_path / "k" / "summary.md").read_text()
    assert "| adamw |" in summary
    # every run says where it trained: a run's floats depend on its device's kernels
    device = describe_device(torch.device("cpu"))
    assert f"Trained on: {device} ({len(after)} runs, " in summary
    threads = env["OMP_NUM_THREADS"]  # what the study's process was given, not this one's
    assert f"h of run time, {threads} thread(s) per run)." in summary


def test_a_dead_local_workers_trial_is_failed_and_its_run_trained_again(tmp_path, corpus_file):
    """A RUNNING trial whose owner process is gone has lost its worker: the next worker fails
    it and trains the run anew. The owner is made a child of this test that has exited."""
    plan = toy_plan(tmp_path, corpus_file)
    study = open_study(plan.spec())
    claimed = claim(plan.spec(), study, stale_after_s=1e9)
    claimed.lock.close()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    (frozen,) = study.get_trials()
    owner = {**frozen.system_attrs["torch_mars_owner"], "pid": child.pid}
    study._storage.set_trial_system_attr(frozen._trial_id, "torch_mars_owner", owner)
    assert work(plan.spec(), max_trials=1) == 1
    trials = trials_of(plan)
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert finished_results(trials) == {claimed.run: trials[1].user_attrs["final"]}
    assert not claimed.work_dir.exists()


def _start_workers(plan: TunePlan, count: int) -> list[subprocess.Popen]:
    args = [sys.executable, "-m", "torch_mars.cli", "tune", "--worker", "--name", plan.study_name]
    args += ["--out-dir", str(plan.study_dir.parent), "--storage", plan.storage]
    args += ["--max-trials", "6"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return [
        subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]


def _two_workers_share_one_study(plan: TunePlan) -> None:
    """11 trials on one seed and one held-out run: 12 runs, 6 for each worker."""
    open_study(plan.spec())
    workers = _start_workers(plan, 2)
    for process in workers:
        out, err = process.communicate()
        assert process.returncode == 0, (out + err)[-2000:]
        assert "6 runs trained here" in out
    trials = trials_of(plan)
    assert len(trials) == 12
    assert_each_run_once(trials)


def test_two_workers_share_one_journal_study_without_a_duplicated_trial(tmp_path, corpus_file):
    storage = f"journal:{tmp_path / 'shared' / 'study.log'}"
    _two_workers_share_one_study(toy_plan(tmp_path, corpus_file, storage=storage, trials=11))


def test_two_workers_share_one_postgresql_study_without_a_duplicated_trial(
    tmp_path, corpus_file, postgres_url
):
    _two_workers_share_one_study(toy_plan(tmp_path, corpus_file, storage=postgres_url, trials=11))


def test_a_study_is_not_reused_with_other_settings(tmp_path, corpus_file, capsys):
    """Issue #35's stale sweep, for the new engine: another budget is another study."""
    args = ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(tmp_path), "--name", "s"]
    assert main([*args, "--max-trials", "1"]) == 0
    capsys.readouterr()
    longer = [a if a != "4" else "5" for a in args]  # --steps 5 and --batch-size 5
    assert main([*longer, "--report"]) == 2
    error = capsys.readouterr().err.strip()
    assert (
        error.count("\n") == 0 and "other settings" in error and "steps: 4 there, 5 here" in error
    )
    assert main([*longer, "--report", "--overwrite"]) == 2  # a report never deletes
    assert main([*longer, "--trials", "1", "--overwrite"]) == 0


def test_a_study_takes_a_new_protocol_and_keeps_its_runs(tmp_path, corpus_file):
    """Trials, seeds and optimizers choose runs without changing any: a study reopened with
    others takes them on, keeps the old ones in its history, and a report alone changes
    nothing."""
    plan = toy_plan(tmp_path, corpus_file)
    study = open_study(plan.spec())
    run = {"optimizer": "adamw", "point": "lr:0", "seed": 0, "data_seed": 0, "final": 2.5}
    study.enqueue_trial({}, user_attrs=run)
    study.tell(study.ask(), 2.5)
    more = dataclasses.replace(plan, trials=5, optimizers=("adamw", "nadamw"))
    open_study(more.spec(), read_only=True)
    assert (
        optuna.load_study(study_name="tune", storage=plan.spec().url).user_attrs["identity"]
        == plan.spec().identity()
    )
    reopened = open_study(more.spec())
    assert reopened.user_attrs["identity"] == more.spec().identity()
    (past,) = reopened.user_attrs["protocol_history"]
    assert past["protocol"]["trials"] == 3 and past["protocol"]["optimizers"] == ["adamw"]
    assert finished_results(reopened.get_trials()) == {("adamw", "lr:0", 0, 0): 2.5}


def test_a_report_reads_any_protocol_the_study_ran_under(tmp_path, corpus_file, capsys):
    """A study extended from 2 to 3 trials reports either budget on demand, changing nothing;
    a protocol it never ran under reports its current one and says so."""
    args = ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(tmp_path), "--name", "x"]

    def with_trials(n: int) -> list[str]:
        at = args.index("--trials") + 1
        return [*args[:at], str(n), *args[at + 1 :]]

    shorter = with_trials(2)
    assert main(shorter) == 0
    plan = toy_plan(tmp_path, corpus_file, study_dir=tmp_path / "x", study_name="x")
    trained_at_2 = len(trials_of(plan))
    assert main(args) == 0
    stored = trials_of(plan)
    assert len(stored) > trained_at_2

    def reported_trials(command: list[str]) -> int:
        capsys.readouterr()
        assert main([*command, "--report"]) == 0
        report = json.loads((tmp_path / "x" / "tune.json").read_text())
        (adamw,) = report["optimizers"]
        return adamw["trials"]

    assert reported_trials(shorter) == 2 and "never ran" not in capsys.readouterr().err
    # its cost is the runs that budget read, not the study's
    (cost,) = json.loads((tmp_path / "x" / "tune.json").read_text())["cost"].values()
    assert cost["runs"] == trained_at_2
    assert reported_trials(args) == 3
    assert reported_trials(with_trials(7)) == 3
    assert "never ran under this command line's protocol" in capsys.readouterr().err
    assert [t.number for t in trials_of(plan)] == [t.number for t in stored]
    reopened = open_study(plan.spec(), read_only=True)
    assert reopened.user_attrs["identity"]["search"]["trials"] == 3


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", ""])
def test_a_study_name_that_is_a_path_is_refused(tmp_path, name, capsys):
    assert main(["tune", "--name", name, "--out-dir", str(tmp_path), "--report"]) == 2
    assert "is not a name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_worker_takes_its_settings_from_the_study_and_refuses_others(tmp_path, capsys):
    args = ["tune", "--worker", "--out-dir", str(tmp_path), "--name", "w", "--steps", "5"]
    assert main(args) == 2
    assert "--worker takes its settings from the study; drop --steps" in capsys.readouterr().err
    assert main(["tune", "--worker", "--out-dir", str(tmp_path), "--name", "w"]) == 2
    assert "w/study.db: no such file" in capsys.readouterr().err


def test_the_report_tells_an_unbegun_optimizer_from_an_unfinished_one(tmp_path, corpus_file):
    plan = toy_plan(tmp_path, corpus_file)
    (unbegun,) = outcomes.outcomes(plan, [])
    assert unbegun.trial_scores == [] and not unbegun.finished
    assert "| adamw (not started) |" in report_text.format_tune_table(plan, [unbegun])
    begun = dataclasses.replace(unbegun, trial_scores=[2.0])
    assert "| adamw (unfinished) |" in report_text.format_tune_table(plan, [begun])


def test_a_study_keeps_the_starts_it_began_with_when_the_defaults_move(
    tmp_path, corpus_file, monkeypatch
):
    """compare's defaults become a map's winners; a study begun before must resume, report
    and serve workers from the starts it began with, or its replay leaves its own runs."""
    plan = toy_plan(tmp_path, corpus_file)
    began = plan.starts_of("adamw")
    open_study(plan.spec())

    def resumed(plan: TunePlan) -> TunePlan:
        return run.resumed_plan(plan, study_storage(plan.spec().url, plan.study_name))

    moved = {**began[0], "lr": began[0]["lr"] + 3}
    monkeypatch.setattr(tune, "start_point", lambda optimizer, model: dict(moved))
    assert plan.starts_of("adamw") == (moved,)
    assert resumed(plan).starts_of("adamw") == began
    stored = open_study(plan.spec(), read_only=True).user_attrs["identity"]
    rebuilt = tune.plan_of_identity(stored, plan.study_dir, plan.storage, plan.study_name)
    assert rebuilt.starts_of("adamw") == began
    # a protocol without adamw drops its starts from the identity; taken up again, adamw
    # resumes from the starts it began with (kept in the protocol history), for a run, a
    # worker and a report alike
    open_study(dataclasses.replace(plan, optimizers=("nadamw",)).spec())
    assert resumed(plan).starts_of("adamw") == began
    reopened = open_study(plan.spec(), read_only=True)
    assert "adamw" not in reopened.user_attrs["identity"]["search"]["starts"]
    rebuilt = tune.plan_of_study(reopened, plan.study_dir, plan.storage, plan.study_name)
    assert rebuilt.starts_of("adamw") == began  # what a worker and a report read
    assert rebuilt.starts_of("nadamw") == resumed(plan).starts_of("nadamw")
    # a new study (or one overwritten) starts from the defaults as they are now
    fresh = dataclasses.replace(plan, study_name="new")
    assert resumed(fresh).starts_of("adamw") == (moved,)
    overwritten = dataclasses.replace(plan, overwrite=True)
    assert resumed(overwritten).starts_of("adamw") == (moved,)


def test_finalists_given_to_a_finished_study_train_only_their_own_runs(tmp_path, corpus_file):
    """Finalists are protocol: a finished study reopened with them keeps every run, trains
    each finalist on the final seed (and the held-out runs of a new winner), and its report
    lists them."""
    args = ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(tmp_path), "--name", "f"]
    assert main(args) == 0
    plan = toy_plan(tmp_path, corpus_file, study_dir=tmp_path / "f", study_name="f")
    before = {t.number: t.user_attrs["point"] for t in trials_of(plan)}
    assert main([*args, "--finalists", "2", "--final-seeds", "7"]) == 0
    after = trials_of(plan)
    assert_each_run_once(after)
    assert {t.number: t.user_attrs["point"] for t in after[: len(before)]} == before
    new = [(t.user_attrs["seed"], t.user_attrs["data_seed"]) for t in after[len(before) :]]
    assert new[:2] == [(7, 0), (7, 0)] and set(new[2:]) <= {(1, 1)}
    report = json.loads((tmp_path / "f" / "tune.json").read_text())
    (adamw,) = report["optimizers"]
    assert len(adamw["finalists"]) == 2 and len(adamw["selection_finals"]) == 2
    assert adamw["winner"] == adamw["finalists"][0]["point"]
    assert "re-read on seeds 7" in (tmp_path / "f" / "summary.md").read_text()


def test_each_runs_line_counts_it_against_the_studys_planned_runs(tmp_path, corpus_file, capsys):
    """3 trials on seed 0 and the winner's held-out run: 4 planned, and a resumed study counts
    on from the runs it holds."""
    args = ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(tmp_path), "--name", "c"]
    assert main([*args, "--max-trials", "2"]) == 0
    first = re.findall(r"^(\d+)/(\d+) runs · adamw ", capsys.readouterr().out, flags=re.M)
    assert main(args) == 0
    rest = re.findall(r"^(\d+)/(\d+) runs · adamw ", capsys.readouterr().out, flags=re.M)
    assert first + rest == [(str(k), "4") for k in range(1, 5)]


@pytest.mark.parametrize("asked", [True, False])
def test_worker_processes_print_their_runs_only_when_progress_is_asked(
    tmp_path, corpus_file, capfd, asked
):
    """Two worker processes, 2 trials of one optimizer and its held-out run: a line per run,
    counted against the 3 planned runs, or none."""
    from torch_mars.train.study.workers import run_workers

    spec = toy_plan(tmp_path, corpus_file, trials=2, jobs=2).spec()
    open_study(spec)
    capfd.readouterr()
    assert run_workers(spec, (lambda line: None) if asked else None) == 3
    printed = capfd.readouterr().out
    counted = sorted(re.findall(r"^\[worker \d\] (\d)/3 runs · adamw ", printed, flags=re.M))
    if asked:  # two workers that finish together may both count the later total
        assert len(counted) == 3 and set(counted) <= {"1", "2", "3"} and counted[-1] == "3"
    else:
        assert "[worker" not in printed


def test_a_run_records_its_cost_and_the_report_sums_it(tmp_path, corpus_file):
    """A run the engine trains records its cost (CPU seconds on a CPU): the report's hours are
    their sum, not the runs' wall times."""
    from torch_mars.train.study.engine import RUN_COST_ATTR

    plan = toy_plan(tmp_path, corpus_file)
    open_study(plan.spec())
    assert work(plan.spec(), max_trials=1) == 1
    (trial,) = trials_of(plan)
    cost = trial.user_attrs[RUN_COST_ATTR]
    assert isinstance(cost, float) and cost > 0
    (device,) = outcomes.run_cost([trial]).values()
    assert device["hours"] == pytest.approx(cost / 3600)


def test_a_runs_cost_is_what_it_recorded_and_its_wall_time_where_it_recorded_none():
    """A run paused for an hour that recorded 30 s of work costs 30 s; a run from before costs
    were recorded costs its claim-to-result wall time."""
    import datetime

    from torch_mars.train.study.engine import RUN_COST_ATTR

    def run(**user_attrs):
        trial = optuna.trial.create_trial(value=1.0, user_attrs=user_attrs)
        trial.datetime_start = datetime.datetime(2026, 11, 29, 12)
        trial.datetime_complete = trial.datetime_start + datetime.timedelta(hours=1)
        return trial

    recorded, older = run(**{RUN_COST_ATTR: 30.0}), run()
    assert outcomes.run_seconds(recorded) == 30.0
    assert outcomes.run_seconds(older) == 3600.0
    (device,) = outcomes.run_cost([recorded, older]).values()
    assert device["hours"] == pytest.approx(1 + 30 / 3600)


def test_the_cost_line_says_where_threads_were_not_recorded():
    from torch_mars.train.study.engine import OWNER_ATTR

    def run(threads):
        owner = {"device": "cpu-x"} | ({} if threads is None else {"threads": threads})
        return optuna.trial.create_trial(value=1.0, system_attrs={OWNER_ATTR: owner})

    assert report_text.devices_note([run(1), run(None)]).endswith(
        "(2 runs, 0.00 h of run time, 1 thread(s) per run where recorded)"
    )
    assert report_text.devices_note([run(None)]).endswith("threads per run not recorded)")
    assert report_text.devices_note([run(1), run(2)]).endswith("1/2 thread(s) per run)")
    assert report_text.devices_note([]) == "no runs"
