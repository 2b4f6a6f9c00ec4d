"""``torch-mars``: compare optimizers, train one, redraw figures, time steps, prepare shards.

torch-mars compare                  # MARS vs AdamW and Muon on the stdlib corpus, ~5 min CPU
torch-mars compare-vision --data fashion-mnist:DIR   # ResNet-18, minutes on CPU
torch-mars train --optimizer mars-adamw --model gpt2-small --data shards:data/owt
torch-mars train-vision --data cifar:DIR   # the paper's CIFAR schedule (200 epochs)
torch-mars sweep --grid mars-adamw:lr=3e-3,6e-3 --grid adamw:lr=2e-3,3e-3 --jobs 2
torch-mars tune --batch-size 64 --jobs 2   # every optimizer tuned alike, winners held out
torch-mars plot runs/compare-*      # redraw curves.png from saved runs of either task
torch-mars bench step               # step time of every MARS path vs torch AdamW and Muon
torch-mars bench distributed        # the step on FSDP2 shards, 2 gloo processes
torch-mars prepare notes.txt --out data/notes --tokenizer-dir gpt2/   # GPT-2 token shards
torch-mars export-hf runs/train-mars-adamw hf-model   # a transformers GPT-2 folder
torch-mars eval runs/train-mars-adamw --tasks hellaswag arc_easy   # lm-eval on the exported run

This module only parses: each command (:data:`COMMANDS`) turns its flags into one
configuration, which its runner executes. A command takes exactly the flags it reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# The harness's own dependencies (the `harness` extra), checked before anything imports them:
# a bare `pip install torch-mars` gets one line, not a traceback.
_missing = [
    m for m in ("matplotlib", "PIL", "tqdm", "optuna") if importlib.util.find_spec(m) is None
]
if _missing:
    print(
        f"torch-mars: error: the command needs the harness extra ({', '.join(_missing)} "
        "missing): pip install 'torch-mars[harness]'",
        file=sys.stderr,
    )
    raise SystemExit(2)

from torch_mars import __version__
from torch_mars.bench.commands import (
    DistributedBenchOptions,
    IterationBenchOptions,
    StepBenchOptions,
    run_distributed_bench,
    run_iteration_bench,
    run_step_bench,
)
from torch_mars.data.prepare import HUB_RECIPES
from torch_mars.models import GPT_CONFIGS
from torch_mars.train.checkpoint import CheckpointError
from torch_mars.train.compare import (
    DEFAULT_COMPARE,
    DEFAULT_OPTIMIZERS,
    is_default_compare,
    run_comparison,
    write_comparison,
)
from torch_mars.train.optimizers import NAME_VALUED_KEYS, OPTIMIZER_NAMES
from torch_mars.train.plots import plot_runs
from torch_mars.train.run_record import RunFolderBusy, RunResult, check_folder_path, is_run_dir
from torch_mars.train.run_shell import train_run
from torch_mars.train.schedules import TEXT_SCHEDULES
from torch_mars.train.study.grid import parse_grid, parse_value
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.space import tunable_optimizers
from torch_mars.train.study.store import (
    check_study_name,
    dashboard_hint,
    storage_errors,
    storage_url,
)
from torch_mars.train.study.sweep import (
    SweepPlan,
    format_sweep_table,
    run_sweep,
    validate_plan,
    write_report,
)
from torch_mars.train.study.tune import (
    DEFAULT_SEARCH,
    DEFAULT_TRIALS,
    SEARCHES,
    default_optimizers,
)
from torch_mars.train.task import TaskConfig, task_of
from torch_mars.train.trainer import TrainConfig
from torch_mars.train.vision import (
    DEFAULT_VISION_OPTIMIZERS,
    VISION_COMPARE_BUDGET,
    VisionConfig,
)


def _key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with one value in the syntax of :mod:`torch_mars.train.study.grid` (a finite
    number, true/false, a name, or a tuple in parentheses)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = parse_value(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{key}: {error}") from error
    if isinstance(parsed, str) and key not in NAME_VALUED_KEYS:
        raise argparse.ArgumentTypeError(
            f"{key}: {value!r} is not a number, true/false or a tuple (names are for "
            f"{', '.join(NAME_VALUED_KEYS)})"
        )
    return key, parsed


def _name_lr(text: str) -> tuple[str, float]:
    """``NAME=LR`` with a number as the rate."""
    name, lr = _key_value(text)
    if isinstance(lr, bool) or not isinstance(lr, int | float):
        raise argparse.ArgumentTypeError(f"{name}: the rate must be a number, got {lr!r}")
    return name, float(lr)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the flag (exit code 2), without the
    usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# The largest counts any flag takes: more steps, tokens or epochs than any run could finish
# (1e9 steps is 11 days at a millisecond each) are a typo, refused before anything starts.
MAX_COUNT = 10**12
MAX_STEPS = 10**9
MAX_TOKENS = 10**14
MAX_EPOCHS = 10**6


def _whole_number(text: str, minimum: int, maximum: int = MAX_COUNT) -> int:
    """A whole number in [``minimum``, ``maximum``]: ``12``, also ``1e3``; not ``1.5``,
    ``inf``, ``nan`` or ``1e99``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value) or not minimum <= value <= maximum:
        raise argparse.ArgumentTypeError(
            f"must be a whole number in [{minimum}, {maximum:.0e}], got {text!r}"
        )
    return int(value)


def _folder(text: str) -> Path:
    """A folder to write into, checked before any work (:func:`check_folder_path`)."""
    try:
        if not text.strip():
            raise ValueError("the folder is empty: name one")
        check_folder_path(Path(text), "the folder")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return Path(text)


def _output_file(text: str) -> Path:
    """A file to write, checked before any work: not a folder, and its folder can be made."""
    path = Path(text)
    try:
        if not text.strip() or path.is_dir():
            raise ValueError(f"{text!r} is not a file name")
        check_folder_path(path.parent, "its folder")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return path


def _positive_int(text: str) -> int:
    return _whole_number(text, 1)


def _fixed_dimension(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not sep or not name or number is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=NUMBER, e.g. weight_decay=0.05")
    return name, number


def _dimension_values(text: str) -> tuple[str, tuple[float, ...]]:
    name, sep, values = text.partition("=")
    try:
        numbers = tuple(float(v) for v in values.split(","))
    except ValueError:
        numbers = ()
    if not sep or not name or not numbers:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=V1,V2,..., e.g. gamma=0.05,0.1,0.2")
    return name, numbers


def _your_dimension(text: str) -> tuple[str, tuple[float, ...]]:
    """``NAME=V1,V2,...`` of ``--extra-space``: whole numbers stay whole (steps, sizes)."""
    name, sep, values = text.partition("=")
    numbers: list[float] = []
    for value in values.split(",") if sep else ():
        try:
            numbers.append(int(value))
        except ValueError:
            try:
                numbers.append(float(value))
            except ValueError:
                numbers = []
                break
    if not name or not numbers:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=V1,V2,..., e.g. dropout=0,0.1,0.2")
    return name, tuple(numbers)


def _positive_minutes(text: str) -> float:
    try:
        minutes = float(text)
    except ValueError:
        minutes = math.nan
    if not (math.isfinite(minutes) and minutes > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: minutes must be a number > 0")
    return minutes


def _nonnegative_int(text: str) -> int:
    return _whole_number(text, 0)


def _seed_order_pair(text: str) -> tuple[int, int]:
    seed, sep, order = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not SEED:ORDER (two integers >= 0)")
    return _nonnegative_int(seed), _nonnegative_int(order)


def _optimizer_count(text: str) -> tuple[str, int]:
    name, sep, count = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not OPTIMIZER=N (a name, an integer >= 2)")
    return name, _whole_number(count, 2)


def _step_count(text: str) -> int:
    return _whole_number(text, 1, MAX_STEPS)


def _token_count(text: str) -> int:
    return _whole_number(text, 1, MAX_TOKENS)


def _epoch_count(text: str) -> int:
    return _whole_number(text, 1, MAX_EPOCHS)


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _fraction(text: str) -> float:
    """A number in (0, 1]."""
    value = _nonnegative_float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text!r}")
    return value


def _open_fraction(text: str) -> float:
    """A number in (0, 1)."""
    value = _nonnegative_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


# Flags shared by several commands.


def _add_text_flags(
    parser: argparse.ArgumentParser,
    defaults: TrainConfig,
    quiet_flag: bool = True,
    diagnostics_flag: bool = True,
) -> None:
    group = parser.add_argument_group("model, data and budget")
    group.add_argument("--model", choices=sorted(GPT_CONFIGS), default=defaults.model)
    group.add_argument(
        "--data", default=defaults.data, help="'stdlib' (default), shards:FOLDER, or a text path"
    )
    group.add_argument(
        "--steps", type=_step_count, help=f"optimizer steps (default {defaults.steps})"
    )
    group.add_argument(
        "--tokens", type=_token_count, help="token budget per run, instead of --steps"
    )
    group.add_argument(
        "--batch-size",
        type=_positive_int,
        default=defaults.batch_size,
        help="sequences per micro-batch per process",
    )
    group.add_argument(
        "--grad-accum",
        type=_positive_int,
        default=defaults.grad_accum,
        help="micro-batches per step over all processes",
    )
    group.add_argument("--block-size", type=_positive_int, help="sequence length")
    group.add_argument("--schedule", choices=TEXT_SCHEDULES, default=defaults.schedule)
    group.add_argument("--warmup-steps", type=_nonnegative_int, help="default: 10%% of --steps")
    group.add_argument(
        "--grad-clip",
        type=_nonnegative_float,
        default=defaults.grad_clip,
        help="global gradient-norm clip (0: none)",
    )
    group.add_argument(
        "--eval-interval",
        type=_positive_int,
        default=defaults.eval_interval,
        help="validation every this many steps, and at the last",
    )
    group.add_argument(
        "--eval-batches",
        type=_positive_int,
        default=defaults.eval_batches,
        help="fixed validation batches of the run's batch size per evaluation",
    )
    group.add_argument(
        "--eval-tokens",
        type=_positive_int,
        default=defaults.eval_tokens,
        help="evaluate on fixed windows holding this many tokens of the val split, the same "
        "for every batch size and run (a multiple of the block size; replaces --eval-batches)",
    )
    group.add_argument(
        "--validation-slices",
        type=lambda text: _whole_number(text, 2, 64),
        default=defaults.validation_slices,
        metavar="N",
        help="cut the val split into N slices; a run's fixed windows (--eval-tokens) lie in "
        "slice (its data order mod N), so a study's selection and its held-out runs on other "
        "data orders are scored on disjoint text (2-64; default: every run reads the same "
        "windows); part of a study's identity",
    )
    group.add_argument(
        "--data-seed",
        type=_nonnegative_int,
        default=defaults.data_seed,
        help="order of the training batches (a run's seed sets its initialisation)",
    )
    group.add_argument("--device", default=defaults.device, help="auto, cpu, cuda, cuda:1, ...")
    group.add_argument("--compile", action="store_true", help="torch.compile the model")
    group.add_argument("--exact", action="store_true", help="MARS exact mode (2 gradients/step)")
    if diagnostics_flag:  # not for studies: it needs a MARS optimizer in every run
        group.add_argument(
            "--diagnostics",
            action="store_true",
            help="log MARS's clipped fraction, ||c||/||g|| and update RMS per step",
        )
    if quiet_flag:
        group.add_argument(
            "--quiet", action="store_true", help="log lines instead of a progress bar"
        )


def _text_config(args: argparse.Namespace, base: TrainConfig) -> TrainConfig:
    steps = args.steps if args.steps is not None else base.steps
    if args.tokens is not None:
        if args.steps is not None:
            raise ValueError("--tokens and --steps both set the length of a run: give one")
        block = args.block_size or GPT_CONFIGS[args.model].block_size
        steps = math.ceil(args.tokens / (args.batch_size * args.grad_accum * block))
    return dataclasses.replace(
        base,
        model=args.model,
        data=args.data,
        steps=steps,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        block_size=args.block_size,
        schedule=args.schedule,
        warmup_steps=args.warmup_steps,
        grad_clip=args.grad_clip,
        eval_interval=args.eval_interval,
        eval_batches=args.eval_batches,
        data_seed=args.data_seed,
        eval_tokens=args.eval_tokens,
        validation_slices=args.validation_slices,
        device=args.device,
        compile=args.compile,
        exact=args.exact,
        diagnostics=getattr(args, "diagnostics", False),
        quiet=getattr(args, "quiet", True),
    )


def _add_vision_flags(
    parser: argparse.ArgumentParser,
    width: int,
    epochs: int,
    train_subset: int | None,
    quiet_flag: bool = True,
) -> None:
    group = parser.add_argument_group("model, data and budget")
    group.add_argument("--data", required=True, help="fashion-mnist:DIR, cifar:DIR or folder:DIR")
    group.add_argument("--width", type=_positive_int, default=width, help="first-stage channels")
    group.add_argument("--epochs", type=_epoch_count, default=epochs)
    group.add_argument(
        "--validation-fraction",
        type=_open_fraction,
        default=VisionConfig.validation_fraction,
        help="the share of the training images held out to choose on (one fixed draw; default "
        f"{VisionConfig.validation_fraction}); the test split is read once, after the last epoch",
    )
    group.add_argument(
        "--train-subset",
        type=_positive_int,
        default=train_subset,
        help="train on this many of the remaining images (a fixed random subset)",
    )
    group.add_argument("--batch-size", type=_positive_int, default=VisionConfig.batch_size)
    group.add_argument(
        "--milestones",
        nargs="+",
        type=_fraction,
        default=list(VisionConfig.milestones),
        help="fractions of --epochs where the lr is divided by 10 (default 0.5 0.75)",
    )
    group.add_argument("--no-augment", action="store_true", help="no random crop and flip")
    group.add_argument("--device", default="auto", help="auto, cpu or cuda")
    if quiet_flag:
        group.add_argument("--quiet", action="store_true", help="log lines, no progress bar")


def _vision_config(args: argparse.Namespace, **fields: Any) -> VisionConfig:
    return VisionConfig(
        data=args.data,
        width=args.width,
        epochs=args.epochs,
        validation_fraction=args.validation_fraction,
        train_subset=args.train_subset,
        batch_size=args.batch_size,
        milestones=tuple(args.milestones),
        augment=not args.no_augment,
        device=args.device,
        quiet=getattr(args, "quiet", True),
        **fields,
    )


def _add_comparison_flags(parser: argparse.ArgumentParser, optimizers: Sequence[str]) -> None:
    group = parser.add_argument_group("comparison")
    group.add_argument(
        "--optimizers",
        nargs="+",
        default=list(optimizers),
        metavar="NAME",
        help=f"from {', '.join(OPTIMIZER_NAMES)}",
    )
    group.add_argument("--seeds", nargs="+", type=_nonnegative_int, default=[0])
    group.add_argument(
        "--lr",
        action="append",
        default=[],
        type=_name_lr,
        metavar="NAME=LR",
        help="peak lr of one optimizer (repeatable)",
    )
    group.add_argument(
        "--opt-arg",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE",
        help="any other hyperparameter, e.g. mars-adamw:gamma=0.05",
    )
    group.add_argument("--name", type=_study_name, help="run folder name (default: compare-<time>)")
    group.add_argument("--out-dir", type=_folder, default=Path("runs"))


def _add_overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in run folders that hold checkpoints of earlier runs",
    )


