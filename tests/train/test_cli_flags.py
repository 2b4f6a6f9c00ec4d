"""Every flag of every ``torch-mars`` command acts: set to another value, it changes the
configuration that the command runs (what ``Command.configure`` makes of the parsed flags),
and no command has a flag missing from the table below, so a new flag that does nothing fails
here. Configurations are built without running anything."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from torch_mars.cli import COMMANDS, Command, build_parser

# What each command needs to parse at all.
REQUIRED: dict[tuple[str, ...], list[str]] = {
    ("compare-vision",): ["--data", "fashion-mnist:/images"],
    ("train-vision",): ["--data", "fashion-mnist:/images"],
    ("sweep-vision",): ["--data", "fashion-mnist:/images"],
    ("plot",): ["runs/a"],
    ("prepare",): ["notes.txt", "--out", "shards"],
    ("export-hf",): ["runs/a", "hf"],
    ("eval",): ["runs/a", "--tasks", "hellaswag", "--include-path", "."],
}

# A landed tune study (its snapshot is tracked).
LANDED = str(Path(__file__).parents[2] / "benchmarks/results/campaign-3/tiny/b64-4x")
# A value other than the default for every flag ((command, flag) first, then the flag alone).
OTHER_VALUE: dict[tuple[tuple[str, ...], str] | str, list[str]] = {
    (("compare",), "--opt-arg"): ["mars-adamw:gamma=0.05"],
    (("compare-vision",), "--opt-arg"): ["mars-adamw:gamma=0.05"],
    (("compare-vision",), "--data"): ["cifar:/images"],
    (("train-vision",), "--data"): ["cifar:/images"],
    (("sweep-vision",), "--data"): ["cifar:/images"],
    (("plot",), "--out"): ["figure.png"],
    # it needs the fixed windows; tests/train/test_validation_slices.py checks it alone reaches runs
    "--validation-slices": ["4", "--eval-tokens", "4096"],
    # a landed study's folder: the flag checks it holds a study
    "--reuse-runs": [LANDED],
    "--reread": [LANDED],
    # a landed study's winners, at its budget (another budget is refused: test_strongest_known_...)
    "--known-winners": [
        LANDED,
        *("--model", "tiny", "--steps", "966", "--batch-size", "64"),
        *("--eval-interval", "966", "--eval-tokens", "131072"),
    ],
    (("prepare",), "--out"): ["other-shards"],
    (("doctor",), "--out"): ["report.md"],
    (("eval",), "--device"): ["cuda"],
    (("compare",), "--model"): ["mini"],
    (("sweep",), "--model"): ["mini"],
    (("tune",), "--model"): ["mini"],
    (("sweep-vision",), "--storage"): ["journal:study.log"],
    (("tune",), "--optimizers"): ["adamw"],
    (("tune",), "--seeds"): ["0", "7"],  # held out are 3-6
    "--heldout-seeds": ["6"],
    "--heldout-data-seeds": ["3"],
    "--trials": ["5"],
    "--finalists": ["2", "--final-seeds", "9"],  # each needs the other
    "--final-seeds": ["9", "--finalists", "2"],
    "--final-data-seeds": ["7", "8"],
    "--pairs": ["1000:1000", "1001:1001"],
    "--pairs-read": ["adamw=2", "--pairs", "1000:1000", "1001:1001", "1002:1002"],
    "--peer-winners": ["off"],
    "--stable-winners": ["off"],
    "--extra-space": ["dropout=0,0.1", "--objective", "examples.tabular_mlp:train"],
    "--prune": ["--objective", "examples.tabular_mlp:train"],
    "--two-looks": [],
    "--order-seed": ["1"],
    "--search": ["lr-profiled"],
    "--fixed": ["weight_decay=0.05"],
    "--ladder": ["weight_decay=0,0.05"],
    # its effect on a study: test_your_space.py (it needs an objective to apply to)
    "--direction": ["maximize", "--objective", "examples.plain_loop:train"],
    "--objective-version": ["2", "--objective", "examples.plain_loop:train"],
    "--family": ["campaign.json"],
    "--show-recipe": [],
    "--objective": ["examples.plain_loop:train"],
    "--max-rounds": ["1"],
    "--storage": ["journal:study.log"],
    "--worker": [],
    "--max-trials": ["4"],
    "--time-budget": ["30"],
    "--report": [],
    "--tasks": ["arc_easy"],
    "--include-path": ["tests"],
    "--no-builtin-tasks": [],
    "--limit": ["5"],
    "--num-fewshot": ["2"],
    "--opt-arg": ["gamma=0.05"],
    "--optimizers": ["adamw"],
    "--seeds": ["0", "1"],
    "--lr": ["mars-adamw=1e-3"],
    "--name": ["mine"],
    "--out-dir": ["elsewhere"],
    "--model": ["tiny"],
    "--data": ["shards:tokens"],
    "--steps": ["7"],
    "--tokens": ["300"],
    "--batch-size": ["3"],
    "--grad-accum": ["2"],
    "--block-size": ["8"],
    "--schedule": ["wsd"],
    "--warmup-steps": ["2"],
    "--grad-clip": ["0.5"],
    "--eval-interval": ["3"],
    "--eval-batches": ["3"],
    "--eval-tokens": ["256"],
    "--data-seed": ["5"],
    "--device": ["cpu"],
    "--compile": [],
    "--exact": [],
    "--diagnostics": [],
    "--quiet": [],
    "--optimizer": ["adamw"],
    "--seed": ["4"],
    "--run-dir": ["runs/other"],
    "--resume": [],
    "--stop-after": ["2"],
    "--checkpoint-interval": ["5"],
    "--fsdp": [],
    "--width": ["4"],
    "--epochs": ["3"],
    "--train-subset": ["100"],
    "--validation-fraction": ["0.2"],
    "--milestones": ["0.3"],
    "--no-augment": [],
    "--warmup": ["2"],
    "--repeats": ["3"],
    "--only": ["adamw-fused"],
    "--json": ["results.json"],
    "--processes": ["3"],
    "--tokenizer-dir": ["gpt2"],
    "--val-fraction": ["0.1"],
    "--grid": ["adamw:lr=1e-3,2e-3"],
    "--search-seeds": ["1"],
    "--jobs": ["2"],
    "--overwrite": [],
    "--dist-timeout": ["30"],
}


def command_parser(command: Command) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=" ".join(command.words), exit_on_error=False)
    command.add_flags(parser)
    return parser


def flags(command: Command) -> list[str]:
    """The long option strings of the command (help aside)."""
    parser = command_parser(command)
    return [
        action.option_strings[-1]
        for action in parser._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    ]


def other_value(command: Command, flag: str) -> list[str]:
    return OTHER_VALUE.get((command.words, flag), OTHER_VALUE.get(flag))  # type: ignore[return-value]


CASES = [(command, flag) for command in COMMANDS for flag in flags(command)]


@pytest.mark.parametrize(
    ("command", "flag"), CASES, ids=[f"{' '.join(c.words)} {f}" for c, f in CASES]
)
def test_every_flag_changes_the_configuration(command, flag):
    values = other_value(command, flag)
    assert values is not None, f"{flag} of {command.words}: add its other value to OTHER_VALUE"
    required = REQUIRED.get(command.words, [])
    parser = command_parser(command)
    baseline = command.configure(parser.parse_args(required))
    changed = command.configure(parser.parse_args([*required, flag, *values]))
    assert changed != baseline, f"{' '.join(command.words)} {flag} {values} changed nothing"


def test_the_commands_are_the_parsers_commands():
    """The table above walks the same commands and flags as ``torch-mars`` itself."""
    parser = build_parser()
    for command in COMMANDS:
        args = parser.parse_args([*command.words, *REQUIRED.get(command.words, [])])
        assert args.command_entry is command


def test_the_walk_catches_a_flag_that_does_nothing():
    ignored = Command(
        ("demo",),
        "a command with a flag it never reads",
        lambda p: (p.add_argument("--steps", type=int, default=1), p.add_argument("--unused")),
        lambda args: {"steps": args.steps},
        lambda config: 0,
    )
    parser = command_parser(ignored)
    baseline = ignored.configure(parser.parse_args([]))
    assert ignored.configure(parser.parse_args(["--steps", "2"])) != baseline
    assert ignored.configure(parser.parse_args(["--unused", "x"])) == baseline
