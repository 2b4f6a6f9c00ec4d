"""Shared fixtures. Without a GPU, Triton kernels run in its CPU interpreter, so CI checks them:
the variable must be set before any kernel is defined."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

# The lab's shared research code (benchmarks/studies/lab), which the tests of the research
# scripts read as its scripts do: ``import lab``. Appended: it shadows nothing.
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist the workers share the machine's cores: one thread each, rather than each
# worker's torch starting a thread per core and the workers contending for them.
if "PYTEST_XDIST_WORKER" in os.environ:
    torch.set_num_threads(1)

from problems import MIXED_SHAPES, RandomProblem


@pytest.fixture
def problem() -> RandomProblem:
    """24 steps of the random problem over every tensor shape MARS must handle."""
    return RandomProblem(MIXED_SHAPES, steps=24)


@pytest.fixture
def postgres_url():
    """A PostgreSQL server of the test's own (PostgreSQL's initdb and pg_ctl, a Unix socket in
    a private folder, no TCP), stopped and removed afterwards."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed")
    pytest.importorskip("psycopg2", reason="the PostgreSQL driver psycopg2 is not installed")
    folder = Path(tempfile.mkdtemp(prefix="torch-mars-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        if (
            shutil.which("runuser") is None
            or subprocess.run(["id", "postgres"], capture_output=True).returncode
        ):
            pytest.skip("running as root, without a postgres user to run the server")
        shutil.chown(folder, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"
    try:
        subprocess.run(
            [*run_as, initdb, "-D", str(data), "-A", "trust", "-U", "tune"],
            check=True,
            capture_output=True,
        )
        options = f"-c listen_addresses='' -c unix_socket_directories={folder} -p 5432"
        subprocess.run(
            [
                *run_as,
                pg_ctl,
                "-D",
                str(data),
                "-o",
                options,
                "-w",
                "start",
                "-l",
                str(folder / "log"),
            ],
            check=True,
            capture_output=True,
        )
        try:
            yield f"postgresql+psycopg2://tune@/postgres?host={folder}&port=5432"
        finally:
            subprocess.run(
                [*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Tests that start processes, servers or kill loops (each over 15 s on 2 cores): marked slow,
# so that `pytest -m "not slow"` is the quick loop while working; CI runs every test and
# prints the slowest (`--durations` in pyproject's addopts).
SLOW_MODULES = frozenset(
    {
        "test_ddp_gloo.py",
        "test_fsdp2.py",
        "test_distributed_checkpoint.py",
        "test_study_engine_holds.py",
        "test_triton_compile.py",
    }
)
SLOW_TESTS = frozenset(
    {
        "test_a_killed_tune_resumes_without_rerunning_a_finished_trial",
        "test_a_killed_sweep_resumes_without_rerunning_finished_runs",
        "test_a_sweep_never_touches_a_run_folder_it_did_not_make",
        "test_parallel_jobs_match_one_process",
        "test_a_sweep_is_not_reused_with_other_settings",
        "test_the_command_line_tunes_a_function_and_a_killed_study_resumes_without_a_rerun",
        "test_the_examples_where_users_already_train_run",
        "test_two_workers_share_one_postgresql_study_without_a_duplicated_trial",
        "test_two_workers_share_one_journal_study_without_a_duplicated_trial",
        "test_a_vision_run_killed_mid_epoch_resumes_bitwise",
        "test_the_pattern_move_screen_reads_both_designs_on_toys_whose_floor_is_on_the_ladder",
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = getattr(item, "originalname", "")
        if item.path.name in SLOW_MODULES or name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
