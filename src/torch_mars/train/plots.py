"""Figures of saved runs, one line per optimizer (the mean over seeds, with a band of ± one std
when there are several): for GPT runs, validation loss against tokens and against training wall
time; for vision runs, test accuracy and test loss against epochs."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from torch_mars.train.metrics import read_metrics


def _val_curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = [row for row in read_metrics(run_dir) if row.get("val_loss") is not None]
    if not rows:
        raise ValueError(f"{run_dir}: the run has no validation points yet")
    return (
        np.array([r["tokens"] for r in rows], dtype=float),
        np.array([r["time_s"] for r in rows], dtype=float),
        np.array([r["val_loss"] for r in rows], dtype=float),
    )


def _save(figure, axes, title: str | None, out_path: Path) -> Path:
    """Grid and legend on ``axes``, the title, then write ``out_path`` and close the figure."""
    import matplotlib.pyplot as plt

    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_path, dpi=120)
    plt.close(figure)
    return out_path


def _mean_with_band(axis, x: np.ndarray, ys: np.ndarray, label: str) -> None:
    """Plot the mean of the rows of ``ys`` against ``x``, with a ± one-std band over rows."""
    mean, std = ys.mean(axis=0), ys.std(axis=0)
    (line,) = axis.plot(x, mean, label=label, marker="o", markersize=2.5)
    if len(ys) > 1:
        axis.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)


def plot_runs(run_dirs: Sequence[Path], out_path: Path, title: str | None = None) -> Path:
    """Draw ``out_path`` (PNG) from the metrics of ``run_dirs``; runs are grouped by the
    optimizer recorded in each ``config.json``. Returns ``out_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not run_dirs:
        raise ValueError("no run folders to plot")
    curves: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = defaultdict(list)
    for run_dir in run_dirs:
        config_path = Path(run_dir) / "config.json"
        if not config_path.is_file():
            raise FileNotFoundError(f"{config_path}: missing; is {run_dir} a torch-mars run?")
        curves[json.loads(config_path.read_text())["optimizer"]].append(_val_curve(Path(run_dir)))
    figure, (by_tokens, by_time) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, runs in curves.items():
        length = min(len(loss) for _, _, loss in runs)
        tokens = runs[0][0][:length]
        times = np.mean([t[:length] for _, t, _ in runs], axis=0)
        losses = np.stack([loss[:length] for _, _, loss in runs])
        label = name if len(runs) == 1 else f"{name} ({len(runs)} seeds)"
        for axis, x in ((by_tokens, tokens), (by_time, times)):
            _mean_with_band(axis, x, losses, label)
    by_tokens.set_xlabel("training tokens")
    by_time.set_xlabel("training wall time (s)")
    for axis in (by_tokens, by_time):
        axis.set_ylabel("validation loss (nats/token)")
    return _save(figure, (by_tokens, by_time), title, out_path)


def plot_vision_runs(run_dirs: Sequence[Path], out_path: Path, title: str | None = None) -> Path:
    """Draw ``out_path`` (PNG): test accuracy and test loss per epoch of vision ``run_dirs``,
    grouped by the optimizer in each ``summary.json``. Returns ``out_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not run_dirs:
        raise ValueError("no run folders to plot")
    curves: dict[str, list[list[dict]]] = defaultdict(list)
    for run_dir in run_dirs:
        summary = Path(run_dir) / "summary.json"
        if not summary.is_file():
            raise FileNotFoundError(f"{summary}: missing; is {run_dir} a finished vision run?")
        curves[json.loads(summary.read_text())["optimizer"]].append(read_metrics(Path(run_dir)))
    figure, (accuracy_axis, loss_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, runs in curves.items():
        length = min(len(rows) for rows in runs)
        epochs = np.array([row["epoch"] for row in runs[0][:length]], dtype=float)
        label = name if len(runs) == 1 else f"{name} ({len(runs)} seeds)"
        for axis, key, scale in (
            (accuracy_axis, "test_accuracy", 100.0),
            (loss_axis, "test_loss", 1.0),
        ):
            values = np.array([[scale * row[key] for row in rows[:length]] for rows in runs])
            _mean_with_band(axis, epochs, values, label)
    accuracy_axis.set_ylabel("test accuracy (%)")
    loss_axis.set_ylabel("test loss (nats)")
    for axis in (accuracy_axis, loss_axis):
        axis.set_xlabel("epoch")
    return _save(figure, (accuracy_axis, loss_axis), title, out_path)
