"""Verdicts that decide: four words from one rule, the two-stage design's error rate by
simulation, pairs that share a seed, an order or no machine refused, diverged runs counted,
and the search's bias B."""

from __future__ import annotations

import math

import pytest

from torch_mars.train.study.family import Comparison, decide
from torch_mars.train.study.outcomes import OptimizerOutcome, verdicts
from torch_mars.train.study.pairs import diverged, same_machine, verdict_bias
from torch_mars.train.study.selection import Selection, protocol_selection
from torch_mars.train.study.two_stage import (
    Design,
    Reading,
    Stage,
    boundary,
    interval,
    read_family,
    second_stage_pairs,
    simulate_family,
)
from torch_mars.train.study.verdict import PairedGap, holm_words, read_word


@pytest.mark.parametrize(
    ("low", "high", "word"),
    [
        (-0.0182, -0.0081, "win"),
        (0.0019, 0.0138, "loss"),
        (-0.0040, 0.0045, "equivalent"),
        (-0.0284, 0.0237, "inconclusive"),
        (-0.0050, 0.0010, "inconclusive"),  # touches the margin: not inside it
        (-0.0010, 0.0, "equivalent"),  # touches 0 inside the margin
    ],
)
def test_a_word_is_read_from_its_interval_alone(low, high, word):
    assert read_word(low, high, 0.005) == word


def test_holm_reads_each_word_at_its_step_and_the_rest_at_the_level_left():
    # ten comparisons at 11 dof; the first two pass at 0.005 and 0.05/9, the rest read at 0.05/8
    gaps = [PairedGap(-0.02, 0, 0, 0.004, 12, 0.004, 11)]
    gaps += [PairedGap(+0.02, 0, 0, 0.0055, 12, 0.005, 11)]
    gaps += [PairedGap(0.0002, 0, 0, 0.9, 12, 0.0008, 11)]
    gaps += [PairedGap(0.003, 0, 0, 0.3, 12, 0.004, 11) for _ in range(7)]
    words = holm_words(gaps)
    assert [w.word for w in words[:3]] == ["win", "loss", "equivalent"]
    assert {w.word for w in words[3:]} == {"inconclusive"}
    assert words[0].level == pytest.approx(0.005)
    assert words[1].level == pytest.approx(0.05 / 9)
    assert all(w.level == pytest.approx(0.05 / 8) for w in words[2:])
    # the printed interval is the word's: the win's excludes 0 at its level, and is wider than 95%
    assert words[0].high < 0 and words[0].low < -0.02 - 2.2 * 0.004


def test_a_diverged_gap_reads_inconclusive_with_no_interval_and_a_pending_one_pending():
    family = [Comparison("mars-adamw", ("nadamw",), "a"), Comparison("mars-shampoo", ("muon",))]
    decided = decide(family, {family[0]: PairedGap(math.inf, math.inf, math.inf, 0.0, 12)})
    assert decided[family[0]].word == "inconclusive" and math.isnan(decided[family[0]].low)
    assert decided[family[1]].word == "pending" and decided[family[0]].provisional


def test_a_family_that_lists_a_comparison_twice_is_refused():
    twice = [Comparison("mars-adamw", ("nadamw",), "a")] * 2
    with pytest.raises(ValueError, match="more than once"):
        decide(twice, {})


def test_the_boundaries_are_pococks_and_a_single_look_is_the_normal_quantile():
    assert boundary(0.05, 1.0) == pytest.approx(1.95996, abs=1e-4)
    assert boundary(0.05, math.sqrt(0.5)) == pytest.approx(2.178, abs=2e-3)  # Pocock, 2 looks
    assert boundary(0.005, Design().weights[0]) > boundary(0.005, 1.0)


def test_the_interval_inverts_the_two_look_test():
    design = Design()
    first = Stage.of(tuple(-0.004 + 0.006 * math.sin(k) for k in range(12)))
    second = Stage.of(tuple(-0.003 + 0.005 * math.cos(k) for k in range(20)))
    reading = Reading("x", (first, second))
    low, high = interval(reading, design, 0.01)
    c = boundary(0.01, design.weights[0])
    assert reading.statistic(low, design) == pytest.approx(c, abs=1e-6)
    assert reading.statistic(high, design) == pytest.approx(-c, abs=1e-6)
    (verdict,) = read_family([reading], design)
    assert verdict.word == ("win" if verdict.high < 0 else verdict.word)
    assert (verdict.high < 0) == (abs(reading.statistic(0.0, design)) >= c and reading.mean < 0)


def test_a_second_stage_is_planned_within_the_cap():
    design = Design()
    noisy = Stage.of(tuple(0.02 * math.sin(3 * k) for k in range(12)))
    assert second_stage_pairs(noisy, design, 0.005) == design.cap - design.first
    clear = Stage.of(tuple(-0.02 + 0.001 * math.sin(k) for k in range(12)))
    assert 2 <= second_stage_pairs(clear, design, 0.005) <= 8


