"""Loading a script of ``benchmarks/`` as a module, for the tests of what it computes (the
scripts are not a package: no script imports another)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark_script(relative: str) -> ModuleType:
    """The module of ``benchmarks/<relative>``, executed once per call."""
    path = BENCHMARKS / relative
    spec = importlib.util.spec_from_file_location(path.stem + "_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
