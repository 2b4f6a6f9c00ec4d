"""The plain grid search of ``torch-mars sweep``: every point of an optimizer's grid on the
search seeds, then the best point on the final seeds, all on one data order."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution

from torch_mars.train.study.engine import RunId
from torch_mars.train.study.space import Fixed

# Optuna's record of a grid value: one wide range for every number.
_GRID_VALUE = FloatDistribution(-1e12, 1e12)


@dataclass
class GridState:
    """Where a grid search stands: the runs it needs next and, once stage 1 is done, its
    winner's point key."""

    needed: list[RunId]
    winner: str | None = None


@dataclass(frozen=True)
class GridSearch:
    """One optimizer's grid: every point on the search seeds, then the best on the final seeds.
    ``points`` holds ``(key, hyperparams as items)``."""

    optimizer: str
    points: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    search_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    lower_is_better: bool = True
    data_seed: int = 0

    @property
    def planned_runs(self) -> int:
        """Every point on the search seeds, then the winner on the final seeds it lacks."""
        return len(self.points) * len(self.search_seeds) + len(
            set(self.seeds) - set(self.search_seeds)
        )

    def hyperparams(self, key: str, fixed: Fixed = ()) -> dict[str, Any]:
        """The point's settings: a grid's points are whole settings, nothing held beside them."""
        if fixed:
            raise ValueError(f"a grid search holds no fixed values, got {fixed}")
        return dict(dict(self.points)[key])

    def trial_params(self, key: str) -> dict[str, tuple[Any, BaseDistribution]]:
        params: dict[str, tuple[Any, BaseDistribution]] = {}
        for name, value in self.hyperparams(key).items():
            entries = value if isinstance(value, tuple | list) else (value,)
            for index, entry in enumerate(entries):
                if isinstance(entry, int | float) and not isinstance(entry, bool):
                    label = name if len(entries) == 1 else f"{name}[{index}]"
                    params[label] = (float(entry), _GRID_VALUE)
        return params

    def label(self, key: str) -> str:
        return key

    def replay(self, results: Mapping[RunId, float]) -> GridState:
        wanted = [
            (self.optimizer, key, s, self.data_seed)
            for key, _ in self.points
            for s in self.search_seeds
        ]
        missing = [run for run in wanted if run not in results]
        if missing:
            return GridState(missing)
        means = {
            key: math.fsum(
                results[(self.optimizer, key, s, self.data_seed)] for s in self.search_seeds
            )
            / len(self.search_seeds)
            for key, _ in self.points
        }

        def badness(key: str) -> float:
            if math.isnan(means[key]):
                return math.inf
            return means[key] if self.lower_is_better else -means[key]

        winner = min((key for key, _ in self.points), key=badness)
        finals = [(self.optimizer, winner, s, self.data_seed) for s in self.seeds]
        return GridState([run for run in finals if run not in results], winner)
