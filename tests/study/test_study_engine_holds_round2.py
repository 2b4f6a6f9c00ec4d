"""The study engine holds, round 2 (../shared/repro/study-engine-2/): a report never creates a
study, and a stored value that is no number is one line naming its trial, not a traceback in
every later ``tune``. (The training function's own escapes are in
test_training_function_contained.py.)"""

from __future__ import annotations

import optuna
import pytest
from test_study_engine_holds import TOY

from harness_helpers import toy_tune_plan, write_synthetic_text
from torch_mars.cli import main
from torch_mars.train.study.engine import finished_results, open_study
from torch_mars.train.study.store import open_storage
from torch_mars.train.study.workers import claim


@pytest.fixture
def corpus_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


def test_a_report_on_a_name_with_no_study_creates_nothing(tmp_path, corpus_file, capsys):
    journal = tmp_path / "shared.log"
    args = ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(tmp_path / "o")]
    code = main([*args, "--name", "typo", "--storage", f"journal:{journal}", "--report"])
    assert code == 2
    assert "no study 'typo'" in capsys.readouterr().err
    names = optuna.get_all_study_summaries(open_storage(f"journal:{journal}"))
    assert names == []


def test_a_stored_final_that_is_no_number_is_one_line_naming_the_trial(tmp_path, corpus_file):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    trial = study.ask()
    for key, value in {"optimizer": "adamw", "point": "lr:1", "seed": 0, "data_seed": 0}.items():
        trial.set_user_attr(key, value)
    trial.set_user_attr("final", "abc")
    study.tell(trial, 0.0)
    with pytest.raises(ValueError, match=r"trial 0 of the study stores final 'abc', not a number"):
        finished_results(study.get_trials())


