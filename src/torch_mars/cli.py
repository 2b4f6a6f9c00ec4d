"""``torch-mars``: compare optimizers, train one, redraw figures, time steps, prepare shards.

torch-mars compare                  # MARS vs AdamW and Muon on the stdlib corpus, ~5 min CPU
torch-mars train --optimizer mars-adamw --model gpt2-small --data shards:data/owt
torch-mars plot runs/compare-*      # redraw curves.png from saved runs
torch-mars bench                    # step time of every MARS path vs torch AdamW and Muon
torch-mars bench --mode distributed # the step on FSDP2 shards, 2 gloo processes
torch-mars compare --task vision --data fashion-mnist:DIR   # ResNet-18, minutes on CPU
torch-mars train-vision --data cifar:DIR   # the paper's CIFAR schedule (200 epochs)
torch-mars prepare notes.txt --out data/notes --tokenizer-dir gpt2/   # GPT-2 token shards
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from torch_mars.data import load_corpus
from torch_mars.data.prepare import HUB_RECIPES, prepare_hub, prepare_text
from torch_mars.data.tokenizer import gpt2_tokenizer
from torch_mars.models import GPT_CONFIGS
from torch_mars.models.gpt import GPT, gpt_config
from torch_mars.train.checkpoint import CheckpointError
from torch_mars.train.compare import (
    DEFAULT_COMPARE,
    DEFAULT_OPTIMIZERS,
    format_table,
    run_comparison,
    summarise,
)
from torch_mars.train.optimizers import OPTIMIZER_NAMES
from torch_mars.train.plots import plot_runs, plot_vision_runs
from torch_mars.train.schedules import SCHEDULES
from torch_mars.train.trainer import TrainConfig, Trainer
from torch_mars.train.vision import (
    DEFAULT_VISION_OPTIMIZERS,
    VISION_COMPARE_BUDGET,
    VISION_OPTIMIZERS,
    VisionConfig,
    VisionTrainer,
    format_vision_table,
    run_vision_comparison,
    summarise_vision,
)


def parse_value(text: str) -> Any:
    """``"3e-3"`` -> 0.003, ``"4"`` -> 4, ``"true"`` -> True, ``"0.9,0.95"`` -> (0.9, 0.95)."""
    if "," in text:
        return tuple(parse_value(part) for part in text.split(","))
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, parse_value(value)


def _positive_int(text: str) -> int:
    value = int(float(text))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _add_opt_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--opt-arg",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="hyperparameter override, e.g. lr=3e-3",
    )


def _add_vision_flags(
    parser: argparse.ArgumentParser, width: int, epochs: int, train_subset: int | None = None
) -> None:
    group = parser.add_argument_group("vision (ResNet-18 on images)")
    group.add_argument("--width", type=_positive_int, default=width, help="first-stage channels")
    group.add_argument("--epochs", type=_positive_int, default=epochs)
    group.add_argument(
        "--train-subset",
        type=_positive_int,
        default=train_subset,
        help="train on this many images (a fixed random subset)",
    )
    group.add_argument("--no-augment", action="store_true", help="no random crop and flip")


def _add_training_flags(parser: argparse.ArgumentParser, defaults: TrainConfig) -> None:
    group = parser.add_argument_group("model, data and budget")
    group.add_argument("--model", choices=sorted(GPT_CONFIGS), default=defaults.model)
    group.add_argument(
        "--data",
        default=defaults.data,
        help="'stdlib' (default), shards:FOLDER, or a text file/folder",
    )
    group.add_argument("--steps", type=_positive_int, default=defaults.steps)
    group.add_argument(
        "--tokens", type=_positive_int, help="token budget per run; sets --steps to cover it"
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
    group.add_argument("--schedule", choices=SCHEDULES, default=defaults.schedule)
    group.add_argument("--warmup-steps", type=int, help="default: 10%% of --steps")
    group.add_argument("--grad-clip", type=float, default=defaults.grad_clip)
    group.add_argument("--eval-interval", type=_positive_int, default=defaults.eval_interval)
    group.add_argument("--eval-batches", type=_positive_int, default=defaults.eval_batches)
    group.add_argument("--data-seed", type=int, default=defaults.data_seed)
    group.add_argument("--device", default=defaults.device, help="auto, cpu, cuda, cuda:1, ...")
    group.add_argument("--compile", action="store_true", help="torch.compile the model")
    group.add_argument("--exact", action="store_true", help="MARS exact mode (2 gradients/step)")
    group.add_argument(
        "--fsdp",
        action="store_true",
        help="under torchrun, shard the model with FSDP2 instead of DDP (DCP checkpoints)",
    )
    group.add_argument(
        "--diagnostics",
        action="store_true",
        help="log MARS's clipped share, ||c||/||g|| and update RMS per step",
    )
    group.add_argument("--quiet", action="store_true", help="log lines instead of progress bars")


def _config_from_args(args: argparse.Namespace, base: TrainConfig) -> TrainConfig:
    config = dataclasses.replace(
        base,
        model=args.model,
        data=args.data,
        steps=args.steps,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        block_size=args.block_size,
        schedule=args.schedule,
        warmup_steps=args.warmup_steps,
        grad_clip=args.grad_clip,
        eval_interval=args.eval_interval,
        eval_batches=args.eval_batches,
        data_seed=args.data_seed,
        device=args.device,
        compile=args.compile,
        exact=args.exact,
        fsdp=args.fsdp,
        diagnostics=args.diagnostics,
        quiet=args.quiet,
    )
    if args.tokens is not None:
        block = args.block_size or GPT_CONFIGS[args.model].block_size
        per_step = args.batch_size * args.grad_accum * block
        config = dataclasses.replace(config, steps=math.ceil(args.tokens / per_step))
    return config


def _vision_config(args: argparse.Namespace, **overrides: Any) -> VisionConfig:
    if args.data is None or ":" not in args.data:
        raise ValueError(
            f"vision needs --data fashion-mnist:DIR, cifar:DIR or folder:DIR (got {args.data!r})"
        )
    return VisionConfig(
        data=args.data,
        width=args.width,
        epochs=args.epochs,
        batch_size=args.batch_size or VisionConfig.batch_size,
        augment=not args.no_augment,
        train_subset=args.train_subset,
        device=args.device,
        quiet=args.quiet,
        **overrides,
    )


def _per_optimizer_hyperparams(
    args: argparse.Namespace, known: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """``--lr NAME=LR`` and ``--opt-arg NAME:KEY=VALUE`` of ``compare``, by optimizer."""
    unknown = set(args.optimizers) - set(known)
    if unknown:
        raise ValueError(f"--optimizers: unknown {sorted(unknown)}; known: {tuple(known)}")
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
        key, value = _key_value(rest)
        hyperparams[name][key] = value
    return hyperparams


def _report_comparison(out_dir: Path, summaries: Sequence[Any], table: str, figure: Path) -> int:
    """Write ``summary.md``/``summary.json`` of a comparison and print the table."""
    (out_dir / "summary.md").write_text(table + "\n")
    (out_dir / "summary.json").write_text(
        json.dumps([dataclasses.asdict(s) for s in summaries], indent=2) + "\n"
    )
    print(table)
    print(f"figure: {figure}\nper-run metrics: {out_dir}/<optimizer>-seed<k>/metrics.csv")
    return 0


def _compare_vision(args: argparse.Namespace) -> int:
    if args.optimizers == list(DEFAULT_OPTIMIZERS):
        args.optimizers = list(DEFAULT_VISION_OPTIMIZERS)
    hyperparams = _per_optimizer_hyperparams(args, VISION_OPTIMIZERS)
    base = _vision_config(args)
    out_dir = args.out_dir / (args.name or time.strftime("compare-vision-%Y%m%d-%H%M%S"))
    print(
        f"comparing {', '.join(args.optimizers)} on {base.data}: ResNet-18 width {base.width}, "
        f"{base.epochs} epochs, seeds {args.seeds} -> {out_dir}",
        flush=True,
    )
    results = run_vision_comparison(base, args.optimizers, args.seeds, out_dir, hyperparams)
    summaries = summarise_vision(results)
    table = format_vision_table(summaries)
    figure = plot_vision_runs(
        [r.run_dir for r in results], out_dir / "curves.png", title=f"ResNet-18 on {base.data}"
    )
    return _report_comparison(out_dir, summaries, table, figure)


def _train_vision(args: argparse.Namespace) -> int:
    config = _vision_config(
        args,
        optimizer=args.optimizer,
        hyperparams=dict(args.opt_arg),
        seed=args.seed,
        run_dir=args.run_dir,
        milestones=tuple(args.milestones),
    )
    result = VisionTrainer(config).run()
    print(
        f"{result.optimizer}: final test accuracy {100 * result.final_test_accuracy:.2f}%, best "
        f"{100 * result.best_test_accuracy:.2f}%, test loss {result.final_test_loss:.4f}, "
        f"{result.epochs} epochs in {result.train_time_s:.0f} s -> {result.run_dir}"
    )
    return 0


def _compare(args: argparse.Namespace) -> int:
    if args.task == "vision":
        return _compare_vision(args)
    if args.batch_size is None:
        args.batch_size = DEFAULT_COMPARE.batch_size
    base = _config_from_args(args, DEFAULT_COMPARE)
    hyperparams = _per_optimizer_hyperparams(args, OPTIMIZER_NAMES)
    out_dir = args.out_dir / (args.name or time.strftime("compare-%Y%m%d-%H%M%S"))
    corpus = load_corpus(base.data)
    print(
        f"comparing {', '.join(args.optimizers)} on {corpus!r}: model {base.model}, "
        f"{base.steps} steps, seeds {args.seeds} -> {out_dir}",
        flush=True,
    )
    results = run_comparison(base, args.optimizers, args.seeds, out_dir, hyperparams, corpus)
    summaries = summarise(results)
    table = format_table(summaries)
    figure = plot_runs(
        [r.run_dir for r in results],
        out_dir / "curves.png",
        title=f"{base.model} GPT on {corpus.name}",
    )
    return _report_comparison(out_dir, summaries, table, figure)


def _train(args: argparse.Namespace) -> int:
    base = TrainConfig(
        optimizer=args.optimizer,
        seed=args.seed,
        run_dir=args.run_dir,
        resume=args.resume,
        stop_after=args.stop_after,
        checkpoint_interval=args.checkpoint_interval,
        hyperparams=dict(args.opt_arg),
    )
    config = _config_from_args(args, base)
    if config.fsdp and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        print(
            "--fsdp: one process has nothing to shard, so this run trains without FSDP2 "
            "(launch with torchrun --nproc_per_node N to shard)",
            file=sys.stderr,
        )
    result = Trainer(config).train()
    if result.steps == config.steps:
        print(
            f"{result.optimizer}: final val loss {result.final_val_loss:.4f}, best "
            f"{result.best_val_loss:.4f}, {result.tokens:,} tokens in "
            f"{result.train_time_s:.1f} s ({result.tokens_per_s:,.0f} tokens/s)"
        )
    else:
        print(f"stopped after step {result.steps}; continue with --resume")
    return 0


def _plot(args: argparse.Namespace) -> int:
    runs: list[Path] = []
    for folder in args.run_dirs:
        if (folder / "config.json").is_file():
            runs.append(folder)
        else:
            found = sorted(p.parent for p in folder.glob("*/config.json"))
            if not found:
                raise FileNotFoundError(
                    f"{folder}: neither a run folder (config.json) nor a folder of runs"
                )
            runs += found
    out = args.out or (args.run_dirs[0] / "curves.png")
    print(plot_runs(runs, out))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    tokenizer = gpt2_tokenizer(args.tokenizer_dir)
    hub = [item for item in args.inputs if item.startswith("hf:")]
    if hub and len(args.inputs) > 1:
        raise ValueError("prepare takes either one hf:RECIPE or local files, not both")
    if hub:
        counts = prepare_hub(hub[0].removeprefix("hf:"), args.out, tokenizer)
    else:
        counts = prepare_text(
            [Path(p) for p in args.inputs], args.out, tokenizer, args.val_fraction
        )
    print(f"{args.out}: train {counts['train']:,} tokens, val {counts['val']:,} tokens")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from torch_mars.bench.iteration import (
        DEFAULT_ROWS,
        format_iteration_table,
        run_iteration_benchmark,
    )
    from torch_mars.bench.step import (
        default_candidates,
        describe_device,
        format_step_table,
        newton_schulz_ms,
        run_step_benchmark,
        uses_newton_schulz,
    )

    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.split(":")[0] not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda, got {args.device!r}")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: this torch build or machine has no CUDA device")
    if args.warmup < 1 or args.repeats < 1:
        raise ValueError("--warmup and --repeats must be >= 1")
    model_name = args.model or (
        "gpt2-small" if args.mode == "step" or device.type == "cuda" else "mini"
    )
    if args.mode == "distributed":
        return _bench_distributed(args, model_name)
    header = (
        f"torch-mars bench --mode {args.mode}: model {model_name}, device {device} "
        f"({describe_device(device)}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, median of {args.repeats} after {args.warmup} "
        f"warm-up"
    )
    print(header, flush=True)
    bar = tqdm(total=0, disable=not sys.stderr.isatty(), desc="bench")

    def progress(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update()

    record: dict[str, object] = {"header": header, "mode": args.mode, "model": model_name}
    if args.mode == "step":
        candidates = default_candidates()
        if args.only:
            unknown = sorted(set(args.only) - {c.name for c in candidates})
            if unknown:
                names = ", ".join(c.name for c in candidates)
                raise ValueError(f"--only: unknown {unknown}; choose from {names}")
            candidates = [c for c in candidates if c.name in args.only]
        elif device.type == "cpu" and model_name.startswith("gpt2"):
            slow = [c.name for c in candidates if uses_newton_schulz(c)]
            candidates = [c for c in candidates if not uses_newton_schulz(c)]
            print(
                f"(left out on CPU at {model_name} size, where bf16 Newton-Schulz takes seconds "
                f"per step: {', '.join(slow)}; name them with --only to run them)",
                flush=True,
            )
        bar.total = len(candidates)
        model = GPT(gpt_config(model_name, 256)).to(device)
        step_results = run_step_benchmark(model, candidates, args.warmup, args.repeats, progress)
        bar.close()
        print(format_step_table(step_results))
        record |= {"results": [r.as_dict() for r in step_results]}
        if any("shampoo" in c.name for c in candidates):
            ns_ms = newton_schulz_ms(model, args.warmup, args.repeats)
            print(f"\nNewton-Schulz of the hidden matrices (batched, 5 steps): {ns_ms:.2f} ms")
            record["newton_schulz_ms"] = ns_ms
    else:
        rows = args.only or list(DEFAULT_ROWS)
        bar.total = len(rows)
        iteration_results = run_iteration_benchmark(
            model_name, rows, device, args.batch_size, args.warmup, args.repeats, progress
        )
        bar.close()
        print(format_iteration_table(iteration_results))
        record |= {
            "batch_size": args.batch_size,
            "results": [r.as_dict() for r in iteration_results],
        }
    out = args.json or Path("runs") / f"bench-{args.mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def _bench_distributed(args: argparse.Namespace, model_name: str) -> int:
    from torch_mars.bench.distributed import (
        DEFAULT_ROWS,
        format_distributed_table,
        run_distributed_benchmark,
    )

    rows = args.only or list(DEFAULT_ROWS)
    launched = int(os.environ.get("WORLD_SIZE", "0"))
    processes = launched or args.processes
    backend = "torchrun" if launched else "spawned gloo processes on the CPU"
    header = (
        f"torch-mars bench --mode distributed: model {model_name}, FSDP2 over {processes} "
        f"processes ({backend}), torch {torch.__version__}, median of {args.repeats} after "
        f"{args.warmup} warm-up"
    )
    results = run_distributed_benchmark(model_name, rows, processes, args.warmup, args.repeats)
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
    out = args.json or Path("runs") / "bench-distributed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``torch-mars`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="torch-mars", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    compare = commands.add_parser("compare", help="train several optimizers side by side")
    compare.add_argument(
        "--optimizers",
        nargs="+",
        default=list(DEFAULT_OPTIMIZERS),
        metavar="NAME",
        help=f"from {', '.join(OPTIMIZER_NAMES)}",
    )
    compare.add_argument("--seeds", nargs="+", type=int, default=[0])
    compare.add_argument(
        "--lr",
        action="append",
        default=[],
        type=_key_value,
        metavar="NAME=LR",
        help="peak lr of one optimizer (repeatable)",
    )
    compare.add_argument(
        "--opt-arg",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE",
        help="any other hyperparameter, e.g. mars-adamw:gamma=0.05",
    )
    compare.add_argument("--name", help="run folder name (default: compare-<time>)")
    compare.add_argument("--out-dir", type=Path, default=Path("runs"))
    _add_training_flags(compare, DEFAULT_COMPARE)
    compare.add_argument(
        "--task",
        choices=("text", "vision"),
        default="text",
        help="text: GPT on --data (default); vision: ResNet-18 on image --data",
    )
    _add_vision_flags(compare, **VISION_COMPARE_BUDGET)
    compare.set_defaults(handler=_compare, batch_size=None)

    train = commands.add_parser("train", help="train one optimizer, with checkpoints")
    train.add_argument("--optimizer", choices=OPTIMIZER_NAMES, default="mars-adamw")
    _add_opt_arg(train)
    train.add_argument("--seed", type=int, default=0, help="model initialisation seed")
    train.add_argument("--run-dir", type=Path, default=Path("runs/train"))
    train.add_argument("--resume", action="store_true", help="continue from run-dir's checkpoint")
    train.add_argument("--stop-after", type=_positive_int, help="stop (checkpointed) at this step")
    train.add_argument(
        "--checkpoint-interval",
        type=int,
        default=0,
        help="steps between checkpoints (0: only at the end)",
    )
    _add_training_flags(train, TrainConfig())
    train.set_defaults(handler=_train)

    train_vision = commands.add_parser(
        "train-vision", help="train the CIFAR ResNet-18 on images (the paper's schedule)"
    )
    train_vision.add_argument(
        "--data", required=True, help="fashion-mnist:DIR, cifar:DIR or folder:DIR"
    )
    train_vision.add_argument("--optimizer", choices=VISION_OPTIMIZERS, default="mars-adamw")
    _add_opt_arg(train_vision)
    train_vision.add_argument("--batch-size", type=_positive_int, default=VisionConfig.batch_size)
    train_vision.add_argument(
        "--milestones",
        nargs="+",
        type=float,
        default=list(VisionConfig.milestones),
        help="fractions of --epochs where the lr is divided by 10 (default 0.5 0.75)",
    )
    train_vision.add_argument("--seed", type=int, default=0)
    train_vision.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train_vision.add_argument("--run-dir", type=Path, default=Path("runs/vision"))
    train_vision.add_argument("--quiet", action="store_true", help="log lines, no progress bar")
    _add_vision_flags(train_vision, width=VisionConfig.width, epochs=VisionConfig.epochs)
    train_vision.set_defaults(handler=_train_vision)

    plot = commands.add_parser("plot", help="redraw curves from saved runs")
    plot.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    plot.add_argument("--out", type=Path, help="PNG path (default: RUN_DIR/curves.png)")
    plot.set_defaults(handler=_plot)

    bench = commands.add_parser("bench", help="time the optimizer step, or whole iterations")
    bench.add_argument(
        "--mode",
        choices=("step", "iteration", "distributed"),
        default="step",
        help="distributed: the step on FSDP2 shards (under torchrun, or --processes on CPU)",
    )
    bench.add_argument(
        "--processes",
        type=_positive_int,
        default=2,
        help="distributed mode without torchrun: CPU (gloo) processes to spawn",
    )
    bench.add_argument(
        "--model",
        choices=sorted(GPT_CONFIGS),
        help="GPT config (default: gpt2-small; mini for iterations on CPU)",
    )
    bench.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    bench.add_argument("--warmup", type=int, default=3)
    bench.add_argument("--repeats", type=int, default=10)
    bench.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="rows to run (default: all); iteration rows are optimizer names, MARS ones with an "
        "optional -fused suffix",
    )
    bench.add_argument("--batch-size", type=_positive_int, default=8, help="iteration mode")
    bench.add_argument("--json", type=Path, help="results file (default: runs/bench-MODE.json)")
    bench.set_defaults(handler=_bench)

    prepare = commands.add_parser("prepare", help="tokenize text into GPT-2 token shards")
    prepare.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=f"text files/folders (.gz ok), or hf:RECIPE for one of {', '.join(HUB_RECIPES)}",
    )
    prepare.add_argument("--out", type=Path, required=True, help="folder for train.bin/val.bin")
    prepare.add_argument(
        "--tokenizer-dir",
        type=Path,
        help="folder with GPT-2's encoder.json and vocab.bpe (offline)",
    )
    prepare.add_argument("--val-fraction", type=float, default=0.05)
    prepare.set_defaults(handler=_prepare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torch-mars`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError, CheckpointError, FloatingPointError) as error:
        print(f"torch-mars {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
