"""A tune study's identity is its own optimizers: it records their spellings and ladders only,
so an optimizer added to the table leaves every stored study of the others openable (a study
recorded with the whole table, as before, included), and its next trials are still written;
a changed ladder of its own optimizers is still another study."""

from __future__ import annotations

import pytest

from harness_helpers import toy_tune_plan, write_synthetic_text
from torch_mars.train.study import space
from torch_mars.train.study.engine import StudyMismatch, open_study
from torch_mars.train.study.workers import claim


@pytest.fixture
def corpus_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


def test_a_study_records_only_its_own_optimizers_space(tmp_path, corpus_file):
    plan = toy_tune_plan(tmp_path / "s", corpus_file, ("adamw", "muon"), trials=1)
    recorded = plan.spec().identity()["search"]["space"]
    assert set(recorded["spelling"]) == {"adamw", "muon"}
    assert "gamma" not in recorded["ladders"]  # neither optimizer has it


@pytest.mark.parametrize("recorded", ["own optimizers", "the whole table, as before"])
def test_an_optimizer_added_to_the_table_leaves_a_stored_study_open(
    tmp_path, corpus_file, monkeypatch, recorded
):
    plan = toy_tune_plan(tmp_path / "s", corpus_file, ("adamw",), trials=2, study_name="s")
    study = open_study(plan.spec())
    if recorded == "the whole table, as before":
        identity = plan.spec().identity()
        whole = space.space_record(space.tunable_optimizers())
        study.set_user_attr(
            "identity", {**identity, "search": {**identity["search"], "space": whole}}
        )
    first = claim(plan.spec(), study, stale_after_s=1e9)
    first.lock.close()
    first.trial.set_user_attr("final", 2.0)
    study.tell(first.trial, 2.0)

    monkeypatch.setitem(space.SPELLING, "adamw-twin", space.ADAM_RULE)  # the table grows
    assert "adamw-twin" in space.tunable_optimizers()
    reopened = open_study(plan.spec())  # no StudyMismatch
    again = claim(plan.spec(), reopened, stale_after_s=1e9)  # and its next trial is written
    again.lock.close()
    assert again.trial.number == first.trial.number + 1


def test_a_changed_ladder_of_its_own_optimizer_is_another_study(tmp_path, corpus_file, monkeypatch):
    plan = toy_tune_plan(tmp_path / "s", corpus_file, ("adamw",), trials=1, study_name="s")
    open_study(plan.spec())
    monkeypatch.setitem(space.LADDERS, "beta1", space.Ladder(levels=(0.8, 0.9, 0.99)))
    with pytest.raises(StudyMismatch, match=r"space\.ladders\.beta1"):
        open_study(plan.spec())
