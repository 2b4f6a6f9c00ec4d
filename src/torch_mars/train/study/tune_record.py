"""A tune study's record, ``tune.json``: its format declared, written and read here only.

The report (:mod:`.tune_report`) builds the record; :func:`write_tune_record` stamps it with
:data:`TUNE_RECORD_FORMAT`, and every reader, the library's and the lab's, opens it with
:func:`read_tune_record` and reads typed fields (:class:`TuneRecord`, :class:`OptimizerEntry`,
:class:`VerdictEntry`): the file's keys are named in this module only. A record from before
the stamp reads as format 1 (its fields are those of format 2 but for the ones a reader finds
absent: peers' winners and ``bias``); one from a newer torch-mars is refused by name rather
than misread."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from torch_mars.atomic_files import write_text_atomically

TUNE_RECORD = "tune.json"
# 2: stamped; each optimizer's peers' winners (own_winner, peer_winners, best_known_from)
# where read, and each verdict's bias B. 1: every record before the stamp.
TUNE_RECORD_FORMAT = 2


@dataclass(frozen=True)
class OptimizerEntry:
    """One optimizer's entry of a record, its keys read here only (each field is the key of
    that name; an absent key reads as the field's default: records of format 1 lack the peers'
    fields, older ones the protocol's). Losses are floats, None where a run diverged or has not
    finished; points map dimension names to values."""

    optimizer: str
    finished: bool = False
    trials: int = 0
    winner: dict[str, float] = field(default_factory=dict)
    hyperparams: dict[str, Any] = field(default_factory=dict)
    extra_space: dict[str, float] | None = None
    selection_finals: list[float | None] = field(default_factory=list)
    finalists: list[dict[str, Any]] = field(default_factory=list)
    heldout_pairs: list[list[int]] = field(default_factory=list)
    heldout_finals: list[float | None] = field(default_factory=list)
    # the machine each held-out run trained on (pairs.machine_of); empty in records before
    # 2026-12-07, which a cross-study read cannot check
    heldout_machines: list[str] = field(default_factory=list)
    trial_scores: list[float | None] = field(default_factory=list)
    tuning_curve: list[float | None] = field(default_factory=list)
    rounds: Any = None
    pruned_trials: int | None = None
    own_winner: dict[str, float] | None = None
    own_score: float | None = None
    peer_winners: list[dict[str, Any]] | None = None
    best_known_from: str | None = None
    moved: list[str] = field(default_factory=list)
    values_scored: dict[str, Any] = field(default_factory=dict)
    failed_runs: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    worst_heldout: Any = None
    heldout_outliers: Any = None

    @property
    def heldout(self) -> tuple[list[float | None], list[list[int]]]:
        """The held-out ``(finals, pairs)``."""
        return list(self.heldout_finals), list(self.heldout_pairs)


@dataclass(frozen=True)
class VerdictEntry:
    """One verdict of a record: ``rule`` minus ``control`` on ``pairs`` held-out pairs, its mean
    ``gap``, unadjusted ``interval`` and ``p``, and (format 2 and the records of the four words)
    the ``adjusted_interval`` at ``level`` its ``decision`` was read from, the runs each side
    lost to divergence and the search's bias B."""

    rule: str
    control: str
    gap: float | None = None
    interval: list[float | None] | None = None
    p: float | None = None
    pairs: int = 0
    decision: str = ""
    provisional: bool = False
    error: str | None = None
    dof: float | None = None
    adjusted_interval: list[float | None] | None = None
    level: float | None = None
    diverged: list[int] | None = None
    bias: float | None = None


def _of(kind: type, data: Any, where: Path) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: an entry of the record is {data!r}, not a record")
    names = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class TuneRecord:
    """A study's report record: its format, the command that built its plan, trials per
    optimizer, selection protocol, budget, run cost per device and runs taken from other
    studies, each optimizer's entry in report order, and the verdicts."""

    path: Path
    format: int
    trials: int
    selection: dict[str, Any]
    optimizers: tuple[OptimizerEntry, ...]
    verdicts: tuple[VerdictEntry, ...]
    command: tuple[str, ...] = ()
    budget: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    copied_runs: int = 0

    def entry(self, optimizer: str) -> OptimizerEntry | None:
        """``optimizer``'s entry, None where the study does not tune it."""
        return next((o for o in self.optimizers if o.optimizer == optimizer), None)

    def heldout(self, optimizer: str) -> tuple[list[float | None], list[list[int]]]:
        """``optimizer``'s held-out ``(finals, pairs)`` (None where a run has not finished);
        two empty lists where the study does not tune it."""
        entry = self.entry(optimizer)
        return entry.heldout if entry is not None else ([], [])


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
    return TuneRecord(
        path=path,
        format=data.get("format", 1),
        trials=data.get("trials", 0),
        selection=data.get("selection", {}),
        optimizers=tuple(_of(OptimizerEntry, o, path) for o in data["optimizers"]),
        verdicts=tuple(_of(VerdictEntry, v, path) for v in data.get("verdicts", [])),
        command=tuple(data.get("command", ())),
        budget=data.get("budget", {}),
        cost=data.get("cost", {}),
        copied_runs=data.get("copied_runs", 0),
    )
