"""Verdicts from paired runs: the gap of a rule to its control as the mean of paired differences
(a pair: one initialisation seed and one data order, the same for both), its 95% t interval,
its two-sided p value, and one of four words after Holm's correction over a family of
comparisons (:func:`holm_words`): win, loss, equivalent, inconclusive.

Student's t distribution is computed in closed form for integer degrees of freedom
(Abramowitz & Stegun 26.7.3-4), so nothing beyond the standard library is needed.

>>> gap = paired_gap([1.0, 1.1, 0.9, 1.0], [1.2, 1.25, 1.1, 1.15])
>>> round(gap.mean, 4), round(gap.low, 4), round(gap.high, 4)
(-0.175, -0.2209, -0.1291)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def student_t_two_sided_p(t: float, dof: int) -> float:
    """P(|T| >= |t|) for Student's t with ``dof`` >= 1 degrees of freedom.

    >>> round(student_t_two_sided_p(2.776445, 4), 4)
    0.05
    """
    if dof < 1:
        raise ValueError(f"dof must be >= 1, got {dof}")
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(dof))
    c2 = math.cos(theta) ** 2
    if dof % 2 == 1:
        total, term = 0.0, math.cos(theta)
        if dof > 1:
            total = term
            for k in range(2, dof - 1, 2):
                term *= c2 * k / (k + 1)
                total += term
        inside = 2 / math.pi * (theta + math.sin(theta) * total)
    else:
        total, term = 1.0, 1.0
        for k in range(1, dof - 2, 2):
            term *= c2 * k / (k + 1)
            total += term
        inside = math.sin(theta) * total
    return min(1.0, max(0.0, 1.0 - inside))


def student_t_quantile(p_two_sided: float, dof: int) -> float:
    """The t with P(|T| >= t) = ``p_two_sided`` (bisection on :func:`student_t_two_sided_p`).

    >>> round(student_t_quantile(0.05, 5), 3)
    2.571
    """
    low, high = 0.0, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        if student_t_two_sided_p(middle, dof) > p_two_sided:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclass(frozen=True)
class PairedGap:
    """``rule - control`` over paired runs: mean, 95% interval, two-sided p, pairs, and the
    mean's standard error with its degrees of freedom (NaN and 0 where not computed: a gap
    read back from a report, or an infinite one)."""

    mean: float
    low: float
    high: float
    p: float
    pairs: int
    error: float = math.nan
    dof: int = 0
    # a two-look design's stages, ``(mean, error, pairs)`` each: the first pairs, then the rest
    stages: tuple[tuple[float, float, int], ...] = ()

    def text(self) -> str:
        return f"{self.mean:+.4f} [{self.low:+.4f}, {self.high:+.4f}]"


def paired_gap(rule: Sequence[float], control: Sequence[float], level: float = 0.95) -> PairedGap:
    """The paired t interval of ``rule[i] - control[i]`` (lower is better: a negative gap is a
    rule ahead). A pair with a non-finite side (a diverged run) makes the gap infinite."""
    if len(rule) != len(control):
        raise ValueError(f"paired runs differ in number: {len(rule)} and {len(control)}")
    if len(rule) < 2:
        raise ValueError(f"a paired interval needs at least 2 pairs, got {len(rule)}")
    differences = [r - c for r, c in zip(rule, control, strict=True)]
    if not all(math.isfinite(d) for d in differences):
        mean = math.inf if any(d > 0 or math.isnan(d) for d in differences) else -math.inf
        return PairedGap(mean, mean, mean, 0.0, len(differences))
    mean = statistics.fmean(differences)
    error = statistics.stdev(differences) / math.sqrt(len(differences))
    dof = len(differences) - 1
    half = student_t_quantile(1 - level, dof) * error
    p = 1.0 if mean == 0 and error == 0 else (0.0 if error == 0 else None)
    if p is None:
        p = student_t_two_sided_p(mean / error, dof)
    return PairedGap(mean, mean - half, mean + half, p, len(differences), error, dof)


def independent_pairs(pairs: Sequence[tuple[int, int]]) -> bool:
    """Whether every pair has a seed and a data order no other pair has (read by
    :func:`paired_gap`; a crossed design by :func:`crossed_gap`).

    >>> independent_pairs([(1000, 1003), (1001, 1007)]), independent_pairs([(3, 1), (4, 1)])
    (True, False)
    """
    seeds = [s for s, _ in pairs]
    orders = [o for _, o in pairs]
    return len(set(seeds)) == len(seeds) and len(set(orders)) == len(orders)


def gap_of_pairs(
    rule: Sequence[float],
    control: Sequence[float],
    pairs: Sequence[tuple[int, int]] | None = None,
    level: float = 0.95,
    first: int = 0,
) -> PairedGap:
    """``rule - control`` over held-out runs on ``pairs``: :func:`crossed_gap` where the pairs
    cross seeds with data orders (the design of the studies before independent pairs), else
    :func:`paired_gap` (independent pairs, or ``pairs`` not given). With ``first`` (a two-look
    design's first pairs) the gap carries its stages: the first ``first`` pairs, then the rest
    where there are two or more."""
    if pairs is not None and not independent_pairs(pairs):
        return crossed_gap(rule, control, pairs, level)
    gap = paired_gap(rule, control, level)
    differences = [r - c for r, c in zip(rule, control, strict=True)]
    if not first or len(differences) < first or not math.isfinite(gap.mean):
        return gap
    looks = [differences[:first]] + ([differences[first:]] if len(differences) > first + 1 else [])
    stages = tuple(
        (statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d)) for d in looks
    )
    return dataclasses.replace(gap, stages=stages)


def crossed_gap(
    rule: Sequence[float],
    control: Sequence[float],
    pairs: Sequence[tuple[int, int]],
    level: float = 0.95,
) -> PairedGap:
    """``rule - control`` over held-out runs whose pairs ``(seed, data order)`` cross every seed
    with every data order, with seed and data order as crossed random effects: the difference
    of pair (s, o) is ``mu + a_s + b_o + e_so``, so the mean's variance is
    ``var_a / S + var_b / O + var_e / (S O)``, not ``var / (S O)`` as if the pairs were
    independent (two runs on one seed share that seed's luck). The components come from the
    two-way ANOVA's mean squares (a component estimated below zero is taken as zero), the
    degrees of freedom from Satterthwaite's formula rounded down (integer t, conservative).
    With one seed or one data order it is :func:`paired_gap`.

    >>> pairs = [(s, o) for o in (1, 2) for s in (3, 4, 5)]
    >>> gap = crossed_gap([1.0, 1.1, 0.9, 1.0, 1.2, 0.9], [1.2, 1.2, 1.1, 1.1, 1.3, 1.0], pairs)
    >>> round(gap.mean, 4), gap.pairs
    (-0.1333, 6)
    """
    if not len(rule) == len(control) == len(pairs):
        raise ValueError(
            f"runs and pairs differ in number: {len(rule)}, {len(control)} and {len(pairs)}"
        )
    seeds = sorted({s for s, _ in pairs})
    orders = sorted({o for _, o in pairs})
    if len(set(pairs)) != len(pairs) or len(pairs) != len(seeds) * len(orders):
        raise ValueError(f"the pairs {list(pairs)} do not cross every seed with every data order")
    if len(seeds) < 2 or len(orders) < 2:
        return paired_gap(rule, control, level)
    differences = {pair: r - c for pair, r, c in zip(pairs, rule, control, strict=True)}
    values = list(differences.values())
    if not all(math.isfinite(d) for d in values):
        return paired_gap(rule, control, level)  # an infinite gap, as a diverged run gives
    n_s, n_o = len(seeds), len(orders)
    mean = statistics.fmean(values)
    by_seed = {s: statistics.fmean(differences[(s, o)] for o in orders) for s in seeds}
    by_order = {o: statistics.fmean(differences[(s, o)] for s in seeds) for o in orders}
    ms_seed = n_o * math.fsum((m - mean) ** 2 for m in by_seed.values()) / (n_s - 1)
    ms_order = n_s * math.fsum((m - mean) ** 2 for m in by_order.values()) / (n_o - 1)
    residual = math.fsum(
        (differences[(s, o)] - by_seed[s] - by_order[o] + mean) ** 2 for s in seeds for o in orders
    )
    ms_error = residual / ((n_s - 1) * (n_o - 1))
    keep_seed, keep_order = ms_seed > ms_error, ms_order > ms_error
    # the mean's variance as a combination of the mean squares: sum of coefficient x MS
    terms = [
        (keep_seed / (n_s * n_o), ms_seed, n_s - 1),
        (keep_order / (n_s * n_o), ms_order, n_o - 1),
        ((1 - keep_seed - keep_order) / (n_s * n_o), ms_error, (n_s - 1) * (n_o - 1)),
    ]
    variance = math.fsum(c * ms for c, ms, _ in terms)
    if variance <= 0:
        p = 1.0 if mean == 0 else 0.0
        return PairedGap(mean, mean, mean, p, len(values))
    dof_real = variance**2 / math.fsum((c * ms) ** 2 / d for c, ms, d in terms if c and ms)
    dof = max(1, math.floor(dof_real))
    error = math.sqrt(variance)
    half = student_t_quantile(1 - level, dof) * error
    p = student_t_two_sided_p(mean / error, dof)
    return PairedGap(mean, mean - half, mean + half, p, len(values), error, dof)


# The margin inside which a gap of held-out validation loss reads "equivalent" unless a family
# declares its own (docs/harness.md: finer than our runs repeat across machines, 0.0026 median).
EQUIVALENCE_MARGIN = 0.005


@dataclass(frozen=True)
class Word:
    """A comparison's word and the interval it is read from: ``rule - control`` at ``level``
    (its Holm level; the interval ``1 - level``), ``low`` and ``high`` NaN where no interval
    can be read (a diverged run: an infinite gap)."""

    word: str
    low: float
    high: float
    level: float

    def interval_text(self) -> str:
        if math.isnan(self.low):
            return "no interval (a diverged run)"
        return f"[{self.low:+.4f}, {self.high:+.4f}] at {1 - self.level:.2%}"


def read_word(low: float, high: float, margin: float) -> str:
    """The word an interval ``[low, high]`` of ``rule - control`` reads (lower is better):
    ``win`` below 0, ``loss`` above, ``equivalent`` inside ``(-margin, margin)``, else
    ``inconclusive``.

    >>> cases = [(-0.02, -0.01), (0.001, 0.01), (-0.004, 0.003), (-0.01, 0.002)]
    >>> [read_word(low, high, 0.005) for low, high in cases]
    ['win', 'loss', 'equivalent', 'inconclusive']
    """
    if high < 0:
        return "win"
    if low > 0:
        return "loss"
    if -margin < low and high < margin:
        return "equivalent"
    return "inconclusive"


def adjusted_interval(gap: PairedGap, level: float) -> tuple[float, float]:
    """``gap``'s two-sided ``1 - level`` t interval (its standard error and degrees of
    freedom)."""
    if gap.dof < 1 or math.isnan(gap.error):
        raise ValueError(f"the gap {gap.text()} carries no standard error to read it at {level}")
    half = student_t_quantile(level, gap.dof) * gap.error
    return gap.mean - half, gap.mean + half


def holm_words(
    gaps: Sequence[PairedGap], alpha: float = 0.05, margin: float = EQUIVALENCE_MARGIN
) -> list[Word]:
    """Each gap's word by Holm's step-down over the family's p values at ``alpha``: the k-th
    smallest p is tested at ``alpha / (m - k)``; those that pass read their interval at that
    level (win or loss: it excludes 0), every other gap at ``alpha / (m - r)``, ``r`` the
    number that passed (equivalent when that interval lies inside ``+-margin``, else
    inconclusive). A gap without an error (an infinite one: a diverged run) reads inconclusive
    with no interval; a gap with no pairs (pending) is ``p = 1``.

    >>> gaps = [PairedGap(-0.02, 0, 0, 0.001, 12, 0.004, 11),
    ...         PairedGap(0.0005, 0, 0, 0.8, 12, 0.0008, 11),
    ...         PairedGap(0.01, 0, 0, 0.3, 12, 0.009, 11)]
    >>> [w.word for w in holm_words(gaps)]
    ['win', 'equivalent', 'inconclusive']
    """
    m = len(gaps)
    order = sorted(range(m), key=lambda i: gaps[i].p)
    levels: list[float | None] = [None] * m
    for rank, index in enumerate(order):
        if gaps[index].p > alpha / (m - rank):
            break
        levels[index] = alpha / (m - rank)
    passed = sum(level is not None for level in levels)
    rest = alpha / (m - passed) if passed < m else alpha
    words = []
    for gap, step in zip(gaps, levels, strict=True):
        level = rest if step is None else step
        if gap.pairs == 0:
            words.append(Word("pending", math.nan, math.nan, level))
        elif not math.isfinite(gap.mean):
            words.append(Word("inconclusive", math.nan, math.nan, level))
        elif gap.dof < 1 or math.isnan(gap.error):
            # read back without its error: a passed step still says its direction
            word = "inconclusive" if step is None else ("win" if gap.mean < 0 else "loss")
            words.append(Word(word, math.nan, math.nan, level))
        else:
            low, high = adjusted_interval(gap, level)
            words.append(Word(read_word(low, high, margin), low, high, level))
    return words


def holm_decisions(
    gaps: Sequence[PairedGap], alpha: float = 0.05, margin: float = EQUIVALENCE_MARGIN
) -> list[str]:
    """The words of :func:`holm_words` alone."""
    return [w.word for w in holm_words(gaps, alpha, margin)]
