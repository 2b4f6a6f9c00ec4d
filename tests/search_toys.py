"""The search toys the tests of the searches share: a (gamma, lr) ridge on MARS-AdamW's space,
the selection they read, and a replay that trains each needed run with a pure function."""

from __future__ import annotations

import random

from torch_mars.train.study.profiled import ProfiledSearch
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.space import parse_point_key, start_point

SELECTION = Selection(seeds=(0, 1, 2), heldout=(3, 4, 5), heldout_data_seeds=(1, 2))
START = start_point("mars-adamw", "tiny")
BEST_GAMMA = START["gamma"] + 2  # two ladder steps up from the default gamma
LR_PER_GAMMA = 2  # each gamma step wants the lr two 1.5x steps higher


def ridge(point: dict[str, int], seed: int) -> float:
    """A loss whose valley runs diagonally in (gamma, lr): at the start's lr a larger gamma is
    worse, at its own best lr it is better, down to ``BEST_GAMMA``."""
    shift = point["lr"] - (START["lr"] + LR_PER_GAMMA * (point["gamma"] - START["gamma"]))
    return 2.0 + 0.05 * shift**2 + 0.01 * (point["gamma"] - BEST_GAMMA) ** 2 + 1e-4 * seed


def run_search(search: ProfiledSearch, objective=ridge, shuffle: int | None = None):
    """Replay until finished, training each needed run with ``objective`` (in a shuffled order
    where ``shuffle`` is a seed); returns the final state and the runs trained."""
    results: dict = {}
    trained = []
    while True:
        state = search.replay(results)
        if not state.needed:
            return state, trained
        needed = list(state.needed)
        if shuffle is not None:
            random.Random(shuffle + len(results)).shuffle(needed)
        for run in needed[: 1 if shuffle is not None else None]:
            assert run not in results
            results[run] = objective(parse_point_key(run[1]), run[2])
            trained.append(run)