@pytest.mark.parametrize(
    "gaps",
    [
        [0.0] * 10,  # every comparison level: any win or loss is wrong
        [0.005, -0.005] * 5,  # every comparison at the margin: any equivalent is wrong
        [-0.05, -0.05, -0.05, 0.005, 0.005, 0.005, -0.005, 0.0, 0.0, 0.0],  # Holm's levels loosen
    ],
)
def test_the_two_stage_design_keeps_wrong_words_to_alpha_over_10000_simulated_families(gaps):
    # the spreads campaign-3's first stage measured (per pair, 12 pairs a comparison)
    spreads = [0.0101, 0.0036, 0.0134, 0.0064, 0.0091, 0.0050, 0.0097, 0.0064, 0.0056, 0.0048]
    simulated = simulate_family(Design(), gaps, spreads, families=10_000, seed=1)
    assert simulated.families == 10_000
    assert simulated.wrong <= 0.05, simulated.text()
    assert simulated.decided > simulated.decided_first  # the second look decides more


def test_pairs_that_share_a_seed_or_an_order_or_meet_the_selection_are_refused():
    with pytest.raises(ValueError, match="pairs' seeds"):
        protocol_selection(pairs=[(1000, 1), (1000, 2)])
    with pytest.raises(ValueError, match="pairs' data orders"):
        protocol_selection(pairs=[(1000, 7), (1001, 7)])
    with pytest.raises(ValueError, match="unseen by selection"):
        protocol_selection(pairs=[(0, 1000), (1001, 1001)])  # seed 0 chooses
    with pytest.raises(ValueError, match="unseen by selection"):
        protocol_selection(pairs=[(1000, 0), (1001, 1001)])  # order 0 chooses
    with pytest.raises(ValueError, match="give one or the other"):
        protocol_selection(heldout=(3, 4), pairs=[(1000, 1000), (1001, 1001)])
    ok = protocol_selection(pairs=[(1000, 1000), (1001, 1001)])
    assert ok.heldout_pairs() == [(1000, 1000), (1001, 1001)] and ok.read_seeds == (1000, 1001)
    assert Selection.of_record(ok.record()) == ok


def _outcome(name: str, finals: list[float], machines: list[str]) -> OptimizerOutcome:
    return OptimizerOutcome(
        optimizer=name,
        finished=True,
        winner={"lr": 0.01},
        trial_scores=[1.0],
        selection_finals=[1.0],
        heldout_finals=finals,
        rounds=1,
        lr_profiles=[],
        winner_score=1.0,
        heldout_machines=machines,
    )


def test_a_verdict_never_pairs_runs_across_machines():
    pairs = [(1000 + k, 2000 + k) for k in range(4)]
    rule = _outcome("mars-adamw", [1.70, 1.71, 1.69, 1.50], ["epyc"] * 3 + ["xeon"])
    control = _outcome("nadamw", [1.72, 1.72, 1.71, 1.72], ["epyc"] * 4)
    (verdict,) = verdicts([rule, control], pairs=pairs)
    assert verdict.gap.pairs == 3  # the pair across machines is left out
    assert verdict.left_out == 1  # and counted, for the report to say
    assert verdict.gap.mean == pytest.approx(-0.0167, abs=1e-4)


def test_a_diverged_run_is_counted_and_never_dropped_from_the_mean():
    values = [1.725, 1.73, 1.72, 1.84, float("nan"), 1.727]
    assert diverged(values) == [3, 4]
    assert same_machine(["a", ""], ["a", ""]) == [True, False]


def test_the_verdict_bias_is_the_searches_shortfall_difference_on_a_toy():
    # the rule's search found its best; the control's stopped 0.013 short of a better setting
    assert verdict_bias(1.730, 1.730, 1.760, 1.747) == pytest.approx(-0.013)
    assert verdict_bias(1.74, 1.73, 1.75, 1.75) == pytest.approx(0.01)


def test_each_sides_diverged_runs_on_the_pairs_are_counted_beside_the_word():
    pairs = [(1000 + k, 2000 + k) for k in range(5)]
    rule = _outcome("mars-adamw", [1.70, 1.71, 1.69, 1.84, 1.70], ["epyc"] * 5)  # one blew up
    control = _outcome("nadamw", [1.72, 1.72, 1.71, 1.72, 1.73], ["epyc"] * 5)
    (verdict,) = verdicts([rule, control], pairs=pairs)
    assert verdict.diverged == (1, 0)
    assert verdict.gap.pairs == 5  # counted, never dropped from the mean


def test_a_campaign_that_declares_two_looks_reads_every_word_from_the_gaps_stages():
    from torch_mars.train.study.verdict import gap_of_pairs

    design = Design(alpha=0.05, margin=0.005, first=12, cap=64)  # campaign-4's (tests/lab)
    pairs = [(1000 + k, 5000 + k) for k in range(20)]
    rule = [1.70 + 0.004 * math.sin(k) for k in range(20)]
    control = [1.71 + 0.004 * math.cos(k) for k in range(20)]
    gap = gap_of_pairs(rule, control, pairs, first=design.first)
    assert [n for _, _, n in gap.stages] == [12, 8]
    a, b = Comparison("mars-adamw", ("nadamw",), "x"), Comparison("mars-shampoo", ("muon",), "x")
    decided = decide([a, b], {a: gap}, design=design)
    reading = Reading(a.key, tuple(Stage(*s) for s in gap.stages))
    (expected, _) = read_family([reading, None], design)
    assert decided[a].word == expected.word and decided[a].low == pytest.approx(expected.low)
    assert decided[a].provisional and decided[b].word == "pending"
