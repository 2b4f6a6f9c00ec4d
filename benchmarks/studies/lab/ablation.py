"""Ablation sweeps of a tuned winner: each rule's switches (:data:`ABLATIONS`), and the pieces of
the ``torch-mars sweep`` command line that retrains a winner with them (its budget's flags, the
grid around it, the sweep study's flags). The scripts of ``benchmarks/studies/`` that ablate a
winner (the regime map's, the fight map's, an edge probe) build their sweeps from these."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torch_mars.optim.settings import DEFAULTS

# The budget's fields that the sweep's command line takes, as its flags.
BUDGET_FLAGS = {
    "model": "--model",
    "data": "--data",
    "steps": "--steps",
    "batch_size": "--batch-size",
    "grad_accum": "--grad-accum",
    "schedule": "--schedule",
    "grad_clip": "--grad-clip",
    "eval_interval": "--eval-interval",
    "eval_batches": "--eval-batches",
    "data_seed": "--data-seed",
}
WINNER = "winner"  # stands for the winner's own value of a dimension
# Each rule's ablation: sweeps (named by their suffix), each a grid of overrides of the winner.
# At gamma = 0, c is the gradient: the per-tensor clip cannot fire under the harness's global
# clip of 1, and the second moment of c is that of g, so a gamma-0 sweep varies nothing else.
ABLATIONS: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    "mars-adamw": {
        "": {"clip": ("true", "false"), "second_moment": ("corrected", "gradient")},
        "-gamma0": {"gamma": ("0",)},
    },
    # Newton-Schulz in bf16, as torch.optim.Muon runs it (MARS-Shampoo's default on a CPU
    # without fast bf16 matrix products is float32): what of a gap to Muon is that dtype.
    "mars-shampoo": {
        "": {"gamma": ("0", WINNER), "clip": ("true", "false")},
        "-ns-bf16": {"gamma": ("0", WINNER), "ns_dtype": ("bfloat16",)},
    },
    # The control's side of that gap: torch.optim.Muon without its Nesterov form, which is
    # Newton-Schulz on the plain EMA of gradients, as MARS-Shampoo's at gamma 0.
    "muon": {"-nesterov": {"nesterov": ("true", "false")}},
}
# The value of an ablated dimension that a winner leaves at its default.
UNSET = {**DEFAULTS, "nesterov": True}


def short_flag_value(value: object) -> str:
    """A value as a sweep's ``--grid`` spells it, floats in ``%g`` (six significant digits: the
    ablation sweeps' stored identities were written so; :func:`.fight_map.flag_value` writes a
    value exactly)."""
    if isinstance(value, list | tuple):
        return "(" + ",".join(short_flag_value(v) for v in value) + ")"
    return f"{value:g}" if isinstance(value, float) else str(value)


# The budget's fields a sweep's command line takes from a tune study's report (the data order is
# each sweep's own).
TUNE_BUDGET_FLAGS = {
    **{k: v for k, v in BUDGET_FLAGS.items() if k != "data_seed"},
    "block_size": "--block-size",
    "eval_tokens": "--eval-tokens",
}


def budget_flags(budget: dict, flags: dict[str, str], ignored=()) -> list[str]:
    """A study's budget as a sweep's command line (``flags``: field to flag; ``ignored`` fields
    left to the caller); a field set that has no flag here is a ``ValueError``."""
    unsupported = {
        k
        for k, v in budget.items()
        if k not in flags and k not in ignored and v not in (None, False, "auto")
    }
    if unsupported:
        raise ValueError(f"the budget sets {sorted(unsupported)}, which this script cannot pass on")
    return [
        part
        for key, flag in flags.items()
        if budget.get(key) is not None
        for part in (flag, short_flag_value(budget[key]))
    ]


def sweep_study_flags(
    folder: Path, name: str, seeds: Sequence[str], jobs: int, root: Path
) -> list[str]:
    """The flags of a plain-grid sweep named ``name`` in ``folder`` (under ``root``, where it
    runs): every point on ``seeds``, its journal ``folder/name/study.log``."""
    study = folder / name / "study.log"
    return [
        "--search-seeds",
        *seeds,
        "--seeds",
        *seeds,
        "--jobs",
        str(jobs),
        "--name",
        name,
        "--out-dir",
        str(folder.relative_to(root)),
        "--storage",
        f"journal:{study.relative_to(root)}",
    ]


def ablation_flags(
    rule: str, suffix: str, budget: dict, winner: dict, flags: dict[str, str], ignored=()
) -> list[str]:
    """The budget's flags (:func:`budget_flags`) and the grid of ``rule``'s ablation
    ``suffix`` around ``winner``."""
    arguments = budget_flags(budget, flags, ignored)
    grid = {key: (short_flag_value(value),) for key, value in winner.items()}
    for key, values in ABLATIONS[rule][suffix].items():
        grid[key] = tuple(short_flag_value(winner[key]) if v == WINNER else v for v in values)
    for key, values in grid.items():
        arguments += ["--grid", f"{rule}:{key}={','.join(values)}"]
    return arguments
