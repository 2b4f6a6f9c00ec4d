"""The training loop: a GPT on a token corpus with one optimizer, deterministic batches,
gradient accumulation, global gradient clipping, a schedule, periodic evaluation, metrics,
atomic checkpoints and exact resume. Multi-process data parallelism comes from ``torchrun``:
when ``WORLD_SIZE > 1`` the loop wraps the model in DDP (nccl on CUDA, gloo on CPU), or shards
it with FSDP2 (``fsdp=True``: each transformer block and the root, checkpoints through DCP)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from torch_mars.data import BatchSampler, TokenCorpus, load_corpus
from torch_mars.models import GPT, gpt_config
from torch_mars.optim import MARS
from torch_mars.optim.step_plan import is_dtensor
from torch_mars.train.diagnostics import MarsDiagnostics
from torch_mars.train.metrics import METRIC_COLUMNS
from torch_mars.train.mfu import (
    model_flops_utilization,
    peak_bf16_flops,
    training_flops_per_token,
)
from torch_mars.train.optimizers import (
    ADAMW_PATH_KEYS,
    MARS_OPTIONS,
    MARS_RULE_OF,
    MUON_OPTIONS,
    build_optimizer,
    default_hyperparams,
)
from torch_mars.train.run_record import TASK_METRICS, RunResult
from torch_mars.train.run_shell import check_run_controls, run_loop
from torch_mars.train.runtime import init_processes, resolve_device
from torch_mars.train.schedules import TEXT_SCHEDULES, Schedule, scale_learning_rates
from torch_mars.train.task import OMITTED_AT_DEFAULT, Task, register_task, task_of


@dataclass
class TrainConfig:
    """One training run.

    ``batch_size`` sequences form a micro-batch on each process; ``grad_accum`` micro-batches
    (over all processes) form an optimizer step, so a step sees
    ``batch_size * grad_accum * block_size`` tokens whatever the number of processes.
    ``hyperparams`` overrides the optimizer's defaults (:func:`default_hyperparams`);
    ``warmup_steps=None`` warms up over the first 10% of ``steps``.
    ``stop_after`` ends the run after that many steps (checkpointed), to be continued with
    ``resume``. A progress bar shows on a terminal unless ``quiet``; otherwise each evaluation
    prints a log line. ``fsdp`` shards the model with FSDP2 instead of DDP when running on
    more than one process (its checkpoints are DCP directories, which resume on any number of
    processes). A run folder that holds a checkpoint is only trained into again with ``resume``
    or ``overwrite``. ``dist_timeout_s`` bounds how long a process waits for the others in a
    collective before the run stops with an error. ``validation_slices`` N: the fixed
    validation windows (``eval_tokens``) lie in the (``data_seed`` mod N)-th of N consecutive
    slices of the val split, so runs on different data orders (a study's selection and its
    held-out runs) are scored on text that shares no token; unset, every run reads the same.
    """

    optimizer: str = "mars-adamw"
    model: str = "mini"
    data: str = "stdlib"
    steps: int = 300
    batch_size: int = 16
    grad_accum: int = 1
    block_size: int | None = None
    hyperparams: dict[str, Any] = field(default_factory=dict)
    exact: bool = False
    schedule: str = "cosine"
    warmup_steps: int | None = None
    grad_clip: float = 1.0
    eval_interval: int = 50
    eval_batches: int = 8
    eval_tokens: int | None = None
    seed: int = 0
    data_seed: int = 0
    validation_slices: int | None = field(default=None, metadata={OMITTED_AT_DEFAULT: True})
    device: str = "auto"
    compile: bool = False
    checkpoint_interval: int = 0
    run_dir: Path = Path("runs/train")
    resume: bool = False
    stop_after: int | None = None
    quiet: bool = False
    diagnostics: bool = False
    fsdp: bool = False
    overwrite: bool = False
    dist_timeout_s: float = 600.0
    task_name: ClassVar[str] = "text"

    def __post_init__(self) -> None:
        positive = ("steps", "batch_size", "grad_accum", "eval_interval", "eval_batches")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.data:
            raise ValueError("data must name a corpus or a file, got ''")
        if self.eval_tokens is not None and self.eval_tokens < 1:
            raise ValueError(f"eval_tokens must be >= 1, got {self.eval_tokens}")
        if self.validation_slices is not None:
            if self.validation_slices < 2:
                raise ValueError(
                    f"validation_slices must be >= 2 (or unset), got {self.validation_slices}"
                )
            if self.eval_tokens is None:
                raise ValueError("validation_slices needs eval_tokens (the fixed windows)")
        if self.schedule not in TEXT_SCHEDULES:
            raise ValueError(f"schedule must be one of {TEXT_SCHEDULES}, got {self.schedule!r}")
        if self.grad_clip < 0:
            raise ValueError(f"grad_clip must be >= 0 (0 disables it), got {self.grad_clip}")
        if not (math.isfinite(self.dist_timeout_s) and self.dist_timeout_s > 0):
            raise ValueError(f"dist_timeout_s must be > 0, got {self.dist_timeout_s}")
        check_run_controls(self)
        if self.stop_after is not None and not 1 <= self.stop_after <= self.steps:
            raise ValueError(
                f"stop_after must be in [1, steps={self.steps}], got {self.stop_after}"
            )
        if self.diagnostics and (self.exact or self.optimizer not in MARS_RULE_OF):
            raise ValueError("diagnostics need a MARS optimizer in the approximate mode")
        self.run_dir = Path(self.run_dir)

    def resolved_hyperparams(self) -> dict[str, Any]:
        """The optimizer's defaults for this model, with ``hyperparams`` applied."""
        settings = default_hyperparams(self.optimizer, self.model)
        allowed = set(settings) | {"min_lr"}
        if self.optimizer in MARS_RULE_OF:
            allowed |= set(MARS_OPTIONS)
        if self.optimizer in ("adamw", "nadamw"):
            allowed |= set(ADAMW_PATH_KEYS)
        if self.optimizer == "muon":
            allowed |= set(MUON_OPTIONS)
        unknown = set(self.hyperparams) - allowed
        if unknown:
            raise ValueError(
                f"unknown hyperparameters for {self.optimizer}: {sorted(unknown)}; "
                f"known: {sorted(allowed)}"
            )
        return {**settings, **self.hyperparams}

    def identity(self, data_fingerprint: str) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it. The data is known
        by its content (``data_fingerprint``, :meth:`TokenCorpus.fingerprint`), not by the
        ``data`` string, so moved data resumes and changed data does not."""
        keep = (
            "optimizer",
            "model",
            "steps",
            "batch_size",
            "grad_accum",
            "block_size",
            "exact",
            "schedule",
            "warmup_steps",
            "grad_clip",
            "seed",
            "data_seed",
        )
        hyperparams = {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in self.resolved_hyperparams().items()
        }
        if self.validation_slices is not None:  # absent when unset: older checkpoints resume
            keep += ("validation_slices",)
        return {
            **{k: getattr(self, k) for k in keep},
            "hyperparams": hyperparams,
            "data_fingerprint": data_fingerprint,
        }


class Trainer:
    """The text task's loop body: a :class:`TrainConfig`'s model, optimizer, batches and one
    step, which :meth:`train` runs in the run shell (:mod:`.run_shell`). ``corpus`` may be
    passed to share one loaded corpus between runs (as ``compare`` does); otherwise
    ``config.data`` is loaded."""

    metric_columns = METRIC_COLUMNS
    x_axis = "tokens"

    def __init__(self, config: TrainConfig, corpus: TokenCorpus | None = None) -> None:
        self.config = config
        self.processes = init_processes(
            config.device
            if config.device != "auto"
            else ("cuda" if torch.cuda.is_available() else "cpu"),
            config.dist_timeout_s,
        )
        if config.grad_accum % self.processes.world:
            raise ValueError(
                f"grad_accum ({config.grad_accum}) must be a multiple of the number "
                f"of processes ({self.processes.world})"
            )
        self.device = resolve_device(config.device, self.processes.local_rank)
        task = task_of(config)
        self.corpus = corpus if corpus is not None else task.load_data(config)
        self.data_fingerprint = task.data_fingerprint(self.corpus)
        model_config = gpt_config(config.model, self.corpus.vocab_size)
        if config.block_size is not None:
            if config.block_size > model_config.block_size:
                raise ValueError(
                    f"block_size must be <= {model_config.block_size} for "
                    f"{config.model}, got {config.block_size}"
                )
            model_config = dataclasses.replace(model_config, block_size=config.block_size)
        self.block_size = model_config.block_size
        torch.manual_seed(config.seed)
        self.model = GPT(model_config).to(self.device)
        self.sharded = config.fsdp and self.processes.enabled
        self.accepts_sharded = config.fsdp
        self.total_steps = config.steps
        if self.sharded:
            from torch.distributed.fsdp import fully_shard  # imported by sharded runs only

            for block in self.model.blocks:
                fully_shard(block)
            fully_shard(self.model)
        self.hyperparams = config.resolved_hyperparams()
        built = build_optimizer(config.optimizer, self.model, self.hyperparams, config.exact)
        self.optimizer, self.needs_closure = built.optimizer, built.needs_closure
        scale_learning_rates(self.optimizer, 1.0)  # records each group's peak lr
        warmup = config.warmup_steps if config.warmup_steps is not None else config.steps // 10
        self.schedule = Schedule(config.schedule, config.steps, warmup, built.min_ratio)
        self.sampler = BatchSampler(
            self.corpus, self.block_size, config.batch_size * config.grad_accum, config.data_seed
        )
        self.forward_model: nn.Module = self.model
        if config.compile:
            self.forward_model = torch.compile(self.model)
        if self.processes.enabled and not self.sharded:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.forward_model = nn.parallel.DistributedDataParallel(
                self.forward_model, device_ids=ids
            )
        self.local_accum = config.grad_accum // self.processes.world
        self._grad_norms: dict[int, Tensor] = {}
        self.tokens_per_step = config.batch_size * config.grad_accum * self.block_size
        self.flops_per_step = (
            training_flops_per_token(self.model.num_parameters()) * self.tokens_per_step
        )
        self.peak_flops = peak_bf16_flops(self.device) * self.processes.world
        self._validation: tuple[Tensor, Tensor] | None = None
        self.diagnostics = (
            MarsDiagnostics(self.optimizer)
            if config.diagnostics and isinstance(self.optimizer, MARS)
            else None
        )

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _micro_rows(self) -> Iterator[tuple[int, slice]]:
        size = self.config.batch_size
        for j in range(self.local_accum):
            m = self.processes.rank * self.local_accum + j
            yield j, slice(m * size, (m + 1) * size)

    def _mean_over_processes(self, value: Tensor) -> Tensor:
        if self.processes.enabled:
            dist.all_reduce(
                value, op=dist.ReduceOp.AVG if self.device.type == "cuda" else dist.ReduceOp.SUM
            )
            if self.device.type != "cuda":
                value /= self.processes.world
        return value

    def _forward_backward(self, step: int) -> Tensor:
        """Gradients of the mean loss over the global batch of ``step``, clipped; returns the
        loss (averaged over processes)."""
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=self.device)
        for j, rows in self._micro_rows():
            x, y = (t.to(self.device) for t in self.sampler.batch("train", step, rows))
            with self._gradient_sync(last=j == self.local_accum - 1), self._autocast():
                _, loss = self.forward_model(x, y)
                (loss / self.local_accum).backward()
            total += loss.detach() / self.local_accum
        if self.config.grad_clip > 0:
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        else:
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            norm = nn.utils.get_total_norm(grads)
        # The exact mode evaluates twice per step; the norm at the current parameters is first.
        self._grad_norms.setdefault(step, norm.full_tensor() if is_dtensor(norm) else norm)
        return self._mean_over_processes(total)

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Reduce gradients across processes only on the last micro-batch of a step."""
        if self.sharded:
            self.model.set_requires_gradient_sync(last)
        elif self.processes.enabled and not last:
            return self.forward_model.no_sync()
        return contextlib.nullcontext()

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean validation loss (nats per token): over the fixed windows of ``eval_tokens``
        tokens where set (the same for every batch size and run), else over ``eval_batches``
        batches of the run's own batch size."""
        if self.config.eval_tokens is not None:
            return self._evaluate_windows()
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for k in range(self.config.eval_batches):
            for _, rows in self._micro_rows():
                x, y = (t.to(self.device) for t in self.sampler.batch("val", k, rows))
                with self._autocast():
                    _, loss = self.model(x, y)
                total += loss.float()
        self.model.train()
        total /= self.config.eval_batches * self.local_accum
        return float(self._mean_over_processes(total))

    def _evaluate_windows(self) -> float:
        if self._validation is None:
            slices = self.config.validation_slices
            part = None if slices is None else (self.config.data_seed % slices, slices)
            self._validation = self.sampler.validation_windows(self.config.eval_tokens, part)
        inputs, targets = self._validation
        self.model.eval()
        total = torch.zeros((), device=self.device)
        size, world = self.config.batch_size, self.processes.world
        for start in range(self.processes.rank * size, len(inputs), size * world):
            x, y = (t[start : start + size].to(self.device) for t in (inputs, targets))
            with self._autocast():
                _, loss = self.model(x, y)
            total += loss.float() * len(x)
        self.model.train()
        # a mean over processes times their number: the sum of every process's windows
        return float(self._mean_over_processes(total)) * world / len(inputs)

    def train(self) -> RunResult:
        """Run (or resume) to ``steps`` or ``stop_after`` in the run shell and return the
        result."""
        return run_loop(self)

    def identity(self) -> dict[str, Any]:
        return self.config.identity(self.data_fingerprint)

    def record(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "data": self.config.data,
            "tokens_per_step": self.tokens_per_step,
            "parameters": self.model.num_parameters(),
            "corpus": repr(self.corpus),
            "device": str(self.device),
            "processes": self.processes.world,
        }

    def run_step(self, step: int, progress: dict[str, Any]) -> dict[str, Any]:
        """Schedule, forward/backward/step, and the metrics row of every step (with the
        validation loss every ``eval_interval`` steps and at the last)."""
        config = self.config
        scale_learning_rates(self.optimizer, self.schedule(step))
        began = time.perf_counter()
        train_loss, grad_norm = self._train_step(step)
        elapsed = time.perf_counter() - began
        progress["train_time_s"] += elapsed
        progress["last_train_loss"] = train_loss
        row: dict[str, Any] = {
            "step": step + 1,
            "tokens": (step + 1) * self.tokens_per_step,
            "time_s": progress["train_time_s"],
            "lr": self.optimizer.param_groups[0]["lr"],
            "train_loss": train_loss,
            "tokens_per_s": self.tokens_per_step / elapsed,
            "grad_norm": grad_norm,
        }
        progress["model_flops"] = progress.get("model_flops", 0.0) + self.flops_per_step
        if math.isfinite(self.peak_flops):
            row["mfu"] = model_flops_utilization(self.flops_per_step, elapsed, self.peak_flops)
            progress["mfu"] = model_flops_utilization(
                progress["model_flops"], progress["train_time_s"], self.peak_flops
            )
        if self.diagnostics:
            row.update(self.diagnostics.after_step())
        if math.isfinite(train_loss) and not math.isfinite(grad_norm):
            raise FloatingPointError(
                f"{config.optimizer}: the gradient norm is {grad_norm} at step {step + 1} "
                f"(loss {train_loss:.4f}); the last checkpoint is kept"
            )
        if math.isfinite(train_loss) and (
            (step + 1) % config.eval_interval == 0 or step + 1 == config.steps
        ):
            row["val_loss"] = self.evaluate()
        return row

    def log_line(self, row: dict[str, Any]) -> str:
        return (
            f"{self.config.optimizer} step {row['step']}/{self.config.steps}: train "
            f"{row['train_loss']:.4f} val {row['val_loss']:.4f} ({row['time_s']:.0f} s)"
        )

    def loop_state(self) -> dict[str, Any]:
        """Nothing beyond the step: step k's batch is a function of the data seed and k."""
        return {}

    def restore_loop_state(self, state: Any) -> None:
        """Nothing to restore (see :meth:`loop_state`)."""

    def budget(self, steps: int) -> int:
        return steps * self.tokens_per_step

    def _train_step(self, step: int) -> tuple[float, float]:
        """Gradients of ``step``'s batch and one optimizer step; returns the training loss and
        the gradient norm before clipping (one host sync for both)."""
        self._grad_norms.clear()
        if self.needs_closure:
            loss = self.optimizer.step(lambda s=step: self._forward_backward(s))
        else:
            loss = self._forward_backward(step)
            if self.diagnostics:
                self.diagnostics.before_step()
            self.optimizer.step()
        loss_value, norm = torch.stack([loss.float(), self._grad_norms[step].float()]).tolist()
        return loss_value, norm

    def parameters_finite(self) -> bool:
        """Whether every parameter entry is finite, on every process."""
        bad = torch.zeros((), device=self.device)
        for param in self.model.parameters():
            local = param.to_local() if is_dtensor(param) else param
            bad += (~torch.isfinite(local.detach())).sum()
        if self.processes.enabled:
            dist.all_reduce(bad)
        return not bool(bad)


def _check_text_hyperparams(config: TrainConfig) -> None:
    model = GPT(gpt_config("tiny", 256))
    build_optimizer(config.optimizer, model, config.resolved_hyperparams(), config.exact)


TEXT_TASK = register_task(
    Task(
        name="text",
        description="a GPT on a token corpus; validation loss (nats per token)",
        metric=TASK_METRICS["text"],
        budget_unit="tokens",
        command_suffix="",
        config_of_budget=lambda budget: TrainConfig(**budget),
        load_data=lambda config: load_corpus(config.data),
        data_fingerprint=lambda corpus: corpus.fingerprint(),
        check_hyperparams=_check_text_hyperparams,
        setting=lambda config, corpus: (
            f"{corpus!r}: model {config.model}, {config.steps} steps",
            f"{config.model} GPT on {corpus.name}",
        ),
        loop=Trainer,
    )
)
