"""The search space of ``torch-mars tune``, declared once as data: which dimensions each
optimizer has, the ladder of values each dimension steps along (the same ladder for every
optimizer), and the hyperparameter each optimizer spells it as.

A comparison is fair by construction when every optimizer is tuned over every dimension it has.
The dimensions:

- ``lr``: the peak learning rate, on one geometric ladder of 1.5x steps (``1e-3 * 1.5**k``);
- ``beta1``: the first-moment decay (Muon's ``momentum``);
- ``beta2``: the second-moment decay, for the rules that keep one (not Newton-Schulz rules);
- ``weight_decay``: decoupled weight decay of the matrices;
- ``lr_1d_ratio`` and ``weight_decay_1d``: the lr (as a ratio to ``lr``) and weight decay of
  the tensors on the AdamW path (norms, biases; embeddings for the Newton-Schulz rules). Every
  optimizer here routes them: the MARS rules and Muon by construction, AdamW and NAdamW through
  the same split (:func:`~torch_mars.train.optimizers.build_optimizer`);
- ``gamma``: the MARS correction, the one dimension the controls lack.

The AdamW path's betas are one fixed setting for every optimizer (:data:`FIXED_1D_BETAS`).

A point is a mapping from dimension to an integer position on its ladder, so that a point's
identity never depends on float rounding. ``start_point`` snaps an optimizer's defaults onto
the ladders; ``hyperparams_of`` spells a point as the harness's hyperparameters.

>>> dimensions_of("mars-adamw")
('lr', 'beta1', 'beta2', 'weight_decay', 'lr_1d_ratio', 'weight_decay_1d', 'gamma')
>>> dimensions_of("muon")
('lr', 'beta1', 'weight_decay', 'lr_1d_ratio', 'weight_decay_1d')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution

from torch_mars.train.optimizers import default_hyperparams
from torch_mars.train.recipes import with_1d_following_group

Point = dict[str, int]
FIXED_1D_BETAS: tuple[float, float] = (0.9, 0.95)


@dataclass(frozen=True)
class Ladder:
    """The values a dimension steps along: ``levels`` (finite, ascending), or, with ``levels``
    empty, the unbounded geometric ladder ``anchor * factor**k``."""

    levels: tuple[float, ...] = ()
    anchor: float = 1.0
    factor: float = 1.0

    def value(self, position: int) -> float:
        if self.levels:
            return self.levels[position]
        return float(f"{self.anchor * self.factor**position:.3g}")

    def has(self, position: int) -> bool:
        return not self.levels or 0 <= position < len(self.levels)

    def nearest(self, value: float) -> int:
        """The position whose value is nearest ``value`` (in log space on a geometric ladder)."""
        if self.levels:
            return min(range(len(self.levels)), key=lambda i: abs(self.levels[i] - value))
        if value <= 0:
            raise ValueError(f"a geometric ladder holds positive values only, got {value}")
        return round(math.log(value / self.anchor) / math.log(self.factor))


# The dimensions, in the order coordinate descent visits them, and their ladders.
LADDERS: dict[str, Ladder] = {
    "lr": Ladder(anchor=1e-3, factor=1.5),
    "beta1": Ladder(levels=(0.8, 0.85, 0.9, 0.95, 0.98)),
    "beta2": Ladder(levels=(0.9, 0.95, 0.98, 0.99, 0.995, 0.999)),
    "weight_decay": Ladder(levels=(0.0, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3)),
    "lr_1d_ratio": Ladder(anchor=1.0, factor=1.5),
    "weight_decay_1d": Ladder(levels=(0.0, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3)),
    "gamma": Ladder(levels=(0.0, 0.025, 0.05, 0.1, 0.2, 0.4)),
}

# How each optimizer spells each dimension it has: ``(hyperparameter, index)``, where index
# picks an entry of a tuple-valued hyperparameter (``betas``) and is None for a scalar. The
# AdamW-path lr is written as ``lr * lr_1d_ratio`` under the named key.
ADAM_RULE = {
    "lr": ("lr", None),
    "beta1": ("betas", 0),
    "beta2": ("betas", 1),
    "weight_decay": ("weight_decay", None),
    "lr_1d_ratio": ("lr_1d", None),
    "weight_decay_1d": ("weight_decay_1d", None),
}
SPELLING: dict[str, dict[str, tuple[str, int | None]]] = {
    "adamw": ADAM_RULE,
    "nadamw": ADAM_RULE,
    "mars-adamw": {**ADAM_RULE, "gamma": ("gamma", None)},
    "muon": {
        "lr": ("lr", None),
        "beta1": ("momentum", None),
        "weight_decay": ("weight_decay", None),
        "lr_1d_ratio": ("adamw_lr", None),
        "weight_decay_1d": ("adamw_weight_decay", None),
    },
    # MARS-Shampoo's matrices use beta1 only; its betas[1] is never read.
    "mars-shampoo": {
        **{k: v for k, v in ADAM_RULE.items() if k != "beta2"},
        "gamma": ("gamma", None),
    },
}
# The hyperparameter that holds each optimizer's fixed AdamW-path betas.
BETAS_1D_KEY: dict[str, str] = {name: "betas_1d" for name in SPELLING} | {"muon": "adamw_betas"}
# The dimension only the MARS rules have.
MARS_ONLY = ("gamma",)


def tunable_optimizers() -> tuple[str, ...]:
    return tuple(SPELLING)


def dimensions_of(optimizer: str) -> tuple[str, ...]:
    """The dimensions ``optimizer`` is tuned over, in the order of :data:`LADDERS`."""
    _check_known(optimizer)
    return tuple(d for d in LADDERS if d in SPELLING[optimizer])


# What a fixed dimension may be set to (``tune --fixed``): its allowed range, in words and as a
# test. The lr is never fixed: every search profiles it.
FIXED_RANGES: dict[str, tuple[str, Callable[[float], bool]]] = {
    "beta1": ("in [0, 1)", lambda v: 0.0 <= v < 1.0),
    "beta2": ("in [0, 1)", lambda v: 0.0 <= v < 1.0),
    "weight_decay": (">= 0", lambda v: v >= 0.0),
    "lr_1d_ratio": ("> 0", lambda v: v > 0.0),
    "weight_decay_1d": (">= 0", lambda v: v >= 0.0),
    "gamma": (">= 0", lambda v: v >= 0.0),
}
Fixed = tuple[tuple[str, float], ...]


def check_fixed(fixed: Mapping[str, Any], optimizers: Sequence[str]) -> Fixed:
    """``fixed`` (dimension -> value, held for every optimizer that has the dimension)
    checked, as sorted pairs: each a dimension some of ``optimizers`` has, never the lr, a
    finite number in its range (:data:`FIXED_RANGES`). A ValueError names the first wrong one."""
    pairs = []
    for dimension, value in sorted(fixed.items()):
        if dimension == "lr":
            raise ValueError("--fixed lr: the lr is never fixed (every search profiles it)")
        if dimension not in FIXED_RANGES:
            raise ValueError(
                f"--fixed {dimension}: no such dimension (one of {', '.join(FIXED_RANGES)})"
            )
        if not any(dimension in dimensions_of(o) for o in optimizers):
            raise ValueError(
                f"--fixed {dimension}: none of {', '.join(optimizers)} has that dimension"
            )
        words, allowed = FIXED_RANGES[dimension]
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is None or not math.isfinite(number) or not allowed(float(number)):
            raise ValueError(f"--fixed {dimension}={value!r}: must be a number {words}")
        pairs.append((dimension, float(number)))
    return tuple(pairs)


Ladders = tuple[tuple[str, tuple[float, ...]], ...]


def check_ladders(ladders: Mapping[str, Sequence[Any]], optimizers: Sequence[str]) -> Ladders:
    """``ladders`` (dimension -> its values, your own range for it) checked, as sorted pairs:
    each a dimension of listed values some of ``optimizers`` has (not the lr or the 1-D lr
    ratio, which step on 1.5x ladders), two or more finite numbers, ascending, in the
    dimension's range (:data:`FIXED_RANGES`). A ValueError names the first wrong one."""
    pairs = []
    for dimension, values in sorted(ladders.items()):
        if dimension in ("lr", "lr_1d_ratio"):
            raise ValueError(
                f"--ladder {dimension}: it steps on a 1.5x ladder, searched without bounds "
                "(fix it with --fixed instead)"
            )
        if dimension not in FIXED_RANGES:
            raise ValueError(
                f"--ladder {dimension}: no such dimension (one of "
                f"{', '.join(d for d in FIXED_RANGES if d != 'lr_1d_ratio')})"
            )
        if not any(dimension in dimensions_of(o) for o in optimizers):
            raise ValueError(
                f"--ladder {dimension}: none of {', '.join(optimizers)} has that dimension"
            )
        words, allowed = FIXED_RANGES[dimension]
        numbers = [
            float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
        ]
        if (
            len(numbers) != len(values)
            or len(numbers) < 2
            or not all(math.isfinite(v) and allowed(v) for v in numbers)
            or any(b <= a for a, b in pairwise(numbers))
        ):
            raise ValueError(
                f"--ladder {dimension}={list(values)}: give two or more ascending numbers {words}"
            )
        pairs.append((dimension, tuple(numbers)))
    return tuple(pairs)


