"""Verdicts that decide: four words from one rule, over independent pairs read in up to two
stages (issue "Verdicts that decide").

A comparison reads ``rule - control`` (lower is better) on pairs, each pair one seed and one
data order of its own, both sides trained on one machine. Its word, from the interval at the
comparison's multiplicity-adjusted level:

- ``win`` / ``loss``: the interval excludes 0 (below it: the rule ahead);
- ``equivalent``: the interval lies inside ``(-margin, +margin)``;
- ``inconclusive``: neither.

**Two looks.** The first ``design.first`` pairs are read first; a comparison inconclusive
there gets more pairs (planned from its measured spread, :func:`second_stage_pairs`, up to
``design.cap`` in all) and is read again. Each stage's paired t is mapped to a standard normal
(``z = Φ⁻¹(F_t(t))``, exact for normal differences), and the second look reads the
inverse-normal combination ``Z = w1·z1 + w2·z2`` with weights declared before the first run
(``w1² = first / cap``). Under any hypothesis ``gap = δ`` the stage-2 ``z2(δ)`` is standard
normal whatever number of pairs stage 1 chose, so ``(z1, Z)`` is bivariate normal with
correlation ``w1`` and the boundaries below are exact for any planning rule. The boundary is
Pocock's: the same ``c`` at both looks, ``P(|z1| ≥ c or |Z| ≥ c) = level``
(:func:`boundary`); inverting the test over ``δ`` gives the interval a word is read from
(:func:`interval`), valid at both looks.

**Holm.** Over the declared family, by Holm's step-down on the final statistics: the ``k``-th
largest ``|Z(0)|`` is tested at ``alpha / (m - k)``; those that pass are win or loss, read at
their step's level; every other comparison is read at ``alpha / (m - r)`` (``r`` passed), the
level its equivalence is read at. :func:`simulate_family` measures the family-wise rate of
wrong words (a win or loss in the wrong direction or at a gap of 0, an equivalent at a gap of
at least the margin) and the share of decided words, over simulated families.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from torch_mars.train.study.verdict import read_word, student_t_two_sided_p

WORDS = ("win", "loss", "equivalent", "inconclusive")
_NORMAL = statistics.NormalDist()


@dataclass(frozen=True)
class Design:
    """What a campaign or a study declares before its first run: the family-wise ``alpha``,
    the equivalence ``margin`` (in the metric's units: nats of validation loss), the pairs of
    the first look and the cap on pairs per comparison (the second look's weight follows)."""

    alpha: float = 0.05
    margin: float = 0.005
    first: int = 12
    cap: int = 64

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not self.margin > 0:
            raise ValueError(f"margin must be > 0, got {self.margin}")
        if self.first < 3:
            raise ValueError(f"first must be >= 3 pairs, got {self.first}")
        if self.cap < self.first:
            raise ValueError(f"cap ({self.cap}) must be >= first ({self.first})")

    @property
    def weights(self) -> tuple[float, float]:
        """The inverse-normal weights ``(w1, w2)`` of the two looks, ``w1² + w2² = 1``."""
        w1 = math.sqrt(self.first / self.cap)
        return w1, math.sqrt(1 - w1 * w1)


def _z_of_t(t: float, dof: int) -> float:
    """``Φ⁻¹(F_t(t))`` computed on the smaller tail, so that large ``|t|`` keep their digits."""
    if math.isinf(t):
        return math.copysign(math.inf, t)
    tail = student_t_two_sided_p(t, dof) / 2
    if tail <= 0:
        return math.copysign(40.0, t)
    z = -_NORMAL.inv_cdf(tail)
    return z if t >= 0 else -z


@dataclass(frozen=True)
class Stage:
    """One look's pairs, as their differences ``rule - control`` summarise: the mean, its
    standard error and the number of pairs (:meth:`of` builds it from the differences)."""

    mean: float
    error: float
    n: int

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ValueError(f"a stage needs at least 2 pairs, got {self.n}")
        if not (math.isfinite(self.mean) and math.isfinite(self.error) and self.error >= 0):
            raise ValueError("a stage's mean and error must be finite (a diverged run reads none)")

    @classmethod
    def of(cls, differences: Sequence[float]) -> Stage:
        if len(differences) < 2:
            raise ValueError(f"a stage needs at least 2 pairs, got {len(differences)}")
        if not all(math.isfinite(d) for d in differences):
            raise ValueError("a stage's differences must be finite (a diverged run reads no word)")
        error = statistics.stdev(differences) / math.sqrt(len(differences))
        return cls(statistics.fmean(differences), error, len(differences))

    def z(self, delta: float) -> float:
        """The stage's paired t for ``gap = delta``, as a standard normal."""
        if self.error == 0:
            return 0.0 if self.mean == delta else math.copysign(math.inf, self.mean - delta)
        return _z_of_t((self.mean - delta) / self.error, self.n - 1)


def design_of(declaration: Mapping[str, Any]) -> Design | None:
    """The two-look design a campaign's declaration states (its ``verdict`` with ``looks`` and
    its ``pairs``), or None for a declaration of one look."""
    verdict, pairs = declaration.get("verdict"), declaration.get("pairs")
    if not isinstance(verdict, Mapping) or "looks" not in verdict or not isinstance(pairs, Mapping):
        return None
    try:
        return Design(
            alpha=float(verdict["alpha"]),
            margin=float(verdict["margin"]),
            first=int(pairs["first_stage"]),
            cap=int(pairs["cap"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"the declaration's verdict design is incomplete ({error})") from None


def _two_look_coverage(c: float, w1: float, points: int = 801) -> float:
    """``P(|z1| < c and |w1 z1 + w2 z2| < c)`` for independent standard normals (Simpson's
    rule over ``z1``)."""
    w2 = math.sqrt(1 - w1 * w1)
    if w2 == 0:
        return 2 * _NORMAL.cdf(c) - 1
    h = 2 * c / (points - 1)
    total = 0.0
    for i in range(points):
        z1 = -c + i * h
        inner = _NORMAL.cdf((c - w1 * z1) / w2) - _NORMAL.cdf((-c - w1 * z1) / w2)
        weight = 1 if i in (0, points - 1) else (4 if i % 2 else 2)
        total += weight * _NORMAL.pdf(z1) * inner
    return total * h / 3


@lru_cache(maxsize=4096)
def boundary(level: float, w1: float) -> float:
    """Pocock's two-look critical value ``c``: ``P(|z1| >= c or |Z| >= c) = level`` under the
    hypothesis, ``Z = w1 z1 + w2 z2`` (a one-look design at ``w1 = 1``).

    >>> round(boundary(0.05, 1.0), 3)
    1.96
    >>> round(boundary(0.05, math.sqrt(0.5)), 3)
    2.178
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    low, high = 0.0, 12.0
    for _ in range(60):
        middle = (low + high) / 2
        if 1 - _two_look_coverage(middle, w1) > level:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclass(frozen=True)
class Reading:
    """One comparison as read so far: its first look and, where it had one, its second."""

    key: str
    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.stages) <= 2:
            raise ValueError(f"{self.key}: one or two stages, got {len(self.stages)}")

    @property
    def pairs(self) -> int:
        return sum(s.n for s in self.stages)

    @property
    def mean(self) -> float:
        """The mean difference over every pair read."""
        return math.fsum(s.mean * s.n for s in self.stages) / self.pairs

    def statistic(self, delta: float, design: Design) -> float:
        """``z1(delta)`` after one look, ``w1 z1 + w2 z2`` after two."""
        if len(self.stages) == 1:
            return self.stages[0].z(delta)
        w1, w2 = design.weights
        return w1 * self.stages[0].z(delta) + w2 * self.stages[1].z(delta)


def interval(reading: Reading, design: Design, level: float) -> tuple[float, float]:
    """The values ``δ`` of ``rule - control`` the two-look test at ``level`` does not reject:
    ``{δ : |statistic(δ)| < c}`` (the statistic falls as ``δ`` grows; bisection)."""
    c = boundary(level, design.weights[0])
    spread = max(s.error for s in reading.stages)
    centre = reading.mean
    if spread == 0:
        return centre, centre

    def solve(target: float) -> float:
        low, high = centre - 1e3 * spread - 1.0, centre + 1e3 * spread + 1.0
        for _ in range(200):
            middle = (low + high) / 2
            if reading.statistic(middle, design) > target:
                low = middle
            else:
                high = middle
        return (low + high) / 2

    return solve(c), solve(-c)


@dataclass(frozen=True)
class Verdict:
    """A comparison's word and the interval it was read from, at ``level`` (its Holm level)."""

    key: str
    word: str
    mean: float
    low: float
    high: float
    level: float
    pairs: int
    looks: int


def holm_levels(statistics_at_zero: Sequence[float], design: Design) -> list[tuple[float, bool]]:
    """Each comparison's ``(level, passed)`` by Holm's step-down over ``|Z(0)|``."""
    m = len(statistics_at_zero)
    w1 = design.weights[0]
    order = sorted(range(m), key=lambda i: -abs(statistics_at_zero[i]))
    out: list[tuple[float, bool]] = [(0.0, False)] * m
    passed = 0
    for rank, index in enumerate(order):
        level = design.alpha / (m - rank)
        if abs(statistics_at_zero[index]) >= boundary(level, w1):
            out[index] = (level, True)
            passed += 1
        else:
            break
    rest = design.alpha / (m - passed) if passed < m else design.alpha
    return [o if o[1] else (rest, False) for o in out]


def read_family(readings: Sequence[Reading | None], design: Design) -> list[Verdict | None]:
    """Every comparison's word over the declared family, each read at its Holm level; a
    comparison not read yet (None) holds its place in the family (it passes no step) and has
    no verdict."""
    levels = holm_levels([0.0 if r is None else r.statistic(0.0, design) for r in readings], design)
    verdicts: list[Verdict | None] = []
    for reading, (level, _) in zip(readings, levels, strict=True):
        if reading is None:
            verdicts.append(None)
            continue
        low, high = interval(reading, design, level)
        verdicts.append(
            Verdict(
                reading.key,
                read_word(low, high, design.margin),
                reading.mean,
                low,
                high,
                level,
                reading.pairs,
                len(reading.stages),
            )
        )
    return verdicts


# The planning rule's share of the target a second look aims its half-width at.
PLANNING_POWER = 0.8


def planned_pairs(mean: Any, sd: Any, critical: Any, n1: int, design: Design) -> Any:
    """The planning rule, on numbers or arrays alike: enough pairs that an interval with
    critical value ``critical`` at the first stage's per-pair spread ``sd`` would have a
    half-width of :data:`PLANNING_POWER` times the larger of ``|mean|`` (to exclude 0) and
    ``margin - |mean|`` (to fit inside the margin); rounded up to a multiple of 4, at least
    4, at most ``cap - n1``."""
    # never 0: the larger of |mean| and margin - |mean| is at least half the margin
    target = PLANNING_POWER * np.maximum(np.abs(mean), design.margin - np.abs(mean))
    wanted = np.ceil((critical * sd / target) ** 2)
    extra = np.maximum(4, 4 * np.ceil(np.maximum(0, wanted - n1) / 4))
    return np.clip(extra, 2, design.cap - n1).astype(int)


def second_stage_pairs(first: Stage, design: Design, level: float) -> int:
    """Pairs a comparison inconclusive after ``first`` gets next (:func:`planned_pairs` at
    ``level``'s critical value). The rule only spends runs: the boundaries hold whatever it
    returns."""
    if design.cap - first.n < 2:
        return 0
    c = boundary(level, design.weights[0])
    return int(planned_pairs(first.mean, first.error * math.sqrt(first.n), c, first.n, design))


# Where a study's two looks draw their pairs (``tune(two_looks=True)``): LOOKS_POOL seeds and
# as many data orders, each drawn without replacement from this range by a generator seeded
# with LOOKS_DRAW_SEED, once, the same for every study (above every selection and finalist
# seed of the protocol); a study reads a prefix, so its first look's pairs open its second's.
LOOKS_PAIR_RANGE = (1000, 9999)
LOOKS_DRAW_SEED = 4
LOOKS_POOL = 1024


def drawn_pairs(count: int) -> tuple[tuple[int, int], ...]:
    """The first ``count`` pairs ``(seed, data order)`` a study with two looks reads, in order:
    the first look's, then the second's (each pair a seed and a data order of its own).

    >>> drawn_pairs(12) == drawn_pairs(64)[:12]
    True
    """
    if not 0 <= count <= LOOKS_POOL:
        raise ValueError(f"a study draws at most {LOOKS_POOL} pairs, not {count}")
    draw = random.Random(LOOKS_DRAW_SEED)
    population = range(LOOKS_PAIR_RANGE[0], LOOKS_PAIR_RANGE[1] + 1)
    seeds = draw.sample(population, LOOKS_POOL)
    orders = draw.sample(population, LOOKS_POOL)
    return tuple(zip(seeds, orders, strict=True))[:count]


def second_look(inconclusive: Sequence[tuple[Stage, float]], design: Design, read: int) -> int:
    """How many pairs a study reads after its second look: its ``read`` pairs where no
    comparison is inconclusive on its first look alone (``(first stage, Holm level)`` each),
    else the first look's plus the most any of them plans (:func:`second_stage_pairs`), up to
    the cap."""
    wanted = read
    for stage, level in inconclusive:
        wanted = max(wanted, design.first + second_stage_pairs(stage, design, level))
    return min(wanted, design.cap)


# -- simulation: the design's error rate and decided share over simulated families -------------


def _t_cdf_array(t: np.ndarray, dof: int) -> np.ndarray:
    """Student's t lower tail ``F_t(-|t|)`` of an array at one integer ``dof`` (the series of
    :func:`~torch_mars.train.study.verdict.student_t_two_sided_p`), on the small tail to keep
    the digits of large statistics."""
    theta = np.arctan(np.abs(t) / math.sqrt(dof))
    c2 = np.cos(theta) ** 2
    if dof % 2 == 1:
        total = np.zeros_like(t)
        term = np.cos(theta)
        if dof > 1:
            total = term.copy()
            for k in range(2, dof - 1, 2):
                term = term * c2 * k / (k + 1)
                total = total + term
        inside = 2 / math.pi * (theta + np.sin(theta) * total)
    else:
        total = np.ones_like(t)
        term = np.ones_like(t)
        for k in range(1, dof - 2, 2):
            term = term * c2 * k / (k + 1)
            total = total + term
        inside = np.sin(theta) * total
    return np.clip((1 - inside) / 2, 1e-300, 0.5)


_INV_CDF = np.vectorize(_NORMAL.inv_cdf, otypes=[float])


def _z_array(mean: np.ndarray, error: np.ndarray, delta: float, dof: int) -> np.ndarray:
    """:meth:`Stage.z` of many stages with ``dof + 1`` pairs each."""
    t = (mean - delta) / error
    z = -_INV_CDF(_t_cdf_array(t, dof))
    return np.where(t >= 0, z, -z)


@dataclass(frozen=True)
class Simulated:
    """A design's operating characteristics over simulated families."""

    families: int
    wrong: float  # the share of families with at least one wrong word
    decided: float  # the share of words that are win, loss or equivalent
    decided_first: float  # ... after the first look alone
    mean_pairs: float  # pairs a comparison used, on average

    def text(self) -> str:
        return (
            f"{self.families} families: wrong words in {self.wrong:.4f} of them; "
            f"{self.decided:.1%} of words decided ({self.decided_first:.1%} at the first look), "
            f"{self.mean_pairs:.1f} pairs a comparison on average"
        )


def _words(
    z0: np.ndarray, zlow: np.ndarray, zhigh: np.ndarray, design: Design
) -> tuple[np.ndarray, np.ndarray]:
    """Holm's words of many families at once: ``z0``, ``zlow``, ``zhigh`` (families x m) are
    the statistics at 0, ``-margin`` and ``+margin``; codes 0 win, 1 loss, 2 equivalent, 3
    inconclusive, and each comparison's critical value."""
    families, m = z0.shape
    w1 = design.weights[0]
    thresholds = np.array([boundary(design.alpha / (m - k), w1) for k in range(m)])
    order = np.argsort(-np.abs(z0), axis=1)
    ranked = np.take_along_axis(np.abs(z0), order, axis=1)
    passing = np.cumprod(ranked >= thresholds, axis=1).astype(bool)
    passed = passing.sum(axis=1)
    rest = np.array([boundary(design.alpha / (m - r), w1) if r < m else 0.0 for r in range(m + 1)])
    critical = np.repeat(rest[passed][:, None], m, axis=1)
    rejected = np.zeros_like(passing)
    np.put_along_axis(rejected, order, passing, axis=1)
    step_c = np.zeros((families, m))
    np.put_along_axis(step_c, order, np.broadcast_to(thresholds, (families, m)), axis=1)
    critical = np.where(rejected, step_c, critical)
    codes = np.full((families, m), 3)
    equivalent = (zlow >= critical) & (zhigh <= -critical)
    codes[equivalent] = 2
    codes[rejected & (z0 <= 0)] = 0
    codes[rejected & (z0 > 0)] = 1
    return codes, critical


def simulate_family(
    design: Design,
    gaps: Sequence[float],
    spreads: Sequence[float],
    families: int = 10_000,
    seed: int = 0,
    two_looks: bool = True,
) -> Simulated:
    """The design run on ``families`` simulated families whose comparison ``j`` has true gap
    ``gaps[j]`` and per-pair standard deviation ``spreads[j]`` (normal differences): the share
    of families with a wrong word (:func:`wrong_words`), the share of decided words, and the
    pairs spent. ``two_looks=False``: the first look only (the design without a second stage)."""
    if len(gaps) != len(spreads):
        raise ValueError(f"gaps and spreads differ in number: {len(gaps)} and {len(spreads)}")
    rng = np.random.default_rng(seed)
    theta = np.asarray(gaps, dtype=float)
    sigma = np.asarray(spreads, dtype=float)
    m = len(theta)
    n1 = design.first
    first = theta[:, None] + sigma[:, None] * rng.standard_normal((families, m, n1))
    mean1 = first.mean(axis=2)
    error1 = first.std(axis=2, ddof=1) / math.sqrt(n1)
    z1 = [_z_array(mean1, error1, delta, n1 - 1) for delta in (0.0, -design.margin, design.margin)]
    codes1, critical1 = _words(*z1, design)
    decided_first = float(np.mean(codes1 != 3))
    pairs = np.full((families, m), n1)
    final = [z.copy() for z in z1]
    if two_looks:
        more = codes1 == 3
        extra = planned_pairs(mean1, error1 * math.sqrt(n1), critical1, n1, design)
        w1, w2 = design.weights
        for n2 in np.unique(extra[more]):
            where = more & (extra == n2)
            count = int(where.sum())
            second = theta[np.nonzero(where)[1]][:, None] + sigma[np.nonzero(where)[1]][
                :, None
            ] * rng.standard_normal((count, n2))
            mean2 = second.mean(axis=1)
            error2 = second.std(axis=1, ddof=1) / math.sqrt(n2)
            for k, delta in enumerate((0.0, -design.margin, design.margin)):
                z2 = _z_array(mean2, error2, delta, n2 - 1)
                final[k][where] = w1 * z1[k][where] + w2 * z2
            pairs[where] += n2
    codes, _ = _words(*final, design)
    wrong = wrong_words(codes, theta, design.margin)
    return Simulated(
        families,
        float(np.mean(wrong.any(axis=1))),
        float(np.mean(codes != 3)),
        decided_first,
        float(pairs.mean()),
    )


def wrong_words(codes: np.ndarray, gaps: np.ndarray, margin: float) -> np.ndarray:
    """Which words are wrong for true ``gaps``: a win where the gap is not below 0, a loss
    where it is not above 0, an equivalent where it is at least ``margin`` from 0."""
    return (
        ((codes == 0) & (gaps >= 0))
        | ((codes == 1) & (gaps <= 0))
        | ((codes == 2) & (np.abs(gaps) >= margin))
    )
