"""A study whose runs cannot be read is started afresh under its claim lock whatever settings it
ran with; a storage with no such study is left as it is."""

from __future__ import annotations

import optuna

from torch_mars.train.study.engine import start_afresh
from torch_mars.train.study.store import open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_study_is_deleted_and_a_missing_one_is_no_error(tmp_path):
    url = f"journal:{tmp_path / 'study.log'}"
    assert not start_afresh(url, "s", "test")  # no file: nothing made
    assert not (tmp_path / "study.log").exists()
    study = optuna.create_study(study_name="s", storage=open_storage(url))
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    optuna.create_study(study_name="other", storage=open_storage(url))
    assert not start_afresh(url, "nowhere", "test")
    assert start_afresh(url, "s", "test")
    assert optuna.get_all_study_names(open_storage(url)) == ["other"]
