"""Finalists read on other data orders than the selection's (``--final-data-seeds``): a point
that leads only on the selection's data order does not survive them, the runs they need are
exactly the declared pairs, and a study that never named them stores the record it always
had (its identity unchanged)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from torch_mars.train.study.selection import PROTOCOL, Selection
from torch_mars.train.study.space import parse_point_key, point_key, start_point
from torch_mars.train.study.tune import SEARCHES

START = start_point("adamw", "tiny")
BEST_LR = START["lr"] + 1  # the best lr on the selection's data order 0; one step lower elsewhere


def order_dependent(run: tuple) -> float:
    """Only the lr matters; on data order 0 its best is ``BEST_LR``, on every other order one
    ladder step lower: a setting x data order interaction, as measured at b64-4x."""
    _, key, seed, data = run
    target = BEST_LR if data == 0 else BEST_LR - 1
    return 2.0 + 0.01 * (parse_point_key(key)["lr"] - target) ** 2 + 1e-6 * seed


def search_to_the_end(selection: Selection):
    return SEARCHES["surface-3"]("adamw", (START,), selection, 12).run_to_the_end(order_dependent)


def test_a_point_ahead_only_on_the_selections_data_order_does_not_survive_other_orders():
    on_one_order, _ = search_to_the_end(PROTOCOL)
    assert on_one_order.point["lr"] == BEST_LR
    other_orders = dataclasses.replace(PROTOCOL, final_data_seeds=(4, 5))
    state, results = search_to_the_end(other_orders)
    # the same walk (its first phase reads order 0 alone), another winner: one run on order 0
    # at the lr it prefers against two on orders 4 and 5 at one step lower
    assert state.trials == on_one_order.trials
    assert state.point["lr"] == BEST_LR - 1
    winner, score = state.finalists[0]
    runs = [("adamw", point_key(winner), s, d) for s, d in other_orders.choosing_pairs()]
    assert score == pytest.approx(sum(order_dependent(r) for r in runs) / 3)
    # every finalist run is on a declared (seed, order) pair; none on (1, 0) or (2, 0)
    finalist_runs = {(s, d) for (_, _, s, d) in results if s in other_orders.final_seeds}
    assert finalist_runs == {(1, 4), (2, 5)}


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"final_data_seeds": (4,)}, "--final-data-seeds [4]: one data order per final seed"),
        ({"final_data_seeds": (4, 2)}, "must differ from the held-out data seeds"),
        ({"final_data_seeds": (4, -1)}, "--final-data-seeds [4, -1]: orders are >= 0"),
    ],
)
def test_final_data_orders_that_cannot_be_read_are_refused(settings, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        dataclasses.replace(PROTOCOL, **settings)


def test_a_study_that_names_no_final_orders_stores_the_record_it_always_had():
    assert "final_data_seeds" not in PROTOCOL.record()
    assert PROTOCOL.record() == {
        k: v
        for k, v in dataclasses.asdict(PROTOCOL).items()
        if k not in ("final_data_seeds", "pairs", "pairs_read")
    }
    named = dataclasses.replace(PROTOCOL, final_data_seeds=(4, 5))
    assert PROTOCOL.final_orders_text() == ""  # reports of such studies read as they did
    assert named.final_orders_text() == " (finalists' seeds on data orders 4,5)"
    assert Selection.of_record(json.loads(json.dumps(named.record()))) == named
    assert Selection.of_record(json.loads(json.dumps(PROTOCOL.record()))) == PROTOCOL
