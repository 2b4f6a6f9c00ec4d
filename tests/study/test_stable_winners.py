"""Stable winners (issue "Verdicts that decide", item 5): with the protocol's
``stable_winners`` a candidate winner with a diverged run among its choosing runs (not finite,
or more than 0.05 above their median) ranks after every one without, whatever its mean; the
studies before the rule keep ranking by the mean, as they recorded."""

from __future__ import annotations

from torch_mars.train.study.profiled import ProfiledSearch, ProfiledState
from torch_mars.train.study.selection import PROTOCOL, Selection
from torch_mars.train.study.space import start_point

START = start_point("adamw", "tiny")
STEADY = {**START, "lr": START["lr"] - 1}
# the better mean, one run in six 0.06 above the rest: diverged by the declared rule
FLAKY_RUNS = [1.70, 1.70, 1.70, 1.70, 1.70, 1.76]
STEADY_RUNS = [1.715] * 6


def chosen(stable: bool) -> tuple[dict, ProfiledSearch]:
    selection = Selection(
        seeds=(0,), heldout=(), heldout_data_seeds=(), finalists=2, final_seeds=(1, 2, 3, 4, 5),
        final_data_seeds=(1, 2, 3, 4, 5), pairs=((1000, 1000), (1001, 1001)),
        stable_winners=stable,
    )  # fmt: skip
    search = ProfiledSearch("adamw", (START,), selection, 2)
    pairs = search.selection.choosing_pairs()
    results = {search.run(START, s, d): v for (s, d), v in zip(pairs, FLAKY_RUNS, strict=True)}
    results |= {search.run(STEADY, s, d): v for (s, d), v in zip(pairs, STEADY_RUNS, strict=True)}
    state = ProfiledState("adamw", [])
    state.trials = [(START, 1.70), (STEADY, 1.715)]
    search._final(results, state)
    return state.point, search


def test_a_finalist_with_a_diverged_run_ranks_after_a_steady_one():
    point, search = chosen(stable=True)
    assert point == STEADY
    pairs = search.selection.choosing_pairs()
    flaky = {search.run(START, s, d): v for (s, d), v in zip(pairs, FLAKY_RUNS, strict=True)}
    assert search.rank(flaky, START, pairs) == (1, sum(FLAKY_RUNS) / 6)


def test_without_the_rule_the_better_mean_wins_as_the_studies_before_recorded():
    point, _ = chosen(stable=False)
    assert point == START


def test_the_rule_is_the_protocols_and_a_record_without_it_reads_as_before():
    assert PROTOCOL.stable_winners
    assert "stable_winners" not in Selection().record()
    assert not Selection.of_record(Selection().record()).stable_winners
    assert Selection.of_record(PROTOCOL.record()).stable_winners
