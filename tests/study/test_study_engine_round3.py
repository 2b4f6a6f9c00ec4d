"""The study engine holds, round 3: one test per reproducer of ``shared/repro/study-engine-3``
(r01-r12): no link followed out of a study folder, no diverged or failed run hidden, a
declared family checked, no traceback from data, an lr-only search that spends its trials."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from torch import nn

import torch_mars
from torch_mars.train.study.family import Comparison, campaign_family
from torch_mars.train.study.family_reads import stored_verdicts
from torch_mars.train.study.outcomes import OptimizerOutcome, curves_of
from torch_mars.train.study.report_text import format_tune_table
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.space import point_key, start_point
from torch_mars.train.study.store import (
    StorageError,
    open_storage,
    owner_of,
    restore_journals,
    snapshot_journals,
    stored_study,
)
from torch_mars.train.study.tune import TunePlan, stored_starts
from torch_mars.train.trainer import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def lowest_at_lr_half(make_optimizer, seed, data_seed, report):
    lr = make_optimizer(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))).param_groups[0]["lr"]
    return 2.0 + (math.log(lr) - math.log(0.5)) ** 2


def test_r01_a_search_with_only_the_lr_free_spends_its_trials_on_the_lr(tmp_path):
    fixed = {"beta1": 0.9, "beta2": 0.95, "weight_decay": 0.01, "lr_1d_ratio": 1}
    result = torch_mars.tune(
        lowest_at_lr_half,
        ["adamw"],
        trials=16,
        fixed={**fixed, "weight_decay_1d": 0},
        heldout_seeds=(3, 4),
        heldout_data_seeds=(1,),
        out_dir=tmp_path,
        progress=False,
    )
    stored = json.loads((result.paths[0].parent / "tune.json").read_text())["optimizers"][0]
    assert stored["trials"] == 16  # not 3: the walk reaches lr 0.5 from 0.0076 and past it
    assert 0.3 < result.winners["adamw"]["lr"] < 0.7


def test_r02_a_storage_that_is_a_link_is_refused_and_nothing_outside_is_touched(tmp_path):
    other = tmp_path / "mine.db"
    other.write_bytes(b"precious")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.db").symlink_to(other)
    with pytest.raises(StorageError, match="is a link"):
        open_storage(f"sqlite:///{tmp_path / 's' / 'study.db'}")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "study.db").symlink_to(tmp_path / "elsewhere.db")  # dangling
    with pytest.raises(StorageError, match="is a link"):
        open_storage(f"sqlite:///{tmp_path / 'd' / 'study.db'}")
    assert other.read_bytes() == b"precious" and not (tmp_path / "elsewhere.db").exists()


def _journal(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    live = folder / "study.log"
    optuna.create_study(study_name="s", storage=open_storage(f"journal:{live}"))
    return live


def test_r03_a_planted_partial_link_is_refused_when_a_snapshot_lands(tmp_path):
    _journal(tmp_path / "camp" / "s")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    (tmp_path / "camp" / "s" / "study.log.gz.partial").symlink_to(notes)
    with pytest.raises(StorageError, match="is a link"):
        snapshot_journals(tmp_path / "camp")
    assert notes.read_text() == "mine"


def test_r04_a_dangling_journal_link_beside_a_snapshot_is_refused(tmp_path):
    live = _journal(tmp_path / "s")
    snapshot_journals(tmp_path / "s")
    live.unlink()
    live.symlink_to(tmp_path / "outside.log")
    with pytest.raises(StorageError, match="is a link"):
        restore_journals(tmp_path / "s")
    assert not (tmp_path / "outside.log").exists()


def test_r05_copying_a_study_into_a_folder_with_a_link_writes_nothing_through_it(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks" / "studies"))
    try:
        import search_benchmark
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "studies"))
    landed = tmp_path / "landed.gz"
    landed.write_bytes(gzip.compress(b"{}\n"))
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "study.log.gz").symlink_to(tmp_path / "written.gz")
    with pytest.raises(StorageError, match="is a link"):
        search_benchmark.copy_study(landed, tmp_path / "dest")
    assert not (tmp_path / "written.gz").exists()


PLAN = TunePlan(TrainConfig(model="tiny"), ("adamw",), PROTOCOL, Path("/x/s"))


def _lost(finals: list[float], failures: dict | None = None, finished: bool = True):
    winner = start_point("adamw", "tiny")
    key = point_key(winner)
    pairs = PROTOCOL.heldout_pairs()
    runs = frozenset(("adamw", key, s, d) for (s, d) in pairs)
    return OptimizerOutcome(
        "adamw", finished, winner, [2.0], [2.0], finals, 1, [], winner_score=2.0,
        runs=runs, failures={("adamw", key, *pairs[k]): m for k, m in (failures or {}).items()},
    )  # fmt: skip


def test_r06_a_diverged_held_out_run_is_said_beside_the_mean_it_is_not_in():
    finals = [2.0 + 0.001 * k for k in range(12)]
    finals[0] = math.nan
    text = format_tune_table(PLAN, [_lost(finals)])
    assert "(1 of 12 lost: diverged or failed, not in this mean)" in text
    assert "1 diverged (seed 3, data order 1)" in text.split("\n")[0]


def test_r07_a_finished_study_that_lost_held_out_runs_answers_none_not_not_yet():
    finals = [2.0] * 12
    finals[1] = math.nan
    answer = format_tune_table(PLAN, [_lost(finals, {1: "odd seed 4"})]).split("\n")[0]
    assert answer.startswith("**Answer:** none: the study has finished")
    assert "1 failed (seed 4, data order 1: odd seed 4)" in answer and "not yet" not in answer
    waiting = format_tune_table(PLAN, [_lost(finals, finished=False)]).split("\n")[0]
    assert waiting.startswith("**Answer:** not yet") and "resumes" in waiting


def test_r08_stored_data_of_the_wrong_shape_is_one_line_naming_what(monkeypatch):
    with pytest.raises(ValueError, match="protocol_history is not a list of protocols"):
        stored_starts({"search": {}}, "garbage")  # type: ignore[arg-type]
    trial = optuna.trial.create_trial(
        value=1.0,
        params={},
        distributions={},
        user_attrs={"curve": {"columns": ["step", "val_loss"], "rows": [5, 6]}},
        system_attrs={"torch_mars_owner": "abc"},
    )
    with pytest.raises(ValueError, match="owner record"):
        owner_of(trial)
    from torch_mars.train.study import outcomes

    monkeypatch.setattr(outcomes, "run_of", lambda t: ("adamw", "{}", 0, 0))
    with pytest.raises(ValueError, match="curve whose rows are not rows"):
        curves_of([trial], "val_loss")


def test_r09_a_donor_without_identity_or_a_snapshot_that_is_not_gzip_is_one_line(tmp_path):
    (tmp_path / "plain").mkdir()
    optuna.create_study(
        study_name="x", storage=open_storage(f"journal:{tmp_path / 'plain' / 'study.log'}")
    )
    with pytest.raises(StorageError, match="stores no identity"):
        stored_study(tmp_path / "plain")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "study.log.gz").write_bytes(os.urandom(64))
    with pytest.raises(StorageError, match="not a study's snapshot"):
        stored_study(tmp_path / "junk")
    (tmp_path / "m" / "q").mkdir(parents=True)
    entry = {"rule": "mars-adamw", "control": "adamw", "gap": -0.01, "p": 0.01, "pairs": 2}
    report = {"optimizers": [], "verdicts": [entry]}
    (tmp_path / "m" / "q" / "tune.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match="gap, interval or p is not numbers"):
        stored_verdicts(tmp_path, [Comparison("mars-adamw", ("adamw",), "m/q")])


def test_r10_a_family_that_is_a_fifo_is_refused_without_reading_it(tmp_path):
    os.mkfifo(tmp_path / "campaign.json")
    with pytest.raises(ValueError, match="not a regular file"):
        campaign_family(tmp_path / "campaign.json")


def test_r11_a_campaign_declaration_that_is_not_json_is_one_line(tmp_path):
    studies = tmp_path / "benchmarks" / "studies"
    studies.mkdir(parents=True)
    (studies / "campaign.py").write_text((ROOT / "benchmarks/studies/campaign.py").read_text())
    shutil.copytree(ROOT / "benchmarks/studies/lab", studies / "lab")  # what the script imports
    results = tmp_path / "benchmarks" / "results" / "campaign-3"
    results.mkdir(parents=True)
    (results / "campaign.json").write_text('{"campaign": "the map decided",\n<<<<<<< HEAD\n')
    done = subprocess.run(
        [sys.executable, str(studies / "campaign.py"), "--campaign", "campaign-3", "--status"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "not a campaign declaration" in done.stderr


def test_r12_a_comparison_listed_twice_counts_once_and_an_unknown_rule_is_refused(tmp_path, capsys):
    entry = {"model": "m", "point": "p", "rule": "mars-adamw", "controls": ["adamw"]}
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps({"family": [entry, entry]}))
    assert campaign_family(twice) == [Comparison("mars-adamw", ("adamw",), "m/p")]
    assert "listed more than once, counted once" in capsys.readouterr().err
    phantom = tmp_path / "phantom.json"
    phantom.write_text(json.dumps({"family": [entry, {**entry, "rule": "mars-adamv"}]}))
    with pytest.raises(ValueError, match="'mars-adamv', not a MARS rule"):
        campaign_family(phantom)
    gamma0 = {**entry, "controls": ["mars-adamw@gamma=0"]}
    (tmp_path / "g.json").write_text(json.dumps({"family": [gamma0]}))
    assert campaign_family(tmp_path / "g.json")[0].controls == ("mars-adamw@gamma=0",)


def test_a_report_on_a_missing_storage_makes_nothing_and_a_landed_journal_opens_to_join(tmp_path):
    missing = tmp_path / "nowhere" / "study.db"
    with pytest.raises(StorageError, match="no such file"):
        open_storage(f"sqlite:///{missing}", create=False)
    assert not missing.parent.exists()
    live = _journal(tmp_path / "landed")
    snapshot_journals(tmp_path / "landed")
    live.unlink()  # a clean checkout holds the snapshot alone
    storage = open_storage(f"journal:{live}", create=False)  # what a joining worker opens
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["s"]


def test_a_donor_run_whose_final_is_no_result_is_trained_here_not_copied_in():
    from torch_mars.train.study.reuse import _a_result

    assert _a_result(1.73) and _a_result(2) and _a_result(None)  # a number, or diverged
    assert not _a_result("abc") and not _a_result(True) and not _a_result("absent")
