r"""The curve columns a study keeps per run, and the reader of a pre-engine sweep's
``runs.jsonl`` (one JSON line per finished run: its config, summary and evaluation curve),
whose runs ``sweep`` takes into its study once.

>>> import tempfile
>>> from pathlib import Path
>>> archive = Path(tempfile.mkdtemp()) / ARCHIVE_FILE
>>> _ = archive.write_text('{"run": "adamw/lr=0.001-seed0", "summary": {"final": 2.0}}\n{"run')
>>> list(read_archive(archive))
['adamw/lr=0.001-seed0']
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        "val_loss",
        "val_accuracy",
    ),
    "objective": ("step", "value"),
}


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