def test_a_journal_that_lost_a_finished_runs_final_line_is_refused_in_one_line(
    tmp_path, corpus_file, capsys
):
    """r09: a COMPLETE run without its ``final`` record was read as diverged; it is a gap in
    the journal, refused naming the trial (a diverged run stores ``final`` None, never
    nothing)."""
    journal = tmp_path / "j.log"
    args = ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(tmp_path / "o")]
    args += ["--name", "s", "--storage", f"journal:{journal}"]
    assert main([*args, "--max-trials", "1"]) == 0
    lines = journal.read_text().splitlines(keepends=True)
    gap = next(i for i, line in enumerate(lines) if '"user_attr":{"final"' in line)
    journal.write_text("".join(lines[:gap] + lines[gap + 1 :]))
    capsys.readouterr()
    assert main([*args, "--report"]) == 2
    err = capsys.readouterr().err
    assert "trial 0 of the study is COMPLETE without its final record" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_worker_runs_only_the_function_its_command_line_names(tmp_path, monkeypatch, capsys):
    """r01: whoever can write a shared storage cannot choose the code its workers import."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "objmod.py").write_text(
        "def ok(make_optimizer, seed, data_seed, report):\n    return 1.0\n"
    )
    (tmp_path / "evilmod.py").write_text(
        "import pathlib\npathlib.Path('PWNED').write_text('imported')\n"
        "def train(make_optimizer, seed, data_seed, report):\n    return 0.0\n"
    )
    storage = ["--storage", f"journal:{tmp_path / 'shared.log'}", "--name", "s", "--out-dir", "o"]
    small = ["--optimizers", "adamw", "--trials", "1", "--seeds", "0", "--heldout-seeds", "1"]
    small += ["--heldout-data-seeds", "1", "--finalists", "0"]
    assert main(["tune", "--objective", "objmod:ok", *small, *storage]) == 0
    study = optuna.load_study(
        study_name="s", storage=open_storage(f"journal:{tmp_path / 'shared.log'}")
    )
    identity = dict(study.user_attrs["identity"])
    identity["budget"] = {**identity["budget"], "objective": "evilmod:train"}
    study.set_user_attr("identity", identity)  # one line appended to the shared journal
    capsys.readouterr()
    assert main(["tune", "--worker", *storage]) == 2
    assert "tunes evilmod:train; this worker names no --objective" in capsys.readouterr().err
    assert main(["tune", "--worker", "--objective", "objmod:ok", *storage]) == 2
    assert not (tmp_path / "PWNED").exists()


def test_links_in_the_study_folder_are_never_followed(tmp_path, corpus_file):
    """r02: a ``runs`` folder that is a link is refused in one line, its target untouched;
    r07: a trial's work folder that is a link is unlinked, its target untouched, and the study
    claims on; a finished trial's leftover folder (a kill after its tell) goes at the next
    claim."""
    plan = toy_tune_plan(tmp_path / "s", corpus_file, ("adamw",), trials=1, study_name="s")
    spec = plan.spec()
    study = open_study(spec)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "trial-0").mkdir(parents=True)
    (elsewhere / "trial-0" / "notes.txt").write_text("precious")
    (tmp_path / "s" / "runs").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="is a link"):
        claim(spec, study, stale_after_s=1e9)
    assert (elsewhere / "trial-0" / "notes.txt").read_text() == "precious"
    (tmp_path / "s" / "runs").unlink()

    held = claim(spec, study, stale_after_s=1e9)
    held.lock.close()
    held.trial.set_user_attr("final", 1.0)
    study.tell(held.trial, 1.0)  # finished, its folder left behind as by a kill
    assert held.work_dir.is_dir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "f").write_text("keep")
    number = held.trial.number + 1
    spec.work_dir(number).symlink_to(target)  # the next trial's folder, a link
    again = claim(spec, study, stale_after_s=1e9)
    again.lock.close()
    assert again.trial.number == number and again.work_dir.is_dir()
    assert not again.work_dir.is_symlink() and (target / "f").read_text() == "keep"
    assert not held.work_dir.exists()


@pytest.mark.parametrize(
    ("case", "gone"),
    [
        ("pid 1 of this host, no heartbeat for 11 minutes", True),
        ("another host, heartbeat stamped 70 years ahead", True),
        ("pid 1 of this host, heartbeat a minute ago", False),
        ("a dead pid of this host in another PID namespace, heartbeat a minute ago", False),
        ("a dead pid of this host in another PID namespace, no heartbeat for 11 minutes", True),
        ("a dead pid of this host and namespace, heartbeat a minute ago", True),
    ],
)
def test_an_owner_record_holds_a_run_only_while_it_beats(tmp_path, corpus_file, case, gone):
    """r03: a record naming a process that never ends, or a heartbeat from the future, holds
    its trial at most ten minutes (the documented limit), not for good. r15: a worker of this
    host in another PID namespace is live while it beats, whatever its pid names here."""
    import socket
    import time

    from torch_mars.train.study.engine import (
        HEARTBEAT_ATTR,
        OWNER_ATTR,
        _boot_id,
        _process_start,
    )

    plan = toy_tune_plan(tmp_path / "s", corpus_file, ("adamw",), trials=1, study_name="s")
    spec = plan.spec()
    study = open_study(spec)
    held = claim(spec, study, stale_after_s=600.0)
    held.lock.close()
    now = time.time()
    if case.startswith("another host"):
        owner, beat = {"host": "elsewhere", "pid": 7, "started": now}, now + 70 * 365 * 86400
    else:
        owner = {"host": socket.gethostname(), "boot": _boot_id(), "pid": 1,
                 "pid_start": _process_start(1), "started": now - 700}  # fmt: skip
        if "dead pid" in case:
            owner["pid"] = 2**22 + 1  # beyond pid_max: no process has it
        if "another PID namespace" in case:
            owner["pid_namespace"] = "pid:[1]"
        beat = now - 660 if "11 minutes" in case else now - 60
    trial_id = held.trial._trial_id
    study._storage.set_trial_system_attr(trial_id, OWNER_ATTR, owner)
    study._storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, beat)
    again = claim(spec, study, stale_after_s=600.0)
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states[held.trial.number] == ("FAIL" if gone else "RUNNING")
    if gone:  # its run is claimed again at once
        assert again.run == held.run
        again.lock.close()


@pytest.mark.parametrize("kind", ["fifo", "device", "foreign sqlite"])
def test_a_storage_that_is_not_a_studys_file_is_one_line(tmp_path, corpus_file, capsys, kind):
    """r04, r05: a FIFO would hang, a device is no file, another application's SQLite database
    would get Optuna's tables: each is refused in one line, nothing written."""
    import os
    import sqlite3

    if kind == "fifo":
        path = tmp_path / "pipe.log"
        os.mkfifo(path)
        storage, says = f"journal:{path}", "is not a regular file"
    elif kind == "device":
        storage, says = "journal:/dev/null", "is not a regular file"
    else:
        path = tmp_path / "app.db"
        with sqlite3.connect(path) as db:
            db.execute("create table customers(name)")
        storage, says = f"sqlite:///{path}", "holds another application's tables (customers)"
    args = ["tune", *TOY, "--data", str(corpus_file), "--out-dir", str(tmp_path / "o")]
    assert main([*args, "--name", "s", "--storage", storage]) == 2
    error = capsys.readouterr().err.strip()
    assert says in error and "\n" not in error and "Traceback" not in error
    if kind == "foreign sqlite":
        with sqlite3.connect(path) as db:
            tables = [r[0] for r in db.execute("select name from sqlite_master")]
        assert tables == ["customers"]
