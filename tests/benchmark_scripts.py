"""Loading a script of ``benchmarks/`` as a module, for the tests of what it computes. The
scripts are not a package and share nothing but :mod:`torch_mars` (the map's protocol and
reports live in :mod:`torch_mars.train.study`); a test reads a script's own functions by
loading its file, once per process."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(path: str | Path) -> ModuleType:
    """The module the script at ``path`` defines, executed once per process: every script and
    test that loads the same file shares one module object (kept in ``sys.modules`` under a
    name made from the file's resolved path)."""
    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise FileNotFoundError(f"no script at {resolved}")
    name = f"script_{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before executing, as an import does (dataclasses look it up)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_benchmark_script(relative: str) -> ModuleType:
    """The module of ``benchmarks/<relative>``."""
    return load_script(BENCHMARKS / relative)


def tracked(*patterns: str) -> list[str]:
    """The repository's tracked files matching ``patterns`` (``git ls-files``), relative to its
    root; the calling test is skipped outside a git checkout."""
    import pytest

    try:
        listed = subprocess.run(
            ["git", "ls-files", *patterns],
            cwd=BENCHMARKS.parent,
            capture_output=True,
            text=True,
            check=True,
        )
    except (FileNotFoundError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return listed.stdout.split()
