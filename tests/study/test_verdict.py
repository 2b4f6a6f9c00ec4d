"""Verdicts and tuning curves on fixed numbers, computed by hand: the paired t interval, its p
value, Holm's step-down decision over a family, and the expected best of k trials."""

from __future__ import annotations

import math

import pytest

from torch_mars.train.study.curves import best_so_far, expected_best_curve
from torch_mars.train.study.verdict import (
    PairedGap,
    crossed_gap,
    holm_decisions,
    paired_gap,
    student_t_quantile,
    student_t_two_sided_p,
)


def test_the_paired_interval_of_six_pairs_is_the_hand_computed_t_interval():
    # differences -0.02 -0.01 -0.03 0 -0.02 -0.01: mean -0.015, sd sqrt(550e-6 / 5),
    # standard error 0.0042817, t = -3.5032 on 5 degrees of freedom, t(0.975, 5) = 2.570582
    control = [1.0] * 6
    rule = [0.98, 0.99, 0.97, 1.0, 0.98, 0.99]
    gap = paired_gap(rule, control)
    half = 2.570582 * math.sqrt(550e-6 / 5) / math.sqrt(6)
    assert gap.mean == pytest.approx(-0.015)
    assert (gap.low, gap.high) == pytest.approx((-0.015 - half, -0.015 + half), abs=1e-6)
    assert gap.p == pytest.approx(0.017225, abs=1e-6)
    assert gap.pairs == 6


def test_students_t_matches_its_tables():
    assert student_t_quantile(0.05, 5) == pytest.approx(2.570582, abs=1e-6)
    assert student_t_quantile(0.05, 2) == pytest.approx(4.302653, abs=1e-6)
    assert student_t_quantile(0.05, 1) == pytest.approx(12.706205, abs=1e-5)
    assert student_t_two_sided_p(0.0, 3) == pytest.approx(1.0)


def test_holm_rejects_step_down_and_stops_at_the_first_kept_hypothesis():
    # m = 4: thresholds 0.0125, 0.0167, 0.025, 0.05 against the sorted p values
    gaps = [
        PairedGap(-0.02, 0, 0, 0.011, 6),  # first: 0.011 <= 0.0125, a win
        PairedGap(0.03, 0, 0, 0.016, 6),  # second: 0.016 <= 0.0167, a loss
        PairedGap(-0.01, 0, 0, 0.03, 6),  # third: 0.03 > 0.025, kept: inconclusive
        PairedGap(0.01, 0, 0, 0.031, 6),  # after the first kept one, kept however small
    ]
    assert holm_decisions(gaps) == ["win", "loss", "inconclusive", "inconclusive"]
    # unadjusted, the third would have been a win at 0.05: Holm is what keeps it
    assert holm_decisions(gaps[2:3]) == ["win"]


def test_a_diverged_run_in_a_pair_makes_the_gap_infinite_not_a_number():
    gap = paired_gap([1.0, math.nan, 1.0], [1.1, 1.0, 1.0])
    # no interval can be read from it: no word but inconclusive (the diverged run is shown)
    assert gap.mean == math.inf and holm_decisions([gap]) == ["inconclusive"]


def test_paired_runs_of_different_counts_are_refused():
    with pytest.raises(ValueError, match="differ in number"):
        paired_gap([1.0, 2.0], [1.0])


def test_the_expected_best_of_k_trials_is_the_hand_computed_mean_over_subsets():
    scores = [4.0, 1.0, 3.0, 2.0]
    # k = 2: the six pairs' minima 1, 3, 2, 1, 1, 2 -> 10/6
    assert expected_best_curve(scores) == pytest.approx([2.5, 10 / 6, 1.25, 1.0])
    assert best_so_far([3.0, math.nan, 2.5, 2.7]) == [3.0, 3.0, 2.5, 2.5]


def test_the_crossed_interval_matches_a_hand_computation():
    """Differences (rule - control) on seeds 3-5 x data orders 1-2, worked by hand:
    order 1: 0.0 0.2 0.4; order 2: 0.2 0.2 0.6. Grand mean 1.6/6 = 0.26667. Seed means
    0.1 0.2 0.5: MS_seed = 2 x 0.086667 / 2 = 0.086667. Order means 0.2 0.33333: MS_order =
    3 x 0.0088889 / 1 = 0.026667. Residuals -1/30 1/15 -1/30 1/30 -1/15 1/30: MS_error =
    0.013333 / 2 = 0.0066667. Var(mean) = (MS_seed + MS_order - MS_error) / 6 = 0.017778, so
    the error is 0.13333 and t = 2. Satterthwaite: 0.017778^2 / (0.014444^2/2 + 0.0044444^2/1
    + 0.0011111^2/2) = 2.53, 2 degrees of freedom: t(0.975, 2) = 4.3027, half width 0.57369,
    p 0.1835 (independent pairs would claim p 0.035)."""
    pairs = [(s, o) for o in (1, 2) for s in (3, 4, 5)]
    differences = [0.0, 0.2, 0.4, 0.2, 0.2, 0.6]
    gap = crossed_gap(differences, [0.0] * 6, pairs)
    assert gap.mean == pytest.approx(0.266667, abs=1e-5)
    assert gap.high - gap.mean == pytest.approx(0.57369, abs=1e-4)
    assert gap.p == pytest.approx(0.1835, abs=1e-3)
    assert paired_gap(differences, [0.0] * 6).p < 0.05  # what the pairs as independent claim


def test_the_crossed_interval_with_one_data_order_is_the_paired_one_and_a_gap_is_refused():
    one_order = [(3, 1), (4, 1), (5, 1)]
    assert crossed_gap([1.0, 1.2, 0.9], [1.1, 1.1, 1.0], one_order) == paired_gap(
        [1.0, 1.2, 0.9], [1.1, 1.1, 1.0]
    )
    with pytest.raises(ValueError, match="do not cross"):
        crossed_gap([1.0, 1.2, 0.9], [1.1, 1.1, 1.0], [(3, 1), (4, 1), (4, 2)])