# The names a dimension of yours may not take: the contract's arguments and our dimensions.
RESERVED_NAMES = ("make_optimizer", "seed", "data_seed", "report", "optimizer")
# Where a run's hyperparameters carry the values of your dimensions (``extra_space``): popped
# before the optimizer is built and passed to your function as keyword arguments.
EXTRA_KEY = "extra_space"


def check_extra(extra: Mapping[str, Sequence[Any]]) -> Ladders:
    """Your own dimensions (``extra_space``: name -> its values), tuned for every optimizer
    alike, checked as sorted pairs: each name a Python identifier that is none of our
    dimensions or the contract's arguments, its values two or more finite numbers, ascending
    (ints stay ints: a warmup in steps, a batch size). A ValueError names the first wrong one.
    A search starts each at its middle value (:func:`extra_start`)."""
    pairs = []
    for name, values in sorted(extra.items()):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"extra_space {name!r}: a name must be a Python identifier")
        if name in LADDERS or name in RESERVED_NAMES:
            raise ValueError(
                f"extra_space {name!r}: taken (our dimensions and the contract's arguments: "
                f"{', '.join([*LADDERS, *RESERVED_NAMES])})"
            )
        given = list(values) if isinstance(values, Sequence) and not isinstance(values, str) else []
        numbers = [v for v in given if isinstance(v, int | float) and not isinstance(v, bool)]
        if (
            len(numbers) != len(given)
            or len(numbers) < 2
            or not all(math.isfinite(v) for v in numbers)
            or any(b <= a for a, b in pairwise(numbers))
        ):
            raise ValueError(
                f"extra_space {name}={values!r}: give two or more ascending finite numbers"
            )
        kept = (
            tuple(numbers)
            if all(isinstance(v, int) for v in numbers)
            else tuple(float(v) for v in numbers)
        )
        pairs.append((name, kept))
    return tuple(pairs)


