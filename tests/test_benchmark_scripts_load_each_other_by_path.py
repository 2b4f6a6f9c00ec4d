"""The benchmark scripts share a protocol by loading each other's files by path
(:func:`torch_mars.bench.scripts.load_script`), never by a bare-name import that works only
where the script's folder is on ``sys.path``; a file loaded twice is one module."""

from __future__ import annotations

import ast

import pytest

from benchmark_scripts import BENCHMARKS, load_benchmark_script
from torch_mars.bench.scripts import load_script


def test_no_benchmark_script_imports_another_by_bare_name():
    scripts = sorted(BENCHMARKS.glob("**/*.py"))
    names = {path.stem for path in scripts}
    bare = []
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                imported = [node.module or ""]
            elif isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            else:
                continue
            bare += [f"{path.name}: {m}" for m in imported if m.split(".")[0] in names]
    assert scripts and bare == []


def test_a_script_loaded_by_two_others_is_one_module():
    second_model = load_benchmark_script("studies/second_model.py")
    edge_probe = load_benchmark_script("studies/edge_probe.py")
    fight_map = load_benchmark_script("studies/fight_map.py")
    assert second_model.fight_map is fight_map
    assert edge_probe.fight_map is fight_map
    assert edge_probe.fight_ablation.fight_map is fight_map


def test_a_script_runs_once_per_process(tmp_path):
    script = tmp_path / "counted.py"
    script.write_text("import itertools\nRUNS = itertools.count(1)\nFIRST = next(RUNS)\n")
    first = load_script(script)
    assert load_script(tmp_path / "." / "counted.py") is first
    assert next(first.RUNS) == 2  # executed once: the second load did not start a new count


def test_a_missing_script_is_refused_with_its_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no script at .*absent\.py"):
        load_script(tmp_path / "absent.py")


def test_a_script_that_fails_leaves_nothing_half_loaded(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("raise RuntimeError('broken on purpose')\n")
    for _ in range(2):  # the second load executes it again: nothing cached from the first
        with pytest.raises(RuntimeError, match="broken on purpose"):
            load_script(script)
