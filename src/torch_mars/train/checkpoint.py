"""Checkpoints: one file with model, optimizer, RNG, data position and run identity.

Written so that a crash at any moment leaves the previous checkpoint intact: a temporary file,
flushed to disk (``fsync``), then renamed over the old one, and the folder synced. Each carries
a SHA-256 of its content (every tensor's bytes, every value) that is checked on load, so a file
damaged on disk is a :class:`CheckpointError` naming it, not a silently different run. The file
is read with ``torch.load(weights_only=True)``, which builds tensors and plain containers only.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

# The single-file checkpoint in a run folder.
CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = "torch-mars-checkpoint/2"
# Version 1 had no content hash; it still loads, unchecked.
READABLE_FORMATS = ("torch-mars-checkpoint/1", CHECKPOINT_FORMAT)
SHARDED_CHECKPOINT_PREFIX = "checkpoint-step"
SHARDED_DIR_PATTERN = re.compile(rf"{SHARDED_CHECKPOINT_PREFIX}[0-9]+")  # ASCII digits only


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from: missing, corrupt, or from another run."""


def _feed(digest: Any, value: Any) -> None:
    """Add ``value`` to ``digest`` in a canonical form (dict keys sorted; tensors by dtype,
    shape and bytes)."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"tensor {tensor.dtype} {tuple(value.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        digest.update(f"dict {len(value)};".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, list | tuple):
        digest.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"{type(value).__name__} {value!r};".encode())


def content_hash(payload: dict[str, Any]) -> str:
    """The SHA-256 of ``payload`` without its own ``sha256`` entry."""
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in payload.items() if k != "sha256"})
    return digest.hexdigest()


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically and durably, with its content hash."""
    record = {"format": CHECKPOINT_FORMAT, **payload}
    record["sha256"] = content_hash(record)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        torch.save(record, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    _fsync_folder(path.parent)


def load_checkpoint(
    path: Path, identity: dict[str, Any], total_steps: int | None = None
) -> dict[str, Any]:
    """Read a checkpoint, check its content hash, check that it belongs to the run described
    by ``identity`` (the settings that determine a run's trajectory) and that its step is
    within ``total_steps``; any failure is a :class:`CheckpointError` naming the file."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint to resume from")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path}: not a readable checkpoint ({error})") from error
    if not isinstance(payload, dict) or payload.get("format") not in READABLE_FORMATS:
        raise CheckpointError(
            f"{path}: not a torch-mars checkpoint (expected format {CHECKPOINT_FORMAT!r})"
        )
    if payload["format"] == CHECKPOINT_FORMAT and payload.get("sha256") != content_hash(payload):
        raise CheckpointError(
            f"{path}: the content does not match its hash: the file is damaged (resume from a "
            "copy, or start over with --overwrite)"
        )
    saved = payload.get("identity", {})
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: its identity is a {type(saved).__name__}, not a dict")
    differences = [
        f"{key}: checkpoint {saved.get(key)!r}, now {value!r}"
        for key, value in identity.items()
        if saved.get(key) != value
    ]
    if differences:
        raise CheckpointError(
            f"{path}: the checkpoint is from a different run; " + "; ".join(differences)
        )
    progress = payload.get("progress")
    if isinstance(progress, dict):
        payload["progress"] = {LEGACY_PROGRESS.get(k, k): v for k, v in progress.items()}
    _check_fields(path, payload, total_steps)
    return payload


PROGRESS_FIELDS = ("train_time_s", "best", "final", "last_train_loss")
# Text checkpoints written before the run shell named the headline metric's fields for text.
LEGACY_PROGRESS = {"best_val_loss": "best", "last_val_loss": "final"}


def _check_fields(path: Path, payload: dict[str, Any], steps: int | None) -> None:
    """Refuse a checkpoint whose fields a resume reads are missing or of the wrong type (a
    valid hash proves only that the file is as written, not what wrote it)."""

    def refuse(field: str, wanted: str) -> CheckpointError:
        value = payload.get(field, "<missing>")
        shown = value if isinstance(value, int | float | str) else type(value).__name__
        return CheckpointError(f"{path}: its {field} must be {wanted}, got {shown!r}")

    step = payload.get("step")
    limit = steps if isinstance(steps, int) else math.inf
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= limit:
        raise refuse("step", f"a step count in [1, {steps}]")
    progress = payload.get("progress")
    if not isinstance(progress, dict) or not all(
        isinstance(progress.get(k), int | float) and not isinstance(progress.get(k), bool)
        for k in PROGRESS_FIELDS
    ):
        raise refuse("progress", f"a dict of numbers {PROGRESS_FIELDS}")
    rng = payload.get("rng")
    if not (
        isinstance(rng, dict)
        and isinstance(rng.get("torch"), torch.Tensor)
        and rng["torch"].dtype == torch.uint8
        and isinstance(rng.get("python"), list | tuple)
        and len(rng["python"]) == 625
        and all(isinstance(x, int) and not isinstance(x, bool) for x in rng["python"])
    ):
        raise refuse("rng", "torch's and Python's generator states")
    if "sharded_dir" not in payload:
        for field in ("model", "optimizer"):
            if not isinstance(payload.get(field), dict):
                raise refuse(field, "a state dict")


def sharded_checkpoint_dir(run_dir: Path, name: object) -> Path:
    """The DCP folder a checkpoint names, checked: a ``checkpoint-stepN`` folder (ASCII digits)
    directly in ``run_dir``, not a link and holding none. Anything else (an absolute path,
    ``..``, a link) is a :class:`CheckpointError`."""
    if not isinstance(name, str) or not SHARDED_DIR_PATTERN.fullmatch(name):
        raise CheckpointError(
            f"{run_dir}: the checkpoint names {name!r} as its shard folder; expected "
            "checkpoint-stepN inside the run folder"
        )
    folder = run_dir / name
    if folder.is_symlink() or folder.resolve().parent != run_dir.resolve():
        raise CheckpointError(f"{folder}: a shard folder must not be a link out of the run folder")
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: the shard folder the checkpoint names is missing")
    links = [path.name for path in folder.rglob("*") if path.is_symlink()]
    if links:
        raise CheckpointError(f"{folder}: a shard folder must hold no links, found {links[:3]}")
    return folder