def extra_start(values: Sequence[float]) -> int:
    """Where a search starts one of your dimensions: its middle value (the lower of two).

    >>> extra_start((0, 50, 100, 200))
    1
    """
    return (len(values) - 1) // 2


def split_extra(point: Mapping[str, int], extra: Ladders) -> tuple[Point, dict[str, Any]]:
    """A point of a study with your dimensions as ``(the optimizer's point, your values)``."""
    yours = dict(extra)
    own = {d: i for d, i in point.items() if d not in yours}
    return own, {d: Ladder(levels=yours[d]).value(i) for d, i in point.items() if d in yours}


def ladder_of(dimension: str, ladders: Ladders = ()) -> Ladder:
    """The ladder ``dimension`` steps on in a study with your ``ladders``: yours, else ours."""
    for name, levels in ladders:
        if name == dimension:
            return Ladder(levels=levels)
    return LADDERS[dimension]


def onto_ladders(point: Mapping[str, int], ladders: Ladders) -> Point:
    """A point on our ladders moved onto your ``ladders``: each of yours at its nearest value."""
    return {
        d: ladder_of(d, ladders).nearest(LADDERS[d].value(i)) if d in dict(ladders) else i
        for d, i in point.items()
    }


def free_dimensions(optimizer: str, held: Collection[str] = ()) -> tuple[str, ...]:
    """The dimensions a search of ``optimizer`` moves: all it has but those ``held`` (the
    names of the fixed ones)."""
    return tuple(d for d in dimensions_of(optimizer) if d not in held)


