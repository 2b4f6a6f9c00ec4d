"""What ``import torch_mars`` costs beyond ``import torch``: fresh interpreters, the two imports
timed alternately, medians over repeats (issue #15's goal: under 0.3 s).

    python benchmarks/perf/import_time.py [--repeats 11]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys

import torch

TIMED = "import time; t = time.perf_counter(); {imports}; print(time.perf_counter() - t)"


def seconds(imports: str) -> float:
    code = TIMED.format(imports=imports)
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return float(completed.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    rows = {"import torch": [], "import torch, torch_mars": [], "import torch_mars.cli": []}
    for _ in range(args.repeats):
        rows["import torch"].append(seconds("import torch"))
        rows["import torch, torch_mars"].append(seconds("import torch, torch_mars"))
        rows["import torch_mars.cli"].append(seconds("import torch_mars.cli"))
    base = statistics.median(rows["import torch"])
    print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, median of {args.repeats}"
    )
    print("| imports | median (s) | beyond torch (s) |\n|---|---:|---:|")
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"| `{name}` | {median:.2f} | {median - base:+.2f} |")


if __name__ == "__main__":
    main()
