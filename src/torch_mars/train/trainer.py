"""The training loop: a GPT on a token corpus with one optimizer, deterministic batches,
gradient accumulation, global gradient clipping, a schedule, periodic evaluation, metrics,
atomic checkpoints and exact resume. Multi-process data parallelism comes from ``torchrun``:
when ``WORLD_SIZE > 1`` the loop wraps the model in DDP (nccl on CUDA, gloo on CPU), or shards
it with FSDP2 (``fsdp=True``: each transformer block and the root, checkpoints through DCP)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import os
import pickle
import random
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from tqdm.auto import tqdm

from torch_mars.data import BatchSampler, TokenCorpus, load_corpus
from torch_mars.distributed import load_sharded_checkpoint, save_sharded_checkpoint
from torch_mars.models import GPT, gpt_config
from torch_mars.optim import MARS
from torch_mars.train.checkpoint import (
    CHECKPOINT_FILE,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
    sharded_checkpoint_dir,
)
from torch_mars.train.diagnostics import MarsDiagnostics
from torch_mars.train.metrics import MetricsLogger
from torch_mars.train.optimizers import (
    ADAMW_PATH_KEYS,
    MARS_OPTIONS,
    MARS_RULE_OF,
    build_optimizer,
    default_hyperparams,
)
from torch_mars.train.run_record import (
    RUN_RECORD_FILES,
    TASK_METRICS,
    RunResult,
    check_finite,
    run_folder_lock,
    write_config,
    write_summary,
)
from torch_mars.train.schedules import TEXT_SCHEDULES, Schedule, scale_learning_rates

SHARDED_CHECKPOINT_PREFIX = "checkpoint-step"


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
    collective before the run stops with an error.
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
    seed: int = 0
    data_seed: int = 0
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

    def __post_init__(self) -> None:
        positive = ("steps", "batch_size", "grad_accum", "eval_interval", "eval_batches")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.schedule not in TEXT_SCHEDULES:
            raise ValueError(f"schedule must be one of {TEXT_SCHEDULES}, got {self.schedule!r}")
        if self.grad_clip < 0:
            raise ValueError(f"grad_clip must be >= 0 (0 disables it), got {self.grad_clip}")
        if not (math.isfinite(self.dist_timeout_s) and self.dist_timeout_s > 0):
            raise ValueError(f"dist_timeout_s must be > 0, got {self.dist_timeout_s}")
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite exclude each other: continue or start over")
        if self.checkpoint_interval < 0:
            raise ValueError(f"checkpoint_interval must be >= 0, got {self.checkpoint_interval}")
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
        return {
            **{k: getattr(self, k) for k in keep},
            "hyperparams": hyperparams,
            "data_fingerprint": data_fingerprint,
        }


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_distributed(device: str, timeout_s: float) -> _Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return _Dist()
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.startswith("cuda") else "gloo",
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return _Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


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


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Trainer:
    """Runs a :class:`TrainConfig`. ``corpus`` may be passed to share one loaded corpus between
    runs (as ``compare`` does); otherwise ``config.data`` is loaded."""

    def __init__(self, config: TrainConfig, corpus: TokenCorpus | None = None) -> None:
        self.config = config
        self.dist = _init_distributed(
            config.device
            if config.device != "auto"
            else ("cuda" if torch.cuda.is_available() else "cpu"),
            config.dist_timeout_s,
        )
        if config.grad_accum % self.dist.world:
            raise ValueError(
                f"grad_accum ({config.grad_accum}) must be a multiple of the number "
                f"of processes ({self.dist.world})"
            )
        self.device = resolve_device(config.device, self.dist.local_rank)
        self.corpus = corpus if corpus is not None else load_corpus(config.data)
        self.data_fingerprint = self.corpus.fingerprint()
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
        self.sharded = config.fsdp and self.dist.enabled
        if self.sharded:
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
        if self.dist.enabled and not self.sharded:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.forward_model = nn.parallel.DistributedDataParallel(
                self.forward_model, device_ids=ids
            )
        self.local_accum = config.grad_accum // self.dist.world
        self._grad_norms: dict[int, Tensor] = {}
        self.tokens_per_step = config.batch_size * config.grad_accum * self.block_size
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
            m = self.dist.rank * self.local_accum + j
            yield j, slice(m * size, (m + 1) * size)

    def _mean_over_processes(self, value: Tensor) -> Tensor:
        if self.dist.enabled:
            dist.all_reduce(
                value, op=dist.ReduceOp.AVG if self.device.type == "cuda" else dist.ReduceOp.SUM
            )
            if self.device.type != "cuda":
                value /= self.dist.world
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
        self._grad_norms.setdefault(step, norm.full_tensor() if isinstance(norm, DTensor) else norm)
        return self._mean_over_processes(total)

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Reduce gradients across processes only on the last micro-batch of a step."""
        if self.sharded:
            self.model.set_requires_gradient_sync(last)
        elif self.dist.enabled and not last:
            return self.forward_model.no_sync()
        return contextlib.nullcontext()

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean validation loss (nats per token) over ``eval_batches`` fixed batches."""
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

    def _checkpoint(self, step: int, progress: dict[str, Any]) -> None:
        if not self._parameters_finite():
            raise FloatingPointError(
                f"{self.config.optimizer}: non-finite parameters after step {step}; the last "
                "checkpoint is kept"
            )
        payload: dict[str, Any] = {
            "identity": self.config.identity(self.data_fingerprint),
            "step": step,
            "rng": _rng_state(),
            "data": {"seed": self.config.data_seed, "next_step": step},
            "progress": progress,
        }
        run_dir = self.config.run_dir
        if self.sharded:
            # Every rank writes its shards; the small file names the directory once it is whole.
            sharded_dir = f"{SHARDED_CHECKPOINT_PREFIX}{step}"
            save_sharded_checkpoint(run_dir / sharded_dir, self.model, self.optimizer)
            payload["sharded_dir"] = sharded_dir
        else:
            payload["model"] = self.model.state_dict()
            payload["optimizer"] = self.optimizer.state_dict()
        if self.dist.enabled:
            dist.barrier()
        if self.dist.main:
            save_checkpoint(run_dir / CHECKPOINT_FILE, payload)
            for old in run_dir.glob(f"{SHARDED_CHECKPOINT_PREFIX}*"):
                if old.name != payload.get("sharded_dir"):
                    shutil.rmtree(old)
        if self.dist.enabled:
            dist.barrier()

    def _resume(self) -> tuple[int, dict[str, Any]]:
        payload = load_checkpoint(
            self.config.run_dir / CHECKPOINT_FILE, self.config.identity(self.data_fingerprint)
        )
        if "sharded_dir" in payload:
            if not self.config.fsdp:
                raise CheckpointError(
                    f"{self.config.run_dir}: the checkpoint is a distributed (DCP) one, in "
                    f"{payload['sharded_dir']!r}; resume it with --fsdp (on any number of "
                    "processes)"
                )
            directory = sharded_checkpoint_dir(self.config.run_dir, payload["sharded_dir"])
            try:
                load_sharded_checkpoint(directory, self.model, self.optimizer)
            except (pickle.UnpicklingError, EOFError) as error:
                raise CheckpointError(f"{directory}: not a DCP checkpoint ({error})") from None
        elif self.sharded:
            raise CheckpointError(
                f"{self.config.run_dir}: a single-file checkpoint cannot resume under --fsdp; "
                "resume it without --fsdp"
            )
        else:
            try:
                self.model.load_state_dict(payload["model"])
                self.optimizer.load_state_dict(payload["optimizer"])
            except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:
                raise CheckpointError(
                    f"{self.config.run_dir / CHECKPOINT_FILE}: its weights or optimizer state "
                    f"do not fit this run ({str(error).splitlines()[0][:200]})"
                ) from None
        _set_rng_state(payload["rng"])
        return payload["step"], payload["progress"]

    def train(self) -> RunResult:
        """Run (or resume) to ``steps`` or ``stop_after`` and return the result, holding the
        run folder's lock (the first process); a collective that times out is a
        ``TimeoutError``."""
        if self.dist.main:
            self.config.run_dir.mkdir(parents=True, exist_ok=True)
        lock = run_folder_lock(self.config.run_dir) if self.dist.main else contextlib.nullcontext()
        try:
            with lock:
                return self._train()
        except RuntimeError as error:
            if self.dist.enabled and "timed out" in str(error).lower():
                raise TimeoutError(
                    f"a collective waited more than {self.config.dist_timeout_s:g} s "
                    "(dist_timeout_s): another process is stuck or has died"
                ) from error
            raise

    def _train(self) -> RunResult:
        """The loop, top to bottom: schedule, forward/backward/step, checks, evaluation, log,
        checkpoint."""
        config = self.config
        # Start: the run folder, the point to start from, the metrics files and config.json.
        start, progress = self._start()
        logger = (
            MetricsLogger(config.run_dir, start if config.resume else None)
            if self.dist.main
            else None
        )
        end = config.stop_after if config.stop_after is not None else config.steps
        show_bar = not config.quiet and self.dist.main and sys.stderr.isatty()
        bar = tqdm(
            total=config.steps,
            initial=start,
            disable=not show_bar,
            desc=config.optimizer,
            unit="step",
            dynamic_ncols=True,
            leave=False,
        )
        for step in range(start, end):
            # Schedule.
            scale_learning_rates(self.optimizer, self.schedule(step))
            # Forward, backward and optimizer step.
            began = time.perf_counter()
            train_loss, grad_norm = self._train_step(step)
            elapsed = time.perf_counter() - began
            progress["train_time_s"] += elapsed
            row: dict[str, Any] = {
                "step": step + 1,
                "tokens": (step + 1) * self.tokens_per_step,
                "time_s": progress["train_time_s"],
                "lr": self.optimizer.param_groups[0]["lr"],
                "train_loss": train_loss,
                "tokens_per_s": self.tokens_per_step / elapsed,
                "grad_norm": grad_norm,
            }
            if self.diagnostics:
                row.update(self.diagnostics.after_step())
            # Nothing non-finite goes on: the run stops before any checkpoint of bad state.
            check_finite(config.optimizer, train_loss, f"step {step + 1}")
            if not math.isfinite(grad_norm):
                raise FloatingPointError(
                    f"{config.optimizer}: the gradient norm is {grad_norm} at step {step + 1} "
                    f"(loss {train_loss:.4f}); the last checkpoint is kept"
                )
            progress["last_train_loss"] = train_loss
            # Evaluation.
            if (step + 1) % config.eval_interval == 0 or step + 1 == config.steps:
                row["val_loss"] = self.evaluate()
                progress["last_val_loss"] = row["val_loss"]
                progress["best_val_loss"] = min(progress["best_val_loss"], row["val_loss"])
                if not show_bar and self.dist.main:
                    print(
                        f"{config.optimizer} step {step + 1}/{config.steps}: train "
                        f"{train_loss:.4f} val {row['val_loss']:.4f} "
                        f"({progress['train_time_s']:.0f} s)",
                        flush=True,
                    )
            # Log.
            if logger is not None:
                logger.log(row)
            bar.update(1)
            bar.set_postfix(
                loss=f"{train_loss:.3f}", lr=f"{row['lr']:.2e}", tok_s=f"{row['tokens_per_s']:.0f}"
            )
            # Checkpoint.
            at_interval = (
                config.checkpoint_interval and (step + 1) % config.checkpoint_interval == 0
            )
            if at_interval or step + 1 == end:
                self._checkpoint(step + 1, progress)
        # Finish: the result, and summary.json.
        bar.close()
        if logger is not None:
            logger.close()
        result = RunResult(
            task="text",
            optimizer=config.optimizer,
            seed=config.seed,
            metric=TASK_METRICS["text"].key,
            final=progress["last_val_loss"],
            best=progress["best_val_loss"],
            final_train_loss=progress["last_train_loss"],
            budget=end * self.tokens_per_step,
            budget_unit="tokens",
            train_time_s=progress["train_time_s"],
            steps=end,
            run_dir=config.run_dir,
        )
        if self.dist.main:
            write_summary(result)
        return result

    def _start(self) -> tuple[int, dict[str, Any]]:
        """Resume from the run folder's checkpoint if asked (else refuse, or with ``overwrite``
        clear, an earlier run's checkpoints), and write config.json; returns the step to start
        from and the progress so far."""
        config = self.config
        if self.dist.main and not config.resume:
            self._clear_earlier_checkpoints()
        if self.dist.enabled:
            dist.barrier()
        start, progress = (
            0,
            {
                "train_time_s": 0.0,
                "best_val_loss": math.inf,
                "last_val_loss": math.nan,
                "last_train_loss": math.nan,
            },
        )
        if config.resume:
            start, progress = self._resume()
        if self.dist.main:
            write_config(
                config.run_dir,
                "text",
                {
                    **config.identity(self.data_fingerprint),
                    "data": config.data,
                    "tokens_per_step": self.tokens_per_step,
                    "parameters": self.model.num_parameters(),
                    "corpus": repr(self.corpus),
                    "device": str(self.device),
                    "processes": self.dist.world,
                },
            )
        return start, progress

    def _clear_earlier_checkpoints(self) -> None:
        """A fresh start in a folder holding any record of an earlier run (a checkpoint, its
        metrics, summary or config): refused, or with ``overwrite`` the old checkpoints are
        removed (metrics, summary and config are rewritten as the run goes)."""
        run_dir = self.config.run_dir
        earlier = [run_dir / CHECKPOINT_FILE, *run_dir.glob(f"{SHARDED_CHECKPOINT_PREFIX}*")]
        earlier = [path for path in earlier if path.exists()]
        records = [run_dir / name for name in RUN_RECORD_FILES if (run_dir / name).exists()]
        if (earlier or records) and not self.config.overwrite:
            held = ", ".join(path.name for path in [*earlier, *records])
            raise CheckpointError(
                f"{run_dir} holds an earlier run ({held}): --resume to continue it, or "
                "--overwrite to start over"
            )
        for path in earlier:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

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

    def _parameters_finite(self) -> bool:
        """Whether every parameter entry is finite, on every process."""
        bad = torch.zeros((), device=self.device)
        for param in self.model.parameters():
            local = param.to_local() if isinstance(param, DTensor) else param
            bad += (~torch.isfinite(local.detach())).sum()
        if self.dist.enabled:
            dist.all_reduce(bad)
        return not bool(bad)
