"""A study's record (tune.json) is written and read in one module, its format stamped: old
records read, a newer one is refused by name, a file that is no record says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from torch_mars.train.study.tune_record import (
    TUNE_RECORD_FORMAT,
    read_tune_record,
    write_tune_record,
)

RECORD = {
    "trials": 3,
    "selection": {"seeds": [0]},
    "optimizers": [
        {"optimizer": "adamw", "heldout_finals": [1.0, None], "heldout_pairs": [[1, 1], [2, 2]]}
    ],
    "verdicts": [],
}


def test_a_written_record_is_stamped_and_reads_back(tmp_path):
    written = write_tune_record(tmp_path, RECORD)
    path = written.path
    assert json.loads(path.read_text())["format"] == TUNE_RECORD_FORMAT
    record = read_tune_record(tmp_path)  # the folder or the file, alike
    assert record == read_tune_record(path) == written  # the record as written is as read
    assert record.format == TUNE_RECORD_FORMAT and record.trials == 3
    assert record.heldout("adamw") == ([1.0, None], [[1, 1], [2, 2]])
    assert record.entry("nadamw") is None and record.heldout("nadamw") == ([], [])


def test_a_record_from_before_the_stamp_reads_as_format_1(tmp_path):
    (tmp_path / "tune.json").write_text(json.dumps(RECORD))
    assert read_tune_record(tmp_path).format == 1


def test_a_newer_record_and_a_file_that_is_none_are_refused_by_name(tmp_path):
    (tmp_path / "tune.json").write_text(json.dumps({**RECORD, "format": TUNE_RECORD_FORMAT + 1}))
    with pytest.raises(ValueError, match=r"tune.json: record format .* newer than this"):
        read_tune_record(tmp_path)
    (tmp_path / "tune.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"tune\.json: no study record"):
        read_tune_record(tmp_path)
    (tmp_path / "tune.json").write_text(json.dumps({"points": []}))
    with pytest.raises(ValueError, match="not a tune study's record"):
        read_tune_record(tmp_path)
    with pytest.raises(ValueError, match="no study record"):
        read_tune_record(tmp_path / "absent")


def test_no_module_but_the_records_own_reads_or_writes_tune_json():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in [*root.glob("src/torch_mars/**/*.py"), *root.glob("benchmarks/**/*.py")]:
        if path.name == "tune_record.py":
            continue
        for line in path.read_text().splitlines():
            if "tune.json" in line and ("json.load" in line or "write_text" in line):
                offenders.append(f"{path.relative_to(root)}: {line.strip()}")
    assert offenders == []


# Keys only a study's record has (an optimizer's entry, a verdict, the record's own): a module
# that subscripts one reads tune.json by hand.
RECORD_ONLY_KEYS = (
    "heldout_finals", "selection_finals", "heldout_pairs", "trial_scores", "tuning_curve",
    "own_winner", "best_known_from", "values_scored", "failed_runs", "worst_heldout",
    "heldout_outliers", "adjusted_interval", "copied_runs",
)  # fmt: skip
KEYS = "|".join(RECORD_ONLY_KEYS)
READ_BY_HAND = re.compile(r"""(\[\s*|\.get\(\s*)["'](""" + KEYS + r""")["']""")


def test_the_records_keys_are_read_in_its_module_alone():
    root = Path(__file__).resolve().parents[2]
    found = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("src", "benchmarks", "examples")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "tune_record.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if READ_BY_HAND.search(line)
    ]
    assert not found, f"tune.json read by hand (use read_tune_record's fields): {found}"
    assert READ_BY_HAND.search('finals = entry["heldout_finals"]')  # the check can fail


def test_an_entry_reads_its_fields_and_an_older_record_its_defaults(tmp_path):
    written = write_tune_record(tmp_path, RECORD)
    (entry,) = written.optimizers
    assert entry.optimizer == "adamw" and entry.heldout == ([1.0, None], [[1, 1], [2, 2]])
    assert entry.own_winner is None and entry.finalists == [] and not entry.finished
    assert written.command == () and written.copied_runs == 0
