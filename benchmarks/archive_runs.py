"""Bring sweep folders written before the run archive into it: each finished run folder under
``SWEEP/runs/`` gets its line in ``SWEEP/runs.jsonl`` (config, summary, evaluation curve), which
is all that a study keeps in git and all that its resume and figures need.

    python benchmarks/archive_runs.py benchmarks/results/study-*/*/
"""

from __future__ import annotations

import argparse
from pathlib import Path

from torch_mars.train.run_archive import archive_run_folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep folders (holding runs/)")
    args = parser.parse_args()
    for sweep in args.sweeps:
        if (sweep / "runs").is_dir():
            print(f"{sweep}: {archive_run_folders(sweep)} runs archived", flush=True)


if __name__ == "__main__":
    main()
