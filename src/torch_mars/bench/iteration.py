"""Iteration benchmark: whole training steps (forward, backward, optimizer step) of the GPT
harness, per optimizer, so the optimizer's share of an iteration is visible.

Every optimizer trains a fresh copy of the same model on the same random token batches, built
exactly as ``torch-mars train`` builds it (:func:`~torch_mars.train.optimizers.build_optimizer`
with the config's default hyperparameters); a ``-fused`` row is the same MARS optimizer with
``fused=True``. Forward and backward run as ``train`` runs them: under bf16 autocast on CUDA,
attention through ``scaled_dot_product_attention``, the model ``torch.compile``d with
``compile=True``. MFU counts 6 x parameters per token (:mod:`torch_mars.train.mfu`).
"""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from torch_mars.bench.step import synchronize
from torch_mars.bench.table import markdown_table
from torch_mars.models.gpt import GPT, gpt_config
from torch_mars.train.mfu import (
    model_flops_utilization,
    peak_bf16_flops,
    training_flops_per_token,
)
from torch_mars.train.optimizers import build_optimizer, default_hyperparams

# Vocabulary of the random tokens when the config leaves it to the data (tiny, mini).
BYTE_VOCAB = 256


@dataclass
class IterationResult:
    """One row: medians over the timed iterations (milliseconds), throughput in tokens/s, and
    model FLOPs utilisation (NaN where the device's bf16 rate is unknown)."""

    name: str
    iteration_ms: float
    step_ms: float
    step_share: float
    tokens_per_s: float
    mfu: float = math.nan

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


DEFAULT_ROWS = (
    "adamw",
    "muon",
    "mars-adamw",
    "mars-adamw-fused",
    "mars-lion",
    "mars-lion-fused",
    "mars-shampoo",
    "mars-shampoo-fused",
)
FUSED_SUFFIX = "-fused"


def _build(row: str, model: torch.nn.Module, model_name: str) -> object:
    """The harness's optimizer for ``row``: an optimizer name, or a MARS name + ``-fused``."""
    fused = row.endswith(FUSED_SUFFIX)
    name = row.removesuffix(FUSED_SUFFIX) if fused else row
    if fused and not name.startswith("mars-"):
        raise ValueError(f"{row!r}: only MARS rows take the {FUSED_SUFFIX!r} suffix")
    settings = default_hyperparams(name, model_name)
    if fused:
        settings["fused"] = True
    return build_optimizer(name, model, settings).optimizer


def run_iteration_benchmark(
    model_name: str,
    rows: list[str],
    device: torch.device,
    batch_size: int,
    warmup: int,
    repeats: int,
    progress: Callable[[str], None] = lambda name: None,
    compile: bool = False,
) -> list[IterationResult]:
    """Time iterations of every row's optimizer on its own copy of one model, round-robin (one
    iteration of each in turn) after ``warmup`` iterations each; report medians. ``compile``:
    each copy's forward is ``torch.compile``d (the warm-up then includes its compilation)."""
    config = gpt_config(model_name, BYTE_VOCAB)
    torch.manual_seed(0)
    reference = GPT(config).to(device)
    flops_per_token = training_flops_per_token(reference.num_parameters())
    peak = peak_bf16_flops(device)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(
        0, config.vocab_size, (batch_size, config.block_size + 1), generator=generator
    ).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    runs = []
    for row in rows:
        progress(row)
        model = copy.deepcopy(reference)
        forward = torch.compile(model) if compile else model
        runs.append((forward, _build(row, model, model_name)))

    def autocast() -> contextlib.AbstractContextManager:
        if device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def iteration(model: torch.nn.Module, optimizer: object) -> tuple[float, float]:
        synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            _, loss = model(inputs, targets)
        loss.backward()
        synchronize(device)
        step_start = time.perf_counter()
        optimizer.step()
        synchronize(device)
        end = time.perf_counter()
        return end - start, end - step_start

    for model, optimizer in runs:
        for _ in range(warmup):
            iteration(model, optimizer)
    timings: list[list[tuple[float, float]]] = [[] for _ in rows]
    for _ in range(repeats):
        for index, (model, optimizer) in enumerate(runs):
            timings[index].append(iteration(model, optimizer))
    results = []
    for row, samples in zip(rows, timings, strict=True):
        whole = statistics.median(total for total, _ in samples)
        step = statistics.median(step for _, step in samples)
        tokens = batch_size * config.block_size
        mfu = model_flops_utilization(flops_per_token * tokens, whole, peak)
        results.append(
            IterationResult(row, 1e3 * whole, 1e3 * step, step / whole, tokens / whole, mfu)
        )
    return results


def format_iteration_table(results: list[IterationResult]) -> str:
    """A Markdown table of the iteration benchmark."""
    headers = ["optimizer", "iteration (ms)", "step (ms)", "step share", "tokens/s", "MFU"]
    return markdown_table(
        headers,
        (
            [
                r.name,
                f"{r.iteration_ms:.1f}",
                f"{r.step_ms:.1f}",
                f"{100 * r.step_share:.0f}%",
                f"{r.tokens_per_s:,.0f}",
                f"{r.mfu:.1%}" if math.isfinite(r.mfu) else "n/a",
            ]
            for r in results
        ),
    )
