"""A study is named after its function's module and name unless given one: two functions named
alike in two modules never share a folder (the shipped examples run one after another)."""

from __future__ import annotations

from torch_mars.train.study.objective import default_study_name
from torch_mars.train.study.store import check_study_name


def test_two_functions_named_train_in_two_modules_get_two_studies():
    first = default_study_name("examples.digits_cnn:train")
    second = default_study_name("lstm_bytes:train")
    assert (first, second) == ("digits_cnn.train", "lstm_bytes.train")
    assert check_study_name(first) == first


def test_a_method_or_a_nested_function_gets_a_name_a_folder_can_hold():
    name = default_study_name("pkg.mod:Trainer.fit.<locals>.inner")
    assert name == "mod.Trainer.fit._locals_.inner" and check_study_name(name) == name


def test_the_shipped_examples_run_one_after_another_into_studies_of_their_own():
    import importlib.util
    from pathlib import Path

    from torch_mars.train.study.objective import function_path

    examples = Path(__file__).resolve().parents[2] / "examples"
    names = set()
    for file in sorted(examples.glob("*.py")):
        source = file.read_text()
        if "def train(" not in source:
            continue
        spec = importlib.util.spec_from_file_location(file.stem, file)
        module = importlib.util.module_from_spec(spec)
        module.__dict__["__name__"] = file.stem
        code = compile(source.split("\nif __name__")[0], str(file), "exec")
        exec(code, module.__dict__)  # the definitions only, not a run
        names.add(default_study_name(function_path(module.train)))
    assert len(names) == len(list(examples.glob("*.py"))) >= 4
