"""The study engine holds, as the red team's scripts (../shared/repro/study-engine/) tried it:
a kill at a named line of a claim or a tell leaves no run under another's label and no trial
that nobody fails; ``--jobs`` returns when a worker was killed; a worker from another directory
leaves live trials alone; a study handed over from elsewhere cannot make ``tune`` touch a
folder outside its own; nothing live is deleted and a report changes nothing; identity is by
content; storage failures are one line naming the storage. Kills are injected at named calls
(``dying_env``), never raced against a clock."""

from __future__ import annotations

import collections
import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from harness_helpers import dying_env, toy_tune_plan, write_synthetic_text
from torch_mars.cli import main
from torch_mars.train.study.engine import OWNER_ATTR, open_study
from torch_mars.train.study.store import open_storage, storage_url
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.study.workers import claim

TOY = ["--model", "tiny", "--steps", "4", "--batch-size", "4", "--block-size", "16"]
TOY += ["--eval-interval", "2", "--eval-batches", "2", "--optimizers", "adamw", "nadamw"]
TOY += ["--seeds", "0", "--heldout-seeds", "1", "--heldout-data-seeds", "1", "--trials", "2"]
TOY += ["--finalists", "0", "--peer-winners", "off"]
# 2 optimizers x (2 trials + 1 held-out run) on one seed
TOY_RUNS = 6


@pytest.fixture
def corpus_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


def tune_args(corpus_file: Path, out: Path, *extra: str) -> list[str]:
    return ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(out), "--name", "s", *extra]


def cli(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "torch_mars.cli", *args],
        env=env or {**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def trials_of(url: str, name: str = "s") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=open_storage(url)).get_trials()


def assert_every_run_once_under_its_own_label(trials: list[optuna.trial.FrozenTrial]) -> None:
    """Every finished run once; no value under two labels; no trial left waiting or running."""
    done = [t for t in trials if t.state.name == "COMPLETE"]
    runs = collections.Counter(
        tuple(t.user_attrs[k] for k in ("optimizer", "point", "seed", "data_seed")) for t in done
    )
    assert len(runs) == TOY_RUNS and max(runs.values()) == 1, runs
    assert max(collections.Counter(t.value for t in done).values()) == 1
    for t in done:  # each trial's parameters are its own run's
        assert t.params["seed"] == t.user_attrs["seed"]
        assert t.params["optimizer"] == t.user_attrs["optimizer"]
    assert {t.state.name for t in trials} <= {"COMPLETE", "FAIL"}


@pytest.mark.parametrize(
    ("storage", "target", "n", "when"),
    [
        ("sqlite", "optuna.storages:RDBStorage._create_new_trial", 3, "before"),
        ("sqlite", "optuna.storages:RDBStorage._create_new_trial", 3, "after"),
        ("journal", "optuna.storages:JournalStorage.create_new_trial", 2, "after"),
        ("journal", "optuna.study:Study.tell", 2, "before"),
    ],
)
def test_a_kill_inside_a_claim_or_a_tell_leaves_no_run_under_another_label(
    tmp_path, corpus_file, storage, target, n, when
):
    """r1 and r2: killed before or after the one write that claims a run, or at a tell; the
    resumed study ends (no trial waits forever) with every run once, under its own label."""
    extra = ["--storage", f"journal:{tmp_path / 'j.log'}"] if storage == "journal" else []
    args = tune_args(corpus_file, tmp_path, *extra)
    killed = cli(args, env=dying_env(tmp_path / "site", target, n, when))
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert main(args) == 0  # resumed in this process: only the kill needs one of its own
    url = storage_url(extra[1] if extra else None, tmp_path / "s")
    assert_every_run_once_under_its_own_label(trials_of(url))


def test_tune_with_jobs_returns_and_reports_when_a_worker_was_killed(tmp_path, corpus_file):
    """r3: one of two workers dies at its second tell; its trial is trained again and tune
    returns with its report."""
    args = tune_args(corpus_file, tmp_path, "--jobs", "2")
    done = cli(args, env=dying_env(tmp_path / "site", "optuna.study:Study.tell", 2))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "s" / "summary.md").is_file()
    assert "ended abnormally" in done.stderr
    assert_every_run_once_under_its_own_label(trials_of(storage_url(None, tmp_path / "s")))


def toy_plan(tmp_path: Path, corpus_file: Path) -> TunePlan:
    optimizers = ("adamw", "nadamw")
    return toy_tune_plan(tmp_path / "s", corpus_file, optimizers, trials=2, study_name="s")