def _add_opt_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--opt-arg",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="hyperparameter override, e.g. lr=3e-3",
    )


@dataclass(frozen=True)
class ComparisonPlan:
    """What ``compare`` and ``compare-vision`` run: ``base`` once per optimizer and seed, with
    per-optimizer overrides, into ``out_dir/name`` (``name`` None: ``compare-<time>``)."""

    base: TrainConfig | VisionConfig
    optimizers: tuple[str, ...]
    seeds: tuple[int, ...]
    hyperparams: dict[str, dict[str, Any]]
    out_dir: Path
    name: str | None
    show_recipe: bool = False


def _comparison_plan(args: argparse.Namespace, base: TrainConfig | VisionConfig) -> ComparisonPlan:
    """``--lr NAME=LR`` and ``--opt-arg NAME:KEY=VALUE`` by optimizer, and the rest."""
    unknown = set(args.optimizers) - set(OPTIMIZER_NAMES)
    if unknown:
        raise ValueError(f"--optimizers: unknown {sorted(unknown)}; known: {OPTIMIZER_NAMES}")
    hyperparams: dict[str, dict[str, Any]] = {name: {} for name in args.optimizers}
    for name, lr in args.lr:
        if name not in hyperparams:
            raise ValueError(f"--lr {name}=...: {name!r} is not among --optimizers")
        hyperparams[name]["lr"] = lr
    for spec in args.opt_arg:
        name, sep, rest = spec.partition(":")
        if not sep or name not in hyperparams:
            raise ValueError(
                f"--opt-arg {spec!r}: expected OPTIMIZER:KEY=VALUE with OPTIMIZER "
                "among --optimizers"
            )
        try:
            key, value = _key_value(rest)
        except argparse.ArgumentTypeError as error:
            raise ValueError(f"--opt-arg {spec!r}: {error}") from error
        hyperparams[name][key] = value
    return ComparisonPlan(
        base,
        tuple(args.optimizers),
        tuple(args.seeds),
        hyperparams,
        args.out_dir,
        args.name,
        getattr(args, "show_recipe", False),
    )


def _add_sweep_flags(parser: argparse.ArgumentParser, optimizers: Sequence[str]) -> None:
    group = parser.add_argument_group("sweep")
    group.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME:KEY=V1,V2,...",
        help="one axis of an optimizer's grid (repeatable), e.g. mars-adamw:lr=3e-3,6e-3 or "
        "'mars-adamw:betas=(0.9,0.95),(0.95,0.99)'",
    )
    group.add_argument(
        "--optimizers",
        nargs="+",
        metavar="NAME",
        help=f"optimizers to compare (default: those with a --grid, else {' '.join(optimizers)})",
    )
    group.add_argument(
        "--search-seeds",
        nargs="+",
        type=_nonnegative_int,
        default=[0],
        help="seeds of the search stage",
    )
    group.add_argument(
        "--seeds",
        nargs="+",
        type=_nonnegative_int,
        default=[0, 1, 2],
        help="seeds of each winner",
    )
    group.add_argument(
        "--jobs",
        type=lambda text: _whole_number(text, 1, 256),
        default=1,
        help="worker processes, 1-256 (cores are divided)",
    )
    group.add_argument("--name", type=_study_name, help="sweep folder name (default: sweep-<time>)")
    group.add_argument("--out-dir", type=_folder, default=Path("runs"))
    group.add_argument(
        "--storage",
        help="Optuna storage for workers elsewhere: an SQLAlchemy URL or journal:PATH "
        "(default: the sweep folder's study.db)",
    )
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="start the sweep afresh if it was run with other settings",
    )


def _sweep_plan(
    args: argparse.Namespace, base: TrainConfig | VisionConfig, defaults: Sequence[str]
) -> SweepPlan:
    grid = parse_grid(args.grid, OPTIMIZER_NAMES)
    names = args.optimizers or list(grid) or list(defaults)
    unknown = set(names) - set(OPTIMIZER_NAMES)
    if unknown:
        raise ValueError(f"--optimizers: unknown {sorted(unknown)}; known: {OPTIMIZER_NAMES}")
    missing = set(grid) - set(names)
    if missing:
        raise ValueError(f"--grid names {sorted(missing)}, which --optimizers leaves out")
    kind = f"sweep{task_of(base).command_suffix}"
    folder = args.out_dir / (args.name or time.strftime(f"{kind}-%Y%m%d-%H%M%S"))
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out-dir/--name: {folder} is a file, not a folder")
    return SweepPlan(
        base=base,
        grid={name: grid.get(name, {}) for name in names},
        search_seeds=tuple(args.search_seeds),
        seeds=tuple(args.seeds),
        sweep_dir=folder,
        jobs=args.jobs,
        storage=args.storage,
        overwrite=args.overwrite,
    )


def _study_name(text: str) -> str:
    """A study or sweep name: it names a folder inside ``--out-dir``, never a path."""
    try:
        return check_study_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("name ")) from error


def _tune_flags(parser: argparse.ArgumentParser) -> None:
    _tune_study_flags(parser)
    _add_text_flags(parser, DEFAULT_COMPARE, quiet_flag=False, diagnostics_flag=False)


def _tune_study_dests() -> set[str]:
    """The destinations of ``tune``'s own flags (not the harness's training flags)."""
    parser = argparse.ArgumentParser()
    _tune_study_flags(parser)
    return set(vars(parser.parse_args([])))


