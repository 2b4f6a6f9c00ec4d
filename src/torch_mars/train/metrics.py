"""Per-run metrics: one row per optimizer step to ``metrics.jsonl`` and ``metrics.csv``, and to
TensorBoard when the ``tensorboard`` package is installed."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from torch_mars.atomic_files import write_text_atomically

METRIC_COLUMNS: tuple[str, ...] = (
    "step",
    "tokens",
    "time_s",
    "lr",
    "train_loss",
    "val_loss",
    "tokens_per_s",
    "mfu",
    "grad_norm",
    "clipped_fraction",
    "correction_ratio",
    "update_rms",
)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``run_dir/metrics.jsonl`` (a last line cut short by a kill is left out)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics; is {run_dir} a torch-mars run folder?")
    *complete, _unterminated = path.read_text().split("\n")
    return [json.loads(line) for line in complete if line.strip()]


class MetricsLogger:
    """Appends rows to the run's metric files. On resume it first cuts them back to the rows up
    to ``resume_step`` (the checkpoint's step: rows past it were written after the last
    checkpoint and will be written again), replacing each file atomically, then appends: a kill
    at any moment leaves every row up to the checkpoint in place."""

    def __init__(
        self,
        run_dir: Path,
        resume_step: int | None = None,
        columns: tuple[str, ...] = METRIC_COLUMNS,
        x_axis: str = "tokens",
    ) -> None:
        self.run_dir = run_dir
        self.columns = columns
        self.x_axis = x_axis
        rows = read_metrics(run_dir) if resume_step is not None else []
        rows = [row for row in rows if row["step"] <= (resume_step or 0)]
        write_text_atomically(
            run_dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows)
        )
        table = io.StringIO()
        writer = csv.DictWriter(table, fieldnames=columns)
        writer.writeheader()
        writer.writerows({key: row.get(key) for key in columns} for row in rows)
        write_text_atomically(run_dir / "metrics.csv", table.getvalue())
        self._jsonl = open(run_dir / "metrics.jsonl", "a")  # noqa: SIM115 (held for the run)
        self._csv_file = open(run_dir / "metrics.csv", "a", newline="")  # noqa: SIM115
        self._csv = csv.DictWriter(self._csv_file, fieldnames=columns)
        self._tensorboard = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            pass
        else:
            self._tensorboard = SummaryWriter(str(run_dir / "tensorboard"))

    def _write(self, row: dict[str, Any]) -> None:
        self._jsonl.write(json.dumps(row) + "\n")
        self._csv.writerow({key: row.get(key) for key in self.columns})

    def log(self, row: dict[str, Any]) -> None:
        """Record one step's metrics (missing or ``None`` values stay empty)."""
        self._write(row)
        self._jsonl.flush()
        self._csv_file.flush()
        if self._tensorboard is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, float) and math.isfinite(value):
                    self._tensorboard.add_scalar(key, value, row[self.x_axis])

    def close(self) -> None:
        self._jsonl.close()
        self._csv_file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
