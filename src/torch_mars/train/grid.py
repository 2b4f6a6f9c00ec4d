"""Hyperparameter values and grids as written on the command line.

``parse_value`` reads one value (``3e-3``, ``4``, ``true``, ``0.9,0.95``); ``parse_grid`` reads
``--grid OPTIMIZER:KEY=V1,V2,...`` specs, where a tuple value is written in parentheses
(``betas=(0.9,0.95),(0.95,0.99)``), and ``grid_points`` expands an optimizer's axes into the
points of their Cartesian product.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

Grid = dict[str, dict[str, tuple[Any, ...]]]


def parse_value(text: str) -> Any:
    """``"3e-3"`` -> 0.003, ``"4"`` -> 4, ``"true"`` -> True, ``"0.9,0.95"`` -> (0.9, 0.95).

    >>> parse_value("3e-3"), parse_value("4"), parse_value("True"), parse_value("0.9,0.95")
    (0.003, 4, True, (0.9, 0.95))
    """
    if "," in text:
        return tuple(parse_value(part) for part in text.split(","))
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ')'")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError("unbalanced '('")
    return [*items, current]


def parse_grid_values(text: str) -> tuple[Any, ...]:
    """The values of one axis: ``3e-3,4e-3`` or ``(0.9,0.95),(0.95,0.99)``.

    >>> parse_grid_values("(0.9,0.95),(0.95,0.99)")
    ((0.9, 0.95), (0.95, 0.99))
    """
    values = []
    for item in _split_top_level(text.strip()):
        item = item.strip()
        if not item:
            raise ValueError("empty value")
        if item.startswith("(") and item.endswith(")"):
            inner = item[1:-1].strip()
            if not inner:
                raise ValueError("empty tuple '()'")
            values.append(tuple(parse_value(part.strip()) for part in inner.split(",")))
        elif "(" in item or ")" in item:
            raise ValueError(f"misplaced parenthesis in {item!r}")
        else:
            values.append(parse_value(item))
    if len(set(map(repr, values))) != len(values):
        raise ValueError("a value is repeated")
    return tuple(values)


def parse_grid(specs: Iterable[str], optimizers: Sequence[str]) -> Grid:
    """``{optimizer: {key: values}}`` from ``OPTIMIZER:KEY=V1,V2,...`` specs; ``ValueError``
    naming the spec for an unknown optimizer, a repeated axis or a malformed spec.

    >>> parse_grid(["adamw:lr=1e-3,2e-3", "adamw:betas=(0.9,0.95)"], ["adamw"])
    {'adamw': {'lr': (0.001, 0.002), 'betas': ((0.9, 0.95),)}}
    """
    grid: Grid = {}
    for spec in specs:
        name, colon, axis = spec.partition(":")
        key, equals, values = axis.partition("=")
        if not colon or not equals or not name or not key.strip():
            raise ValueError(f"--grid {spec!r}: expected OPTIMIZER:KEY=V1,V2,...")
        if name not in optimizers:
            raise ValueError(f"--grid {spec!r}: unknown optimizer {name!r}; known: {optimizers}")
        axes = grid.setdefault(name, {})
        key = key.strip()
        if key in axes:
            raise ValueError(f"--grid {spec!r}: {name}:{key} is given twice")
        try:
            axes[key] = parse_grid_values(values)
        except ValueError as error:
            raise ValueError(f"--grid {spec!r}: {error}") from error
    return grid


def grid_points(axes: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, the first axis varying slowest.

    >>> grid_points({"lr": (1, 2), "gamma": (0, 0.1)})
    [{'lr': 1, 'gamma': 0}, {'lr': 1, 'gamma': 0.1}, {'lr': 2, 'gamma': 0}, {'lr': 2, 'gamma': 0.1}]
    """
    keys = list(axes)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*axes.values())]