def _tune_study_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("study")
    group.add_argument(
        "--optimizers",
        nargs="+",
        choices=tunable_optimizers(),
        metavar="NAME",
        help="optimizers to tune, each over its whole declared space (default: "
        f"{' '.join(default_optimizers(False))}; with --objective, "
        f"{' '.join(default_optimizers(True))})",
    )
    group.add_argument(
        "--search",
        choices=tuple(SEARCHES),
        metavar=DEFAULT_SEARCH,
        help=f"the search that spends the trials ({DEFAULT_SEARCH}, the one to use; the designs "
        "measured and not adopted, and lr-profiled, are kept so that the studies that ran them "
        "replay and report: docs/harness-history.md)",
    )
    group.add_argument(
        "--fixed",
        nargs="+",
        type=_fixed_dimension,
        default=[],
        metavar="NAME=VALUE",
        help="hold a dimension at a value for every optimizer that has it, never tuned (e.g. "
        "weight_decay=0.05 gamma=0.025; not lr); part of the study's identity",
    )
    group.add_argument(
        "--ladder",
        nargs="+",
        type=_dimension_values,
        default=[],
        metavar="NAME=V1,V2,...",
        help="your own values for a dimension, searched instead of ours (e.g. "
        "weight_decay=0,0.01,0.05,0.1; not lr or lr_1d_ratio); part of the study's identity",
    )
    group.add_argument(
        "--seeds",
        nargs="+",
        type=_nonnegative_int,
        help="selection seeds: points are compared on their mean (default "
        f"{' '.join(map(str, PROTOCOL.seeds))})",
    )
    group.add_argument(
        "--heldout-seeds",
        nargs="+",
        type=_nonnegative_int,
        help="seeds each winner is read on (the table's figures; default "
        f"{' '.join(map(str, PROTOCOL.heldout))})",
    )
    group.add_argument(
        "--heldout-data-seeds",
        nargs="+",
        type=_nonnegative_int,
        help="data orders each winner is read on, with every held-out seed (--data-seed is the "
        f"selection's data order; default {' '.join(map(str, PROTOCOL.heldout_data_seeds))})",
    )
    group.add_argument(
        "--pairs",
        nargs="+",
        type=_seed_order_pair,
        default=(),
        metavar="SEED:ORDER",
        help="read each winner on independent pairs instead of the crossed held-out seeds and "
        "data orders: each pair its own seed and data order, none shared (a paired t on n - 1 "
        "degrees of freedom)",
    )
    group.add_argument(
        "--pairs-read",
        nargs="+",
        type=_optimizer_count,
        default=(),
        metavar="OPTIMIZER=N",
        help="optimizers that read only the first N of --pairs (every other reads them all): a "
        "second look trains only the sides of the comparisons it looks at again",
    )
    group.add_argument(
        "--finalists",
        type=_nonnegative_int,
        help="re-read each search's K best points on --final-seeds; the best mean over every "
        f"choosing seed wins (default {PROTOCOL.finalists}; 0: the search's best wins)",
    )
    group.add_argument(
        "--final-seeds",
        nargs="*",
        type=_nonnegative_int,
        help="the seeds the finalists are also read on (data order --data-seed; default: the "
        "two smallest seeds that neither choose nor are held out, 1 2 with the other defaults)",
    )
    group.add_argument(
        "--final-data-seeds",
        nargs="*",
        type=_nonnegative_int,
        default=(),
        help="one data order per final seed, the i-th final seed read on the i-th (none of "
        "--heldout-data-seeds); default: every final seed on --data-seed",
    )
    group.add_argument(
        "--peer-winners",
        choices=("on", "off"),
        help="read each optimizer at its peers' winners moved onto its space too (on its "
        "choosing runs), and read the best-known setting held out: a search that stopped short "
        f"is not what a verdict reads (default {'on' if PROTOCOL.peer_winners else 'off'})",
    )
    group.add_argument(
        "--stable-winners",
        choices=("on", "off"),
        help="rank a candidate winner with a diverged run among its choosing runs (not finite, "
        "or more than 0.05 above their median) after every one without: a setting that fails "
        "one run in a few is no recommendation "
        f"(default {'on' if PROTOCOL.stable_winners else 'off'})",
    )
    group.add_argument(
        "--trials",
        type=_positive_int,
        help="trials every optimizer gets (a trial: one point on every selection seed; default "
        f"{DEFAULT_TRIALS})",
    )
    group.add_argument(
        "--family",
        type=Path,
        help="a campaign's declaration file (JSON): Holm runs over its family of comparisons, "
        "every point's, declared before the first run (default: the study's own comparisons)",
    )
    group.add_argument(
        "--order-seed",
        type=_nonnegative_int,
        default=0,
        help="shuffles the order in which the search visits the dimensions (a second search)",
    )
    group.add_argument(
        "--max-rounds",
        type=_positive_int,
        help="stop each search after this many rounds, spending fewer trials (a quick look, "
        "never a comparison; default: each spends its --trials)",
    )
    group.add_argument(
        "--jobs",
        type=lambda text: _whole_number(text, 1, 256),
        default=1,
        help="local worker processes, 1-256 (cores divided; one GPU each where there are GPUs)",
    )
    group.add_argument(
        "--storage",
        help="Optuna storage: an SQLAlchemy URL (postgresql://..., sqlite:///...) or "
        "journal:PATH, shared by workers on other machines (default: OUT_DIR/NAME/study.db)",
    )
    group.add_argument(
        "--name",
        type=_study_name,
        help="study name, and its folder's (default: tune; with --objective M:F, M.F)",
    )
    group.add_argument("--out-dir", type=_folder, default=Path("runs"))
    group.add_argument(
        "--overwrite",
        action="store_true",
        help="start the study afresh if it was tuned with other settings",
    )
    group.add_argument(
        "--objective",
        metavar="MODULE:FUNCTION",
        help="tune on your own training function, train(make_optimizer, seed, data_seed, "
        "report) -> float, imported from the current folder or an installed package "
        "(docs/tuning-your-model.md); --model names the recipe the searches start from",
    )
    group.add_argument(
        "--extra-space",
        nargs="+",
        type=_your_dimension,
        default=[],
        metavar="NAME=V1,V2,...",
        help="with --objective: your own dimensions (dropout=0,0.1,0.2 warmup=0,100,200), tuned "
        "for every optimizer alike from the middle value and passed to your function by name; "
        "part of the study's identity",
    )
    group.add_argument(
        "--two-looks",
        action="store_true",
        help="read every word on 12 independent pairs the study draws, then on up to 64 where "
        "one is inconclusive (its spread plans how many; at most 52 more runs an optimizer); "
        "instead of --pairs and the crossed held-out seeds",
    )
    group.add_argument(
        "--prune",
        action="store_true",
        help="with --objective: stop a trial's run where a value it reports is worse than the "
        "median of its optimizer's finished trial runs at that step (Optuna's median pruner); "
        "finalists', peers' and held-out runs always finish",
    )
    group.add_argument(
        "--direction",
        choices=("minimize", "maximize"),
        default="minimize",
        help="with --objective: maximize when the function returns a score (accuracy, reward); "
        "the study then reads its negative, lower better throughout",
    )
    group.add_argument(
        "--objective-version",
        metavar="TEXT",
        help="with --objective: the function's version as you declare it; the study knows your "
        "code by it instead of by its code's content (bump it when an edit changes "
        "results)",
    )
    group.add_argument(
        "--worker",
        action="store_true",
        help="join the existing study --name in --storage, with its settings (model, budget, "
        "optimizers come from the study)",
    )
    group.add_argument(
        "--max-trials",
        type=_positive_int,
        help="stop each worker after it has trained this many runs (the study resumes later)",
    )
    group.add_argument(
        "--reuse-runs",
        nargs="+",
        type=Path,
        default=[],
        metavar="STUDY_DIR",
        help="tune study folders (a study.log or study.log.gz in each) whose finished runs are "
        "taken instead of trained where a run's budget, data, hyperparameters, seed and data "
        "order are the same (runs repeat exactly on one machine and torch); each taken run is "
        "marked with where it came from and not counted as trained here",
    )
    group.add_argument(
        "--known-winners",
        nargs="+",
        type=Path,
        default=[],
        metavar="STUDY_DIR",
        help="tune studies of the same budget whose winners (each optimizer's, moved onto this "
        "study's ladders) are read on the choosing runs beside the peers' winners: each side "
        "is read at its best-known setting (needs --peer-winners on, the default)",
    )
    group.add_argument(
        "--reread",
        type=Path,
        metavar="STUDY_DIR",
        help="walk that tune study's selection again: begin from its starts and take its "
        "selection runs (the selection seeds on its data order) whichever machine trained them; "
        "the finalists' other seeds, peers' reads and held-out pairs train here (a study whose "
        "search ran on another machine type read again on this one)",
    )
    group.add_argument(
        "--time-budget",
        type=_positive_minutes,
        metavar="MINUTES",
        help="begin no run after this many minutes (those in flight finish); the report says "
        "how far the study got, and the same command resumes it",
    )
    group.add_argument(
        "--report", action="store_true", help="write the report of the study as it stands, and stop"
    )


