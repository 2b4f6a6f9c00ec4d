"""The surface searches, ``torch-mars tune``'s default: a screen that moves every dimension within a
dozen trials, then lr profiles chosen by a local quadratic surface fitted on every trial so far,
as a pure function of the runs so far.

A trial is one point of an optimizer's declared space (:mod:`.space`) scored on the selection
seeds (by default one: the noise is paid where it decides, by the finalists). The walk:

1. **Start**: the optimizer's own defaults at their lr and its two 1.5x neighbours (no
   further: the screen and the steps move the lr on); then each peer's defaults moved onto its
   space (a peer: another optimizer of the study with the same dimensions but for gamma), one
   trial each at the peer's own lr. One rule for every optimizer.
2. **Screen**: from the best point so far, every dimension but the lr moved one ladder step
   (the direction drawn from ``order_seed``; the only one at a ladder's end), scored at the lr
   one step down, in the dimensions' order; then the same moves at the lr one step up. After
   the first pass (3 + peers + dimensions trials: 11 for MARS-AdamW in a study with its two
   peers) every dimension has been scored away from its start; after the second each one's
   slope in lr is known, so a (gamma, lr) ridge shows as an interaction before any step is
   taken on it.
3. **Steps**: a quadratic in the ladder positions (every dimension's linear and squared term,
   and the lr times each other dimension) is fitted by weighted least squares, the weights
   falling with the distance from the best point (a local model), with a small ridge penalty
   so that it is defined with fewer trials than terms. Each candidate, the best point's setting
   of the other dimensions moved by one step in one or two of them, is given its predicted
   best lr; the candidate predicted lowest that has not been profiled is lr-profiled from that
   lr. So the model chooses which dimensions move, and moves them together where it expects a
   gain, and the profile makes each step judge a setting at its own lr, which no model needs to
   get right. The steps go on until the trials are spent or every candidate has been profiled.
4. **Finalists** (where the selection names them): the best ``finalists`` points scored are
   read on the final seeds too, and the best mean over every choosing seed wins; without
   finalists the best point scored wins. The winner is then read on the held-out runs.

That walk is one class, :class:`SurfaceSearch`, whose :class:`SurfaceDesign` says how it screens,
fits, probes, steps and draws its finalists; :data:`DESIGNS` names each design a study ran:
``surface-3`` is tune's default (a dimension taken as straight until both sides of the best point
are scored, the finalists' lr hedged, a pair probe after the screen), ``surface`` and
``surface-2`` the campaigns' first two, ``surface-4``, ``-5`` and ``-6`` candidates measured
and not adopted (docs/harness-history.md). Each stays, so that the studies that ran it replay.

Every decision reads only runs the search asked for, and the path never depends on the budget:
a replay on more results takes the same path (a killed study resumes), and more trials extend
the same search (the shorter is a prefix). Why this design, and what it buys against the
lr-profiled coordinate descent (:mod:`.profiled`), is measured in docs/harness.md.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from torch_mars.train.study.engine import RunId
from torch_mars.train.study.profiled import ProfiledSearch, ProfiledState
from torch_mars.train.study.selection import badness, need
from torch_mars.train.study.space import LADDERS, Point, point_key

# The local model's reach: a trial k ladder steps (summed in squares) from the best point
# weighs exp(-k / (2 * WEIGHT_SCALE**2)).
WEIGHT_SCALE = 2.0
# The ridge penalty on every term but the constant, relative to the weights' sum, in units of
# the scores' spread: enough to define the fit with fewer trials than terms, too little to
# bend it where the trials decide.
RIDGE = 1e-3
# The penalty on the squared terms: a prior that the surface is straight along a dimension
# until trials on both sides of the best point show it bends. With one side scored (a screen
# step that lost), an even penalty splits the loss between slope and curvature and predicts no
# change on the other side, which is then never tried (measured at b64-4x: beta1 stepped up,
# lost, and 0.85 was never scored); this one gives the slope the loss, so the other side is
# predicted to gain and is tried. Both sides scored, it shrinks the curvature by ~10%.
CURVATURE_RIDGE = 3e-2
# How far from the best point's lr the model looks for a candidate's best lr (ladder steps).
LR_REACH = 3


def _features(
    offsets: np.ndarray, lr_column: int, pairs: tuple[tuple[int, int], ...] = ()
) -> np.ndarray:
    """The quadratic's terms for ``offsets`` (points x dimensions, ladder steps from the best
    point): 1, each offset, each offset squared, the lr's offset times each other one, and the
    product of each pair of columns in ``pairs``."""
    count, width = offsets.shape
    others = [j for j in range(width) if j != lr_column]
    columns = [np.ones(count), *offsets.T, *(offsets**2).T]
    columns += [offsets[:, lr_column] * offsets[:, j] for j in others]
    columns += [offsets[:, a] * offsets[:, b] for a, b in pairs]
    return np.stack(columns, axis=1)


@dataclass(frozen=True)
class LocalSurface:
    """A quadratic fitted around ``centre`` on the trials so far; :meth:`predict` gives the
    modelled score of points (lower is better)."""

    dimensions: tuple[str, ...]
    centre: Point
    coefficients: np.ndarray
    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def fit(
        cls,
        dimensions: tuple[str, ...],
        centre: Point,
        trials: list[tuple[Point, float]],
        curvature_ridge: float = RIDGE,
        pairs: tuple[tuple[str, str], ...] = (),
    ) -> LocalSurface:
        """Weighted ridge least squares on ``trials`` (``curvature_ridge``: the penalty on the
        squared terms; :data:`RIDGE` on every other; ``pairs``: dimensions whose product is a
        term too, besides the lr's with each other one); a diverged trial counts as the worst finite
        score (it says "worse here", not how much)."""
        finite = [badness(s) for _, s in trials if math.isfinite(badness(s))]
        worst = max(finite) if finite else 0.0
        scores = np.array([min(badness(s), worst) for _, s in trials])
        offsets = cls._offsets(dimensions, centre, [p for p, _ in trials])
        lr_column = dimensions.index("lr")
        terms = _features(offsets, lr_column, cls._columns(dimensions, pairs))
        weights = np.exp(-(offsets**2).sum(axis=1) / (2 * WEIGHT_SCALE**2))
        spread = float(np.std(scores)) or 1.0
        target = (scores - float(np.average(scores, weights=weights))) / spread
        root = np.sqrt(weights)[:, None]
        width = len(dimensions)
        strength = np.full(terms.shape[1], RIDGE)
        strength[1 + width : 1 + 2 * width] = curvature_ridge
        penalty = np.diag(np.sqrt(strength * float(weights.sum())))[1:]
        system = np.vstack([terms * root, penalty])
        rhs = np.concatenate([target * root[:, 0], np.zeros(terms.shape[1] - 1)])
        coefficients, *_ = np.linalg.lstsq(system, rhs, rcond=None)
        return cls(dimensions, dict(centre), coefficients, tuple(pairs))

    @staticmethod
    def _columns(
        dimensions: tuple[str, ...], pairs: tuple[tuple[str, str], ...]
    ) -> tuple[tuple[int, int], ...]:
        return tuple((dimensions.index(a), dimensions.index(b)) for a, b in pairs)

    @staticmethod
    def _offsets(dimensions: tuple[str, ...], centre: Point, points: list[Point]) -> np.ndarray:
        return np.array(
            [[p[d] - centre[d] for d in dimensions] for p in points], dtype=float
        ).reshape(len(points), len(dimensions))

    def sensitivity(self, dimension: str) -> float:
        """How much the fit's score moves along ``dimension`` near the centre: its linear
        coefficient's size plus its squared term's (per ladder step, in units of the scores'
        spread)."""
        i, width = self.dimensions.index(dimension), len(self.dimensions)
        return float(abs(self.coefficients[1 + i]) + abs(self.coefficients[1 + width + i]))

    def predict(self, points: list[Point]) -> np.ndarray:
        offsets = self._offsets(self.dimensions, self.centre, points)
        columns = self._columns(self.dimensions, self.pairs)
        return _features(offsets, self.dimensions.index("lr"), columns) @ self.coefficients


# The second design's finalists, in the report's words.
HEDGED_FINALISTS = (
    "its best point, that setting one lr step down, then the best points of other settings"
)


@dataclass(frozen=True)
class SurfaceDesign:
    """How a :class:`SurfaceSearch` walks: every choice its designs differ in, measured at
    b64-4x (docs/harness-history.md).

    Attributes:
        curvature_ridge: the fit's ridge on the squared terms: :data:`RIDGE` (even, the first
            design), or :data:`CURVATURE_RIDGE`, which takes a dimension as straight until
            trials on both sides of the best point show it bends, so that a screen step that
            lost predicts a gain the other way.
        single_steps: the ladder steps a candidate moves one dimension by (two dimensions move
            by one step each).
        follows_a_gain: a step that gained is taken once more the same way, lr-profiled,
            before the fit chooses again (Hooke and Jeeves' pattern move).
        hedged_finalists: the finalists are the best point, the same setting one lr step down
            (one selection seed flatters the lr at the stability edge most), then the best
            points of other settings; else the best points scored.
        screen: ``"one at a time"``: every dimension but the lr one step from the start, at the
            lr one step down then up; ``"joint"``: as many points moving every dimension
            together in balanced random signs (:func:`joint_screen_plan`).
        probe: after the screen, two dimensions moved together one step each, every sign, and
            their product a term of the fit: the two the fit finds the score most sensitive to
            (``"sensitivity"``), the pair whose product a fit with every pair's finds largest
            (``"product"``), or none.
        probe_profiled: the probe's best pair is lr-profiled at once.
    """

    curvature_ridge: float = RIDGE
    single_steps: tuple[int, ...] = (-1, 1, -2, 2)
    follows_a_gain: bool = False
    hedged_finalists: bool = False
    screen: str = "one at a time"
    probe: str = "none"
    probe_profiled: bool = False

    @property
    def finalists_drawn(self) -> str:
        """How the finalists are drawn, in the report's words."""
        return HEDGED_FINALISTS if self.hedged_finalists else ProfiledSearch.finalists_drawn


_SECOND = SurfaceDesign(curvature_ridge=CURVATURE_RIDGE, hedged_finalists=True)
_THIRD = dataclasses.replace(_SECOND, probe="sensitivity")
# Each design by the name a study records: tune's default first, then the campaigns' earlier
# two, then the candidates measured and not adopted (the fourth: the probe's pair profiled and
# one-step candidates; the fifth: a joint screen; the sixth: a pattern move).
DESIGNS: dict[str, SurfaceDesign] = {
    "surface-3": _THIRD,
    "surface-2": _SECOND,
    "surface": SurfaceDesign(),
    "surface-4": dataclasses.replace(_THIRD, single_steps=(-1, 1), probe_profiled=True),
    "surface-5": dataclasses.replace(_THIRD, screen="joint", probe="product"),
    "surface-6": dataclasses.replace(_THIRD, follows_a_gain=True),
}


@dataclass(frozen=True)
class SurfaceSearch(ProfiledSearch):
    """The search of one optimizer (see the module's docstring) by ``design`` (tune's default
    unless given); ``order_seed`` draws the screen's directions and the order it visits the
    dimensions in. ``max_rounds`` caps the model's steps (a quick look; a comparison never sets
    it)."""

    design: SurfaceDesign = DESIGNS["surface-3"]

    @property
    def finalists_drawn(self) -> str:  # type: ignore[override]
        return self.design.finalists_drawn

    def _search(self, results: Mapping[RunId, float], state: ProfiledState) -> None:
        dimensions = self.dimensions
        own, *peers = self.starts
        profiled = {self._setting_key(own)}
        self.score_points(results, state, [{**own, "lr": own["lr"] + k} for k in (0, -1, 1)])
        self.score_points(results, state, list(peers))
        state.moves.append("start")
        others = [d for d in dimensions if d != "lr"]
        self._screen(results, state, others)
        if self.design.probe != "none" and len(others) >= 2:
            self._probe(results, state, others)
        follow: Point | None = None
        while not self._capped(state):
            surface = self._fit(state)
            chosen = follow or self._next_step(surface, state.point, profiled)
            if chosen is None:
                self._spend_on_lr(results, state)
                return
            profiled.add(self._setting_key(chosen))
            state.rounds += 1
            incumbent, before = dict(state.point), self._best_score(state)
            self._profile(results, state, chosen)
            follow = None
            if self._best_score(state) < before:
                moved = [d for d in dimensions if d != "lr" and chosen[d] != incumbent[d]]
                state.moves.append("+".join(moved))
                if self.design.follows_a_gain:
                    follow = self._continued(state.point, incumbent, moved, profiled)

    def _fit(self, state: ProfiledState) -> LocalSurface:
        """The local surface around the best point so far, with the products of
        ``state.pairs``."""
        return LocalSurface.fit(
            self.dimensions, state.point, state.trials, self.design.curvature_ridge, state.pairs
        )

    @staticmethod
    def _setting_key(point: Point) -> str:
        return point_key({d: i for d, i in point.items() if d != "lr"})

    def _screen(
        self, results: Mapping[RunId, float], state: ProfiledState, others: list[str]
    ) -> None:
        """The design's screen from the best point so far (:attr:`SurfaceDesign.screen`)."""
        centre = dict(state.point)
        if self.design.screen == "joint":
            points = []
            for moves in joint_screen_plan(others, 2 * len(others), self.order_seed):
                point = dict(centre)
                for dimension, step in moves.items():
                    here, ladder = centre[dimension], self.ladder(dimension)
                    point[dimension] = next(
                        (here + s for s in (step, -step) if ladder.has(here + s)), here
                    )
                points.append(point)
            self.score_points(results, state, points)
            state.moves.append("screen")
            return
        draw = random.Random(self.order_seed)
        order = list(others)
        draw.shuffle(order)
        moved = []
        for dimension in order:
            step = draw.choice((-1, 1))
            if not self.ladder(dimension).has(centre[dimension] + step):
                step = -step
            if self.ladder(dimension).has(centre[dimension] + step):
                moved.append({**centre, dimension: centre[dimension] + step})
        for lr_step in (-1, 1):
            self.score_points(results, state, [{**p, "lr": centre["lr"] + lr_step} for p in moved])
        state.moves.append("screen")

    def _probe(
        self, results: Mapping[RunId, float], state: ProfiledState, others: list[str]
    ) -> list[tuple[Point, float]]:
        """The pair probe from the best point so far (:attr:`SurfaceDesign.probe`); returns the
        probes scored."""
        centre = dict(state.point)
        a, b = self._probe_pair(state, others)
        state.pairs = ((a, b),)
        probes = [
            point
            for step_a in (-1, 1)
            for step_b in (-1, 1)
            if (point := self._neighbour(centre, {a: step_a, b: step_b})) is not None
        ]
        scored = self.score_points(results, state, probes)
        state.moves.append(f"probe {a}+{b}")
        finite = [(p, s) for p, s in scored if math.isfinite(badness(s))]
        if self.design.probe_profiled and finite:
            best, _ = min(finite, key=lambda ps: badness(ps[1]))
            self._profile(results, state, best)
            state.moves.append("probe profiled")
        return scored

    def _probe_pair(self, state: ProfiledState, others: list[str]) -> tuple[str, str]:
        """The two dimensions the fit finds the score most sensitive to, or (``"product"``) the
        pair whose product is largest in a fit with every pair's product."""
        if self.design.probe == "product":
            pairs = tuple(combinations(others, 2))
            surface = LocalSurface.fit(
                self.dimensions, state.point, state.trials, self.design.curvature_ridge, pairs
            )
            products = surface.coefficients[-len(pairs) :]
            return pairs[int(np.argmax(np.abs(products)))]
        surface = self._fit(state)
        a, b = sorted(others, key=lambda d: -surface.sensitivity(d))[:2]
        return a, b

    def _continued(
        self, best: Point, incumbent: Point, moved: list[str], profiled: set[str]
    ) -> Point | None:
        """``best`` moved once more by the step that took ``incumbent``'s setting to it (the
        dimensions ``moved``), at ``best``'s lr; None where that leaves a ladder or was
        profiled already."""
        point = self._neighbour(best, {d: best[d] - incumbent[d] for d in moved})
        if point is None or self._setting_key(point) in profiled:
            return None
        return point

    def _next_step(self, surface: LocalSurface, best: Point, profiled: set[str]) -> Point | None:
        """The candidate setting (one dimension of ``best`` moved by one of the design's
        :attr:`~SurfaceDesign.single_steps`, or two by one step each) predicted lowest at its
        own predicted best lr, among those not yet profiled."""
        others = [d for d in surface.dimensions if d != "lr"]
        moves = [{d: s} for d in others for s in self.design.single_steps]
        moves += [
            {a: sa, b: sb} for a, b in combinations(others, 2) for sa in (-1, 1) for sb in (-1, 1)
        ]
        candidates = []
        for move in moves:
            point = self._neighbour(best, move)
            if point is not None and self._setting_key(point) not in profiled:
                candidates.append(point)
        if not candidates:
            return None
        lrs = range(best["lr"] - LR_REACH, best["lr"] + LR_REACH + 1)
        grid = [{**p, "lr": lr} for p in candidates for lr in lrs]
        predicted = surface.predict(grid).reshape(len(candidates), len(lrs))
        best_lr = predicted.argmin(axis=1)
        values = predicted[np.arange(len(candidates)), best_lr]
        index = int(np.argmin(values))  # the first of equals: the moves' declared order
        return {**candidates[index], "lr": best["lr"] - LR_REACH + int(best_lr[index])}

    def _final(self, results: Mapping[RunId, float], state: ProfiledState) -> None:
        count = self.selection.finalists
        finite = sorted(
            ((p, s) for p, s in state.trials if math.isfinite(badness(s))), key=lambda ps: ps[1]
        )
        if not self.design.hedged_finalists or not count or not finite:
            super()._final(results, state)
            return
        best = finite[0][0]
        chosen = [best]
        lower = {**best, "lr": best["lr"] - 1}
        if count > 1 and LADDERS["lr"].has(lower["lr"]):
            chosen.append(lower)
        settings = {self._setting_key(p) for p in chosen}
        for point, _ in finite:
            if len(chosen) >= count:
                break
            if self._setting_key(point) not in settings:
                chosen.append(point)
                settings.add(self._setting_key(point))
        pairs = self.selection.choosing_pairs()
        need(results, [self.run(p, s, d) for p in chosen for s, d in pairs])
        scored = [(p, self.score(results, p, pairs)) for p in chosen]
        state.finalists = sorted(scored, key=lambda ps: self.rank(results, ps[0], pairs))
        state.point = state.finalists[0][0]


def joint_screen_plan(dimensions: list[str], count: int, seed: int) -> list[dict[str, int]]:
    """The joint screen's moves (ladder steps from the centre): ``count`` points, each moving
    every one of ``dimensions`` one step (a balanced column of -1 and +1 per dimension) and the
    lr by -1, 0 or +1 (balanced), the columns shuffled in turn by one generator seeded ``seed``."""
    draw = random.Random(seed)

    def column(levels: tuple[int, ...]) -> list[int]:
        values = [levels[i % len(levels)] for i in range(count)]
        draw.shuffle(values)
        return values

    columns = {d: column((-1, 1)) for d in dimensions}
    columns["lr"] = column((-1, 0, 1))
    return [{d: values[i] for d, values in columns.items()} for i in range(count)]
