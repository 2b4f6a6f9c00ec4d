"""Distributed checkpoints (``torch.distributed.checkpoint``, DCP) of a model and its optimizer.

DCP writes each rank's shards with their global offsets and reshards on load, so a checkpoint
saved by N ranks loads on M ranks, FSDP2 or not (a single process without a process group
included). Optimizer state is keyed by parameter name, not by position.

DCP's reader unpickles a checkpoint's ``.metadata`` in full (torch offers no allow-list for it),
so :func:`load_sharded_checkpoint` reads it with an unpickler of its own that builds only the
classes DCP's metadata is made of and refuses any other name before looking it up: a crafted
``.metadata`` cannot run code. The shard files themselves are tensors read as raw bytes.
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

# What DCP's metadata pickle names, and nothing else (besides torch's dtypes, checked by type).
_METADATA_GLOBALS = {
    ("pathlib", "PosixPath"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    *(
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    ),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds only what DCP's ``.metadata`` is made of; any other class or function named in
    the file is refused before it is looked up."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(
            f"refused {module}.{name}: a DCP checkpoint's metadata names only DCP's metadata "
            "classes, torch.Size and dtypes"
        )


class _CheckedReader(dcp.FileSystemReader):
    """DCP's file-system reader, with its metadata read by :class:`_MetadataUnpickler`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as handle:
            metadata = _MetadataUnpickler(handle).load()
        if not isinstance(metadata, Metadata):
            raise pickle.UnpicklingError(f"{path} holds a {type(metadata).__name__}, not Metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _optimizers_of(
    optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer],
) -> list[torch.optim.Optimizer]:
    """The optimizers DCP saves: a combined optimizer (Muon + AdamW) is an ``Optimizer`` that
    iterates over the ones it holds, and DCP must see those."""
    return list(optimizer) if hasattr(type(optimizer), "__iter__") else [optimizer]


def save_sharded_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer],
) -> None:
    """Write ``model`` and ``optimizer`` (one, or several over disjoint parameters) to
    ``directory`` with DCP; every rank of the process group must call it."""
    model_state, optimizer_state = get_state_dict(model, _optimizers_of(optimizer))
    state = {"model": model_state, "optimizer": optimizer_state}
    with _single_process_is_intended():
        dcp.save(state, checkpoint_id=str(directory), no_dist=_single_process())


def load_sharded_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer],
) -> None:
    """Load ``model`` and ``optimizer`` (as saved) in place from a DCP checkpoint written with
    any number of ranks; every rank must call it. A ``.metadata`` that names anything but DCP's
    metadata classes is a ``pickle.UnpicklingError``, and nothing in it runs."""
    optimizers = _optimizers_of(optimizer)
    for each in optimizers:
        init_state = getattr(each, "init_state", None)
        if init_state is not None:
            init_state()  # MARS: DCP loads into existing state (exact mode cannot step to make it)
    model_state, optimizer_state = get_state_dict(model, optimizers)
    state = {"model": model_state, "optimizer": optimizer_state}
    reader = _CheckedReader(str(directory))
    reader.read_metadata()  # a crafted metadata fails here, before DCP wraps the error
    with _single_process_is_intended():
        dcp.load(state, storage_reader=reader, no_dist=_single_process())
    set_state_dict(
        model,
        optimizers,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )


def _single_process() -> bool:
    return not (dist.is_available() and dist.is_initialized())


@contextlib.contextmanager
def _single_process_is_intended() -> Iterator[None]:
    """Silence DCP's warning that it assumes a single process when there is no process group:
    here that is the documented behaviour, not a guess."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield
