"""The record of one run, the same for every task: ``config.json`` when it starts, a metrics row
per step or epoch (:mod:`.metrics`), and ``summary.json`` (a :class:`RunResult`) when it ends.
``torch-mars plot`` and the comparison table read runs through this module only."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_mars.atomic_files import write_text_atomically

CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
# The files that say a folder holds a run (with its checkpoint): a fresh run refuses such a
# folder unless told to resume or overwrite it.
RUN_RECORD_FILES = (CONFIG_FILE, "metrics.jsonl", "metrics.csv", SUMMARY_FILE)


@dataclass(frozen=True)
class MetricSpec:
    """How a task's headline metric reads.

    Attributes:
        key: its column in the metrics rows.
        label: its name in tables and figures.
        lower_is_better: True for losses, False for accuracies.
        percent: shown as a percentage (values are fractions in [0, 1]).
        test_key: its column on the task's test split, read once after the last evaluation
            and never chosen on (None where the task has no test split).
    """

    key: str
    label: str
    lower_is_better: bool
    percent: bool = False
    test_key: str | None = None

    def best(self, values: list[float]) -> float:
        """The best of ``values`` (NaN when there are none)."""
        finite = [v for v in values if not math.isnan(v)]
        if not finite:
            return math.nan
        return min(finite) if self.lower_is_better else max(finite)

    def format(self, value: float) -> str:
        return f"{100 * value:.2f}%" if self.percent else f"{value:.4f}"


# The headline metric of each task, and the x-axes its figure draws it against.
TASK_METRICS: dict[str, MetricSpec] = {
    "text": MetricSpec("val_loss", "val loss", lower_is_better=True),
    "vision": MetricSpec(
        "val_accuracy",
        "validation accuracy",
        lower_is_better=False,
        percent=True,
        test_key="test_accuracy",
    ),
    "objective": MetricSpec("value", "value", lower_is_better=True),
}


class RunFailed(Exception):
    """A run that ended in an error its study records as the run's outcome (a user's training
    function that raised): its trial is failed with the message, and not trained again."""


@dataclass
class RunResult:
    """What a finished (or stopped) run ends with.

    Attributes:
        task: ``"text"`` or ``"vision"``.
        optimizer, seed: what was trained, from which initialisation.
        metric: the task's headline metric (:data:`TASK_METRICS`), e.g. ``"val_loss"``.
        final, best: its last and its best evaluated value (NaN before any evaluation).
        final_train_loss: the training loss of the last step or epoch (nats).
        budget, budget_unit: what the run trained on, e.g. ``819200`` ``"tokens"`` or
            ``40000`` ``"images"``.
        train_time_s: wall time of the training steps, evaluation excluded.
        steps: optimizer steps taken.
        run_dir: the run folder.
        mfu: model FLOPs utilisation of the training steps (:mod:`torch_mars.train.mfu`), NaN
            where the device's bf16 rate is unknown (a CPU) or the task counts no FLOPs.
        test: the headline metric on the task's test split, read once after the last
            evaluation (:attr:`MetricSpec.test_key`); NaN where the task has none.
    """

    task: str
    optimizer: str
    seed: int
    metric: str
    final: float
    best: float
    final_train_loss: float
    budget: int
    budget_unit: str
    train_time_s: float
    steps: int
    run_dir: Path
    mfu: float = math.nan
    test: float = math.nan

    @property
    def throughput(self) -> float:
        """``budget_unit`` per second of training."""
        return self.budget / self.train_time_s if self.train_time_s > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "run_dir": str(self.run_dir)}

    @classmethod
    def from_dict(cls, record: dict[str, Any], run_dir: Path | None = None) -> RunResult:
        """The result :meth:`as_dict` wrote (NaN where JSON holds null); ``run_dir`` where the
        run folder is now, else the one recorded."""
        values = {k: math.nan if v is None else v for k, v in record.items()}
        return cls(**{**values, "run_dir": Path(run_dir or record.get("run_dir") or ".")})


def check_finite(optimizer: str, loss: float, where: str) -> None:
    """Raise ``FloatingPointError`` if the training ``loss`` at ``where`` is not finite."""
    if not math.isfinite(loss):
        raise FloatingPointError(
            f"{optimizer}: training loss is {loss} at {where}; lower the learning rate"
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def write_config(run_dir: Path, task: str, config: dict[str, Any]) -> None:
    """Write ``run_dir/config.json``: the run's task and settings (tuples as lists)."""
    record = {"task": task, **_jsonable(config)}
    (run_dir / CONFIG_FILE).write_text(json.dumps(record, indent=2) + "\n")


def write_summary(result: RunResult) -> None:
    """Write ``summary.json`` into the result's run folder, atomically (a temporary file, then a
    rename): a run has a summary only once it is whole, which is how a sweep knows it is done."""
    write_text_atomically(
        result.run_dir / SUMMARY_FILE, json.dumps(result.as_dict(), indent=2) + "\n"
    )


def read_config(run_dir: Path) -> dict[str, Any]:
    """The ``config.json`` of a run folder (runs written before the ``task`` key are text)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; is {run_dir} a torch-mars run folder?")
    config = json.loads(path.read_text())
    config.setdefault("task", "text")
    return config


LOCK_FILE = ".lock"


class RunFolderBusy(RuntimeError):
    """Another process is training into the run folder."""


@contextlib.contextmanager
def run_folder_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock (an ``flock`` on ``.lock``, which records the holder's process
    id) while the block runs; a second process gets :class:`RunFolderBusy` naming the first.
    The operating system releases the lock when its holder dies, so a killed run leaves none."""
    path = Path(run_dir) / LOCK_FILE
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise RunFolderBusy(
                f"{run_dir} is in use by process {holder} (lock {path}); wait for it to end or "
                "choose another run folder"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()


def check_folder_path(folder: Path, name: str) -> None:
    """Refuse, before any work, a folder path that cannot hold a run's files: empty (given as a
    string), the file-system root, an existing file, one under a file, or a component longer
    than the file system allows (255 bytes). A ``ValueError`` naming ``name``."""
    text = str(folder)
    if not text.strip():
        raise ValueError(f"{name} is empty: name a folder")
    path = Path(folder)
    if path.resolve() == Path(path.resolve().anchor):
        raise ValueError(f"{name} {text!r} is the file-system root: name a folder of its own")
    too_long = [part for part in path.parts if len(part.encode()) > 255]
    if too_long:
        raise ValueError(f"{name}: the name {too_long[0][:40]!r}... is longer than 255 bytes")
    for ancestor in (path, *path.parents):
        if ancestor.exists() and not ancestor.is_dir():
            where = "is" if ancestor == path else f"is under {ancestor}, which is"
            raise ValueError(f"{name} {text!r} {where} a file, not a folder")


def is_run_dir(folder: Path) -> bool:
    """Whether ``folder`` holds a run (a ``config.json``)."""
    return (Path(folder) / CONFIG_FILE).is_file()