def test_a_worker_from_another_directory_leaves_a_live_trial_alone(tmp_path, corpus_file):
    """r4: this process holds a trial (it is alive); a worker started elsewhere, with its own
    relative --out-dir, trains another run and leaves that trial running."""
    plan = toy_plan(tmp_path, corpus_file)
    study = open_study(plan.spec())
    held = claim(plan.spec(), study, stale_after_s=1e9)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "o").mkdir(parents=True)
    args = ["tune", "--worker", "--name", "s", "--out-dir", "o", "--max-trials", "1"]
    args += ["--storage", plan.spec().url]
    done = cli(args, cwd=elsewhere)
    assert done.returncode == 0, done.stderr[-2000:]
    states = {t.number: t.state.name for t in trials_of(plan.spec().url)}
    assert states == {held.trial.number: "RUNNING", held.trial.number + 1: "COMPLETE"}
    held.lock.close()


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_a_study_naming_a_folder_outside_its_own_cannot_make_tune_touch_it(
    tmp_path, corpus_file, where
):
    """r5: a study from elsewhere names a folder outside the study as a dead worker's work
    folder (in every attribute a past engine read); tune trains, resumes and reports, and the
    folder keeps every file."""
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "sub" / "file.txt").write_text("precious")
    named = str(victim) if where == "absolute" else "../victim"
    plan = toy_plan(tmp_path, corpus_file)
    study = open_study(plan.spec())
    storage = study._storage
    trial_id = storage.create_new_trial(study._study_id)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], text=True, capture_output=True
    ).stdout.strip()
    owner = {"host": socket.gethostname(), "pid": int(dead), "work_dir": named}
    storage.set_trial_system_attr(trial_id, "torch_mars_worker", {**owner, "started": 0})
    storage.set_trial_system_attr(trial_id, OWNER_ATTR, owner)
    storage.set_trial_user_attr(trial_id, "work_dir", named)
    for args in (tune_args(corpus_file, tmp_path), tune_args(corpus_file, tmp_path, "--report")):
        assert main(args) == 0
    assert (victim / "sub" / "file.txt").read_text() == "precious"
    assert trials_of(plan.spec().url)[0].state.name == "FAIL"


def test_overwrite_refuses_while_a_trial_trains(tmp_path, corpus_file, capsys):
    """r6: the study is not deleted under a live worker; one line says why and the way out
    (round 2, r03: stop the process, or retry once its heartbeat has aged out)."""
    plan = toy_plan(tmp_path, corpus_file)
    held = claim(plan.spec(), open_study(plan.spec()), stale_after_s=1e9)
    longer = tune_args(corpus_file, tmp_path, "--overwrite")
    longer[longer.index("--steps") + 1] = "5"
    assert main(longer) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "training now" in error and "not deleted" in error
    assert re.search(r"stop those processes, or run --overwrite again in (59\d|600) s$", error)
    assert [t.state.name for t in trials_of(plan.spec().url)] == ["RUNNING"]
    held.lock.close()


def test_a_report_never_changes_a_study_whatever_else_the_command_line_says(
    tmp_path, corpus_file, capsys
):
    """r8: --report with --overwrite and another budget, or with another protocol, leaves the
    study's trials and identity as they were."""
    assert main(tune_args(corpus_file, tmp_path)) == 0
    url = storage_url(None, tmp_path / "s")
    before = [(t.number, t.state, t.value) for t in trials_of(url)]
    identity = optuna.load_study(study_name="s", storage=url).user_attrs["identity"]
    other = tune_args(corpus_file, tmp_path, "--report", "--overwrite")
    other[other.index("--steps") + 1] = "5"
    assert main(other) == 2
    assert main(tune_args(corpus_file, tmp_path, "--report", "--trials", "9")) == 0
    assert [(t.number, t.state, t.value) for t in trials_of(url)] == before
    assert optuna.load_study(study_name="s", storage=url).user_attrs["identity"] == identity


def test_two_sweeps_with_different_names_share_one_storage(tmp_path, corpus_file):
    """r7: each sweep's study is named after its --name."""
    storage = f"journal:{tmp_path / 'shared.log'}"
    for name, lr in (("one", "1e-3"), ("two", "2e-3")):
        args = ["sweep", *TOY[:10], "--optimizers", "adamw", "--grid", f"adamw:lr={lr}"]
        args += ["--search-seeds", "0", "--seeds", "0", "--data", str(corpus_file)]
        args += ["--out-dir", str(tmp_path), "--name", name, "--storage", storage]
        assert main(args) == 0
    names = {s.study_name for s in optuna.get_all_study_summaries(open_storage(storage))}
    assert names == {"one", "two"}


