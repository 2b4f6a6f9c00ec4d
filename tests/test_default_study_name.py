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
