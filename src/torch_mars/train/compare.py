"""``torch-mars compare``: train the same GPT with several optimizers from the same seed on the
same batches, at an equal token budget, and summarise val loss, tokens and speed."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_mars.data import TokenCorpus, load_corpus
from torch_mars.train.trainer import TrainConfig, Trainer, TrainResult

# MARS-AdamW against its base AdamW, MARS-Shampoo against its base Muon.
DEFAULT_OPTIMIZERS: tuple[str, ...] = ("mars-adamw", "adamw", "mars-shampoo", "muon")
# About five minutes for the four optimizers on two CPU cores (docs/results.md).
DEFAULT_COMPARE = TrainConfig(
    model="mini", data="stdlib", steps=400, batch_size=16, eval_interval=40, eval_batches=8
)


@dataclass
class OptimizerSummary:
    """One optimizer's results over its seeds (``*_std`` is 0 for a single seed)."""

    optimizer: str
    seeds: list[int]
    final_val_loss: float
    final_val_loss_std: float
    best_val_loss: float
    best_val_loss_std: float
    tokens: int
    train_time_s: float
    tokens_per_s: float


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(results: Sequence[TrainResult]) -> list[OptimizerSummary]:
    """Group run results by optimizer, in first-seen order, with mean and std over seeds."""
    names = list(dict.fromkeys(r.optimizer for r in results))
    summaries = []
    for name in names:
        runs = [r for r in results if r.optimizer == name]
        final, final_std = _mean_std([r.final_val_loss for r in runs])
        best, best_std = _mean_std([r.best_val_loss for r in runs])
        summaries.append(
            OptimizerSummary(
                optimizer=name,
                seeds=[r.seed for r in runs],
                final_val_loss=final,
                final_val_loss_std=final_std,
                best_val_loss=best,
                best_val_loss_std=best_std,
                tokens=runs[0].tokens,
                train_time_s=statistics.fmean(r.train_time_s for r in runs),
                tokens_per_s=statistics.fmean(r.tokens_per_s for r in runs),
            )
        )
    return summaries


def format_table(summaries: Sequence[OptimizerSummary]) -> str:
    """A Markdown table of the summaries, best final val loss first."""

    def loss(mean: float, std: float, seeds: int) -> str:
        return f"{mean:.4f} ± {std:.4f}" if seeds > 1 else f"{mean:.4f}"

    lines = [
        "| optimizer | final val loss | best val loss | tokens | time (s) | tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for s in sorted(summaries, key=lambda s: (math.isnan(s.final_val_loss), s.final_val_loss)):
        n = len(s.seeds)
        lines.append(
            f"| {s.optimizer} | {loss(s.final_val_loss, s.final_val_loss_std, n)} | "
            f"{loss(s.best_val_loss, s.best_val_loss_std, n)} | {s.tokens:,} | "
            f"{s.train_time_s:.1f} | {s.tokens_per_s:,.0f} |"
        )
    return "\n".join(lines)


def run_comparison(
    base: TrainConfig,
    optimizers: Sequence[str],
    seeds: Sequence[int],
    out_dir: Path,
    hyperparams: dict[str, dict[str, Any]] | None = None,
    corpus: TokenCorpus | None = None,
) -> list[TrainResult]:
    """Train ``base`` once per optimizer and seed into ``out_dir/<optimizer>-seed<k>``.
    ``hyperparams[name]`` overrides optimizer ``name``'s defaults. The data order is fixed by
    ``base.data_seed`` for every run; ``seed`` sets the model's initialisation."""
    corpus = corpus if corpus is not None else load_corpus(base.data)
    results = []
    for seed in seeds:
        for name in optimizers:
            config = dataclasses.replace(
                base,
                optimizer=name,
                seed=seed,
                run_dir=out_dir / f"{name}-seed{seed}",
                hyperparams=dict((hyperparams or {}).get(name, {})),
            )
            results.append(Trainer(config, corpus).train())
    return results
