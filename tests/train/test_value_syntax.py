"""One syntax for a hyperparameter value wherever one is typed (``--opt-arg``, ``--lr``,
``--grid``), read by one parser (:mod:`torch_mars.train.study.grid`), and counts no run could ever
finish refused in one line."""

from __future__ import annotations

import pytest

from torch_mars.cli import build_parser, main
from torch_mars.train.optimizers import OPTIMIZER_NAMES
from torch_mars.train.study.grid import parse_grid, parse_value, parse_values


def test_a_tuple_reads_the_same_in_opt_arg_and_in_grid():
    args = build_parser().parse_args(
        ["compare", "--optimizers", "nadamw", "--opt-arg", "nadamw:betas=(0.9,0.95)"]
    )
    plan = args.command_entry.configure(args)
    grid = parse_grid(["nadamw:betas=(0.9,0.95)"], OPTIMIZER_NAMES)
    assert plan.hyperparams["nadamw"]["betas"] == grid["nadamw"]["betas"][0] == (0.9, 0.95)


def test_a_name_value_reaches_the_optimizer():
    args = build_parser().parse_args(
        ["compare", "--optimizers", "mars-adamw", "--opt-arg", "mars-adamw:state_dtype=bfloat16"]
    )
    assert args.command_entry.configure(args).hyperparams["mars-adamw"]["state_dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.9,0.95", r"several values; write a tuple in parentheses, e.g. \(0.9,0.95\)"),
        ("nan", "not a finite number"),
        ("inf", "not a finite number"),
        ("(inf,0.9)", "not a finite number"),
        ("", "empty value"),
        ("((0.9,0.95))", "nested parentheses"),
        ("1e-3x", "not a number, true/false, a name or a tuple"),
        ("0.9)", r"unbalanced '\)'"),
    ],
)
def test_a_malformed_value_is_one_value_error_that_says_why(text, message):
    with pytest.raises(ValueError, match=message):
        parse_value(text)


def test_a_grid_axis_is_a_list_of_values_in_the_same_syntax():
    assert parse_values("1e-3,(0.9,0.95),true,bfloat16") == (1e-3, (0.9, 0.95), True, "bfloat16")
    with pytest.raises(ValueError, match="not a finite number"):
        parse_values("1e-3,nan")


@pytest.mark.parametrize(
    "flags",
    [
        ["--opt-arg", "nadamw:betas=0.9,0.95"],
        ["--opt-arg", "nadamw:lr=nan"],
        ["--lr", "nadamw=abc"],
        ["--steps", "1e99"],
        ["--steps", "2000000000"],
        ["--tokens", "1e30"],
    ],
)
def test_bad_values_and_absurd_counts_are_refused_in_one_line(flags, capsys, tmp_path):
    assert main(["compare", "--optimizers", "nadamw", "--out-dir", str(tmp_path), *flags]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and flags[0] in error


def test_the_largest_counts_a_run_could_finish_are_taken():
    args = build_parser().parse_args(["compare", "--steps", "1e9"])
    assert args.steps == 10**9
    args = build_parser().parse_args(["compare", "--tokens", "1e14"])
    assert args.tokens == 10**14
