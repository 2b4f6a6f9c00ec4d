"""Distributed checkpoints (``torch.distributed.checkpoint``, DCP) of a model and its optimizer.

DCP writes each rank's shards with their global offsets and reshards on load, so a checkpoint
saved by N ranks loads on M ranks, FSDP2 or not (a single process without a process group
included). Optimizer state is keyed by parameter name, not by position.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def save_sharded_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer],
) -> None:
    """Write ``model`` and ``optimizer`` (one, or several over disjoint parameters) to
    ``directory`` with DCP; every rank of the process group must call it."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    with _single_process_is_intended():
        dcp.save(state, checkpoint_id=str(directory), no_dist=_single_process())


def load_sharded_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer],
) -> None:
    """Load ``model`` and ``optimizer`` (as saved) in place from a DCP checkpoint written with
    any number of ranks; every rank must call it."""
    optimizers = [optimizer] if isinstance(optimizer, torch.optim.Optimizer) else list(optimizer)
    for each in optimizers:
        init_state = getattr(each, "init_state", None)
        if init_state is not None:
            init_state()  # MARS: DCP loads into existing state (exact mode cannot step to make it)
    model_state, optimizer_state = get_state_dict(model, optimizers)
    state = {"model": model_state, "optimizer": optimizer_state}
    with _single_process_is_intended():
        dcp.load(state, checkpoint_id=str(directory), no_dist=_single_process())
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
