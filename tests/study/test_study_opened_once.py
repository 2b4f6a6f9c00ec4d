"""One ``tune`` command opens its study's storage once: resuming the plan, opening the study,
training in this process and writing the report all read that one opening (issue "The study
wing, round 2"); a worker process, which cannot share it, opens its own."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from harness_helpers import toy_tune_plan, write_synthetic_text
from torch_mars.train.study import run


@pytest.fixture
def corpus_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


@pytest.fixture
def openings(monkeypatch) -> list[str]:
    """Each Optuna storage the code under test constructs, by kind."""
    made: list[str] = []
    for kind in ("JournalStorage", "RDBStorage"):
        real = getattr(optuna.storages, kind)

        def __init__(self, *args, _real=real, _kind=kind, **kwargs):
            made.append(_kind)
            _real.__init__(self, *args, **kwargs)

        counted = type(kind, (real,), {"__init__": __init__})
        monkeypatch.setattr(optuna.storages, kind, counted)
    return made


def test_a_tune_command_opens_its_storage_once_to_train_and_once_to_report(
    tmp_path, corpus_file, openings
):
    plan = toy_tune_plan(tmp_path / "toy", corpus_file, ("adamw",), trials=2)
    ran = run.run_study(plan, show="none", announce_to=None)
    assert ran.trained > 0 and ran.nothing is None
    assert len(openings) == 1, openings
    # the same study resumed (its plan read from it) and reported: again one opening each
    run.run_study(plan, show="none", announce_to=None)
    assert len(openings) == 2, openings
    run.run_study(plan, report_only=True, show="none", announce_to=None)
    assert len(openings) == 3, openings


def test_a_second_look_reads_the_same_opening(tmp_path, corpus_file, openings, monkeypatch):
    """A study whose first look leaves a word inconclusive runs its second look on the
    storage the command opened (no reopening per look)."""
    plan = toy_tune_plan(tmp_path / "toy", corpus_file, ("adamw",), trials=2)
    looks = []

    def once_wider(plan, record):
        if looks:
            return None
        looks.append(plan)
        sel = plan.selection
        return dataclasses.replace(plan, selection=dataclasses.replace(sel, seeds=(0, 2)))

    monkeypatch.setattr(run, "second_look_plan", once_wider)
    ran = run.run_study(plan, show="none", announce_to=None)
    assert len(looks) == 1
    assert ran.plan.selection.seeds == (0, 2) and ran.trained > 0
    assert len(openings) == 1, openings
