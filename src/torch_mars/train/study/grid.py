"""Hyperparameter values and grids as written on the command line, in one syntax.

A value is a number (``3e-3``, ``4``; finite), ``true``/``false``, a name (``bfloat16``), or a
tuple of those in parentheses (``(0.9,0.95)``). ``--opt-arg KEY=VALUE`` takes one value;
``--grid OPTIMIZER:KEY=V1,V2,...`` a comma-separated list of them
(``betas=(0.9,0.95),(0.95,0.99)``). :func:`parse_value` and :func:`parse_values` are the one
parser of both; ``grid_points`` expands an optimizer's axes into the points of their Cartesian
product.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

Grid = dict[str, dict[str, tuple[Any, ...]]]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
# A number as the command line takes it: Python's int() and float() also accept "1_000" and
# non-ASCII digits, which a typo or a paste should not turn into a learning rate.
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


def _scalar(text: str) -> Any:
    """One number, boolean or name."""
    text = text.strip()
    if not text:
        raise ValueError("empty value")
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _NUMBER.fullmatch(text):
        number = int(text) if text.lstrip("+-").isdigit() else float(text)
        if not math.isfinite(number):
            raise ValueError(f"{text!r} is not a finite number")
        return number
    if text.lower().lstrip("+-") in ("inf", "infinity", "nan"):
        raise ValueError(f"{text!r} is not a finite number")
    if _NAME.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not a number, true/false, a name or a tuple in parentheses")
    return text


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
            if depth > 1:
                raise ValueError("nested parentheses")
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


def parse_value(text: str) -> Any:
    """One value: ``"3e-3"`` -> 0.003, ``"4"`` -> 4, ``"true"`` -> True, ``"bfloat16"``,
    ``"(0.9,0.95)"`` -> (0.9, 0.95). A bare comma is a ``ValueError`` that shows the tuple form.

    >>> parse_value("3e-3"), parse_value("4"), parse_value("True"), parse_value("(0.9,0.95)")
    (0.003, 4, True, (0.9, 0.95))
    """
    items = _split_top_level(text.strip())
    if len(items) > 1:
        raise ValueError(
            f"{text!r} is several values; write a tuple in parentheses, e.g. ({text.strip()})"
        )
    item = items[0].strip()
    if item.startswith("(") and item.endswith(")"):
        inner = item[1:-1].strip()
        if not inner:
            raise ValueError("empty tuple '()'")
        return tuple(_scalar(part) for part in inner.split(","))
    if "(" in item or ")" in item:
        raise ValueError(f"misplaced parenthesis in {item!r}")
    return _scalar(item)


def parse_values(text: str) -> tuple[Any, ...]:
    """A comma-separated list of values (the values of one grid axis), none repeated.

    >>> parse_values("3e-3,4e-3"), parse_values("(0.9,0.95),(0.95,0.99)")
    ((0.003, 0.004), ((0.9, 0.95), (0.95, 0.99)))
    """
    values = tuple(parse_value(item) for item in _split_top_level(text.strip()))
    if len(set(map(repr, values))) != len(values):
        raise ValueError("a value is repeated")
    return values


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
            axes[key] = parse_values(values)
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
