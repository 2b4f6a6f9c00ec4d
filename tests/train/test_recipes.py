"""The harness's one recipe table (train/recipes.py): every default of every (task, model,
optimizer) with its source, the only place a harness default is written, and what
``compare --show-recipe`` prints."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torch_mars.cli import main
from torch_mars.models import GPT_CONFIGS
from torch_mars.train.optimizers import OPTIMIZER_NAMES, default_hyperparams
from torch_mars.train.recipes import CAMPAIGN_B16, PAPER, recipe
from torch_mars.train.vision import vision_hyperparams

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "torch_mars"
HARNESS = [PACKAGE / "train", PACKAGE / "bench", PACKAGE / "cli.py"]
HYPERPARAMETERS = {
    "lr", "betas", "gamma", "weight_decay", "momentum", "lr_1d", "betas_1d", "weight_decay_1d",
    "min_lr", "adamw_lr", "adamw_betas", "adamw_weight_decay", "momentum_decay",
}  # fmt: skip


def test_every_value_of_every_row_names_its_source():
    for optimizer in OPTIMIZER_NAMES:
        for model in GPT_CONFIGS:
            row = recipe("text", model, optimizer)
            assert row.settings == default_hyperparams(optimizer, model)
            assert set(row.sources) == set(row.settings) and all(row.sources.values())
        vision = recipe("vision", "*", optimizer)
        assert set(vision.sources) == set(vision.settings)
        assert vision_hyperparams(optimizer, {}).items() >= vision.settings.items()
    tiny = recipe("text", "tiny", "mars-adamw")
    assert tiny.sources["gamma"] == tiny.sources["lr"] == CAMPAIGN_B16
    assert recipe("text", "tiny", "muon").sources["momentum"] == CAMPAIGN_B16
    assert recipe("text", "gpt2-small", "adamw").sources["lr"] == PAPER


def _literal_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    if isinstance(node, ast.Tuple):
        return all(_literal_number(e) for e in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def hyperparameter_literals(path: Path) -> list[str]:
    """``{"lr": 3e-3, ...}``: a hyperparameter's number written in a dict outside the table."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value in HYPERPARAMETERS
                    and _literal_number(value)
                ):
                    found.append(f"{path.name}:{node.lineno} {key.value}")
    return found


def test_no_harness_default_is_written_outside_the_table(tmp_path):
    files = [p for root in HARNESS for p in ([root] if root.is_file() else root.rglob("*.py"))]
    found = [
        hit for path in files if path.name != "recipes.py" for hit in hyperparameter_literals(path)
    ]
    assert not found
    sample = tmp_path / "defaults.py"
    sample.write_text('DEFAULTS = {"adamw": {"lr": 4.5e-3, "betas": (0.9, 0.95)}}\n')
    assert hyperparameter_literals(sample) == ["defaults.py:1 lr", "defaults.py:1 betas"]


def test_compare_shows_its_recipe_with_sources_and_trains_nothing(tmp_path, capsys):
    args = ["compare", "--show-recipe", "--optimizers", "mars-adamw", "adamw"]
    assert main([*args, "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"| mars-adamw | tiny | gamma | 0.1 | {CAMPAIGN_B16} |" in out
    assert "| adamw | tiny | lr |" in out
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("task", ["images"])
def test_an_unknown_task_has_no_recipe(task):
    with pytest.raises(ValueError, match="no recipes for task"):
        recipe(task, "*", "adamw")
