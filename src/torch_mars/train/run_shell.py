"""The run shell: everything a run does that is not its task's maths, the same for text and
vision. A task supplies a :class:`RunLoop` (its model, optimizer, one step of its loop, what to
log and its own position in its data); :func:`run_loop` runs it:

- the run folder's lock, held for the whole run; a fresh run refuses a folder that holds any
  record of an earlier one unless told ``resume`` or ``overwrite``;
- ``config.json`` and the metrics files (cut back to the checkpoint's step on resume);
- the progress bar, or a log line per evaluation where there is no terminal;
- the checkpoint: hashed, fsync'd and read back with ``weights_only``, every
  ``checkpoint_interval`` steps and at the end, holding the model, the optimizer, the global
  random generators and the loop's own state, so that a resumed run continues bitwise as if
  never stopped; ``resume`` checks the settings and the data's fingerprint first;
- ``stop_after``; the non-finite stop (no checkpoint of non-finite parameters is written);
- the :class:`~torch_mars.train.run_record.RunResult`, built here only.

``TORCH_MARS_PAUSE_AT_STEP=N`` makes a run stand still after step N (and its checkpoint, if
one is due): a test kills it there.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any, Protocol

from torch import nn
from torch.optim import Optimizer
from tqdm.auto import tqdm

from torch_mars.train.checkpoint import (
    CHECKPOINT_FILE,
    SHARDED_CHECKPOINT_PREFIX,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
    sharded_checkpoint_dir,
)
from torch_mars.train.metrics import MetricsLogger
from torch_mars.train.run_record import (
    RUN_RECORD_FILES,
    RunResult,
    check_finite,
    run_folder_lock,
    write_config,
    write_summary,
)
from torch_mars.train.runtime import Processes, pause_if_asked, rng_state, set_rng_state
from torch_mars.train.task import TaskConfig, task_of

PAUSE_AT_STEP_VARIABLE = "TORCH_MARS_PAUSE_AT_STEP"
# The config fields, in every task, that say how the shell drives a run, not what it trains:
# no checkpoint identity or study budget includes them.
RUN_CONTROL_FIELDS = (
    "run_dir",
    "quiet",
    "resume",
    "overwrite",
    "stop_after",
    "checkpoint_interval",
)


class RunLoop(Protocol):
    """What a task supplies to the shell: the body of its loop.

    Attributes:
        config: the run's config (its task's; the shell reads ``run_dir``, ``optimizer``,
            ``seed``, ``resume``, ``overwrite``, ``stop_after``, ``checkpoint_interval`` and
            ``quiet``).
        processes: this process among the run's.
        model, optimizer: what the checkpoint saves and restores.
        sharded: the model is sharded across processes (its checkpoint is a DCP folder).
        accepts_sharded: a DCP checkpoint may be resumed (the user asked for sharding).
        total_steps: optimizer steps of the whole run.
        metric_columns, x_axis: the metrics files' columns and the figure's x-axis column.
    """

    config: Any
    processes: Processes
    model: nn.Module
    optimizer: Optimizer
    sharded: bool
    accepts_sharded: bool
    total_steps: int
    metric_columns: tuple[str, ...]
    x_axis: str

    def identity(self) -> dict[str, Any]:
        """The settings a checkpoint must share with the run that resumes it (with the data's
        fingerprint)."""

    def record(self) -> dict[str, Any]:
        """What ``config.json`` holds."""

    def run_step(self, step: int, progress: dict[str, Any]) -> dict[str, Any] | None:
        """Optimizer step ``step`` (0-based), adding its training time to
        ``progress["train_time_s"]`` and its loss to ``progress["last_train_loss"]``; returns
        the metrics row that is due after it, if any: with ``train_loss``, and the headline
        metric when an evaluation ran."""

    def loop_state(self) -> dict[str, Any]:
        """The loop's own position (data order, running sums) for the checkpoint."""

    def restore_loop_state(self, state: Any) -> None:
        """Take back what :meth:`loop_state` gave (a ``CheckpointError`` if it does not fit)."""

    def parameters_finite(self) -> bool:
        """Whether every parameter entry is finite (on every process)."""

    def budget(self, steps: int) -> int:
        """What ``steps`` steps trained on, in the task's budget unit."""

    def log_line(self, row: dict[str, Any]) -> str:
        """One line for an evaluated row, printed where no progress bar shows."""


