"""Figures of saved runs of any task, one line per optimizer (the mean over seeds, with a band of
± one std when there are several): text runs show validation loss against tokens and against
training wall time, vision runs validation accuracy and loss against epochs."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from torch_mars.train.metrics import read_metrics
from torch_mars.train.run_record import read_config


@dataclass(frozen=True)
class Panel:
    """One subplot: metrics column ``y`` (times ``scale``) against column ``x``."""

    x: str
    x_label: str
    y: str
    y_label: str
    scale: float = 1.0


PANELS: dict[str, tuple[Panel, ...]] = {
    "text": (
        Panel("tokens", "training tokens", "val_loss", "validation loss (nats/token)"),
        Panel("time_s", "training wall time (s)", "val_loss", "validation loss (nats/token)"),
    ),
    "vision": (
        Panel("epoch", "epoch", "val_accuracy", "validation accuracy (%)", 100.0),
        Panel("epoch", "epoch", "val_loss", "validation loss (nats)"),
    ),
}


@dataclass(frozen=True)
class RunCurve:
    """One run's metric rows as a figure draws them: its task, its optimizer (the line it joins)
    and its rows (column name to value; a row may lack a column)."""

    task: str
    optimizer: str
    rows: list[dict[str, Any]]


def curves_of_run_dirs(run_dirs: Sequence[Path]) -> list[RunCurve]:
    """The :class:`RunCurve` of each run folder, from its ``config.json`` and metrics."""
    curves = []
    for run_dir in run_dirs:
        config = read_config(Path(run_dir))
        curves.append(RunCurve(config["task"], config["optimizer"], read_metrics(Path(run_dir))))
    return curves


def _curve(run: RunCurve, panel: Panel) -> tuple[np.ndarray, np.ndarray]:
    rows = [row for row in run.rows if row.get(panel.y) is not None]
    if not rows:
        raise ValueError(f"a {run.optimizer} run has no {panel.y} points yet")
    return (
        np.array([row[panel.x] for row in rows], dtype=float),
        panel.scale * np.array([row[panel.y] for row in rows], dtype=float),
    )


def plot_runs(run_dirs: Sequence[Path], out_path: Path, title: str | None = None) -> Path:
    """Draw ``out_path`` (PNG) from the metrics of ``run_dirs``, all of one task, grouped by the
    optimizer in each ``config.json``. Returns ``out_path``."""
    if not run_dirs:
        raise ValueError("no run folders to plot")
    return plot_curves(curves_of_run_dirs(run_dirs), out_path, title)


def plot_curves(runs: Sequence[RunCurve], out_path: Path, title: str | None = None) -> Path:
    """Draw ``out_path`` (PNG) from ``runs``, all of one task, one line per optimizer (the mean
    over its runs, with a band of ± one std when there are several). Returns ``out_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("no runs to plot")
    tasks = {run.task for run in runs}
    if len(tasks) != 1:
        raise ValueError(f"runs of several tasks cannot share a figure: {sorted(tasks)}")
    panels = PANELS[tasks.pop()]
    by_optimizer: dict[str, list[RunCurve]] = defaultdict(list)
    for run in runs:
        by_optimizer[run.optimizer].append(run)
    figure, axes = plt.subplots(1, len(panels), figsize=(11, 4.2))
    for axis, panel in zip(axes, panels, strict=True):
        for name, group in by_optimizer.items():
            curves = [_curve(run, panel) for run in group]
            length = min(len(y) for _, y in curves)
            x = np.mean([x[:length] for x, _ in curves], axis=0)
            ys = np.stack([y[:length] for _, y in curves])
            mean, std = ys.mean(axis=0), ys.std(axis=0)
            label = name if len(group) == 1 else f"{name} ({len(group)} seeds)"
            (line,) = axis.plot(x, mean, label=label, marker="o", markersize=2.5)
            if len(group) > 1:
                axis.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        axis.set_xlabel(panel.x_label)
        axis.set_ylabel(panel.y_label)
        axis.grid(alpha=0.3)
        axis.legend()
    if title:
        figure.suptitle(title)
    return save_figure(figure, out_path)


def save_figure(figure: Any, out_path: Path) -> Path:
    """Lay out ``figure``, write it to ``out_path`` (its folder made) at 120 dpi, close it.

    A PNG is stored with a 256-colour palette: line plots lose nothing visible and the file is
    about a third of matplotlib's RGBA one, which is what keeps committed results small."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.suffix.lower() == ".png":
        from PIL import Image

        buffer = io.BytesIO()
        figure.savefig(buffer, dpi=120, format="png")
        buffer.seek(0)
        with Image.open(buffer) as image:
            image.convert("RGB").quantize(colors=256).save(out_path, optimize=True)
    else:
        figure.savefig(out_path, dpi=120)
    plt.close(figure)
    return out_path
