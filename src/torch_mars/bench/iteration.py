"""Iteration benchmark: whole training steps (forward, backward, optimizer step) of the GPT
harness, per optimizer, so the optimizer's share of an iteration is visible.

Every optimizer trains a fresh copy of the same model on the same random token batches, built
exactly as ``torch-mars train`` builds it (:func:`~torch_mars.train.optimizers.build_optimizer`
with the config's default hyperparameters), optionally with MARS's fused kernels.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from torch_mars.bench.step import synchronize
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


def run_iteration_benchmark(
    model_name: str,
    optimizers: list[str],
    device: torch.device,
    batch_size: int,
    warmup: int,
    repeats: int,
    fused_mars: bool = False,
    progress: Callable[[str], None] = lambda name: None,
) -> list[IterationResult]:
    """Time ``warmup + repeats`` iterations of each optimizer; report the medians of the last
    ``repeats``."""
    config = gpt_config(model_name, BYTE_VOCAB)
    torch.manual_seed(0)
    reference = GPT(config).to(device)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(
        0, config.vocab_size, (batch_size, config.block_size + 1), generator=generator
    ).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    results = []
    for name in optimizers:
        label = f"{name}-fused" if fused_mars and name.startswith("mars-") else name
        progress(label)
        model = copy.deepcopy(reference)
        settings = default_hyperparams(name, model_name)
        if fused_mars and name.startswith("mars-"):
            settings["fused"] = True
        optimizer = build_optimizer(name, model, settings).optimizer
        iteration_times, step_times = [], []
        for index in range(warmup + repeats):
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
            if index >= warmup:
                iteration_times.append(end - start)
                step_times.append(end - step_start)
        iteration = statistics.median(iteration_times)
        step = statistics.median(step_times)
        results.append(
            IterationResult(
                label,
                1e3 * iteration,
                1e3 * step,
                step / iteration,
                batch_size * config.block_size / iteration,
            )
        )
    return results


def format_iteration_table(results: list[IterationResult]) -> str:
    """A Markdown table of the iteration benchmark."""
    lines = [
        "| optimizer | iteration (ms) | step (ms) | step share | tokens/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.iteration_ms:.1f} | {r.step_ms:.1f} | {100 * r.step_share:.0f}% "
            f"| {r.tokens_per_s:,.0f} |"
        )
    return "\n".join(lines)
