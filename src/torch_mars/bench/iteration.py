"""Iteration benchmark: whole training steps (forward, backward, optimizer step) of the GPT
harness, per optimizer, so the optimizer's share of an iteration is visible.

Every optimizer trains a fresh copy of the same model on the same random token batches, built
exactly as ``torch-mars train`` builds it (:func:`~torch_mars.train.optimizers.build_optimizer`
with the config's default hyperparameters); a ``-fused`` row is the same MARS optimizer with
``fused=True``.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from torch_mars.bench.step import synchronize
from torch_mars.bench.table import markdown_table
from torch_mars.models.gpt import GPT, gpt_config
from torch_mars.train.optimizers import build_optimizer, default_hyperparams

# Vocabulary of the random tokens when the config leaves it to the data (tiny, mini).
BYTE_VOCAB = 256


@dataclass
class IterationResult:
    """One row: medians over the timed iterations (milliseconds), throughput in tokens/s."""

    name: str
    iteration_ms: float
    step_ms: float
    step_share: float
    tokens_per_s: float

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
) -> list[IterationResult]:
    """Time iterations of every row's optimizer on its own copy of one model, round-robin (one
    iteration of each in turn) after ``warmup`` iterations each; report medians."""
    config = gpt_config(model_name, BYTE_VOCAB)
    torch.manual_seed(0)
    reference = GPT(config).to(device)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(
        0, config.vocab_size, (batch_size, config.block_size + 1), generator=generator
    ).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    runs = []
    for row in rows:
        progress(row)
        model = copy.deepcopy(reference)
        runs.append((model, _build(row, model, model_name)))

    def iteration(model: torch.nn.Module, optimizer: object) -> tuple[float, float]:
        synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
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
        tokens_per_s = batch_size * config.block_size / whole
        results.append(IterationResult(row, 1e3 * whole, 1e3 * step, step / whole, tokens_per_s))
    return results


def format_iteration_table(results: list[IterationResult]) -> str:
    """A Markdown table of the iteration benchmark."""
    headers = ["optimizer", "iteration (ms)", "step (ms)", "step share", "tokens/s"]
    return markdown_table(
        headers,
        (
            [
                r.name,
                f"{r.iteration_ms:.1f}",
                f"{r.step_ms:.1f}",
                f"{100 * r.step_share:.0f}%",
                f"{r.tokens_per_s:,.0f}",
            ]
            for r in results
        ),
    )
