"""The landed studies still report under the protocol they recorded: a study whose earlier
protocols were stored before ``search`` became a protocol setting reads each of its budgets
(the map's 40 and 80 trials), under the search it ran."""

from __future__ import annotations

import dataclasses

import pytest

from harness_helpers import toy_tune_plan, write_synthetic_text
from torch_mars.train.study.engine import _protocol_of, open_study, ran_under
from torch_mars.train.study.store import PROTOCOL_HISTORY_ATTR
from torch_mars.train.study.tune import PROTOCOL_KEYS


@pytest.fixture
def corpus_file(tmp_path):
    return write_synthetic_text(tmp_path / "corpus.txt")


def test_a_budget_recorded_before_search_was_a_protocol_setting_still_reports(
    tmp_path, corpus_file
):
    plan = toy_tune_plan(
        tmp_path / "s", corpus_file, ("adamw",), trials=80, search="lr-profiled", study_name="s"
    )
    study = open_study(plan.spec())
    at_40 = dataclasses.replace(plan, trials=40)
    past = _protocol_of(at_40.spec().identity(), PROTOCOL_KEYS)
    del past["search"]  # as the map's studies stored their 40-trial protocol
    study.set_user_attr(PROTOCOL_HISTORY_ATTR, [{"protocol": past, "until": 0.0}])
    assert ran_under(study, at_40.spec()) and ran_under(study, plan.spec())
    assert not ran_under(study, dataclasses.replace(at_40, search="surface").spec())
    assert not ran_under(study, dataclasses.replace(plan, trials=20).spec())
