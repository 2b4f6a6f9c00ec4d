"""The search of ``torch-mars tune``: lr-profiled coordinate descent on a fixed trial budget, as
a pure function of the runs so far.

A *trial* is one point of an optimizer's declared space (:mod:`.space`) scored on the
selection seeds (the mean of their final metrics; a diverged run scores worst). Every optimizer
of a study gets the same ``trials``; the search spends exactly that many unless no move is
left to try.

Every value of every other dimension is judged at its own best lr (its *lr profile*): the lr is
swept on its 1.5x ladder around the current best lr (that lr and its two neighbours, then one
more step past an edge while the best is there, up to ``max_extensions``). So a ridge such as
(gamma, lr), where a larger gamma clips c more often and wants a larger step, is followed: a
gamma is never judged at another gamma's lr.

The protocol:

1. Starts, one rule for every optimizer: its own defaults, then each peer's defaults moved onto
   its space (a peer: another optimizer of the study with the same dimensions but for gamma),
   each lr-profiled. The best is the current point.
2. Rounds: each dimension but the lr in turn (the order is shuffled by ``order_seed``), its two
   neighbours of the current point lr-profiled; a better one is taken, and the search steps on
   in that direction while it keeps gaining. A round that gains less than the selection seeds'
   standard error at its start ends the rounds.
3. Pairs: every pair of dimensions moved together by one step each way (four moves a pair),
   lr-profiled; the first move that gains is taken and the rounds begin again.
4. The search ends when its trials are spent, no move is left, or after ``max_rounds`` rounds
   where that is set (then it may spend fewer trials: a cap for quick looks, never for a
   comparison, whose searches all spend their trials).
5. Finalists (where the selection names them): the best ``finalists`` points it scored are
   read on the final seeds too, and the best mean over every choosing seed wins; without
   finalists the best point it scored wins.
   With the selection's ``stable_winners`` a finalist with a diverged run among its choosing
   runs ranks after every one without (:meth:`ProfiledSearch.rank`), here and in step 6.
6. Peers' winners (where the selection says ``peer_winners``): each peer's winner (its own,
   before this step) moved onto this space, at this winner's values of the dimensions the peer
   lacks, is read on the same choosing runs; the best mean over the winner and them is the
   best-known setting, and it is what the held-out runs read. A search stopped short is then
   not what a verdict reads (issue "Verdicts that decide": the strongest known opponent). So
   are the winners stored studies of the same point found (``known``: ``tune
   --known-winners``), each moved onto this space the same way.
7. The winner is read on the held-out runs (:class:`~.selection.Selection`): new
   initialisations on new data orders.

Every decision reads only runs the search asked for, so replaying it on more results takes the
same path: a killed study resumes by replaying, and nothing finished reruns.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, ClassVar

from optuna.distributions import BaseDistribution, FloatDistribution

from torch_mars.train.study.engine import RunId
from torch_mars.train.study.pairs import diverged
from torch_mars.train.study.selection import Needs, Selection, badness, need
from torch_mars.train.study.space import (
    DISTRIBUTIONS,
    EXTRA_KEY,
    LADDERS,
    Fixed,
    Ladder,
    Ladders,
    Point,
    free_dimensions,
    hyperparams_of,
    ladder_of,
    parse_point_key,
    point_at,
    point_key,
    point_label,
    split_extra,
)


class BudgetSpent(Exception):
    """Raised by :meth:`ProfiledSearch.score_points` once the trial budget is spent: the replay
    ends the walk there."""


@dataclass
class ProfiledState:
    """Where a replay stopped: the runs it needs next (empty once finished), each trial
    ``(point, selection score)`` in the order the search asked for them, the best point so
    far (the winner once finished), the finalists ``(point, mean over every choosing seed)``
    best first, the rounds begun, the moves taken (``"start"``, a dimension, or ``"a+b"``)
    and the pairs of dimensions whose product a surface search fits (its pair probe's). With
    peers' winners read: the search's own winner and its mean over every choosing run, and each
    ``(peer, point on this space, mean over every choosing run)``; ``point`` is then the
    best-known of them."""

    optimizer: str
    needed: list[RunId]
    trials: list[tuple[Point, float]] = field(default_factory=list)
    point: Point = field(default_factory=dict)
    finalists: list[tuple[Point, float]] = field(default_factory=list)
    rounds: int = 0
    moves: list[str] = field(default_factory=list)
    spent: bool = False
    pairs: tuple[tuple[str, str], ...] = ()
    own_point: Point = field(default_factory=dict)
    own_score: float = math.nan
    # the needed runs are trials' runs, which a study that prunes may stop early
    prunable: bool = False
    peer_points: list[tuple[str, Point, float]] = field(default_factory=list)

    @property
    def best_known_from(self) -> str | None:
        """The peer whose winner moved onto this space is the best-known setting (None: the
        search's own winner is, or no peer was read)."""
        for peer, point, _ in self.peer_points:
            if point_key(point) == point_key(self.point) != point_key(self.own_point):
                return peer
        return None

    @property
    def finished(self) -> bool:
        return not self.needed

    @property
    def lr_profiles(self) -> list[list[tuple[float, float]]]:
        """Each lr profile of the search: ``(lr, score)`` at one setting of the other
        dimensions, in the order they were made."""
        profiles: dict[str, list[tuple[float, float]]] = {}
        for point, score in self.trials:
            rest = point_key({d: i for d, i in point.items() if d != "lr"})
            profiles.setdefault(rest, []).append((LADDERS["lr"].value(point["lr"]), score))
        return [sorted(p) for p in profiles.values()]


def planned_runs(trials: int, selection: Selection, optimizer: str | None = None) -> int:
    """The runs a search of ``optimizer`` (None: one that reads every pair) of ``trials``
    trains at least: every trial on the selection seeds, the finalists on the final seeds and
    the winner's held-out runs."""
    finalists = min(selection.finalists, trials)
    return (
        trials * len(selection.seeds)
        + finalists * len(selection.final_seeds)
        + len(selection.heldout_pairs(optimizer))
    )


@dataclass(frozen=True)
class ProfiledSearch:
    """The search of one optimizer (lower metric is better) on the GPT config ``model``
    (whose defaults fill what the space does not set), from ``starts`` (its own defaults
    first), spending ``trials``; the dimensions named ``held`` are never moved (the study
    holds them at its fixed values, given to :meth:`hyperparams`), and those of ``ladders``
    step on your values; ``extra``:
    your own dimensions (``(name, values)`` pairs, :func:`~.space.check_extra`), moved like
    ours and handed to your function, not the optimizer."""

    # How the finalists are drawn, in the report's words.
    finalists_drawn: ClassVar[str] = "its best points"

    optimizer: str
    starts: tuple[Point, ...]
    selection: Selection
    trials: int
    model: str = "tiny"
    order_seed: int = 0
    max_extensions: int = 4
    max_rounds: int | None = None
    held: tuple[str, ...] = ()
    ladders: Ladders = ()
    # the searches of this study's peers (their own peers none), whose winners this one reads
    # on its space where the selection says ``peer_winners``
    peers: tuple[ProfiledSearch, ...] = ()
    extra: Ladders = ()
    # settings stored studies of the point found for this optimizer, each named by its study and
    # holding the dimensions that study tuned (``tune --known-winners``): read as peers' are
    known: tuple[tuple[str, Point], ...] = ()

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"--trials must be >= 1, got {self.trials}")
        if not self.starts:
            raise ValueError(f"the search of {self.optimizer} needs a start point")
        for start in self.starts:
            if set(start) != set(self.dimensions):
                raise ValueError(f"start point of {self.optimizer} lacks a dimension: {start}")

    def ladder(self, dimension: str) -> Ladder:
        """The ladder ``dimension`` steps on in this search (your ``ladders`` where given, your
        own dimensions' values)."""
        return ladder_of(dimension, self.ladders + self.extra)

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The dimensions this search moves: the optimizer's, but for the ``held`` ones, then
        your own."""
        return free_dimensions(self.optimizer, self.held) + tuple(d for d, _ in self.extra)

    @property
    def planned_runs(self) -> int:
        """At least :func:`planned_runs`; with peers' winners read, up to each peer's on every
        choosing run more (fewer where a peer's lands on a point read already)."""
        peers = (len(self.peers) + len(self.known)) * len(self.selection.choosing_pairs())
        return planned_runs(self.trials, self.selection, self.optimizer) + peers

    def hyperparams(self, key: str, fixed: Fixed = ()) -> dict[str, Any]:
        """The run's hyperparameters at the point ``key`` with the study's ``fixed`` values (one
        for each dimension ``held``): the optimizer's, and your dimensions' values under
        :data:`~.space.EXTRA_KEY` where the study has any."""
        if sorted(d for d, _ in fixed) != sorted(self.held):
            raise ValueError(f"fixed {fixed}: the search of {self.optimizer} holds {self.held}")
        own, yours = split_extra(parse_point_key(key), self.extra)
        settings = hyperparams_of(self.optimizer, own, self.model, fixed, self.ladders)
        return {**settings, EXTRA_KEY: yours} if yours else settings

    def trial_params(self, key: str) -> dict[str, tuple[Any, BaseDistribution]]:
        point = parse_point_key(key)
        return {d: (self.ladder(d).value(i), self._distribution(d)) for d, i in point.items()}

    def _distribution(self, dimension: str) -> BaseDistribution:
        if dimension in DISTRIBUTIONS:
            return DISTRIBUTIONS[dimension]
        levels = self.ladder(dimension).levels  # yours: Optuna records its range
        return FloatDistribution(float(levels[0]), float(levels[-1]))

    def label(self, key: str) -> str:
        return point_label(parse_point_key(key), self.ladders + self.extra)

    def run(self, point: Point, seed: int, data_seed: int | None = None) -> RunId:
        data = self.selection.data_seed if data_seed is None else data_seed
        return (self.optimizer, point_key(point), seed, data)

    def replay(self, results: Mapping[RunId, float], read: bool = True) -> ProfiledState:
        """The search as far as ``results`` take it (see the module's docstring); with
        ``read`` false it stops once its own winner is chosen (what a peer reads of it)."""
        state = ProfiledState(self.optimizer, [])
        try:
            try:
                self._search(results, state)
            except BudgetSpent:
                state.spent = True
            if state.trials:
                self._final(results, state)
                if not read:
                    return state
                self._at_peer_winners(results, state)
                self.selection.need_heldout(results, self.run, state.point, self.optimizer)
        except Needs as needs:
            state.needed = needs.runs
            state.prunable = needs.prunable
        return state

    def run_to_the_end(
        self, train: Callable[[RunId], float]
    ) -> tuple[ProfiledState, dict[RunId, float]]:
        """The whole search with ``train`` answering each run it needs, in the order it asks
        (a pure function in tests and screens; a study trains through the engine): the
        finished state and every run's result."""
        results: dict[RunId, float] = {}
        while True:
            state = self.replay(results)
            if not state.needed:
                return state, results
            for run in state.needed:
                results[run] = train(run)

    def score(
        self,
        results: Mapping[RunId, float],
        point: Point,
        pairs: Sequence[tuple[int, int]] | None = None,
    ) -> float:
        """``point``'s mean final over its ``(seed, data seed)`` runs ``pairs`` (the selection's
        seeds on its data order unless given); NaN where one diverged."""
        pairs = self.selection.selection_pairs() if pairs is None else pairs
        values = [results[self.run(point, s, d)] for s, d in pairs]
        return math.fsum(values) / len(values)

    def rank(
        self, results: Mapping[RunId, float], point: Point, pairs: Sequence[tuple[int, int]]
    ) -> tuple[int, float]:
        """How a candidate winner ranks on its choosing runs ``pairs`` (lower first): with the
        selection's ``stable_winners``, its diverged runs (:func:`~.pairs.diverged`) first, then
        its mean; else its mean alone."""
        unstable = 0
        if self.selection.stable_winners:
            unstable = len(diverged([results[self.run(point, s, d)] for s, d in pairs]))
        return unstable, badness(self.score(results, point, pairs))

    # -- the walk (raises Needs where it must wait, BudgetSpent once the budget is gone)

    def _final(self, results: Mapping[RunId, float], state: ProfiledState) -> None:
        """The finalists (the best-scored finite trials, ties in search order) read on the
        final seeds; the best mean over every choosing run becomes ``state.point``."""
        count = self.selection.finalists
        finite = [(p, s) for p, s in state.trials if math.isfinite(badness(s))]
        ranked = sorted(finite, key=lambda ps: ps[1])[:count]
        if not ranked:
            return
        finals = self.selection.final_pairs()
        need(results, [self.run(p, s, d) for p, _ in ranked for s, d in finals])
        pairs = self.selection.choosing_pairs()
        scored = [(p, self.score(results, p, pairs)) for p, _ in ranked]
        state.finalists = sorted(scored, key=lambda ps: self.rank(results, ps[0], pairs))
        state.point = state.finalists[0][0]

    def _at_peer_winners(self, results: Mapping[RunId, float], state: ProfiledState) -> None:
        """Each peer's own winner moved onto this space, read on every choosing run; the best
        mean of them and this search's winner becomes ``state.point`` (step 6). Waits (raises
        :class:`Needs` with the peer's runs) until every peer has chosen its winner."""
        if not self.selection.peer_winners or not (self.peers or self.known) or not state.point:
            return
        pairs = self.selection.choosing_pairs()
        state.own_point = dict(state.point)
        candidates = []
        for peer in self.peers:
            theirs = peer.replay(results, read=False)
            if theirs.needed:
                raise Needs(theirs.needed)
            if theirs.point:
                candidates.append((peer.optimizer, point_at(theirs.point, state.own_point)))
        candidates += [(name, point_at(point, state.own_point)) for name, point in self.known]
        points = [state.own_point] + [p for _, p in candidates]
        need(results, [self.run(p, s, d) for p in points for s, d in pairs])
        state.own_score = self.score(results, state.own_point, pairs)
        state.peer_points = [(n, p, self.score(results, p, pairs)) for n, p in candidates]
        ranks = [self.rank(results, p, pairs) for _, p, _ in state.peer_points]
        best = min(range(len(ranks)), key=ranks.__getitem__, default=None)
        if best is not None and ranks[best] < self.rank(results, state.own_point, pairs):
            state.point = state.peer_points[best][1]

    def score_points(
        self, results: Mapping[RunId, float], state: ProfiledState, points: list[Point]
    ) -> list[tuple[Point, float]]:
        """Score ``points`` (new ones spend trials, in order, until the budget is gone);
        returns those scored, the budget's last ones included. The one step a variant of the
        search overrides to read a trial's score another way (the seed racing of
        ``benchmarks/studies/seed_racing.py``)."""
        known = {point_key(p): s for p, s in state.trials}
        fresh = [p for p in dict((point_key(p), p) for p in points).values()]
        fresh = [p for p in fresh if point_key(p) not in known]
        room = self.trials - len(state.trials)
        taken = fresh[:room]
        need(results, [self.run(p, s) for p in taken for s in self.selection.seeds], prunable=True)
        for p in taken:
            score = self.score(results, p)
            state.trials.append((p, score))
            known[point_key(p)] = score
            if not state.point or badness(score) < self._best_score(state):
                state.point = p  # the first trial, then any better one
        scored = [(p, known[point_key(p)]) for p in points if point_key(p) in known]
        if len(taken) < len(fresh):
            raise BudgetSpent
        return scored

    def _best_score(self, state: ProfiledState) -> float:
        if not state.point:
            return math.inf
        return badness(dict((point_key(p), s) for p, s in state.trials)[point_key(state.point)])

    def _profile(
        self, results: Mapping[RunId, float], state: ProfiledState, point: Point
    ) -> tuple[Point, float]:
        """The best lr at ``point``'s other dimensions, searched from ``point``'s lr."""
        here = point["lr"]
        positions = [here - 1, here, here + 1]
        for _ in range(self.max_extensions + 1):
            scored = self.score_points(results, state, [{**point, "lr": j} for j in positions])
            best, score = min(scored, key=lambda ps: badness(ps[1]))
            j = best["lr"]
            if j == positions[0]:
                positions.insert(0, j - 1)
            elif j == positions[-1]:
                positions.append(j + 1)
            else:
                break
        return best, score

    def _neighbour(self, point: Point, moves: dict[str, int]) -> Point | None:
        moved = {**point}
        for dimension, step in moves.items():
            moved[dimension] = point[dimension] + step
            if not self.ladder(dimension).has(moved[dimension]):
                return None
        return moved

    def _search(self, results: Mapping[RunId, float], state: ProfiledState) -> None:
        for start in self.starts:
            self._profile(results, state, start)
        state.moves.append("start")
        others = [d for d in self.dimensions if d != "lr"]
        random.Random(self.order_seed).shuffle(others)
        pairs = list(combinations(others, 2))
        random.Random(self.order_seed + 1).shuffle(pairs)
        while True:
            self._rounds(results, state, others)
            if self._capped(state):
                return
            if not self._pair_move(results, state, pairs):
                self._spend_on_lr(results, state)
                return

    def _spend_on_lr(self, results: Mapping[RunId, float], state: ProfiledState) -> None:
        """Where no move of another dimension is left (every one fixed, or all tried), the
        trials left go to the lr of the best setting: one ladder step beyond the lrs it was
        scored at, on the side of its best lr first, then the other, until the trials are
        spent or the ladder ends both ways. A search never stops with trials unspent while an
        lr is left to read (an lr at the edge of what was tried is no optimum)."""
        while not self._capped(state):
            best = state.point
            setting = {d: v for d, v in best.items() if d != "lr"}
            tried = sorted(
                p["lr"]
                for p, _ in state.trials
                if {d: v for d, v in p.items() if d != "lr"} == setting
            )
            low, high = tried[0] - 1, tried[-1] + 1
            near_low = best["lr"] - tried[0] <= tried[-1] - best["lr"]
            sides = [low, high] if near_low else [high, low]
            options = [j for j in sides if LADDERS["lr"].has(j)]
            if not options:
                return
            self.score_points(results, state, [{**best, "lr": options[0]}])
            state.rounds += 1

    def _capped(self, state: ProfiledState) -> bool:
        return self.max_rounds is not None and state.rounds >= self.max_rounds

    def _rounds(self, results: Mapping[RunId, float], state: ProfiledState, others: list[str]):
        while True:
            state.rounds += 1
            start_score = self._best_score(state)
            values = [results[self.run(state.point, s)] for s in self.selection.seeds]
            finite = [v for v in values if not math.isnan(v)]
            noise = statistics.stdev(finite) / math.sqrt(len(finite)) if len(finite) > 1 else 0.0
            for dimension in others:
                for step in (-1, 1):
                    moved = self._neighbour(state.point, {dimension: step})
                    while moved is not None:
                        before = self._best_score(state)
                        self._profile(results, state, moved)
                        if not self._best_score(state) < before:
                            break
                        state.moves.append(dimension)
                        moved = self._neighbour(state.point, {dimension: step})
            gain = start_score - self._best_score(state)
            if not gain > noise or self._capped(state):
                return

    def _pair_move(
        self, results: Mapping[RunId, float], state: ProfiledState, pairs: list[tuple[str, str]]
    ) -> bool:
        for a, b in pairs:
            for step_a in (-1, 1):
                for step_b in (-1, 1):
                    moved = self._neighbour(state.point, {a: step_a, b: step_b})
                    if moved is None:
                        continue
                    before = self._best_score(state)
                    self._profile(results, state, moved)
                    if self._best_score(state) < before:
                        state.moves.append(f"{a}+{b}")
                        return True
        return False
