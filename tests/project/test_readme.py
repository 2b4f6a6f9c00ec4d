"""The README's promises hold: its usage examples run as written, and CI runs its test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_usage_examples_run_as_written():
    usage, exact = code_blocks("python")
    namespace: dict = {}
    exec(usage, namespace)
    assert namespace["opt"].state[namespace["model"][0].weight]["step"] == 100
    exec(exact, namespace)
    assert namespace["loss"].item() > 0
    assert len(usage.strip().splitlines()) <= 10


def test_quick_start_has_two_commands_and_ci_runs_the_test_command():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", quick_start, flags=re.DOTALL)
    assert len(commands) == 2
    main_job, test_command = commands
    assert main_job.endswith("&& torch-mars compare")
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()
    assert "torch==2.13.0" in main_job and "torch==2.13.0" in test_command


def test_the_readme_stays_short_and_links_what_it_moved():
    """A newcomer reads it in five minutes: at most 140 lines, and the details it used to hold
    are one link away."""
    assert len(README.splitlines()) <= 140
    for doc in ("docs/harness.md", "docs/results.md", "docs/benchmarks.md", "docs/reliability.md"):
        assert f"({doc}" in README, doc
        assert (ROOT / doc).is_file()
