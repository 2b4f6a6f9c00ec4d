"""The gamma to take (issue #83, item 3): the screen chooses each rule's candidate, declared
once; on pairs the candidate holds where its winner takes it or the adjusted interval of
winner - candidate lies above -margin, fails where it lies below, and waits where unread; the
campaign trains the candidate only where the winner takes another gamma."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from benchmark_scripts import load_script
from torch_mars.train.study.store import open_storage

ROOT = Path(__file__).resolve().parents[2]
gamma_to_take = load_script(ROOT / "benchmarks" / "studies" / "gamma_to_take.py")
campaign = load_script(ROOT / "benchmarks" / "studies" / "campaign.py")
PAIRS = [[1000 + k, 2000 + k] for k in range(12)]


def test_the_candidate_is_the_gamma_the_best_trials_took_at_the_most_points():
    points = [
        ("p1", {0.05: 0.01, 0.1: 0.0}),
        ("p2", {0.05: 0.0, 0.1: 0.002}),
        ("p3", {0.1: 0.0, 0.2: 0.03}),
    ]
    assert gamma_to_take.candidate(points) == 0.1
    # a tie goes to the gamma whose worst shortfall is smaller
    assert gamma_to_take.candidate(points[:2]) == 0.1
    assert gamma_to_take.candidate([("p", {0.05: 0.0}), ("q", {0.1: 0.0, 0.05: 0.02})]) == 0.05


def test_a_declaration_is_written_once(tmp_path):
    rows = {"mars-adamw": [("campaign-3/tiny/b64-4x", {0.1: 0.0, 0.05: 0.02})]}
    path = tmp_path / "gamma-to-take.json"
    assert gamma_to_take.declare(rows, path)
    assert json.loads(path.read_text())["candidates"] == {"mars-adamw": 0.1}
    assert not gamma_to_take.declare({"mars-adamw": [("x", {0.2: 0.0})]}, path)
    assert json.loads(path.read_text())["candidates"] == {"mars-adamw": 0.1}


def _report(folder: Path, finals: list[float], gamma: float | None = None) -> None:
    folder.mkdir(parents=True)
    entry = {"optimizer": "mars-adamw", "finished": True, "heldout_pairs": PAIRS}
    entry["heldout_finals"] = finals
    if gamma is not None:
        entry["winner"] = {"lr": 0.01, "beta1": 0.9, "gamma": gamma}
    (folder / "tune.json").write_text(json.dumps({"optimizers": [entry]}))


def test_on_pairs_the_candidate_holds_fails_holds_by_construction_or_waits(tmp_path):
    points = [{"model": "m", "point": p, "optimizers": ["mars-adamw"]} for p in "abcd"]
    design = {"pairs": {"first_stage": 12, "cap": 64}}
    design["verdict"] = {"alpha": 0.05, "margin": 0.005, "looks": "two"}
    (tmp_path / "campaign.json").write_text(json.dumps({"points": points, **design}))
    declared = {"declared": "2026-12-07", "candidates": {"mars-adamw": 0.1}}
    (tmp_path / "gamma-to-take.json").write_text(
        json.dumps({**declared, "campaign": "campaign.json"})
    )
    winner = [1.70 + 0.0004 * (k % 3) for k in range(12)]
    _report(tmp_path / "m" / "a", winner, gamma=0.1)  # the winner takes the candidate
    _report(tmp_path / "m" / "b", winner, gamma=0.2)  # the candidate 0.001 behind
    _report(
        tmp_path / "m" / "b.gamma=0.1.mars-adamw",
        [w + 0.001 + 0.0002 * (k % 2) for k, w in enumerate(winner)],
    )
    _report(tmp_path / "m" / "c", winner, gamma=0.025)  # the candidate 0.03 behind
    _report(
        tmp_path / "m" / "c.gamma=0.1.mars-adamw",
        [w + 0.03 + 0.0002 * (k % 2) + 0.06 * (k == 5) for k, w in enumerate(winner)],
    )  # its run on the sixth pair diverged: counted, kept in the mean
    lines = gamma_to_take.pair_reading(tmp_path / "gamma-to-take.json")
    rows = {
        line.split(" | ")[0].removeprefix("| "): line for line in lines if line.startswith("| m/")
    }
    assert rows["m/a"].endswith("| holds (the winner's) |")
    assert rows["m/b"].endswith("| holds |") and "| -0.0011 [" in rows["m/b"]
    assert rows["m/c"].endswith("| win (provisional) | 0, 1 | fails |")
    assert rows["m/d"].endswith("| pending | — | pending |")  # not read: its winner unknown
    assert "Holm over the 3 comparisons realised (1 hold by construction" in " ".join(lines)
    assert lines[-1] == (
        "- mars-adamw, gamma 0.1, over 4 points: holds at 2, fails at 1, pending at 1; not 0.1: "
        "more than 0.005 behind the winner at 1."
    )


def test_the_campaign_trains_a_candidate_only_where_the_winner_takes_another_gamma(
    toy_campaign, capsys
):
    folder, called = toy_campaign.folder, toy_campaign.called
    points = ["--points", "tiny/b16-1x", "tiny/b16-4x"]
    with pytest.raises(SystemExit) as both:  # one gamma a command: a usage error, exit 2
        campaign.main(["--campaign", "campaign-4", "--gamma0", "--gamma-to-take", *points])
    assert both.value.code == 2 and called == []
    with pytest.raises(SystemExit) as undeclared:
        campaign.main(["--campaign", "campaign-4", "--gamma-to-take", *points])
    assert undeclared.value.code == 2 and "declares no gamma to take yet" in capsys.readouterr().err
    candidates = {"mars-adamw": 0.1, "mars-shampoo": 0.05}
    (folder / "gamma-to-take.json").write_text(json.dumps({"candidates": candidates}))
    for point, gammas in (("b16-1x", (0.2, 0.05)), ("b16-4x", (0.1, 0.05))):
        entries = [
            {"optimizer": rule, "finished": True, "winner": {"lr": 0.01, "beta1": 0.9, "gamma": g}}
            for rule, g in zip(candidates, gammas, strict=True)
        ]
        (folder / "tiny" / point).mkdir(parents=True)
        (folder / "tiny" / point / "tune.json").write_text(json.dumps({"optimizers": entries}))
    assert campaign.main(["--campaign", "campaign-4", "--gamma-to-take", *points]) == 0
    [argv] = called  # MARS-AdamW at b16-1x: the only winner away from its candidate
    text = " ".join(argv)
    assert "--fixed beta1=0.9 gamma=0.1 " in text and "--optimizers mars-adamw " in text
    assert "--name b16-1x.gamma=0.1.mars-adamw" in text and "--trials 12 " in text


def test_a_winner_at_its_start_is_tallied_with_whether_the_search_tried_both_sides(
    tmp_path, monkeypatch
):
    searched = {
        "a": {"mars-adamw": (0.1, [(0.1, 1.0), (0.05, 1.1), (0.2, 1.2), (0.1, 0.9)])},
        "b": {"mars-adamw": (0.1, [(0.1, 1.0), (0.05, 1.1), (0.1, float("nan"))])},
        "c": {"mars-adamw": (0.1, [(0.1, 1.0), (0.2, 0.8)])},
    }
    monkeypatch.setattr(gamma_to_take, "searched_gammas", lambda folder: searched[folder.name])
    monkeypatch.setattr(gamma_to_take, "CAMPAIGN", tmp_path / "campaign-4")
    winners = {"a": 0.1, "b": 0.1, "c": 0.2}
    monkeypatch.setattr(gamma_to_take, "winner_gamma", lambda root, point, rule: winners[point[-1]])
    folders = [(f"campaign-3/m/{p}", tmp_path / p) for p in "abc"]
    lines = gamma_to_take.start_table(folders)
    assert "| mars-adamw | campaign-3/m/a | 0.1 | 0.1 | 0.1 | 1 / 2 / 1 |" in lines
    assert "| mars-adamw | campaign-3/m/b | 0.1 | 0.1 | 0.1 | 1 / 2 / 0 |" in lines
    assert "| mars-adamw | campaign-3/m/c | 0.1 | 0.2 | 0.2 | 0 / 1 / 1 |" in lines
    assert (
        "- mars-adamw: the winner took the start at 2 of 3 points; at 1 of those the search "
        "had scored gammas on both sides of it."
    ) in lines


def test_shortfalls_are_read_from_finite_scores_against_the_best():
    scored = [(0.1, 1.0), (0.05, 1.25), (0.2, float("nan")), (0.1, 0.75)]
    assert gamma_to_take.shortfalls(scored) == {0.05: 0.5, 0.1: 0.0}
    assert gamma_to_take.shortfalls([(0.1, float("inf"))]) == {}


def test_a_fixed_gamma_read_trains_on_the_points_machine_and_thread_count_or_not_at_all(
    toy_campaign, monkeypatch, capsys
):
    folder, called = toy_campaign.folder, toy_campaign.called
    monkeypatch.setattr(campaign, "this_machine", lambda jobs: f"cpu · {3 - jobs} thread(s)")
    entry = {"optimizer": "mars-adamw", "finished": True, "heldout_pairs": PAIRS}
    entry |= {"heldout_finals": [1.7] * 12, "heldout_machines": ["cpu · 1 thread(s)"] * 12}
    entry["winner"] = {"lr": 0.01, "beta1": 0.9, "gamma": 0.1}
    (folder / "tiny" / "b16-1x").mkdir(parents=True)
    (folder / "tiny" / "b16-1x" / "tune.json").write_text(json.dumps({"optimizers": [entry]}))
    command = ["--campaign", "campaign-4", "--gamma0", "--points", "tiny/b16-1x"]
    with pytest.raises(SystemExit) as other_threads:  # a usage error: one line, exit 2
        campaign.main([*command, "--jobs", "1"])
    assert other_threads.value.code == 2 and called == []
    assert "--jobs 1: this command trains on cpu · 2 thread" in capsys.readouterr().err
    assert campaign.main([*command, "--jobs", "2"]) == 0
    assert "--overwrite" not in called[0]
    # a study whose pairs trained at another thread count reads no pair: trained afresh
    old = campaign.fixed_gamma_folder(folder, "tiny/b16-1x", "mars-adamw", 0.0)
    old.mkdir()
    at_two = {**entry, "heldout_machines": ["cpu · 2 thread(s)"] * 12}
    (old / "tune.json").write_text(json.dumps({"optimizers": [at_two]}))
    [line] = campaign.unpaired_lines("campaign-4")  # said in state.md, with the command
    assert line.startswith("- b16-1x.gamma=0.mars-adamw: not read; its pairs trained on cpu · 2")
    assert "--points tiny/b16-1x --gamma0" in line
    storage = open_storage(f"journal:{old / 'study.log'}")
    optuna.create_study(study_name=old.name, storage=storage).add_trial(
        optuna.trial.create_trial(params={}, distributions={}, value=1.0)
    )
    assert campaign.main([*command, "--jobs", "2"]) == 0
    assert len(called) == 2
    reopened = open_storage(f"journal:{old / 'study.log'}")
    assert old.name not in optuna.get_all_study_names(reopened)  # its runs are not reused