def shares_space(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` have the same dimensions but for :data:`MARS_ONLY`, so that each
    can be tried at the other's point (a MARS rule and its same-cost controls).

    >>> shares_space("mars-shampoo", "muon"), shares_space("adamw", "muon")
    (True, False)
    """
    return set(dimensions_of(a)) - set(MARS_ONLY) == set(dimensions_of(b)) - set(MARS_ONLY)


def point_at(other: Mapping[str, int], own: Mapping[str, int]) -> Point:
    """``own`` moved to ``other``'s positions on every dimension both have (the dimensions
    only ``own`` has keep their value)."""
    return {d: other.get(d, i) for d, i in own.items()}


def _check_known(optimizer: str) -> None:
    if optimizer not in SPELLING:
        raise ValueError(f"tune has a search space for {tunable_optimizers()}, not {optimizer!r}")


def _read(settings: Mapping[str, Any], key: str, index: int | None) -> float:
    value = settings[key]
    return float(value if index is None else value[index])


def start_point(optimizer: str, model: str) -> Point:
    """``optimizer``'s defaults for the GPT config ``model``, snapped onto the ladders.
    An optimizer whose defaults do not route the 1-D tensors starts with them at its own lr,
    weight decay and the fixed 1-D betas."""
    _check_known(optimizer)
    settings = with_1d_following_group(default_hyperparams(optimizer, model))
    point: Point = {}
    for dimension in dimensions_of(optimizer):
        key, index = SPELLING[optimizer][dimension]
        value = _read(settings, key, index)
        if dimension == "lr_1d_ratio":
            value /= _read(settings, "lr", None)
        point[dimension] = LADDERS[dimension].nearest(value)
    return point


def values_of(point: Mapping[str, int], ladders: Ladders = ()) -> dict[str, float]:
    """The dimension values of a point: ``{"lr": 0.0034, ...}`` (on your ``ladders`` where
    given)."""
    return {d: ladder_of(d, ladders).value(i) for d, i in point.items()}


def hyperparams_of(
    optimizer: str,
    point: Mapping[str, int],
    model: str,
    fixed: Fixed = (),
    ladders: Ladders = (),
) -> dict[str, Any]:
    """The harness hyperparameters of ``point`` for ``optimizer`` on the GPT config ``model``:
    every dimension it has (``point``'s, and the ``fixed`` values of those it holds) and the
    fixed 1-D betas (a tuple entry that is no dimension, such as MARS-Shampoo's unread
    ``betas[1]``, keeps its default)."""
    _check_known(optimizer)
    free = free_dimensions(optimizer, [d for d, _ in fixed])
    if set(point) != set(free):
        raise ValueError(f"a {optimizer} point needs exactly {free}, got {sorted(point)}")
    defaults = default_hyperparams(optimizer, model)
    own = dimensions_of(optimizer)
    values = values_of(point, ladders) | {d: v for d, v in fixed if d in own}
    settings: dict[str, Any] = {BETAS_1D_KEY[optimizer]: FIXED_1D_BETAS}
    for dimension, value in values.items():
        key, index = SPELLING[optimizer][dimension]
        if dimension == "lr_1d_ratio":
            value = float(f"{values['lr'] * value:.3g}")
        if index is None:
            settings[key] = value
        else:
            entries = list(settings.get(key, defaults[key]))
            entries[index] = value
            settings[key] = tuple(entries)
    return settings


def point_label(point: Mapping[str, int], ladders: Ladders = ()) -> str:
    """A readable name: ``lr=0.0114 beta1=0.9 ...``."""
    return " ".join(f"{d}={v:g}" for d, v in values_of(point, ladders).items())


def point_key(point: Mapping[str, int]) -> str:
    """A point's identity in a study: its ladder positions, ``lr:3,beta1:2,...`` (ours in
    :data:`LADDERS`' order, then yours by name)."""
    yours = sorted(d for d in point if d not in LADDERS)
    return ",".join(f"{d}:{point[d]}" for d in [*LADDERS, *yours] if d in point)


def parse_point_key(key: str) -> Point:
    """The inverse of :func:`point_key`."""
    return {d: int(i) for d, i in (part.split(":") for part in key.split(","))}


def space_record(optimizers: Sequence[str], ladders: Ladders = ()) -> dict[str, Any]:
    """The space of ``optimizers`` as data, for a study's identity: their spellings and the
    ladders of their dimensions, yours where given (a study tuned on other ladders or spellings
    is another study; an optimizer it does not tune is no part of it)."""
    used = {d for o in optimizers for d in dimensions_of(o)}
    return {
        "ladders": {
            d: [list(r.levels), r.anchor, r.factor]
            for d, r in ((d, ladder_of(d, ladders)) for d in LADDERS)
            if d in used
        },
        "spelling": {o: {d: list(s) for d, s in SPELLING[o].items()} for o in optimizers},
        "betas_1d": list(FIXED_1D_BETAS),
    }


def spaces_in_common(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict, dict]:
    """Two space records reduced to the optimizers both spell and the ladders of their
    dimensions: a study recorded with every optimizer of the table then (before records held
    only their own) or before an optimizer joined the table compares on what both describe."""
    common = [o for o in a.get("spelling", {}) if o in b.get("spelling", {})]

    def reduced(record: dict[str, Any]) -> dict[str, Any]:
        used = {d for o in common for d in record["spelling"][o]}
        return {
            **record,
            "ladders": {d: v for d, v in record.get("ladders", {}).items() if d in used},
            "spelling": {o: record["spelling"][o] for o in common},
        }

    return reduced(a), reduced(b)


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
