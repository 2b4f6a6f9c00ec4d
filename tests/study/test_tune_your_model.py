"""``tune`` on a user's own training function (docs/tuning-your-model.md): from Python and from
the command line, with equal trials, held-out runs on new seeds and data orders, a killed study
resumed without a rerun, one line for each bad input, and the three examples (a plain loop,
Hugging Face's Trainer, Lightning) run for real on toy models."""

from __future__ import annotations

import collections
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

import torch_mars
from harness_helpers import dying_env
from torch_mars.cli import main
from torch_mars.train.study.space import dimensions_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = dict(
    trials=2,
    seeds=(0,),
    heldout_seeds=(1, 2),
    heldout_data_seeds=(1,),
    finalists=0,
    peer_winners=False,  # the runs these tests count are each search's own
)


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_tune_on_a_plain_loop_gives_equal_trials_and_reads_winners_on_new_data(tmp_path, capsys):
    result = torch_mars.tune(
        example("plain_loop").train,
        optimizers=["adamw", "mars-adamw"],
        out_dir=tmp_path,
        **{**SMALL, "finalists": 2, "final_seeds": (5,)},
    )
    report = json.loads((tmp_path / "plain_loop.train" / "tune.json").read_text())
    assert [o["trials"] for o in report["optimizers"]] == [2, 2]
    assert [len(o["finalists"]) for o in report["optimizers"]] == [2, 2]
    assert all(len(o["selection_finals"]) == 2 for o in report["optimizers"])  # seeds 0 and 5
    assert all(o["heldout_pairs"] == [[1, 1], [2, 1]] for o in report["optimizers"])
    assert all(None not in o["heldout_finals"] for o in report["optimizers"])
    (verdict,) = result.verdicts
    assert verdict.rule == "mars-adamw" and verdict.control == "adamw"
    assert set(result.winners) == {"adamw", "mars-adamw"}
    assert "gamma" in result.winners["mars-adamw"]
    assert tmp_path / "plain_loop.train" / "summary.md" in result.paths
    assert "| mars-adamw |" in result.table or "| adamw |" in result.table
    # the bar counts every run against the plan: (2 trials + 2 finalists + 2 held out) x 2
    assert "12/12" in capsys.readouterr().err


def test_progress_false_hides_the_bar(tmp_path, capsys):
    small = {**SMALL, "trials": 1}
    torch_mars.tune(
        example("plain_loop").train, ["adamw"], out_dir=tmp_path, progress=False, **small
    )
    assert "tune plain_loop.train" not in capsys.readouterr().err


@pytest.mark.parametrize("name", ["hf_trainer", "lightning_module"])
def test_the_examples_where_users_already_train_run(tmp_path, name):
    pytest.importorskip("transformers" if name == "hf_trainer" else "lightning")
    result = torch_mars.tune(
        example(name).train, optimizers=["adamw", "mars-adamw"], out_dir=tmp_path, **SMALL
    )
    report = json.loads((tmp_path / f"{name}.train" / "tune.json").read_text())
    assert [o["trials"] for o in report["optimizers"]] == [2, 2]
    assert all(v is not None for o in report["optimizers"] for v in o["heldout_finals"])
    assert result.verdicts


def test_a_library_model_at_a_quick_budget_has_every_dimension_tuned(tmp_path):
    """#63: a model we did not write (transformers' ViT, a tiny config), 12 trials each: every
    dimension of every optimizer moved, gamma included, and the report says so."""
    pytest.importorskip("transformers")
    library_vit = example("library_vit")
    library_vit.STEPS = 4  # a search's path, not the model's quality, is what this reads
    quick = dict(seeds=(0,), heldout_seeds=(1, 2), heldout_data_seeds=(1,), finalists=0)
    result = torch_mars.tune(
        library_vit.train, ["adamw", "mars-adamw"], trials=12, out_dir=tmp_path,
        progress=False, **quick,
    )  # fmt: skip
    report = json.loads((tmp_path / "library_vit.train" / "tune.json").read_text())
    for entry in report["optimizers"]:
        assert entry["trials"] == 12
        assert set(entry["moved"]) == set(dimensions_of(entry["optimizer"])), entry["optimizer"]
    assert "moved only the lr" not in result.table and "(every dimension)" in result.table
    # moved is not tuned: at 12 trials some dimensions are scored at 2 values, and it says so
    assert "search is short" in result.table


