"""The study engine holds, round 2 (../shared/repro/study-engine-2/): a report never creates a
study, and a stored value that is no number is one line naming its trial, not a traceback in
every later ``tune``. (The training function's own escapes are in
test_training_function_contained.py.)"""

from __future__ import annotations

import optuna
import pytest

from harness_helpers import write_synthetic_text
from torch_mars.cli import main
from torch_mars.train.study.engine import finished_results
from torch_mars.train.study.store import open_storage

TOY = ["--model", "tiny", "--steps", "4", "--batch-size", "4", "--block-size", "16"]
TOY += ["--eval-interval", "2", "--eval-batches", "2", "--optimizers", "adamw"]
TOY += ["--seeds", "0", "--heldout-seeds", "1", "--heldout-data-seeds", "1", "--trials", "1"]
TOY += ["--finalists", "0"]


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
