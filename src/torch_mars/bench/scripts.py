"""A script file loaded as a module by its path: how the repository's benchmark scripts share a
protocol (``benchmarks/studies/second_model.py`` reads ``fight_map.py``'s points) without being
a package, or finding each other by bare name on ``sys.path``."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


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
