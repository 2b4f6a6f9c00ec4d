"""The trace of one parameter from ``torch-mars tune``'s ``main`` to a run's stored value (issue
"The study wing, round 2": how many places a newcomer follows a setting through).

One small study of a training function runs in this process with ``--fixed
weight_decay=0.0123`` (a value no default has). Every torch_mars function entered between
``main`` and the first run's value stored in the study, with that value among its arguments
(directly, in a container, or as a field of a record it is given, three levels deep; a method
of a plan or spec that holds it counts), is one *stay*; the modules they are in are its
*rooms*. The count depends on this definition: it is a yardstick for the next change, not the
issue's own count (its method is not in the repository).

    python benchmarks/studies/parameter_trace.py   # writes benchmarks/results/parameter-trace/
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "parameter-trace" / "trace.md"
MARK = 0.0123


def train(make_optimizer, seed, data_seed, report):
    import torch

    group = make_optimizer(torch.nn.Linear(2, 2)).param_groups[0]
    return (math.log10(group["lr"]) + 2.5) ** 2 + 0.01 * seed


def holds(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` carries :data:`MARK` within three levels."""
    if isinstance(value, float):
        return value == MARK
    if depth >= 3:
        return False
    if isinstance(value, dict):
        return any(holds(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return any(holds(v, depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(
            holds(getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value)
        )
    if isinstance(value, argparse.Namespace):
        return any(holds(v, depth + 1) for v in vars(value).values())
    return False


def trace() -> dict[tuple[str, str], int]:
    """Each stay (module, function) and how often the value entered it."""
    stays: dict[tuple[str, str], int] = collections.OrderedDict()
    stored: list[bool] = []

    def profile(frame, event, arg):
        if stored or event != "call":
            return
        code = frame.f_code
        if "torch_mars" not in code.co_filename:
            if code.co_name == "set_trial_state_values" and "optuna" in code.co_filename:
                stored.append(True)
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(holds(frame.f_locals.get(n)) for n in names):
            key = (code.co_filename.split("src/")[-1], code.co_name)
            stays[key] = stays.get(key, 0) + 1

    with tempfile.TemporaryDirectory() as folder:
        arguments = ["tune", "--objective", "parameter_trace:train", "--optimizers", "adamw"]
        arguments += ["--trials", "2", "--seeds", "0", "--heldout-seeds", "1", "2"]
        arguments += ["--heldout-data-seeds", "1", "--finalists", "0", "--out-dir", folder]
        arguments += ["--name", "trace", "--fixed", f"weight_decay={MARK}"]
        sys.setprofile(profile)
        try:
            torch_mars(arguments)
        finally:
            sys.setprofile(None)
    return stays


def main() -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    stays = trace()
    rooms = sorted({module for module, _ in stays})
    lines = [
        f"# One parameter from main to a stored run value: {len(stays)} stays in "
        f"{len(rooms)} rooms",
        "",
        "Written by benchmarks/studies/parameter_trace.py (its docstring defines a stay).",
        "",
        "| module | function | entered |",
        "|---|---|---:|",
        *(f"| {module} | {name} | {count} |" for (module, name), count in stays.items()),
    ]
    write_text_atomically(OUT, "\n".join(lines) + "\n")
    print(lines[0].removeprefix("# "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