# What --worker takes from its study, never from the command line.
_TUNE_WORKER_OWN = {
    "worker",
    "storage",
    "name",
    "out_dir",
    "jobs",
    "max_trials",
    "time_budget",
    "report",
    "objective",
    "reuse_runs",
}
# The harness flags an --objective study reads: the recipe its searches start from, the
# selection's data order and the device; the function trains the rest its own way.
_OBJECTIVE_READS = {"model", "data_seed", "device", "direction", "objective_version"}


def _given_flags(args: argparse.Namespace, keep: set[str]) -> list[str]:
    """The tune flags given other values than their defaults, but for ``keep``."""
    defaults = argparse.ArgumentParser()
    _tune_flags(defaults)
    return [
        "--" + dest.replace("_", "-")
        for dest, value in vars(defaults.parse_args([])).items()
        if dest not in keep and getattr(args, dest) != value
    ]


@dataclass(frozen=True)
class TuneRequest:
    """``torch-mars tune`` parsed: a plan (None for ``--worker``, which takes its study's), the
    study to join, and what to do."""

    plan: Any
    study_dir: Path
    storage: str | None
    name: str
    jobs: int
    report_only: bool
    max_trials: int | None
    objective: str | None = None  # what a worker's own command line names
    time_budget_s: float | None = None
    reuse: tuple[Path, ...] = ()


def _tune_request(args: argparse.Namespace) -> TuneRequest:
    from torch_mars.train.study.reuse import check_donors
    from torch_mars.train.study.run import tune_plan

    given = _given_flags(args, _TUNE_WORKER_OWN) if args.worker else []
    if given:
        raise ValueError(f"--worker takes its settings from the study; drop {', '.join(given)}")
    if args.name is None:
        from torch_mars.train.study.objective import default_study_name

        args.name = default_study_name(args.objective) if args.objective else "tune"
    folder = args.out_dir / args.name
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out-dir/--name: {folder} is a file, not a folder")
    plan = None
    if not args.worker:
        if args.objective is not None:
            from torch_mars.train.study.objective import (
                ObjectiveConfig,
                check_contract,
                import_objective,
            )

            given = _given_flags(args, _tune_study_dests() | _OBJECTIVE_READS)
            if given:
                raise ValueError(
                    f"--objective trains your function its own way; drop {', '.join(given)}"
                )
            # a bad path or signature: one line, no study
            check_contract(
                import_objective(args.objective),
                args.objective,
                tuple(name for name, _ in args.extra_space),
            )
            # the device only describes where the function's optimizer runs; "auto" is the
            # same study as torch_mars.tune's default, so that either door reopens it
            device = {} if args.device == "auto" else {"device": args.device}
            base: Any = ObjectiveConfig(
                args.objective,
                model=args.model,
                direction=args.direction,
                version=args.objective_version,
                **device,
            )
        else:
            if args.direction != "minimize" or args.objective_version is not None:
                raise ValueError(
                    "--direction and --objective-version apply to --objective: the text task's "
                    "loss falls, and its code is this package's"
                )
            base = dataclasses.replace(_text_config(args, DEFAULT_COMPARE), quiet=True, data_seed=0)
        plan = tune_plan(
            base,
            study_dir=folder,
            name=args.name,
            optimizers=args.optimizers,
            trials=args.trials,
            search=args.search,
            seeds=args.seeds,
            heldout_seeds=args.heldout_seeds,
            data_seed=args.data_seed,
            heldout_data_seeds=args.heldout_data_seeds,
            finalists=args.finalists,
            final_seeds=args.final_seeds,
            final_data_seeds=args.final_data_seeds,
            pairs=args.pairs,
            pairs_read=dict(args.pairs_read),
            peer_winners=None if args.peer_winners is None else args.peer_winners == "on",
            stable_winners=None if args.stable_winners is None else args.stable_winners == "on",
            fixed=dict(args.fixed),
            ladders=dict(args.ladder),
            family_file=args.family,
            order_seed=args.order_seed,
            max_rounds=args.max_rounds,
            storage=args.storage,
            jobs=args.jobs,
            overwrite=args.overwrite,
            reuse_runs=args.reuse_runs,
            reread=args.reread,
            known_winners=args.known_winners,
            extra_space=dict(args.extra_space),
            prune=args.prune,
            two_looks=args.two_looks,
        )
    return TuneRequest(
        plan,
        folder,
        args.storage,
        args.name,
        args.jobs,
        args.report,
        args.max_trials,
        args.objective if args.worker else None,
        None if args.time_budget is None else 60.0 * args.time_budget,
        check_donors(tuple(args.reuse_runs)),
    )


def _check_worker_objective(identity: dict[str, Any], request: TuneRequest) -> None:
    """A worker runs the training function its own command line names, never one a study's
    data name: a study of a function must be joined with ``--objective`` naming the same one,
    checked before anything is imported (whoever can write a shared storage cannot choose the
    code its workers run)."""
    stored = (
        identity.get("budget", {}).get("objective") if identity.get("task") == "objective" else None
    )
    if stored is None and request.objective is None:
        return
    if stored is None:
        raise ValueError(f"--objective: study {request.name!r} does not tune a function")
    if request.objective != stored:
        named = f"--objective {request.objective}" if request.objective else "no --objective"
        raise ValueError(
            f"study {request.name!r} tunes {stored}; this worker names {named}: a worker runs "
            f"only the function its own command line names (add --objective {stored} if that "
            "is the code you mean to run)"
        )


