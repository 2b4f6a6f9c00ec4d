"""Coordinate descent over an optimizer's search space, as a pure function of the runs so far.

:meth:`CoordinateDescent.replay` walks the descent from the start point, reading each run's
final metric from ``results``. Where a decision needs runs that have not finished, it stops
and returns them (the frontier): those runs can train in any order, on any number of workers.
Every decision reads only runs that the descent itself asked for, so replaying it on more
results takes the same path: a killed study resumes by replaying, and nothing finished reruns.

The protocol:

1. From the start point, sweep one dimension at a time (the order of
   :data:`~torch_mars.train.search_space.LADDERS`): the current value and its two neighbours on
   the dimension's ladder; while the best is a neighbour at the edge of what was tried, one
   more step past it (up to ``max_extensions``). A value is accepted only if its selection
   score beats the current point's.
2. After each accepted change of another dimension, the lr is swept again.
3. A round is one pass over every dimension. The descent stops when a round improves the
   selection score by less than the seeds' noise (the sample std of the round's starting point
   over the selection seeds), or after ``max_rounds``.
4. Peers' points (``peers``: the study's other optimizers with the same dimensions but for
   gamma, :func:`~torch_mars.train.search_space.shares_space`): once every peer has descended,
   the point is tried against each peer's, moved onto it on every dimension both have, and a
   better one is taken (the lr then swept again). One round of the descent can end far from
   another optimizer's winner (at 128 sequences per step, Muon's one round ended 0.056 behind
   its own loss at MARS-Shampoo's settings): each optimizer of a pair gets the other's point.
5. The winner trains on the held-out seeds; its held-out mean is what a report shows.

Selection (``Selection``): the mean over the selection seeds of every candidate, or, with
``screen_top=k``, every candidate on the first selection seed and the ``k`` best of those, with
the current point, on the rest. A diverged run (NaN) scores worst.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution

from torch_mars.train.search_space import (
    LADDERS,
    Point,
    dimensions_of,
    hyperparams_of,
    parse_point_key,
    point_at,
    point_key,
    point_label,
    shares_space,
    values_of,
)

# A run's identity in a study: (optimizer, point key, seed).
RunId = tuple[str, str, int]
# Optuna's record of a point's dimensions: ranges wide enough that no ladder leaves them.
DISTRIBUTIONS: dict[str, BaseDistribution] = {
    "lr": FloatDistribution(1e-8, 100.0, log=True),
    "beta1": FloatDistribution(0.0, 1.0),
    "beta2": FloatDistribution(0.0, 1.0),
    "weight_decay": FloatDistribution(0.0, 100.0),
    "lr_1d_ratio": FloatDistribution(1e-6, 1e6, log=True),
    "weight_decay_1d": FloatDistribution(0.0, 100.0),
    "gamma": FloatDistribution(0.0, 10.0),
}


@dataclass(frozen=True)
class Selection:
    """How points are compared: ``seeds`` choose, ``heldout`` seeds read the winner, and
    ``screen_top`` (None: every candidate on every selection seed) screens on the first."""

    seeds: tuple[int, ...] = (0, 1, 2)
    heldout: tuple[int, ...] = (3, 4, 5)
    screen_top: int | None = None

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("selection needs at least one seed")
        if set(self.seeds) & set(self.heldout):
            raise ValueError(
                f"held-out seeds {self.heldout} must differ from selection seeds {self.seeds}"
            )
        if self.screen_top is not None and self.screen_top < 1:
            raise ValueError(f"screen_top must be >= 1, got {self.screen_top}")


@dataclass
class Sweep:
    """One sweep of the descent: the dimension, the points it tried, the one it kept."""

    dimension: str
    tried: list[Point]
    chosen: Point


@dataclass
class DescentState:
    """Where a replay stopped: the runs it needs next (empty once finished, or while
    ``waiting`` for its peers to descend), the sweeps it made, its current (or final) point,
    how many rounds it began, and the peer whose point it moved to (None if none)."""

    optimizer: str
    needed: list[RunId]
    sweeps: list[Sweep] = field(default_factory=list)
    point: Point = field(default_factory=dict)
    rounds: int = 0
    waiting: bool = False
    moved_to_peer: str | None = None

    @property
    def finished(self) -> bool:
        return not self.needed and not self.waiting


class _Needs(Exception):
    def __init__(self, runs: list[RunId]) -> None:
        super().__init__(f"{len(runs)} runs needed")
        self.runs = runs


def _badness(value: float) -> float:
    return math.inf if math.isnan(value) else value


@dataclass(frozen=True)
class CoordinateDescent:
    """The descent of one optimizer from ``start`` (lower metric is better), on the GPT config
    ``model`` (whose defaults fill what the space does not set)."""

    optimizer: str
    start: Point
    selection: Selection
    max_rounds: int = 3
    max_extensions: int = 4
    model: str = "tiny"
    peers: tuple[CoordinateDescent, ...] = ()

    def hyperparams(self, key: str) -> dict[str, Any]:
        return hyperparams_of(self.optimizer, parse_point_key(key), self.model)

    def trial_params(self, key: str) -> dict[str, tuple[Any, BaseDistribution]]:
        return {d: (v, DISTRIBUTIONS[d]) for d, v in values_of(parse_point_key(key)).items()}

    def label(self, key: str) -> str:
        return point_label(parse_point_key(key))

    def __post_init__(self) -> None:
        if set(self.start) != set(dimensions_of(self.optimizer)):
            raise ValueError(f"start point of {self.optimizer} lacks a dimension: {self.start}")
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {self.max_rounds}")
        for peer in self.peers:
            if peer.optimizer == self.optimizer or not shares_space(peer.optimizer, self.optimizer):
                raise ValueError(
                    f"{peer.optimizer} cannot be a peer of {self.optimizer}: a peer is another "
                    "optimizer with the same dimensions but for gamma"
                )

    def _run(self, point: Point, seed: int) -> RunId:
        return (self.optimizer, point_key(point), seed)

    def _need(
        self, results: Mapping[RunId, float], points: Sequence[Point], seeds: Sequence[int]
    ) -> None:
        wanted = [self._run(p, s) for p in points for s in seeds]
        missing = [run for run in dict.fromkeys(wanted) if run not in results]
        if missing:
            raise _Needs(missing)

    def score(self, results: Mapping[RunId, float], point: Point) -> float:
        """The selection score: mean over the selection seeds (NaN if any diverged)."""
        return math.fsum(results[self._run(point, s)] for s in self.selection.seeds) / len(
            self.selection.seeds
        )

    def _select(self, results: Mapping[RunId, float], candidates: list[Point], current: Point):
        seeds = self.selection.seeds
        if self.selection.screen_top is None:
            finalists = candidates
        else:
            self._need(results, candidates, seeds[:1])
            ranked = sorted(candidates, key=lambda p: _badness(results[self._run(p, seeds[0])]))
            finalists = [current] + [p for p in ranked[: self.selection.screen_top] if p != current]
        self._need(results, finalists, seeds)
        # the current point wins ties: a change is accepted only when it is strictly better
        ordered = [current] + [p for p in finalists if p != current]
        return min(ordered, key=lambda p: _badness(self.score(results, p)))

    def _sweep(
        self, results: Mapping[RunId, float], point: Point, dimension: str, sweeps: list[Sweep]
    ) -> Point:
        ladder = LADDERS[dimension]
        here = point[dimension]
        positions = [j for j in (here - 1, here, here + 1) if ladder.has(j)]
        for extension in range(self.max_extensions + 1):
            candidates = [{**point, dimension: j} for j in positions]
            best = self._select(results, candidates, point)
            j = best[dimension]
            if j == here or extension == self.max_extensions:
                break
            if j == positions[0] and ladder.has(j - 1):
                positions.insert(0, j - 1)
            elif j == positions[-1] and ladder.has(j + 1):
                positions.append(j + 1)
            else:
                break
        sweeps.append(Sweep(dimension, candidates, best))
        return best

    def replay(self, results: Mapping[RunId, float]) -> DescentState:
        """The descent as far as ``results`` take it (see the module's docstring)."""
        state = DescentState(self.optimizer, [])
        try:
            self._descend(results, state)
            if self.peers:
                peer_points = self._peer_points(results)
                if peer_points is None:
                    state.waiting = True
                    return state
                self._try_peer_points(results, state, peer_points)
            self._need(results, [state.point], self.selection.heldout)
        except _Needs as needs:
            state.needed = needs.runs
        return state

    def _descend(self, results: Mapping[RunId, float], state: DescentState) -> None:
        """The rounds from the start point, recorded in ``state`` (raises :class:`_Needs`)."""
        seeds = self.selection.seeds
        state.point = dict(self.start)
        for _ in range(self.max_rounds):
            state.rounds += 1
            round_start = state.point
            self._need(results, [round_start], seeds)
            for dimension in dimensions_of(self.optimizer):
                moved = self._sweep(results, state.point, dimension, state.sweeps)
                if moved != state.point:
                    state.point = moved
                    if dimension != "lr":
                        state.point = self._sweep(results, state.point, "lr", state.sweeps)
            start_values = [results[self._run(round_start, s)] for s in seeds]
            noise = statistics.stdev(start_values) if len(seeds) > 1 else 0.0
            gain = self.score(results, round_start) - self.score(results, state.point)
            if not gain >= noise or state.point == round_start:
                break

    def _peer_points(self, results: Mapping[RunId, float]) -> dict[str, Point] | None:
        """Each peer's point at the end of its rounds; None while a peer is still descending
        (its own search asks for the runs it needs)."""
        points = {}
        for peer in self.peers:
            progress = DescentState(peer.optimizer, [])
            try:
                peer._descend(results, progress)
            except _Needs:
                return None
            points[peer.optimizer] = progress.point
        return points

    def _try_peer_points(
        self, results: Mapping[RunId, float], state: DescentState, peer_points: dict[str, Point]
    ) -> None:
        """Select among the point and the peers' points moved onto it; a better one is taken
        and the lr swept again there."""
        current = state.point
        moves: dict[str, tuple[str, Point]] = {}
        for name, other in peer_points.items():
            moved = point_at(other, current)
            if moved != current:
                moves.setdefault(point_key(moved), (name, moved))
        if not moves:
            return
        candidates = [current] + [moved for _, moved in moves.values()]
        best = self._select(results, candidates, current)
        state.sweeps.append(Sweep("peers", candidates, best))
        if best != current:
            state.moved_to_peer = moves[point_key(best)][0]
            state.point = self._sweep(results, best, "lr", state.sweeps)
