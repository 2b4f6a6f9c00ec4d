"""Which rank orthogonalises which matrix: MARS-Shampoo gathers each whole matrix's momentum to
one owner rank, and the owners are chosen so that every rank gets about the same Newton-Schulz
work."""

from __future__ import annotations

from collections.abc import Sequence

from torch_mars.optim.step_math import matrix_shape


def newton_schulz_cost(shape: Sequence[int]) -> int:
    """Multiply-adds of one Newton-Schulz iteration on a tensor of ``shape`` viewed as
    ``(shape[0], -1)``, up to a constant: ``rows * cols * min(rows, cols)``."""
    rows, cols = matrix_shape(shape)
    return rows * cols * min(rows, cols)


def assign_owners(costs: Sequence[float], world: int) -> list[int]:
    """The owner rank of each of ``costs``' items: largest first, each to the least-loaded rank
    (ties to the lower rank). Deterministic, so every rank computes the same assignment.

    >>> assign_owners([4, 1, 3, 2], world=2)
    [0, 0, 1, 1]
    """
    loads = [0.0] * world
    owners = [0] * len(costs)
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(world), key=lambda r: (loads[r], r))
        owners[index] = rank
        loads[rank] += costs[index]
    return owners
