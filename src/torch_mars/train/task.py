"""What the harness knows of a task (text, vision): one :class:`Task` record each, looked up
from a config by :func:`task_of`. Every command that runs, sweeps, tunes or compares either
task reads what differs between them from here; nothing else asks which task a config is.

A config declares its task once, as the class attribute ``task_name``; each task's module
(:mod:`.trainer`, :mod:`.vision`) defines its record and registers it when imported, so this
module depends on neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from torch_mars.train.run_record import MetricSpec

# A config field's metadata key: the study's identity leaves the field out at its default, so
# that a setting added later keeps the identities stored before it.
OMITTED_AT_DEFAULT = "omitted_at_default"


class TaskConfig(Protocol):
    """What every task's run config has (:class:`~torch_mars.train.trainer.TrainConfig`,
    :class:`~torch_mars.train.vision.VisionConfig`)."""

    task_name: str
    optimizer: str
    seed: int
    data: str
    hyperparams: dict[str, Any]

    def resolved_hyperparams(self) -> dict[str, Any]:
        """The optimizer's defaults for this task, with ``hyperparams`` applied."""


@dataclass(frozen=True)
class Task:
    """One task of the harness.

    Attributes:
        name: ``"text"`` or ``"vision"``; the ``task`` of its run records.
        description: one line, for help and logs.
        metric: the headline metric and its direction.
        budget_unit: what a run's budget counts (``"tokens"``, ``"images"``).
        command_suffix: the suffix of its commands (``compare`` + suffix, ``sweep`` + suffix).
        config_of_budget: the config of a study's stored budget (its fields, as JSON).
        load_data: the config's data, read afresh (share it between runs by passing it).
        data_fingerprint: a hash of loaded data by content.
        check_hyperparams: build the config's optimizer on a small model of the task, so that
            a bad setting is a ``ValueError`` before any run.
        setting: ``(line, title)`` saying what a comparison of this config trains.
        loop: the per-run loop body of a config, on loaded data (None: it reads the
            config's data once its settings are checked), which
            :func:`~torch_mars.train.run_shell.run_loop` runs; None for a task that runs
            itself.
        run: a task that runs itself (a user's training function,
            :mod:`~torch_mars.train.study.objective`): the run's result from the config and
            the loaded data; None for a loop in the run shell.
    """

    name: str
    description: str
    metric: MetricSpec
    budget_unit: str
    command_suffix: str
    config_of_budget: Callable[[dict[str, Any]], Any]
    load_data: Callable[[Any], Any]
    data_fingerprint: Callable[[Any], str]
    check_hyperparams: Callable[[Any], None]
    setting: Callable[[Any, Any], tuple[str, str]]
    loop: Callable[[Any, Any], Any] | None
    run: Callable[[Any, Any], Any] | None = None


_TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Make ``task`` known by its name. Each task's module registers its record when it is
    imported, and :mod:`torch_mars.train`'s ``__init__`` imports every task's module, so any
    import from the package has them all."""
    if task.name in _TASKS and _TASKS[task.name] is not task:
        raise ValueError(f"a task named {task.name!r} is registered already")
    _TASKS[task.name] = task
    return task


def task_named(name: str) -> Task:
    """The task of that name (a ``ValueError`` naming the known ones for any other)."""
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; known: {sorted(_TASKS)}")
    return _TASKS[name]


def task_of(config: TaskConfig) -> Task:
    """The task a run config belongs to, by the ``task_name`` its class declares (a
    ``TypeError`` for anything else)."""
    name = getattr(type(config), "task_name", None)
    if name not in _TASKS:
        raise TypeError(f"{type(config).__name__} is not a task's run config")
    return _TASKS[name]
