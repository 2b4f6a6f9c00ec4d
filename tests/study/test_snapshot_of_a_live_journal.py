"""A study lands mid-way and resumes elsewhere: the snapshot of a journal that a worker is
appending to holds only whole records, so the checkout that restores it can go on writing."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import optuna

from torch_mars.train.study.store import open_storage, restore_journals, snapshot_journals

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study_with_trials(live: Path, finished: int) -> None:
    storage = open_storage(f"journal:{live}")
    study = optuna.create_study(study_name="s", storage=storage)
    for value in range(finished):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": float(value)},
                distributions={"x": optuna.distributions.FloatDistribution(0, 10)},
                value=float(value),
            )
        )


def test_a_torn_last_record_is_left_out_of_the_snapshot_and_the_restored_study_goes_on(
    tmp_path,
):
    live = tmp_path / "here" / "p" / "study.log"
    live.parent.mkdir(parents=True)
    _study_with_trials(live, finished=3)
    whole = live.read_bytes()
    with live.open("ab") as journal:  # a worker caught half-way through a record
        journal.write(b'{"op_code": 4, "worker_id": "w", "study_id": 0')
    snapshot_journals(tmp_path / "here")
    packed = gzip.decompress((live.parent / "study.log.gz").read_bytes())
    assert packed == whole

    there = tmp_path / "there" / "p"
    there.mkdir(parents=True)
    shutil.copy(live.parent / "study.log.gz", there / "study.log.gz")
    restore_journals(tmp_path / "there")
    storage = open_storage(f"journal:{there / 'study.log'}")
    study = optuna.load_study(study_name="s", storage=storage)
    study.add_trial(
        optuna.trial.create_trial(
            params={"x": 7.0},
            distributions={"x": optuna.distributions.FloatDistribution(0, 10)},
            value=7.0,
        )
    )
    again = optuna.load_study(
        study_name="s", storage=open_storage(f"journal:{there / 'study.log'}")
    )
    assert [t.value for t in again.get_trials()] == [0.0, 1.0, 2.0, 7.0]


def test_a_journal_of_whole_records_snapshots_unchanged(tmp_path):
    live = tmp_path / "p" / "study.log"
    live.parent.mkdir()
    _study_with_trials(live, finished=2)
    snapshot_journals(tmp_path)
    assert gzip.decompress((live.parent / "study.log.gz").read_bytes()) == live.read_bytes()
