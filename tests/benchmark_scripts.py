"""Loading a script of ``benchmarks/`` as a module, for the tests of what it computes (the
scripts are not a package: each loads the scripts it shares a protocol with by path, through
:func:`torch_mars.bench.scripts.load_script`, and so do the tests)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from torch_mars.bench.scripts import load_script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark_script(relative: str) -> ModuleType:
    """The module of ``benchmarks/<relative>``: the one every script that loads it shares."""
    return load_script(BENCHMARKS / relative)
