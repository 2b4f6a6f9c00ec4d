"""The three ``torch-mars bench`` runs, each from one options dataclass: the step, whole
iterations, and the step on FSDP2 shards. Each prints a header naming the machine, a Markdown
table, and writes a JSON record; the CLI only parses flags into the options."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm


@dataclass(frozen=True)
class BenchOptions:
    """What every bench mode takes.

    Attributes:
        model: GPT config name, or None for the mode's default (GPT-2 small for the step;
            ``mini`` for iterations and the distributed step on CPU).
        warmup, repeats: untimed and timed rounds; each row reports the median.
        only: the rows to run (None: the mode's default rows).
        json: the results file (None: ``runs/bench-<mode>.json``).
    """

    model: str | None = None
    warmup: int = 3
    repeats: int = 10
    only: tuple[str, ...] | None = None
    json: Path | None = None

    def __post_init__(self) -> None:
        if self.warmup < 1 or self.repeats < 1:
            raise ValueError("--warmup and --repeats must be >= 1")


@dataclass(frozen=True)
class StepBenchOptions(BenchOptions):
    """``bench step``: ``device`` is ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or None (CUDA when
    available)."""

    device: str | None = None


@dataclass(frozen=True)
class IterationBenchOptions(StepBenchOptions):
    """``bench iteration``: ``batch_size`` sequences per iteration; ``compile``: the model's
    forward ``torch.compile``d, as ``train --compile`` does."""

    batch_size: int = 8
    compile: bool = False


@dataclass(frozen=True)
class DistributedBenchOptions(BenchOptions):
    """``bench distributed``: ``processes`` spawned gloo CPU processes when not under torchrun
    (under torchrun: the launched processes, NCCL on GPUs)."""

    processes: int = 2


def _device(name: str | None) -> torch.device:
    name = name or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.split(":")[0] not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda, got {name!r}")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: this torch build or machine has no CUDA device")
    return device


def _write(record: dict[str, object], path: Path | None, mode: str) -> int:
    out = path or Path("runs") / f"bench-{mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def _progress_bar() -> tuple[tqdm, object]:
    bar = tqdm(total=0, disable=not sys.stderr.isatty(), desc="bench")

    def progress(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update()

    return bar, progress


def _header(mode: str, model: str, device: torch.device, options: BenchOptions) -> str:
    from torch_mars.train.runtime import describe_device

    return (
        f"torch-mars bench {mode}: model {model}, device {device} ({describe_device(device)}), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of "
        f"{options.repeats} after {options.warmup} warm-up"
    )


def run_step_bench(options: StepBenchOptions) -> int:
    """Time one optimizer step of every candidate; see :mod:`torch_mars.bench.step`."""
    from torch_mars.bench.step import (
        cuda_candidates,
        default_candidates,
        format_step_table,
        newton_schulz_ms,
        run_step_benchmark,
        uses_newton_schulz,
    )
    from torch_mars.kernels import TRITON_AVAILABLE
    from torch_mars.models.gpt import GPT, gpt_config

    device = _device(options.device)
    model_name = options.model or "gpt2-small"
    header = _header("step", model_name, device, options)
    print(header, flush=True)
    candidates = default_candidates()
    if device.type == "cuda":
        candidates += cuda_candidates()
    if options.only:
        unknown = sorted(set(options.only) - {c.name for c in candidates})
        if unknown:
            names = ", ".join(c.name for c in candidates)
            raise ValueError(f"--only: unknown {unknown}; choose from {names}")
        candidates = [c for c in candidates if c.name in options.only]
    elif device.type == "cpu" and model_name.startswith("gpt2"):
        slow = [c.name for c in candidates if uses_newton_schulz(c)]
        candidates = [c for c in candidates if not uses_newton_schulz(c)]
        print(
            f"(left out on CPU at {model_name} size, where bf16 Newton-Schulz takes seconds per "
            f"step: {', '.join(slow)}; name them with --only to run them)",
            flush=True,
        )
    bar, progress = _progress_bar()
    bar.total = len(candidates)
    model = GPT(gpt_config(model_name, 256)).to(device)
    results = run_step_benchmark(model, candidates, options.warmup, options.repeats, progress)
    bar.close()
    print(format_step_table(results))
    record: dict[str, object] = {
        "header": header,
        "mode": "step",
        "model": model_name,
        "results": [r.as_dict() for r in results],
    }
    if any("shampoo" in c.name for c in candidates):
        ns_ms = newton_schulz_ms(model, options.warmup, options.repeats)
        print(f"\nNewton-Schulz of the hidden matrices (batched, 5 steps): {ns_ms:.2f} ms")
        record["newton_schulz_ms"] = ns_ms
        if device.type == "cuda" and TRITON_AVAILABLE:
            ns_ms = newton_schulz_ms(model, options.warmup, options.repeats, products="triangle")
            print(f"the same with ns_products='triangle': {ns_ms:.2f} ms")
            record["newton_schulz_triangle_ms"] = ns_ms
    return _write(record, options.json, "step")


def run_iteration_bench(options: IterationBenchOptions) -> int:
    """Time whole training iterations; see :mod:`torch_mars.bench.iteration`."""
    from torch_mars.bench.iteration import (
        DEFAULT_ROWS,
        format_iteration_table,
        run_iteration_benchmark,
    )

    device = _device(options.device)
    model_name = options.model or ("gpt2-small" if device.type == "cuda" else "mini")
    header = _header("iteration", model_name, device, options)
    print(header, flush=True)
    rows = list(options.only or DEFAULT_ROWS)
    bar, progress = _progress_bar()
    bar.total = len(rows)
    results = run_iteration_benchmark(
        model_name,
        rows,
        device,
        options.batch_size,
        options.warmup,
        options.repeats,
        progress,
        compile=options.compile,
    )
    bar.close()
    print(format_iteration_table(results))
    record = {
        "header": header,
        "mode": "iteration",
        "model": model_name,
        "batch_size": options.batch_size,
        "compile": options.compile,
        "results": [r.as_dict() for r in results],
    }
    return _write(record, options.json, "iteration")


def run_distributed_bench(options: DistributedBenchOptions) -> int:
    """Time the step on FSDP2 shards; see :mod:`torch_mars.bench.distributed`."""
    from torch_mars.bench.distributed import (
        DEFAULT_ROWS,
        format_distributed_table,
        run_distributed_benchmark,
    )

    model_name = options.model or ("gpt2-small" if torch.cuda.is_available() else "mini")
    launched = int(os.environ.get("WORLD_SIZE", "0"))
    processes = launched or options.processes
    backend = "torchrun" if launched else "spawned gloo processes on the CPU"
    header = (
        f"torch-mars bench distributed: model {model_name}, FSDP2 over {processes} processes "
        f"({backend}), torch {torch.__version__}, median of {options.repeats} after "
        f"{options.warmup} warm-up"
    )
    rows = list(options.only or DEFAULT_ROWS)
    results = run_distributed_benchmark(
        model_name, rows, processes, options.warmup, options.repeats
    )
    if results is None:  # a torchrun rank other than 0
        return 0
    print(header)
    print(format_distributed_table(results))
    record = {
        "header": header,
        "mode": "distributed",
        "model": model_name,
        "processes": processes,
        "results": [r.as_dict() for r in results],
    }
    return _write(record, options.json, "distributed")
