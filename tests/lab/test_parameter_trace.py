"""How far one setting travels (issue "The study wing, round 2"): a value given to ``torch-mars
tune --fixed`` reaches the optimizer a run builds through fewer than 45 functions, by the
yardstick of benchmarks/studies/parameter_trace.py (its docstring defines a stay)."""

from __future__ import annotations

from pathlib import Path

from benchmark_scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "studies" / "parameter_trace.py"
parameter_trace = load_script(SCRIPT)


def test_a_fixed_value_reaches_its_run_through_fewer_than_45_functions(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # the study's objective is the script's
    stays = parameter_trace.trace()
    assert ("torch_mars/train/optimizers.py", "build_optimizer") in stays  # it reached the run
    assert len(stays) < 45, sorted(stays)
    # the search walks points of the dimensions it moves: the held values never enter it
    assert [name for module, name in stays if module.endswith("profiled.py")] == ["hyperparams"]
