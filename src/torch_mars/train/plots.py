"""Figures of saved runs: validation loss against tokens and against training wall time, one
line per optimizer (the mean over seeds, with a band of ± one std when there are several)."""

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
        mean, std = losses.mean(axis=0), losses.std(axis=0)
        label = name if len(runs) == 1 else f"{name} ({len(runs)} seeds)"
        for axis, x in ((by_tokens, tokens), (by_time, times)):
            (line,) = axis.plot(x, mean, label=label, marker="o", markersize=2.5)
            if len(runs) > 1:
                axis.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    by_tokens.set_xlabel("training tokens")
    by_time.set_xlabel("training wall time (s)")
    for axis in (by_tokens, by_time):
        axis.set_ylabel("validation loss (nats/token)")
        axis.grid(alpha=0.3)
        axis.legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_path, dpi=120)
    plt.close(figure)
    return out_path