OBJECTIVE = ["--optimizers", "adamw", "nadamw", "--trials", "2", "--seeds", "0"]
OBJECTIVE += ["--heldout-seeds", "1", "--heldout-data-seeds", "1", "--name", "s"]
OBJECTIVE += ["--finalists", "0", "--peer-winners", "off"]


def test_the_command_line_tunes_a_function_and_a_killed_study_resumes_without_a_rerun(tmp_path):
    args = [sys.executable, "-m", "torch_mars.cli", "tune", "--objective", "plain_loop:train"]
    args += [*OBJECTIVE, "--out-dir", str(tmp_path)]
    env = dying_env(tmp_path / "site", "optuna.storages:RDBStorage._create_new_trial", 4)
    killed = subprocess.run(args, cwd=EXAMPLES, env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    done = subprocess.run(
        args, cwd=EXAMPLES, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    trials = optuna.load_study(
        study_name="s", storage=f"sqlite:///{tmp_path / 's' / 'study.db'}"
    ).get_trials()
    finished = [t for t in trials if t.state.name == "COMPLETE"]
    runs = collections.Counter(
        tuple(t.user_attrs[k] for k in ("optimizer", "point", "seed", "data_seed"))
        for t in finished
    )
    assert len(runs) == 6 and max(runs.values()) == 1
    assert len(finished) == 6  # the three before the kill were not trained again


FUNCTIONS = """
import math


def raises(make_optimizer, seed, data_seed, report):
    if seed == 0:
        raise RuntimeError("out of memory, say")
    return 1.0 + seed


def not_a_number(make_optimizer, seed, data_seed, report):
    return "low" if seed == 0 else 1.0


def diverges(make_optimizer, seed, data_seed, report):
    return math.nan if seed == 0 else 1.0


def wrong_signature(model, seed):
    return 1.0
"""


@pytest.fixture
def functions(tmp_path, monkeypatch):
    (tmp_path / "user_functions.py").write_text(FUNCTIONS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def objective(name: str, out: Path) -> list[str]:
    return ["tune", "--objective", f"user_functions:{name}", *OBJECTIVE, "--out-dir", str(out)]


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("no_such_module:train", "does not import"),
        ("user_functions:absent", "has no 'absent'"),
        ("user_functions:wrong_signature", "the contract is train(make_optimizer"),
        ("user_functions", "must be MODULE:FUNCTION"),
    ],
)
def test_a_bad_objective_is_one_line_and_makes_no_study(functions, capsys, path, says):
    args = objective("x", functions / "out")
    args[args.index("user_functions:x")] = path
    assert main(args) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and says in error and "Traceback" not in error
    assert not (functions / "out").exists()


@pytest.mark.parametrize(
    ("name", "state", "error"),
    [
        ("raises", "FAIL", "RuntimeError: out of memory, say"),
        ("not_a_number", "FAIL", "returned str 'low', not a number (return float(loss))"),
        ("diverges", "COMPLETE", None),
    ],
)
def test_a_failing_function_fails_its_trial_with_its_message_and_the_study_goes_on(
    functions, name, state, error
):
    assert main(objective(name, functions / "out")) == 0
    trials = optuna.load_study(
        study_name="s", storage=f"sqlite:///{functions / 'out' / 's' / 'study.db'}"
    ).get_trials()
    on_seed_0 = [t for t in trials if t.user_attrs["seed"] == 0]
    assert on_seed_0 and {t.state.name for t in on_seed_0} == {state}
    assert all(t.user_attrs.get("error") == error for t in on_seed_0)
    held_out = [t for t in trials if t.user_attrs["seed"] == 1]
    assert {t.state.name for t in held_out} == {"COMPLETE"}  # the study went on to them


def test_the_tabular_example_tunes_with_pruning_and_a_dimension_of_its_own(tmp_path):
    """The fourth example (a tabular MLP) as its ``__main__`` calls it, on a smaller budget:
    its dropout searched for every optimizer alike, its trials' runs pruned on the validation
    losses it reports each epoch."""
    tabular = example("tabular_mlp")
    result = torch_mars.tune(
        tabular.train,
        ["adamw"],
        trials=7,
        out_dir=tmp_path,
        progress=False,
        extra_space={"dropout": tabular.DROPOUT},
        prune=True,
        seeds=(0,),
        heldout_seeds=(1, 2),
        heldout_data_seeds=(1,),
        finalists=2,
        final_seeds=(3,),
    )
    assert {w["dropout"] for w in result.extra_winners.values()} <= set(tabular.DROPOUT)
    assert "Your own dimensions, tuned for every optimizer alike: dropout 0, 0.1, 0.2, 0.3." in (
        result.table
    )
    assert "Pruned trials" in result.table and all(
        math.isfinite(m) for m in result.heldout_means.values()
    )


def test_every_setting_the_users_guide_names_is_a_keyword_and_a_flag():
    """docs/tuning-your-model.md's "Your space": each bullet's ``keyword=`` is a keyword of
    ``torch_mars.tune`` and its ``--flag`` one of ``torch-mars tune``'s."""
    import inspect
    import re

    from torch_mars.cli import build_parser

    text = (EXAMPLES.parent / "docs" / "tuning-your-model.md").read_text()
    section = text.split("## Your space", 1)[1].split("\n## ", 1)[0]
    heads = [line for line in section.splitlines() if line.startswith("- `")]
    keywords = {re.match(r"- `(\w+)=", line).group(1) for line in heads}
    flags = {f for line in heads for f in re.findall(r"`(--[a-z-]+)", line)}
    assert {"extra_space", "prune", "fixed", "ladders", "direction", "version"} <= keywords
    assert keywords <= set(inspect.signature(torch_mars.tune).parameters)
    tune_parser = build_parser()._subparsers._group_actions[0].choices["tune"]
    known = {o for action in tune_parser._actions for o in action.option_strings}
    assert flags and flags <= known, flags - known


def test_every_snippet_of_the_users_guide_runs_against_the_api(monkeypatch):
    """docs/tuning-your-model.md's snippets, run: each Python block executed in order (the
    contract's function defined; ``torch_mars.tune`` called through a stand-in that binds its
    arguments to the real signature, so a keyword the API lacks fails here), each shell line
    parsed by ``torch-mars``'s own parser."""
    import inspect
    import re
    import shlex

    from torch_mars.cli import build_parser

    text = (EXAMPLES.parent / "docs" / "tuning-your-model.md").read_text()
    blocks = re.findall(r"```(python|bash)\n(.*?)```", text, flags=re.S)
    assert [kind for kind, _ in blocks].count("python") >= 2
    called = []

    def stand_in(*args, **kwargs):
        called.append(inspect.signature(torch_mars.tune).bind(*args, **kwargs))
        return torch_mars.TuneResult("**Answer** ...", {"adamw": {}}, [], [])

    monkeypatch.setattr(torch_mars, "tune", stand_in)
    scope: dict = {}
    for kind, code in blocks:
        if kind == "python":
            exec(compile(code, "tuning-your-model.md", "exec"), scope)
            continue
        for line in code.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split("#", 1)[0])
            if words[:2] == ["torch-mars", "tune"]:
                build_parser().parse_args(words[1:])  # exits on a flag the parser lacks
    assert called and callable(scope["train"])