def _run_tune(request: TuneRequest) -> int:
    with storage_errors(storage_url(request.storage, request.study_dir)):
        return _tune(request)


def _tune(request: TuneRequest) -> int:
    from torch_mars.train.study.engine import join_study
    from torch_mars.train.study.run import run_study
    from torch_mars.train.study.store import open_storage
    from torch_mars.train.study.tune import plan_of_study

    plan, storage = request.plan, None
    if plan is None:
        url = storage_url(request.storage, request.study_dir)
        storage = open_storage(url, create=False)
        joined, identity = join_study(storage, url, request.name)
        _check_worker_objective(identity, request)
        plan = plan_of_study(joined, request.study_dir, request.storage, request.name)
        plan = dataclasses.replace(plan, jobs=request.jobs, reuse=request.reuse)
    show = "bar" if sys.stderr.isatty() and plan.jobs == 1 else "lines"
    # a report changes no study, whatever else the command line says (--overwrite included)
    ran = run_study(
        plan,
        report_only=request.report_only,
        max_trials=request.max_trials,
        time_budget_s=request.time_budget_s,
        show=show,
        storage=storage,
    )
    if not request.report_only:
        print(f"{ran.trained} runs trained here")
    print(ran.report.summary, end="")
    print("wrote " + ", ".join(str(path) for path in ran.report.paths))
    print(dashboard_hint(ran.plan.spec().url))
    if ran.stopped:
        print(f"torch-mars tune: {ran.stopped}", file=sys.stderr)
    if ran.nothing:
        print(f"torch-mars tune: {ran.nothing}", file=sys.stderr)
        return 1
    return 0


# The commands: flags, configuration, run.


def _compare_flags(parser: argparse.ArgumentParser) -> None:
    _add_comparison_flags(parser, DEFAULT_OPTIMIZERS)
    _add_overwrite(parser)
    _add_text_flags(parser, DEFAULT_COMPARE)
    parser.add_argument(
        "--show-recipe",
        action="store_true",
        help="print each optimizer's settings for this model, each with its source, and stop",
    )


def _compare_vision_flags(parser: argparse.ArgumentParser) -> None:
    _add_comparison_flags(parser, DEFAULT_VISION_OPTIMIZERS)
    _add_vision_flags(parser, **VISION_COMPARE_BUDGET)


def _run_comparison(plan: ComparisonPlan) -> int:
    task = task_of(plan.base)
    if plan.show_recipe:
        from torch_mars.train.recipes import format_recipes, recipe

        model = getattr(plan.base, "model", "*")
        rows = [recipe(task.name, model, name) for name in plan.optimizers]
        print(format_recipes(rows))
        overridden = {n: h for n, h in plan.hyperparams.items() if h}
        if overridden:
            print(f"overridden on the command line: {overridden}")
        return 0
    default_name = f"compare{task.command_suffix}"
    out_dir = plan.out_dir / (plan.name or time.strftime(f"{default_name}-%Y%m%d-%H%M%S"))
    data = task.load_data(plan.base)
    setting, title = task.setting(plan.base, data)
    print(
        f"comparing {', '.join(plan.optimizers)} on {setting}, seeds {list(plan.seeds)} "
        f"-> {out_dir}",
        flush=True,
    )
    results = run_comparison(
        plan.base, plan.optimizers, plan.seeds, out_dir, plan.hyperparams, data
    )
    table, figure = write_comparison(results, out_dir, title, is_default_compare(plan.base))
    print(table)
    print(f"figure: {figure}\nper-run metrics: {out_dir}/<optimizer>-seed<k>/metrics.csv")
    return 0


def _sweep_text_flags(parser: argparse.ArgumentParser) -> None:
    _add_sweep_flags(parser, DEFAULT_OPTIMIZERS)
    # each run logs to its log.txt
    _add_text_flags(parser, DEFAULT_COMPARE, quiet_flag=False, diagnostics_flag=False)


def _sweep_vision_flags(parser: argparse.ArgumentParser) -> None:
    _add_sweep_flags(parser, DEFAULT_VISION_OPTIMIZERS)
    _add_vision_flags(parser, **VISION_COMPARE_BUDGET, quiet_flag=False)


def _run_sweep_command(plan: SweepPlan) -> int:
    with storage_errors(storage_url(plan.storage, plan.sweep_dir)):
        return _sweep(plan)


def _sweep(plan: SweepPlan) -> int:
    from tqdm import tqdm

    count = validate_plan(plan)
    print(
        f"sweep of {', '.join(plan.grid)}: {count} points on search seeds "
        f"{list(plan.search_seeds)}, winners on seeds {list(plan.seeds)}, {plan.jobs} jobs "
        f"-> {plan.sweep_dir}",
        flush=True,
    )
    bar = tqdm(unit="run", desc="sweep", disable=not sys.stderr.isatty() or plan.jobs > 1)

    def progress(line: str) -> None:
        bar.update()
        if bar.disable:
            print(line, flush=True)

    def opened(finished: int, planned: int) -> None:
        bar.reset(total=planned)
        bar.update(finished)

    report = run_sweep(plan, progress, opened)
    bar.close()
    written = write_report(plan, report)
    print(format_sweep_table(report))
    print("wrote " + ", ".join(str(path) for path in written))
    return 0


def _add_run_control_flags(parser: argparse.ArgumentParser, run_dir: Path) -> None:
    """The run shell's flags, the same for every task's ``train`` command."""
    parser.add_argument("--run-dir", type=_folder, default=run_dir)
    parser.add_argument("--resume", action="store_true", help="continue from run-dir's checkpoint")
    parser.add_argument(
        "--stop-after", type=_positive_int, help="stop (checkpointed) after this many steps"
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=_nonnegative_int,
        default=0,
        help="optimizer steps between checkpoints (0: only at the end)",
    )
    _add_overwrite(parser)


def _run_controls(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "run_dir": args.run_dir,
        "resume": args.resume,
        "stop_after": args.stop_after,
        "checkpoint_interval": args.checkpoint_interval,
        "overwrite": args.overwrite,
    }


def _train_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--optimizer", choices=OPTIMIZER_NAMES, default="mars-adamw")
    _add_opt_arg(parser)
    parser.add_argument(
        "--seed", type=_nonnegative_int, default=0, help="model initialisation seed"
    )
    _add_run_control_flags(parser, Path("runs/train"))
    parser.add_argument(
        "--fsdp", action="store_true", help="under torchrun: shard with FSDP2 instead of DDP"
    )
    parser.add_argument(
        "--dist-timeout",
        type=_positive_int,
        default=int(TrainConfig.dist_timeout_s),
        help="under torchrun: seconds a process waits for the others before the run stops",
    )
    _add_text_flags(parser, TrainConfig())


