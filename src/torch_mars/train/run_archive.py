"""A sweep's compact record of its finished runs: ``runs.jsonl``, one JSON line per run with its
config, its summary and its evaluation curve (the rows where the task's metric was measured,
with the columns the figures draw). It is what a study keeps in git: a run folder's per-step
``metrics.jsonl`` is a work file of the run, and everything a table or figure needs is here.

A line is appended, flushed and synced as each run finishes, so a kill loses at most the line
being written; a last line cut short is ignored when the archive is read, and that run is simply
trained again.

>>> record = {"run": "adamw/lr=0.001-seed0", "config": {}, "summary": {"final": 2.0},
...           "curve": {"columns": ["step", "val_loss"], "rows": [[1, 3.0], [2, 2.0]]}}
>>> curve_rows(record)
[{'step': 1, 'val_loss': 3.0}, {'step': 2, 'val_loss': 2.0}]
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from torch_mars.train.metrics import read_metrics
from torch_mars.train.run_record import (
    TASK_METRICS,
    RunResult,
    read_config,
    read_summary,
)

ARCHIVE_FILE = "runs.jsonl"
# The columns a run's evaluation curve keeps: what the figures draw against what, and the
# training loss beside it.
CURVE_COLUMNS: dict[str, tuple[str, ...]] = {
    "text": ("step", "tokens", "time_s", "train_loss", "val_loss"),
    "vision": (
        "epoch",
        "images",
        "time_s",
        "train_loss",
        "train_accuracy",
        "test_loss",
        "test_accuracy",
    ),
}


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def compact_record(run_dir: Path, key: str) -> dict[str, Any]:
    """The archive line of the finished run in ``run_dir``, under ``key`` (its path inside
    the sweep's ``runs/``, e.g. ``"adamw/lr=0.001-seed0"``)."""
    config = read_config(run_dir)
    summary = read_summary(run_dir).as_dict()
    summary.pop("run_dir")
    task = config["task"]
    metric = TASK_METRICS[task].key
    metrics_file = Path(run_dir) / "metrics.jsonl"
    rows = read_metrics(run_dir) if metrics_file.is_file() else []
    columns = CURVE_COLUMNS[task]
    evaluated = [row for row in rows if row.get(metric) is not None]
    return {
        "run": key,
        "config": config,
        "summary": {k: _finite_or_none(v) for k, v in summary.items()},
        "curve": {
            "columns": list(columns),
            "rows": [[_finite_or_none(row.get(c)) for c in columns] for row in evaluated],
        },
    }


def append_record(archive: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one line of ``archive`` and sync it to disk; a last line cut short
    by a kill is cut off first, so that the new line starts a line of its own."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, separators=(",", ":")) + "\n"
    with archive.open("ab+") as handle:
        handle.seek(0)
        text = handle.read()
        if text and not text.endswith(b"\n"):
            handle.truncate(text.rfind(b"\n") + 1)
        handle.write(line.encode())
        handle.flush()
        os.fsync(handle.fileno())


def read_archive(archive: Path) -> dict[str, dict[str, Any]]:
    """The records of ``archive`` by run key (empty when there is none). A last line without
    its newline (a kill while writing it) is left out; a key written twice keeps its last; any
    other line that is no record is a ``ValueError`` naming the file and line."""
    if not archive.is_file():
        return {}
    *complete, _unterminated = archive.read_text().split("\n")
    records = {}
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            records[record["run"]] = record
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(
                f"{archive}:{number}: not a run record ({error}); mend or remove that line"
            ) from None
    return records


def result_of(record: dict[str, Any], run_dir: Path) -> RunResult:
    """The :class:`RunResult` an archive line holds (NaN where it holds null); ``run_dir`` is
    where the run folder is or was."""
    return RunResult.from_dict(record["summary"], run_dir)


def curve_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The evaluation curve of an archive line as metric rows (column name to value)."""
    columns = record["curve"]["columns"]
    return [dict(zip(columns, row, strict=True)) for row in record["curve"]["rows"]]


def archive_run_folders(sweep_dir: Path) -> int:
    """Append to ``sweep_dir/runs.jsonl`` every finished run folder under ``sweep_dir/runs``
    (``<optimizer>/<point>-seed<k>``, holding a ``summary.json``) that it lacks, in name order;
    returns how many were added. This brings sweeps written before the archive into it."""
    archive = Path(sweep_dir) / ARCHIVE_FILE
    archived = read_archive(archive)
    added = 0
    for summary in sorted((Path(sweep_dir) / "runs").glob("*/*/summary.json")):
        key = f"{summary.parent.parent.name}/{summary.parent.name}"
        if key not in archived:
            append_record(archive, compact_record(summary.parent, key))
            added += 1
    return added
