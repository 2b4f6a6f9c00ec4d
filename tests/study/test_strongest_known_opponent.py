"""Each side of a verdict is read at its best-known setting (issue "Verdicts that decide",
item 4; "Your model, round 2", item 3): every peer's winner moved onto an optimizer's space is
read on its choosing runs, a search that stopped short is said and not what the held-out runs
read, and B (how far a word read at the searches' own winners would have leant) is reported
per comparison."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from torch import nn

import torch_mars
from torch_mars.train.study.objective import ObjectiveConfig, function_path
from torch_mars.train.study.outcomes import OptimizerOutcome, verdicts
from torch_mars.train.study.pairs import verdict_bias
from torch_mars.train.study.report_text import peer_sentences
from torch_mars.train.study.run import tune_plan
from torch_mars.train.study.selection import PROTOCOL, Selection, protocol_selection
from torch_mars.train.study.space import (
    LADDERS,
    parse_point_key,
    point_at,
    point_key,
    start_point,
)
from torch_mars.train.study.surface import SurfaceSearch
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.study.tune_record import read_tune_record
from torch_mars.train.trainer import TrainConfig

SELECTION = Selection(
    seeds=(0,),
    heldout=(),
    heldout_data_seeds=(),
    finalists=2,
    final_seeds=(1, 2),
    final_data_seeds=(1, 2),
    pairs=((100, 100), (101, 101), (102, 102)),
    peer_winners=True,
)


def toy_loss(run) -> float:
    """A bowl in the lr and beta2 shared by AdamW and NAdamW (its floor at lr index 9, beta2
    index 2; both start at 5 and 1), the same for both, with a little seed noise."""
    _, key, seed, data = run
    point = parse_point_key(key)
    lr, beta2 = point["lr"], point["beta2"]
    return 1.0 + 0.01 * (lr - 9) ** 2 + 0.02 * (beta2 - 2) ** 2 + 0.0001 * ((seed + data) % 3)


def run_together(searches) -> dict:
    """Every search to its end on one shared set of results (as the engine trains them)."""
    results: dict = {}
    while True:
        needed = [run for s in searches for run in s.replay(results).needed]
        if not needed:
            return results
        for run in needed:
            results[run] = toy_loss(run)


def toy_searches(short: int = 3, long: int = 24):
    starts = {name: (start_point(name, "tiny"),) for name in ("adamw", "nadamw")}
    adamw = SurfaceSearch("adamw", starts["adamw"], SELECTION, short)
    nadamw = SurfaceSearch("nadamw", starts["nadamw"], SELECTION, long)
    return dataclasses.replace(adamw, peers=(nadamw,)), dataclasses.replace(nadamw, peers=(adamw,))


def test_a_search_stopped_short_is_read_at_its_peers_better_setting():
    adamw, nadamw = toy_searches()
    results = run_together([adamw, nadamw])
    state = adamw.replay(results)
    theirs = dataclasses.replace(nadamw, peers=()).replay(results, read=False)
    moved = point_at(theirs.point, state.own_point)
    assert state.finished and state.best_known_from == "nadamw"
    assert point_key(state.point) == point_key(moved) != point_key(state.own_point)
    [(peer, point, score)] = state.peer_points
    assert point_key(point) == point_key(moved)
    assert peer == "nadamw" and score < state.own_score
    # the held-out pairs read the best-known setting, not the search's own winner
    for seed, order in SELECTION.pairs:
        assert ("adamw", point_key(state.point), seed, order) in results
        assert ("adamw", point_key(state.own_point), seed, order) not in results
    # the peer's own winner is chosen without reading adamw's (its peers' own stay theirs)
    assert nadamw.replay(results).best_known_from is None


def test_without_peer_winners_the_peers_are_not_read():
    adamw, nadamw = toy_searches()
    own = dataclasses.replace(SELECTION, peer_winners=False)
    adamw, nadamw = (dataclasses.replace(s, selection=own) for s in (adamw, nadamw))
    results = run_together([adamw, nadamw])
    state = adamw.replay(results)
    assert state.peer_points == [] and state.best_known_from is None and not state.own_point
    # the held-out pairs read the search's own winner: its finalists' best
    assert point_key(state.point) == point_key(state.finalists[0][0])
    assert all(("adamw", point_key(state.point), s, o) in results for s, o in SELECTION.pairs)


def test_a_search_waits_for_its_peers_winner_before_its_held_out_runs():
    adamw, _ = toy_searches()
    results: dict = {}
    while True:  # adamw's own runs only: it must wait on nadamw's
        needed = [r for r in adamw.replay(results).needed if r[0] == "adamw"]
        if not needed:
            break
        for run in needed:
            results[run] = toy_loss(run)
    state = adamw.replay(results)
    assert state.needed and all(run[0] == "nadamw" for run in state.needed)
    assert not any((s, o) in SELECTION.pairs for _, _, s, o in results)


def test_bias_is_each_sides_shortfall_and_the_report_says_a_control_stopped_short():
    lr = LADDERS["lr"].nearest(1e-3)
    own, better = {"lr": lr}, {"lr": lr + 1}

    def outcome(name: str, own_score: float, peer_score: float, finals: list[float]):
        winner = better if peer_score < own_score else own
        return OptimizerOutcome(
            optimizer=name,
            finished=True,
            winner=winner,
            trial_scores=[own_score],
            selection_finals=[own_score],
            heldout_finals=finals,
            rounds=1,
            lr_profiles=[],
            winner_score=own_score,
            own_winner=own,
            own_score=own_score,
            peer_points=[("peer", better, peer_score)],
            best_known_from="peer" if peer_score < own_score else None,
            heldout_machines=["epyc"] * len(finals),
        )

    rule = outcome("mars-adamw", 1.70, 1.71, [1.70, 1.71, 1.69, 1.72])
    control = outcome("nadamw", 1.76, 1.74, [1.73, 1.75, 1.74, 1.76])
    pairs = [(100, 100), (101, 101), (102, 102), (103, 103)]
    [verdict] = verdicts([rule, control], pairs=pairs)
    assert rule.shortfall == 0.0 and control.shortfall == pytest.approx(0.02)
    assert verdict.bias == pytest.approx(verdict_bias(1.70, 1.70, 1.76, 1.74))
    assert verdict.bias_text() == "-0.0200"
    said = "\n".join(peer_sentences([rule, control]))
    assert "nadamw at peer's winner moved onto its space scored 1.7400" in said
    assert "stopped 0.0200 short" in said and "mars-adamw's own winner (1.7000" in said
    # a study that read no peer's winner has no B
    plain = dataclasses.replace(control, peer_points=[], best_known_from=None)
    [no_peers] = verdicts([rule, plain], pairs=pairs)
    assert math.isnan(no_peers.bias) and no_peers.bias_text() == "—"


def test_peer_winners_is_tunes_default_and_a_record_without_it_reads_as_before():
    assert PROTOCOL.peer_winners and protocol_selection().peer_winners
    assert not protocol_selection(peer_winners=False).peer_winners
    old = protocol_selection(peer_winners=False).record()
    assert "peer_winners" not in old  # the records of studies from before stay as stored
    assert not Selection.of_record(old).peer_winners
    assert Selection.of_record(protocol_selection().record()).peer_winners


def test_a_plans_searches_carry_the_peers_that_share_their_space(tmp_path: Path):
    plan = TunePlan(
        TrainConfig(model="tiny"),
        ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo"),
        protocol_selection(),
        tmp_path,
    )
    peers = {s.optimizer: sorted(p.optimizer for p in s.peers) for s in plan.searches()}
    assert peers == {
        "adamw": ["mars-adamw", "nadamw"],
        "nadamw": ["adamw", "mars-adamw"],
        "mars-adamw": ["adamw", "nadamw"],
        "muon": ["mars-shampoo"],
        "mars-shampoo": ["muon"],
    }
    assert all(not p.peers for s in plan.searches() for p in s.peers)  # one level deep
    off = dataclasses.replace(plan, selection=protocol_selection(peer_winners=False))
    assert all(not s.peers for s in off.searches())


def lr_bowl(make_optimizer, seed, data_seed, report):
    """Lowest at lr 0.03 (about five 1.5x steps above AdamW's default), with a little noise:
    a search of 2 trials stops short of it, one of 12 reaches it."""
    import random

    lr = make_optimizer(nn.Linear(2, 1)).param_groups[0]["lr"]
    return (math.log10(lr / 0.03)) ** 2 + random.Random(seed * 31 + data_seed).gauss(0, 1e-4)


def test_a_stored_studys_better_winner_is_what_a_short_search_is_read_at(tmp_path):
    protocol = dict(seeds=(0,), finalists=0, heldout_seeds=(1, 2), heldout_data_seeds=(1,))
    torch_mars.tune(lr_bowl, ["adamw"], trials=12, out_dir=tmp_path, name="long",
                    progress=False, **protocol)  # fmt: skip
    long = read_tune_record(tmp_path / "long").entry("adamw")
    result = torch_mars.tune(lr_bowl, ["adamw"], trials=2, out_dir=tmp_path, name="short",
                             known_winners=[tmp_path / "long"], progress=False,
                             **protocol)  # fmt: skip
    short = read_tune_record(tmp_path / "short").entry("adamw")
    assert short.best_known_from == str(tmp_path / "long")
    assert short.winner["lr"] == long.winner["lr"] != short.own_winner["lr"]
    assert f"adamw at {tmp_path / 'long'}'s winner moved onto its space" in result.table
    again = tune_plan(
        ObjectiveConfig(function_path(lr_bowl), model="tiny"),
        study_dir=tmp_path / "x",
        name="x",
        known_winners=[tmp_path / "long"],
        **protocol,
    )
    assert "--known-winners" in again.command_line()
    with pytest.raises(ValueError, match=r"--known-winners: .* tuned another budget"):
        tune_plan(
            ObjectiveConfig(function_path(lr_bowl), model="tiny", version="2"),
            study_dir=tmp_path / "y",
            name="y",
            known_winners=[tmp_path / "long"],
            **protocol,
        )
    with pytest.raises(ValueError, match=r"^--known-winners: .*nowhere.*: no study record"):
        tune_plan(
            ObjectiveConfig(function_path(lr_bowl), model="tiny"),
            study_dir=tmp_path / "w",
            name="w",
            known_winners=[tmp_path / "nowhere"],
            **protocol,
        )
    with pytest.raises(ValueError, match="--peer-winners on"):
        tune_plan(
            ObjectiveConfig(function_path(lr_bowl), model="tiny"),
            study_dir=tmp_path / "z",
            name="z",
            known_winners=[tmp_path / "long"],
            peer_winners=False,
            **protocol,
        )
