"""The training harness: trainer loop, schedules, checkpoints, metrics, plots and the
optimizer factory by name. Depends on optim, models and data; nothing depends on it but the
CLI."""

from torch_mars.train.compare import run_comparison, summarise
from torch_mars.train.optimizers import OPTIMIZER_NAMES, build_optimizer, default_hyperparams
from torch_mars.train.plots import plot_runs
from torch_mars.train.schedules import Schedule
from torch_mars.train.trainer import TrainConfig, Trainer, TrainResult

__all__ = [
    "OPTIMIZER_NAMES",
    "Schedule",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "build_optimizer",
    "default_hyperparams",
    "plot_runs",
    "run_comparison",
    "summarise",
]
