"""The training harness, one for every task. A task (text: a GPT on a token corpus,
:mod:`.trainer`; vision: a ResNet on images, :mod:`.vision`) is a :class:`~.task.Task` record
(:mod:`.task`) and a loop body; the run shell (:mod:`.run_shell`) runs every task's loop with
the same lock, checkpoint, resume and run record (``config.json``, metrics rows,
``summary.json``), and the tasks share the optimizer factory by name, the schedules, the
comparison runner, the summaries, the table and the figure.

It depends on ``torch_mars.optim``, ``models`` and ``data``; the CLI and the benchmarks use it,
and so can any script: ``run_comparison(DEFAULT_COMPARE, ["mars-adamw", "adamw"], [0, 1],
Path("runs/mine"))``.
"""

from torch_mars.train.compare import (
    DEFAULT_COMPARE,
    DEFAULT_OPTIMIZERS,
    OptimizerSummary,
    format_table,
    run_comparison,
    summarise,
)
from torch_mars.train.optimizers import OPTIMIZER_NAMES, build_optimizer, default_hyperparams
from torch_mars.train.plots import plot_runs
from torch_mars.train.run_record import RunResult
from torch_mars.train.run_shell import run_loop, train_run
from torch_mars.train.schedules import Schedule
from torch_mars.train.task import Task, task_named, task_of
from torch_mars.train.trainer import TrainConfig, Trainer
from torch_mars.train.vision import VisionConfig, VisionTrainer, vision_hyperparams

__all__ = [
    "DEFAULT_COMPARE",
    "DEFAULT_OPTIMIZERS",
    "OPTIMIZER_NAMES",
    "OptimizerSummary",
    "RunResult",
    "Schedule",
    "Task",
    "TrainConfig",
    "Trainer",
    "VisionConfig",
    "VisionTrainer",
    "build_optimizer",
    "default_hyperparams",
    "format_table",
    "plot_runs",
    "run_comparison",
    "run_loop",
    "summarise",
    "task_named",
    "task_of",
    "train_run",
    "vision_hyperparams",
]
