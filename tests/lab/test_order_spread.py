"""The order-spread screen (benchmarks/studies/order_spread.py): its search scores each point
on its own data order from the rotation, in turn, its finalists on that order too, and reads
the winner on the held-out orders as they are; the screen's toy is a convex bowl whose optimum
scores 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark_scripts import load_benchmark_script
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.space import parse_point_key, point_key
from torch_mars.train.study.surface import SurfaceSearch
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.trainer import TrainConfig

spread = load_benchmark_script("studies/order_spread.py")


def test_each_point_is_scored_on_its_own_order_in_turn_and_held_out_as_asked():
    plan = TunePlan(TrainConfig(model="tiny"), ("nadamw",), PROTOCOL, Path("unused"))
    search = spread.OrderSpreadSearch("nadamw", plan.starts_of("nadamw"), PROTOCOL, trials=12)
    optimum = dict(search.starts[0])
    true, run = spread.toy_runs(search.dimensions, optimum, (0.002, 0.002, 0.002), draw=0)
    assert true(optimum) == 0.0
    state, results = search.run_to_the_end(lambda r: run(parse_point_key(r[1]), r[2], r[3]))
    orders = {}
    for _, key, _, order in results:
        if order not in PROTOCOL.heldout_data_seeds:
            orders.setdefault(key, set()).add(order)
    assert all(len(o) == 1 for o in orders.values())  # one order a point, finalists included
    firsts = [orders[point_key(p)].pop() for p, _ in state.trials]
    assert firsts == [spread.ROTATION[i % 3] for i in range(len(firsts))]
    assert len(state.finalists) == PROTOCOL.finalists
    winner = point_key(state.point)
    heldout = {(s, d) for _, key, s, d in results if key == winner and d in {1, 2, 3}}
    assert heldout == set(PROTOCOL.heldout_pairs())


def test_without_noise_the_third_design_finds_the_toys_optimum_and_a_screen_needs_two_draws(
    capsys,
):
    assert spread.regret(SurfaceSearch, "muon", (0.0, 0.0, 0.0), draw=1) == 0.0
    with pytest.raises(SystemExit):
        spread.main(["--draws", "1"])
    assert "--draws must be >= 2, got 1" in capsys.readouterr().err