def check_run_controls(config: Any) -> None:
    """The run-control fields every task's config has: ``resume`` and ``overwrite`` exclude
    each other, ``checkpoint_interval >= 0`` steps (0: only at the end), ``stop_after >= 1``
    (its upper bound, the run's steps, is checked when the run starts). A ``ValueError``."""
    if config.resume and config.overwrite:
        raise ValueError("resume and overwrite exclude each other: continue or start over")
    if config.checkpoint_interval < 0:
        raise ValueError(f"checkpoint_interval must be >= 0, got {config.checkpoint_interval}")
    if config.stop_after is not None and config.stop_after < 1:
        raise ValueError(f"stop_after must be >= 1, got {config.stop_after}")


def build_result(
    config: TaskConfig, steps: int, budget: int, progress: dict[str, Any]
) -> RunResult:
    """The result of a run of ``config`` that took ``steps`` steps over ``budget`` units."""
    task = task_of(config)
    return RunResult(
        task=task.name,
        optimizer=config.optimizer,
        seed=config.seed,
        metric=task.metric.key,
        final=progress["final"],
        best=progress["best"],
        final_train_loss=progress["last_train_loss"],
        budget=budget,
        budget_unit=task.budget_unit,
        train_time_s=progress["train_time_s"],
        steps=steps,
        run_dir=Path(config.run_dir),
        mfu=progress.get("mfu", math.nan),
        test=progress.get("test", math.nan),
    )


def diverged_result(config: TaskConfig) -> RunResult:
    """The result of a run stopped by a non-finite loss: no metric, no budget."""
    return build_result(config, 0, 0, _fresh_progress())


def _fresh_progress() -> dict[str, Any]:
    return {
        "train_time_s": 0.0,
        "best": math.nan,
        "final": math.nan,
        "last_train_loss": math.nan,
    }


def run_loop(loop: RunLoop) -> RunResult:
    """Run (or resume) ``loop`` to its end or ``stop_after``, holding the run folder's lock
    (the first process); a collective that times out is a ``TimeoutError``."""
    config = loop.config
    if loop.processes.main:
        Path(config.run_dir).mkdir(parents=True, exist_ok=True)
    lock = run_folder_lock(config.run_dir) if loop.processes.main else contextlib.nullcontext()
    try:
        with lock:
            return _run(loop)
    except RuntimeError as error:
        if loop.processes.enabled and "timed out" in str(error).lower():
            raise TimeoutError(
                f"a collective waited more than {config.dist_timeout_s:g} s "
                "(dist_timeout_s): another process is stuck or has died"
            ) from error
        raise


def _run(loop: RunLoop) -> RunResult:
    """Start (or resume), the steps, the finish."""
    config, processes = loop.config, loop.processes
    metric = task_of(config).metric
    end = config.stop_after if config.stop_after is not None else loop.total_steps
    if not 1 <= end <= loop.total_steps:
        raise ValueError(f"stop_after must be in [1, {loop.total_steps}] steps, got {end}")
    # Start: refuse or clear an earlier run, or resume; config.json and the metrics files.
    if processes.main and not config.resume:
        _clear_earlier_run(Path(config.run_dir), config.overwrite)
    processes.barrier()
    start, progress = _resume(loop) if config.resume else (0, _fresh_progress())
    logger = None
    if processes.main:
        write_config(config.run_dir, task_of(config).name, loop.record())
        logger = MetricsLogger(
            config.run_dir,
            start if config.resume else None,
            columns=loop.metric_columns,
            x_axis=loop.x_axis,
        )
    show_bar = not config.quiet and processes.main and sys.stderr.isatty()
    bar = tqdm(
        total=loop.total_steps,
        initial=start,
        disable=not show_bar,
        desc=config.optimizer,
        unit="step",
        dynamic_ncols=True,
        leave=False,
    )
    for step in range(start, end):
        row = loop.run_step(step, progress)
        if row is not None:
            check_finite(config.optimizer, row["train_loss"], f"step {step + 1}")
            if row.get(metric.key) is not None:
                progress["final"] = row[metric.key]
                progress["best"] = metric.best([progress["best"], row[metric.key]])
            if metric.test_key is not None and row.get(metric.test_key) is not None:
                progress["test"] = row[metric.test_key]
                if not show_bar and processes.main:
                    print(loop.log_line(row), flush=True)
            if logger is not None:
                logger.log(row)
            bar.set_postfix(
                {
                    name: f"{row[key]:{form}}"
                    for key, name, form in (
                        ("train_loss", "loss", ".3f"),
                        ("lr", "lr", ".2e"),
                        ("tokens_per_s", "tok_s", ".0f"),
                        ("mfu", "mfu", ".0%"),
                    )
                    if isinstance(row.get(key), float)
                }
            )
        bar.update(1)
        at_interval = config.checkpoint_interval and (step + 1) % config.checkpoint_interval == 0
        if at_interval or step + 1 == end:
            _checkpoint(loop, step + 1, progress)
        pause_if_asked(PAUSE_AT_STEP_VARIABLE, step + 1, "steps")
    # Finish: the result, and summary.json.
    bar.close()
    if logger is not None:
        logger.close()
    result = build_result(config, end, loop.budget(end), progress)
    if processes.main:
        write_summary(result)
    return result