def _train_config(args: argparse.Namespace) -> TrainConfig:
    base = TrainConfig(
        optimizer=args.optimizer,
        seed=args.seed,
        **_run_controls(args),
        fsdp=args.fsdp,
        dist_timeout_s=float(args.dist_timeout),
        hyperparams=dict(args.opt_arg),
    )
    if args.fsdp and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        print(
            "--fsdp: one process has nothing to shard, so this run trains without FSDP2 "
            "(launch with torchrun --nproc_per_node N to shard)",
            file=sys.stderr,
        )
    return _text_config(args, base)


def _summary_line(result: RunResult) -> str:
    from torch_mars.train.run_record import TASK_METRICS

    spec = TASK_METRICS[result.task]
    mfu = f", MFU {result.mfu:.1%}" if math.isfinite(result.mfu) else ""
    return (
        f"{result.optimizer}: final {spec.label} {spec.format(result.final)}, best "
        f"{spec.format(result.best)}, {result.budget:,} {result.budget_unit} in "
        f"{result.train_time_s:.1f} s ({result.throughput:,.0f} {result.budget_unit}/s{mfu}) "
        f"-> {result.run_dir}"
    )


def _train_vision_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--optimizer", choices=OPTIMIZER_NAMES, default="mars-adamw")
    _add_opt_arg(parser)
    parser.add_argument("--seed", type=_nonnegative_int, default=0)
    _add_run_control_flags(parser, Path("runs/vision"))
    _add_vision_flags(parser, VisionConfig.width, VisionConfig.epochs, None)


def _train_vision_config(args: argparse.Namespace) -> VisionConfig:
    return _vision_config(
        args,
        optimizer=args.optimizer,
        hyperparams=dict(args.opt_arg),
        seed=args.seed,
        **_run_controls(args),
    )


def _run_train(config: TaskConfig) -> int:
    """``train`` and ``train-vision``: one run in the run shell."""
    result = train_run(config)
    print(_summary_line(result))
    if config.stop_after is not None and result.steps == config.stop_after:
        print(f"stopped after step {result.steps} (--stop-after); continue with --resume")
    return 0


@dataclass(frozen=True)
class PlotPlan:
    """``plot``: the run folders (or folders of runs) to draw, and the PNG path."""

    run_dirs: tuple[Path, ...]
    out: Path | None


def _plot_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=_output_file, help="PNG path (default: RUN_DIR/curves.png)")


def _run_plot(plan: PlotPlan) -> int:
    runs: list[Path] = []
    for folder in plan.run_dirs:
        if is_run_dir(folder):
            runs.append(folder)
            continue
        found = sorted(p for p in folder.glob("*") if is_run_dir(p))
        if not found:
            raise FileNotFoundError(
                f"{folder}: neither a run folder (config.json) nor a folder of runs"
            )
        runs += found
    print(plot_runs(runs, plan.out or (plan.run_dirs[0] / "curves.png")))
    return 0


def _bench_common_flags(parser: argparse.ArgumentParser, model_help: str) -> None:
    parser.add_argument("--model", choices=sorted(GPT_CONFIGS), help=model_help)
    parser.add_argument("--warmup", type=_positive_int, default=3)
    parser.add_argument("--repeats", type=_positive_int, default=10)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="rows to run (default: all)")
    parser.add_argument(
        "--json", type=_output_file, help="results file (default: runs/bench-MODE.json)"
    )


def _bench_step_flags(parser: argparse.ArgumentParser) -> None:
    _bench_common_flags(parser, "GPT config (default: gpt2-small)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")


def _bench_iteration_flags(parser: argparse.ArgumentParser) -> None:
    _bench_common_flags(parser, "GPT config (default: gpt2-small on CUDA, mini on CPU)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--batch-size", type=_positive_int, default=8)
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile the model, as train --compile"
    )


def _bench_distributed_flags(parser: argparse.ArgumentParser) -> None:
    _bench_common_flags(parser, "GPT config (default: gpt2-small on CUDA, mini on CPU)")
    parser.add_argument(
        "--processes",
        type=_positive_int,
        default=2,
        help="without torchrun: CPU (gloo) processes to spawn",
    )


def _bench_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": args.model,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "only": tuple(args.only) if args.only else None,
        "json": args.json,
    }


@dataclass(frozen=True)
class PreparePlan:
    """``prepare``: the inputs (local text, or one ``hf:RECIPE``) and where the shards go."""

    inputs: tuple[str, ...]
    out: Path
    tokenizer_dir: Path | None
    val_fraction: float


def _prepare_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=f"text files/folders (.gz ok), or hf:RECIPE for one of {', '.join(HUB_RECIPES)}",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for train.bin/val.bin")
    parser.add_argument(
        "--tokenizer-dir", type=Path, help="folder with GPT-2's encoder.json and vocab.bpe"
    )
    parser.add_argument("--val-fraction", type=_fraction, default=0.05)


def _run_prepare(plan: PreparePlan) -> int:
    from torch_mars.data.prepare import prepare_hub, prepare_text
    from torch_mars.data.tokenizer import gpt2_tokenizer

    tokenizer = gpt2_tokenizer(plan.tokenizer_dir)
    hub = [item for item in plan.inputs if item.startswith("hf:")]
    if hub and len(plan.inputs) > 1:
        raise ValueError("prepare takes either one hf:RECIPE or local files, not both")
    if hub:
        counts = prepare_hub(hub[0].removeprefix("hf:"), plan.out, tokenizer)
    else:
        files = [Path(p) for p in plan.inputs]
        counts = prepare_text(files, plan.out, tokenizer, plan.val_fraction)
    print(f"{plan.out}: train {counts['train']:,} tokens, val {counts['val']:,} tokens")
    return 0


def _doctor_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument(
        "--model", choices=sorted(GPT_CONFIGS), default="gpt2-small", help="shapes to time"
    )
    parser.add_argument("--repeats", type=_positive_int, default=5)
    parser.add_argument("--out", type=_output_file, help="also write the Markdown report here")


def _run_doctor(options: Any) -> int:
    from torch_mars.bench.doctor import run_doctor

    return run_doctor(options)


def _doctor_options(args: argparse.Namespace) -> Any:
    from torch_mars.bench.doctor import DoctorOptions

    return DoctorOptions(args.device, args.model, args.repeats, args.out)


@dataclass(frozen=True)
class ExportPlan:
    """``export-hf``: the run whose GPT to export, the output folder, GPT-2's BPE files."""

    run_dir: Path
    out: Path
    tokenizer_dir: Path | None


def _tokenizer_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tokenizer-dir",
        type=Path,
        help="for runs on token shards: folder with GPT-2's encoder.json and vocab.bpe "
        "(default: fetch GPT-2's tokenizer from the hub)",
    )


def _export_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a text run's folder")
    parser.add_argument("out", type=Path, metavar="OUT", help="the transformers folder to write")
    _tokenizer_dir_flag(parser)


def _run_export(plan: ExportPlan) -> int:
    from torch_mars.integrations.hf_export import export_hf

    exported = export_hf(plan.run_dir, plan.out, plan.tokenizer_dir)
    print(
        f"{exported.folder}: transformers GPT-2 with the {exported.tokenizer} tokenizer "
        f"(max |logit difference| to ours {exported.max_logit_difference:.2g})"
    )
    return 0