def test_the_same_data_under_another_path_or_a_default_written_out_is_the_same_study(
    tmp_path, corpus_file, monkeypatch
):
    """r9: the data is known by content and a default written out is the default (a report
    opens only a study that exists, so each study trains a run first)."""
    assert main(tune_args(corpus_file, tmp_path, "--max-trials", "1")) == 0
    monkeypatch.chdir(corpus_file.parent)
    relative = tune_args(Path("./corpus.txt"), tmp_path, "--report")
    assert main(relative) == 0
    no_block = tune_args(corpus_file, tmp_path / "t", "--max-trials", "1")
    del no_block[no_block.index("--block-size") : no_block.index("--block-size") + 2]
    assert main(no_block) == 0
    assert main([*no_block, "--block-size", "32"]) == 0  # tiny's default, written out
    assert main([*no_block, "--block-size", "16"]) == 2  # another block is another study


def _old_schema(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("update version_info set library_version='0.9.0'")
    connection.execute("update alembic_version set version_num='v0.9.0.a'")
    connection.commit()


@pytest.mark.parametrize(
    "case",
    [
        "garbage study.db",
        "study.db of an old optuna",
        "postgres:// (no such scheme)",
        "redis:// (unknown scheme)",
        "unreachable postgresql",
        "journal with an unknown op code",
        "journal with a damaged line",
        "jounral: (a typo)",
    ],
)
def test_a_storage_failure_is_one_line_naming_the_storage(tmp_path, corpus_file, case, capsys):
    """r10-r12: every one ends in one line naming the storage, no traceback, and a file
    storage is left byte for byte as it was."""
    storage = None
    left_alone: Path | None = None
    if case == "garbage study.db":
        left_alone = tmp_path / "s" / "study.db"
        left_alone.parent.mkdir()
        left_alone.write_bytes(os.urandom(4096))
    elif case == "study.db of an old optuna":
        assert main(tune_args(corpus_file, tmp_path, "--max-trials", "1")) == 0
        left_alone = tmp_path / "s" / "study.db"
        _old_schema(left_alone)
    elif case.startswith("postgres://"):
        storage = "postgres://u@localhost/db"
    elif case.startswith("redis://"):
        storage = "redis://localhost"
    elif case == "unreachable postgresql":
        storage = "postgresql+psycopg2://u@127.0.0.1:1/db"
        pytest.importorskip("psycopg2")
    elif case.startswith("journal"):
        left_alone = tmp_path / "j.log"
        storage = f"journal:{left_alone}"
        assert (
            main(tune_args(corpus_file, tmp_path, "--max-trials", "1", "--storage", storage)) == 0
        )
        line = '{"op_code": 99}\n' if "op code" in case else "not json\n"
        with left_alone.open("a") as journal:
            journal.write(line)
    else:
        storage = f"jounral:{tmp_path / 'j.log'}"
    before = left_alone.read_bytes() if left_alone else None
    capsys.readouterr()
    extra = ["--storage", storage] if storage else []
    assert main(tune_args(corpus_file, tmp_path, "--report", *extra)) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "--storage" in error and "Traceback" not in error, error
    if left_alone is not None:
        assert left_alone.read_bytes() == before
    if case == "journal with a damaged line":
        assert f"{left_alone}: line" in error
    if case.startswith("jounral"):
        assert not (tmp_path / "j.log").exists() and not Path("jounral:").exists()


def test_the_postgresql_url_as_the_docs_write_it_opens(tmp_path, corpus_file, postgres_url):
    """r10: ``postgresql://`` without a driver named takes the installed one."""
    plain = "postgresql://" + postgres_url.split("://", 1)[1]
    assert main(tune_args(corpus_file, tmp_path, "--max-trials", "1", "--storage", plain)) == 0


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--seeds", "0", "0"], "named twice"),
        (["--heldout-seeds", "1", "1"], "named twice"),
        (["--data", ""], "data must name"),
        (["--jobs", "1000"], "--jobs"),
    ],
)
def test_silently_wrong_inputs_are_refused(tmp_path, corpus_file, flags, says, capsys):
    """r13-r14 and --jobs: one line, and no study made."""
    assert main([*tune_args(corpus_file, tmp_path), *flags]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "s" / "study.db").exists()