def _clear_earlier_run(run_dir: Path, overwrite: bool) -> None:
    """A fresh start in a folder holding any record of an earlier run (a checkpoint, its
    metrics, summary or config): refused, or with ``overwrite`` the old checkpoints are
    removed (metrics, summary and config are rewritten as the run goes). The caller holds the
    folder's lock."""
    earlier = [run_dir / CHECKPOINT_FILE, *run_dir.glob(f"{SHARDED_CHECKPOINT_PREFIX}*")]
    earlier = [path for path in earlier if path.exists()]
    records = [run_dir / name for name in RUN_RECORD_FILES if (run_dir / name).exists()]
    if (earlier or records) and not overwrite:
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


def _checkpoint(loop: RunLoop, step: int, progress: dict[str, Any]) -> None:
    """Save the run after ``step`` steps, unless a parameter is non-finite (then the run
    stops and the last checkpoint stays). Sharded: every process writes its shards, then the
    small file names the folder once it is whole."""
    config, processes = loop.config, loop.processes
    if not loop.parameters_finite():
        raise FloatingPointError(
            f"{config.optimizer}: non-finite parameters after step {step}; the last "
            "checkpoint is kept"
        )
    payload: dict[str, Any] = {
        "identity": loop.identity(),
        "step": step,
        "rng": rng_state(),
        "data": loop.loop_state(),
        "progress": dict(progress),
    }
    run_dir = Path(config.run_dir)
    if loop.sharded:
        from torch_mars.distributed import save_sharded_checkpoint  # DCP: sharded runs only

        sharded_dir = f"{SHARDED_CHECKPOINT_PREFIX}{step}"
        save_sharded_checkpoint(run_dir / sharded_dir, loop.model, loop.optimizer)
        payload["sharded_dir"] = sharded_dir
    else:
        payload["model"] = loop.model.state_dict()
        payload["optimizer"] = loop.optimizer.state_dict()
    processes.barrier()
    if processes.main:
        save_checkpoint(run_dir / CHECKPOINT_FILE, payload)
        for old in run_dir.glob(f"{SHARDED_CHECKPOINT_PREFIX}*"):
            if old.name != payload.get("sharded_dir"):
                shutil.rmtree(old)
    processes.barrier()


def _resume(loop: RunLoop) -> tuple[int, dict[str, Any]]:
    """The step and progress of the run folder's checkpoint, with the model, optimizer,
    generators and loop state restored from it. A DCP checkpoint is followed only when the
    run asked for sharding: it unpickles its metadata."""
    run_dir = Path(loop.config.run_dir)
    payload = load_checkpoint(run_dir / CHECKPOINT_FILE, loop.identity(), loop.total_steps)
    if "sharded_dir" in payload:
        if not loop.accepts_sharded:
            raise CheckpointError(
                f"{run_dir}: the checkpoint is a distributed (DCP) one, in "
                f"{payload['sharded_dir']!r}; resume it with --fsdp (on any number of "
                "processes)"
            )
        from torch_mars.distributed import load_sharded_checkpoint  # DCP: sharded runs only

        directory = sharded_checkpoint_dir(run_dir, payload["sharded_dir"])
        try:
            load_sharded_checkpoint(directory, loop.model, loop.optimizer)
        except (pickle.UnpicklingError, EOFError) as error:
            raise CheckpointError(f"{directory}: not a DCP checkpoint ({error})") from None
    elif loop.sharded:
        raise CheckpointError(
            f"{run_dir}: a single-file checkpoint cannot resume under --fsdp; resume it "
            "without --fsdp"
        )
    else:
        try:
            loop.model.load_state_dict(payload["model"])
            loop.optimizer.load_state_dict(payload["optimizer"])
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:
            raise CheckpointError(
                f"{run_dir / CHECKPOINT_FILE}: its weights or optimizer state do not fit this "
                f"run ({str(error).splitlines()[0][:200]})"
            ) from None
    loop.restore_loop_state(payload.get("data"))
    set_rng_state(payload["rng"])
    return payload["step"], payload["progress"]


def train_run(config: TaskConfig, data: Any = None) -> RunResult:
    """Run one configuration of any task in the run shell (``data``: its task's loaded data,
    to share between runs; by default the task loads it, once per process); a task that runs
    itself runs so."""
    task = task_of(config)
    if task.run is not None:
        return task.run(config, data)
    return run_loop(task.loop(config, data))
