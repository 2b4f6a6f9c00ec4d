"""Where a run executes: its processes (``torchrun``'s environment), its device, and the state
of its random generators, the same for every task."""

from __future__ import annotations

import datetime
import functools
import os
import platform
import random
import sys
import threading
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Processes:
    """This process's place among a run's processes (one, unless launched by ``torchrun``)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        """More than one process: collectives are needed."""
        return self.world > 1

    @property
    def main(self) -> bool:
        """The process that writes the run's files."""
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every process (nothing on one)."""
        if self.enabled:
            dist.barrier()


def init_processes(device: str, timeout_s: float) -> Processes:
    """Join ``torchrun``'s process group (nccl on CUDA, gloo on CPU) when ``WORLD_SIZE > 1``;
    a collective that waits longer than ``timeout_s`` fails."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Processes()
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.startswith("cuda") else "gloo",
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return Processes(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """``auto`` is CUDA when available, else CPU; under torchrun each process takes the GPU of its
    ``LOCAL_RANK``."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        resolved = torch.device(device)
    except RuntimeError:
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu or cuda[:N], got {device!r}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this torch build or machine has no CUDA device")
    if device == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        resolved = torch.device(f"cuda:{local_rank}")
    return resolved


def rng_state() -> dict[str, Any]:
    """The global generators' states (torch's, Python's, and CUDA's where there is CUDA)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def pause_if_asked(variable: str, count: int, what: str) -> None:
    """Stand still for good, saying ``paused after {count} {what}`` on stderr, when the
    environment variable ``variable`` equals ``count``: a test kills the process there, at a
    point it controls rather than a moment it guesses."""
    if os.environ.get(variable) == str(count):
        print(f"\npaused after {count} {what}", file=sys.stderr, flush=True)
        threading.Event().wait()


@functools.cache
def describe_device(device: torch.device) -> str:
    """A human name of ``device``: the GPU's name, or the CPU model (from /proc/cpuinfo) and the
    vector instructions torch's kernels use there (they change a run's floats). Cached: a
    worker names its device once, not at every claim."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {torch.backends.cpu.get_cpu_capability()}"
