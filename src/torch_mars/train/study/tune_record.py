"""A tune study's record, ``tune.json``: its format declared, written and read here only.

The report (:mod:`.tune_report`) builds the record; :func:`write_tune_record` stamps it with
:data:`TUNE_RECORD_FORMAT`, and every reader, the library's and the lab's, opens it with
:func:`read_tune_record`. A record from before the stamp reads as format 1 (its fields are
those of format 2 but for the ones a reader finds absent: peers' winners and ``bias``); one
from a newer torch-mars is refused by name rather than misread."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_mars.atomic_files import write_text_atomically

TUNE_RECORD = "tune.json"
# 2: stamped; each optimizer's peers' winners (own_winner, peer_winners, best_known_from)
# where read, and each verdict's bias B. 1: every record before the stamp.
TUNE_RECORD_FORMAT = 2


@dataclass(frozen=True)
class TuneRecord:
    """A study's report record: its format, trials per optimizer, selection protocol, each
    optimizer's entry (winner, finals, finalists, ...) in report order, and the verdicts."""

    path: Path
    format: int
    trials: int
    selection: dict[str, Any]
    optimizers: tuple[dict[str, Any], ...]
    verdicts: tuple[dict[str, Any], ...]
    data: dict[str, Any]

    def entry(self, optimizer: str) -> dict[str, Any] | None:
        """``optimizer``'s entry, None where the study does not tune it."""
        return next((o for o in self.optimizers if o["optimizer"] == optimizer), None)

    def heldout(self, optimizer: str) -> tuple[list[float | None], list[list[int]]]:
        """``optimizer``'s held-out ``(finals, pairs)`` (None where a run has not finished);
        two empty lists where the study does not tune it."""
        entry = self.entry(optimizer) or {}
        return list(entry.get("heldout_finals") or []), list(entry.get("heldout_pairs") or [])


def write_tune_record(folder: Path, record: dict[str, Any]) -> TuneRecord:
    """``record`` (:func:`~.tune_report.report_json`) as ``folder/tune.json``, stamped with
    :data:`TUNE_RECORD_FORMAT`, written atomically; the record as written (what a reader of
    the file gets, without reading it back)."""
    path = Path(folder) / TUNE_RECORD
    stamped = {"format": TUNE_RECORD_FORMAT, **record}
    write_text_atomically(path, json.dumps(stamped, indent=2) + "\n")
    return _record_of(path, json.loads(json.dumps(stamped)))


def read_tune_record(where: str | Path) -> TuneRecord:
    """The record in ``where`` (a study folder, or its ``tune.json``). A ValueError names the
    file where it is missing, not JSON, not a study's record, or of a newer format."""
    path = Path(where)
    if path.is_dir() or path.name != TUNE_RECORD:
        path = path / TUNE_RECORD
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: no study record ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("optimizers"), list):
        raise ValueError(f"{path}: not a tune study's record (no optimizers)")
    version = data.get("format", 1)
    if not isinstance(version, int) or version > TUNE_RECORD_FORMAT:
        raise ValueError(
            f"{path}: record format {version!r}, newer than this torch-mars reads "
            f"({TUNE_RECORD_FORMAT}): upgrade torch-mars to read it"
        )
    return _record_of(path, data)


def _record_of(path: Path, data: dict[str, Any]) -> TuneRecord:
    version = data.get("format", 1)
    return TuneRecord(
        path=path,
        format=version,
        trials=data.get("trials", 0),
        selection=data.get("selection", {}),
        optimizers=tuple(data["optimizers"]),
        verdicts=tuple(data.get("verdicts", [])),
        data=data,
    )