def _eval_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a text run's folder")
    parser.add_argument(
        "--tasks", nargs="+", required=True, help="lm-eval task names (hellaswag, arc_easy, ...)"
    )
    parser.add_argument("--include-path", type=Path, help="a folder of your own task YAML files")
    parser.add_argument(
        "--no-builtin-tasks",
        action="store_true",
        help="take tasks from --include-path only (skips indexing lm-eval's own, ~17 s)",
    )
    parser.add_argument("--limit", type=_positive_int, help="at most this many documents per task")
    parser.add_argument("--num-fewshot", type=int, help="examples per prompt (default: the task's)")
    parser.add_argument("--batch-size", type=_positive_int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    _tokenizer_dir_flag(parser)


def _eval_plan(args: argparse.Namespace) -> tuple[Path, Any, Path | None]:
    from torch_mars.integrations.lm_evaluation import EvalPlan

    plan = EvalPlan(
        tuple(args.tasks),
        args.include_path,
        args.limit,
        args.num_fewshot,
        args.batch_size,
        args.device,
        not args.no_builtin_tasks,
    )
    return args.run_dir, plan, args.tokenizer_dir


def _run_eval(configured: tuple[Path, Any, Path | None]) -> int:
    from torch_mars.integrations.lm_evaluation import RESULTS_FILE, evaluate_run, results_table

    run_dir, plan, tokenizer_dir = configured
    print(results_table(evaluate_run(run_dir, plan, tokenizer_dir)))
    print(f"results: {run_dir / RESULTS_FILE}")
    return 0


@dataclass(frozen=True)
class Command:
    """One ``torch-mars`` command: its words (``("bench", "step")``), help, flags, the
    configuration its flags make, and the runner of that configuration."""

    words: tuple[str, ...]
    help: str
    add_flags: Callable[[argparse.ArgumentParser], None]
    configure: Callable[[argparse.Namespace], Any]
    run: Callable[[Any], int]


COMMANDS: tuple[Command, ...] = (
    Command(
        ("compare",),
        "train several optimizers side by side on text (a GPT)",
        _compare_flags,
        lambda args: _comparison_plan(
            args,
            _text_config(args, dataclasses.replace(DEFAULT_COMPARE, overwrite=args.overwrite)),
        ),
        _run_comparison,
    ),
    Command(
        ("compare-vision",),
        "train several optimizers side by side on images (ResNet-18)",
        _compare_vision_flags,
        lambda args: _comparison_plan(args, _vision_config(args)),
        _run_comparison,
    ),
    Command(
        ("sweep",),
        "tune optimizers on grids on text, then compare the winners over seeds",
        _sweep_text_flags,
        lambda args: _sweep_plan(args, _text_config(args, DEFAULT_COMPARE), DEFAULT_OPTIMIZERS),
        _run_sweep_command,
    ),
    Command(
        ("sweep-vision",),
        "tune optimizers on grids on images, then compare the winners over seeds",
        _sweep_vision_flags,
        lambda args: _sweep_plan(args, _vision_config(args), DEFAULT_VISION_OPTIMIZERS),
        _run_sweep_command,
    ),
    Command(
        ("tune",),
        "tune every optimizer over its declared space (coordinate descent, held-out seeds)",
        _tune_flags,
        _tune_request,
        _run_tune,
    ),
    Command(
        ("train",),
        "train one optimizer on text, with checkpoints",
        _train_flags,
        _train_config,
        _run_train,
    ),
    Command(
        ("train-vision",),
        "train the CIFAR ResNet-18 on images (the paper's schedule)",
        _train_vision_flags,
        _train_vision_config,
        _run_train,
    ),
    Command(
        ("plot",),
        "redraw curves.png from saved runs",
        _plot_flags,
        lambda args: PlotPlan(tuple(args.run_dirs), args.out),
        _run_plot,
    ),
    Command(
        ("bench", "step"),
        "time one optimizer step of every MARS path and the baselines",
        _bench_step_flags,
        lambda args: StepBenchOptions(**_bench_options(args), device=args.device),
        run_step_bench,
    ),
    Command(
        ("bench", "iteration"),
        "time whole forward/backward/step iterations of the GPT",
        _bench_iteration_flags,
        lambda args: IterationBenchOptions(
            **_bench_options(args),
            device=args.device,
            batch_size=args.batch_size,
            compile=args.compile,
        ),
        run_iteration_bench,
    ),
    Command(
        ("bench", "distributed"),
        "time the step on FSDP2 shards (torchrun, or spawned CPU processes)",
        _bench_distributed_flags,
        lambda args: DistributedBenchOptions(**_bench_options(args), processes=args.processes),
        run_distributed_bench,
    ),
    Command(
        ("doctor",),
        "check this install: versions, every step path against float64, step timings",
        _doctor_flags,
        _doctor_options,
        _run_doctor,
    ),
    Command(
        ("prepare",),
        "tokenize text into GPT-2 token shards",
        _prepare_flags,
        lambda args: PreparePlan(
            tuple(args.inputs), args.out, args.tokenizer_dir, args.val_fraction
        ),
        _run_prepare,
    ),
    Command(
        ("export-hf",),
        "write a text run's GPT as a transformers GPT-2 folder (safetensors, tokenizer)",
        _export_flags,
        lambda args: ExportPlan(args.run_dir, args.out, args.tokenizer_dir),
        _run_export,
    ),
    Command(
        ("eval",),
        "evaluate a text run with lm-eval (HellaSwag, ARC, PIQA, or your own tasks)",
        _eval_flags,
        _eval_plan,
        _run_eval,
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The ``torch-mars`` argument parser: one sub-parser per :data:`COMMANDS` entry."""
    parser = OneLineParser(
        prog="torch-mars", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"torch-mars {__version__}")
    subparsers = {
        (): parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    }
    for command in COMMANDS:
        parent = command.words[:-1]
        if parent not in subparsers:
            group = subparsers[()].add_parser(parent[0], help=f"{parent[0]} MODE: see its --help")
            subparsers[parent] = group.add_subparsers(dest="mode", required=True)
        sub = subparsers[parent].add_parser(command.words[-1], help=command.help)
        command.add_flags(sub)
        sub.set_defaults(command_entry=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torch-mars`` command; returns the exit code (2: a bad flag or
    value, reported in one line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a bad flag (2)
        return int(exit_.code or 0)
    command: Command = args.command_entry
    try:
        return command.run(command.configure(args))
    except (
        ValueError,
        FileNotFoundError,
        CheckpointError,
        FloatingPointError,
        RunFolderBusy,
        TimeoutError,
        ImportError,
    ) as error:
        print(f"torch-mars {' '.join(command.words)}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # a study's finished runs are stored as they finish; what was training is lost
        hint = " (a study: the same command resumes it)" if command.words[0] == "tune" else ""
        print(f"\ntorch-mars {' '.join(command.words)}: interrupted{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
