"""The benchmark scripts share nothing but the library and the lab: no script imports another
by bare name or loads another's file by path; what two scripts share (the fight map's protocol
and reports, the campaigns, the ablations) lives in the lab package
(``benchmarks/studies/lab``), which imports the library; the library knows no path of the
repository and imports nothing of the lab."""

from __future__ import annotations

import ast

import pytest

from benchmark_scripts import BENCHMARKS, load_script

SCRIPTS = sorted(BENCHMARKS.glob("**/*.py"))


def _imported(path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def test_no_benchmark_script_imports_another_by_bare_name():
    names = {path.stem for path in SCRIPTS}
    bare = [f"{p.name}: {m}" for p in SCRIPTS for m in _imported(p) if m.split(".")[0] in names]
    assert SCRIPTS and bare == []


def test_no_benchmark_script_loads_another_by_path():
    loaders = ("importlib", "runpy")
    found = [
        f"{p.relative_to(BENCHMARKS)}: {m}"
        for p in SCRIPTS
        for m in _imported(p)
        if m.split(".")[0] in loaders
    ]
    found += [
        str(p.relative_to(BENCHMARKS))
        for p in SCRIPTS
        if "load_script" in p.read_text() or "spec_from_file_location" in p.read_text()
    ]
    assert found == []


def test_the_library_imports_nothing_of_the_lab_and_names_no_results_folder():
    library = sorted((BENCHMARKS.parent / "src" / "torch_mars").glob("**/*.py"))
    lab = [f"{p.name}: {m}" for p in library for m in _imported(p) if m.split(".")[0] == "lab"]
    paths = [p.name for p in library if "benchmarks/results" in p.read_text()]
    assert library and lab == [] and paths == []


def test_the_studies_share_the_labs_map():
    from lab.fight_map import POINTS, FightMap

    second_model = load_script(BENCHMARKS / "studies" / "second_model.py")
    fight_map = load_script(BENCHMARKS / "studies" / "fight_map.py")
    assert second_model.POINTS is fight_map.POINTS is POINTS
    assert fight_map.MAP == FightMap(BENCHMARKS.parent) == second_model.MAP


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
