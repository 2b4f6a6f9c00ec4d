"""Packaging: the optimizer imports and steps with torch and numpy alone (no harness
dependencies, no distributed code loaded), the command names the extra it lacks, and
`--version` and `python -m torch_mars` work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch_mars

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_HARNESS = (
    "import sys\nfor name in ('tqdm', 'matplotlib', 'PIL'):\n    sys.modules[name] = None\n"
)


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_optimizer_needs_neither_the_harness_nor_distributed_code():
    completed = run_python(
        WITHOUT_HARNESS + "import torch\nfrom torch_mars import MARS\n"
        "model = torch.nn.Linear(3, 2)\nopt = MARS(model.parameters())\n"
        "model(torch.randn(4, 3)).sum().backward()\nopt.step()\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch_mars')))"
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    loaded = completed.stdout
    assert "torch_mars.optim.mars" in loaded
    for absent in ("torch_mars.distributed", "torch_mars.train", "torch_mars.cli"):
        assert f"'{absent}" not in loaded


def test_the_command_names_the_extra_it_lacks():
    completed = run_python(WITHOUT_HARNESS + "import torch_mars.cli")
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1, completed.stderr  # one line, no traceback
    assert "(matplotlib, PIL, tqdm missing): pip install 'torch-mars[harness]'" in (
        completed.stderr
    )


def test_the_tuning_api_names_the_extra_it_lacks_in_one_line():
    completed = run_python(
        WITHOUT_HARNESS + "sys.modules['optuna'] = None\nimport torch_mars\n"
        "try:\n    torch_mars.tune(lambda m, s, d, r: 0.0)\n"
        "except ImportError as error:\n    print(error)\n"
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    said = completed.stdout.strip()
    assert "\n" not in said and "torch_mars.tune needs the harness extra" in said


def test_version_and_python_dash_m():
    for command in (["-m", "torch_mars", "--version"], ["-m", "torch_mars.cli", "--version"]):
        completed = subprocess.run([sys.executable, *command], capture_output=True, text=True)
        assert completed.returncode == 0
        assert completed.stdout.strip() == f"torch-mars {torch_mars.__version__}"


def test_the_wheel_ships_py_typed_and_the_license():
    assert (ROOT / "src" / "torch_mars" / "py.typed").is_file()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert 'torch_mars = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()
