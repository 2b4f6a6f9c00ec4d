"""Checkpoints: one file with model, optimizer, RNG, data position and run identity, written
atomically (temporary file, then rename) so a crash mid-write leaves the previous one intact."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = "torch-mars-checkpoint/1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from: missing, corrupt, or from another run."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically."""
    partial = path.with_name(path.name + ".partial")
    torch.save({"format": CHECKPOINT_FORMAT, **payload}, partial)
    os.replace(partial, path)


def load_checkpoint(path: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """Read a checkpoint and check it belongs to the run described by ``identity`` (the settings
    that determine a run's trajectory); any difference is a :class:`CheckpointError`."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint to resume from")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path}: not a readable checkpoint ({error})") from error
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path}: not a torch-mars checkpoint (expected format {CHECKPOINT_FORMAT!r})"
        )
    saved = payload.get("identity", {})
    differences = [
        f"{key}: checkpoint {saved.get(key)!r}, now {value!r}"
        for key, value in identity.items()
        if saved.get(key) != value
    ]
    if differences:
        raise CheckpointError(
            f"{path}: the checkpoint is from a different run; " + "; ".join(differences)
        )
    return payload
