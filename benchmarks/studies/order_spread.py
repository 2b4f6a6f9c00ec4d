"""Would spreading the selection's trials over data orders help the search? A toy screen, no
training (issue "A search that finds the optimum at a budget users can afford").

The misses left at b64-4x and b16-4x are winners level with their references on the
selection's data order and behind on the held-out ones (docs/harness.md). The idea screened
here: trial i of a search scored on its own data order, in turn from :data:`ROTATION`
(disjoint from the held-out orders 1-3), its finalists re-read on that same order, so that no
one order's luck is shared by every trial. Against it: trials on one seed and one order share
that order's perturbation of the surface (common random numbers), which makes neighbours'
comparisons precise; spread, each comparison carries two orders' perturbations.

The toy: each optimizer's declared space around its start, a bowl at an optimum drawn up to
two ladder steps from the start in every dimension (one product term), and each data order
and each seed adding its own smooth perturbation (a random slope per dimension of the given
scale and a curvature of a quarter of it, in ladder steps from the optimum: the bowl's own
curvature, 0.004 a step squared, stays convex) plus white noise per run. A search's regret is
its winner's true (noise-free) loss above the optimum's; each row is the mean and 90th
percentile over ``--draws`` draws of optimum, perturbations and screen order.

    python benchmarks/studies/order_spread.py [--draws 24]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from torch_mars.bench.table import markdown_table
from torch_mars.train.study.engine import RunId
from torch_mars.train.study.profiled import ProfiledState
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.space import Point, parse_point_key, point_key
from torch_mars.train.study.surface import SurfaceSearch
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.trainer import TrainConfig

# The data orders the spread selection's trials take in turn: the selection's own (0), then two
# that neither the held-out runs (1-3) nor any finalist read.
ROTATION = (0, 4, 5)
OPTIMIZERS = ("nadamw", "muon", "mars-adamw")
# (order perturbation, seed perturbation, white noise): the scales of each, in loss units per
# ladder step (the perturbations) or per run (the noise).
NOISE_CASES = ((0.002, 0.002, 0.002), (0.004, 0.002, 0.002), (0.001, 0.001, 0.004))
TRIALS = 40


@dataclasses.dataclass(frozen=True)
class OrderSpreadSearch(SurfaceSearch):
    """The third design with each point's selection runs (and its finalists' runs) on its own
    data order, :data:`ROTATION`'s next in the order the search first asks for the point; runs
    on other orders (the held-out ones) are left as asked."""

    orders: dict[str, int] = dataclasses.field(default_factory=dict, compare=False)

    def replay(self, results: Mapping[RunId, float]) -> ProfiledState:
        self.orders.clear()  # a replay assigns the orders again, in its own asking order
        return super().replay(results)

    def run(self, point: Point, seed: int, data_seed: int | None = None) -> RunId:
        if data_seed is None or data_seed == self.selection.data_seed:
            key = point_key(point)
            data_seed = self.orders.setdefault(key, ROTATION[len(self.orders) % len(ROTATION)])
        return super().run(point, seed, data_seed)


def toy_runs(
    dimensions: tuple[str, ...], optimum: Point, scales: tuple[float, float, float], draw: int
) -> tuple[Callable[[Point], float], Callable[[Point, int, int], float]]:
    """``(true, run)``: the toy's noise-free loss of a point, and one run's final on a seed and
    a data order (see the module's docstring)."""
    order_scale, seed_scale, white = scales
    generator = np.random.default_rng(draw)
    perturbations: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}

    def offsets(point: Point) -> np.ndarray:
        return np.array([point[d] - optimum[d] for d in dimensions], dtype=float)

    def perturbation(kind: str, index: int, scale: float, x: np.ndarray) -> float:
        if (kind, index) not in perturbations:
            width = len(dimensions)
            slope = generator.normal(0.0, scale, width)
            perturbations[kind, index] = (slope, generator.normal(0.0, scale / 4, width))
        slope, curvature = perturbations[kind, index]
        return float(slope @ x + curvature @ x**2)

    def true(point: Point) -> float:
        x = offsets(point)
        return 0.004 * float((x**2).sum()) + 0.003 * float(x[0] * x[1])

    def run(point: Point, seed: int, order: int) -> float:
        x = offsets(point)
        noise = random.Random(f"{draw} {point_key(point)} {seed} {order}").gauss(0.0, white)
        return (
            true(point)
            + perturbation("order", order, order_scale, x)
            + perturbation("seed", seed, seed_scale, x)
            + noise
        )

    return true, run


def regret(design: type[SurfaceSearch], optimizer: str, scales, draw: int) -> float:
    """One draw: the winner's true loss above the optimum's."""
    plan = TunePlan(TrainConfig(model="tiny"), ("adamw", *OPTIMIZERS, "mars-shampoo"), PROTOCOL,
                    Path("unused"))  # fmt: skip
    search = design(optimizer, plan.starts_of(optimizer), PROTOCOL, TRIALS, order_seed=draw % 3)
    own, steps = search.starts[0], random.Random(draw)
    optimum = {}
    for dimension, index in own.items():
        moved = index + steps.choice((-2, -1, 0, 1, 2))
        optimum[dimension] = moved if search.ladder(dimension).has(moved) else index
    true, run = toy_runs(search.dimensions, optimum, scales, draw)
    state, _ = search.run_to_the_end(lambda r: run(parse_point_key(r[1]), r[2], r[3]))
    return true(state.point)


def screen(draws: int) -> str:
    """The table: per noise case, optimizer and design, the mean and 90th-percentile regret."""
    rows = []
    for scales in NOISE_CASES:
        for optimizer in OPTIMIZERS:
            for design in (SurfaceSearch, OrderSpreadSearch):
                regrets = sorted(regret(design, optimizer, scales, d) for d in range(draws))
                rows.append(
                    [
                        " / ".join(f"{s:g}" for s in scales),
                        optimizer,
                        "surface-3" if design is SurfaceSearch else "orders spread",
                        f"{math.fsum(regrets) / draws:.4f}",
                        f"{regrets[int(0.9 * (draws - 1))]:.4f}",
                    ]
                )
    header = ["order / seed / white", "optimizer", "design", "mean regret", "90th percentile"]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=24)
    args = parser.parse_args(argv)
    if args.draws < 2:
        parser.error(f"--draws must be >= 2, got {args.draws}")
    print(screen(args.draws))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
