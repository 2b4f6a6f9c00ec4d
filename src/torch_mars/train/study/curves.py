"""Tuning curves (Dodge et al. 2019, "Show your work"): the expected best selection score after
``k`` trials, ``k = 1..N``, when the trials are taken in a random order. The expectation is
exact: with the ``N`` scores sorted best first, the best of a random ``k``-subset is the
``i``-th with probability ``C(N - i, k - 1) / C(N, k)``.

>>> expected_best_curve([3.0, 1.0, 2.0])
[2.0, 1.3333333333333333, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def expected_best_curve(scores: Sequence[float]) -> list[float]:
    """Expected best (lowest) of ``k`` of ``scores`` drawn without replacement, for each ``k``;
    a NaN score (a diverged trial) counts as worst."""
    ranked = sorted(scores, key=lambda v: math.inf if math.isnan(v) else v)
    n = len(ranked)
    curve = []
    for k in range(1, n + 1):
        total = math.comb(n, k)
        expected = 0.0
        for i, value in enumerate(ranked, start=1):
            weight = math.comb(n - i, k - 1)
            if weight:
                expected += weight * (math.inf if math.isnan(value) else value) / total
        curve.append(expected)
    return curve


def best_so_far(scores: Sequence[float]) -> list[float]:
    """The best score after each trial, in the order the search ran them."""
    best, out = math.inf, []
    for value in scores:
        if not math.isnan(value):
            best = min(best, value)
        out.append(best)
    return out
