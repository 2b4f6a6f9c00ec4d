"""The fight map's protocol (the lab's `lab.fight_map`, which
benchmarks/studies/fight_map.py runs) and its reports (`lab.map_report`):
every point's study at the map's budget, a second search with another order seed in its own
folder outside the map's verdicts, and the second model's studies with the same protocol at
its own size (steps from its parameters)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import optuna
import pytest
from PIL import Image

from benchmark_scripts import BENCHMARKS, load_benchmark_script
from lab import fight_map, map_report
from torch_mars.train.study.store import restore_journals, snapshot_journals, stored_study
from torch_mars.train.study.tune_record import TUNE_RECORD_FORMAT, OptimizerEntry, TuneRecord

MAP = fight_map.FightMap(BENCHMARKS.parent)
second_model = load_benchmark_script("studies/second_model.py")


def _flags(arguments: list[str]) -> dict[str, str]:
    return {a: b for a, b in itertools.pairwise(arguments) if a.startswith("--")}


def test_a_second_search_lives_beside_its_point_with_its_order_seed():
    first = _flags(MAP.tune_arguments("b64-4x", 2, 40))
    second = _flags(MAP.tune_arguments("b64-4x", 2, 40, order_seed=1))
    assert first["--order-seed"] == "0" and second["--order-seed"] == "1"
    assert first["--storage"].endswith("fight-map/b64-4x/study.log")
    assert second["--storage"].endswith("fight-map/b64-4x/order-seed-1/study.log")
    assert second["--name"] == "order-seed-1" and first["--name"] == "b64-4x"
    # the same runs otherwise: budget, seeds, data orders, validation set
    for flag in ("--steps", "--batch-size", "--trials", "--eval-tokens", "--heldout-data-seeds"):
        assert first[flag] == second[flag], flag
    assert first["--finalists"] == second["--finalists"] == "4"


def test_the_second_model_keeps_the_protocol_at_four_times_the_parameters():
    tiny = _flags(MAP.tune_arguments("b16-4x", 2, 40))
    wide = _flags(
        MAP.tune_arguments(
            "b16-4x",
            2,
            16,
            study=second_model.FOLDER / "b16-4x",
            model=second_model.MODEL,
            data="corpus.txt",
            optimizers=second_model.ADAM_PAIR,
        )
    )
    ratio = fight_map.non_embedding_parameters("tiny-w64") / fight_map.non_embedding_parameters()
    assert 3.9 < ratio < 4.1
    assert abs(int(wide["--steps"]) / int(tiny["--steps"]) - ratio) < 0.01
    assert wide["--model"] == "tiny-w64" and wide["--data"] == "corpus.txt"
    assert wide["--storage"].endswith("second-model/b16-4x/study.log")
    for flag in ("--batch-size", "--eval-tokens", "--seeds", "--heldout-seeds", "--finalists"):
        assert wide[flag] == tiny[flag], flag


def test_the_map_figure_draws_every_finished_comparison(tmp_path):
    rows = [
        {"point": "b64-4x", "rule": "mars-adamw", "control": "nadamw", "gap": -0.008,
         "interval": [-0.017, 0.001]},
        {"point": "b16-4x", "rule": "mars-adamw", "control": "adamw", "gap": 0.002,
         "interval": [-0.004, 0.008]},
        {"point": "b256-16x", "rule": "mars-shampoo", "control": "muon", "gap": 0.004,
         "interval": [-0.002, 0.010]},
    ]  # fmt: skip
    path = map_report.plot_map(rows, tmp_path / "map.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 10_000
    with Image.open(path) as image:
        assert image.mode == "P"  # stored with a palette: a third of the RGBA file


def test_another_budget_extends_the_points_study_and_reports_beside_it():
    at_80 = MAP.budget_folder("b64-4x", 80)
    extended = _flags(MAP.tune_arguments("b64-4x", 2, 80, reports_in=at_80))
    own = _flags(MAP.tune_arguments("b64-4x", 2, 40))
    assert MAP.budget_folder("b64-4x", fight_map.FIRST_TRIALS) is None
    assert MAP.budget_folder("b64-4x", fight_map.TRIALS) == at_80
    assert extended["--storage"] == own["--storage"] and extended["--name"] == own["--name"]
    assert extended["--out-dir"].endswith("fight-map/b64-4x/trials-80")
    assert own["--out-dir"].endswith("fight-map") and extended["--trials"] == "80"


def test_each_rule_reads_its_points_report_with_the_most_trials(tmp_path):
    """A budget extended for the Shampoo pair replaces that pair's verdict only."""

    def record(trials, verdicts, names=("nadamw", "mars-adamw", "muon", "mars-shampoo")):
        return {"trials": trials, "optimizers": [{"optimizer": n, "trials": trials} for n in names],
                "cost": {"cpu": {"runs": 10, "hours": 1.0}}, "verdicts": verdicts}  # fmt: skip

    def verdict(rule, gap):
        control = "muon" if rule == "mars-shampoo" else "nadamw"
        return {"rule": rule, "control": control, "gap": gap, "interval": [gap - 0.01, gap + 0.01],
                "p": 0.5, "pairs": 6}  # fmt: skip

    point = tmp_path / "b64-4x"
    (point / "trials-80" / "b64-4x").mkdir(parents=True)
    at_40 = record(40, [verdict("mars-adamw", -0.01), verdict("mars-shampoo", 0.0)])
    at_80 = record(80, [verdict("mars-shampoo", -0.009)], names=("muon", "mars-shampoo"))
    (point / "tune.json").write_text(json.dumps(at_40))
    (point / "trials-80" / "b64-4x" / "tune.json").write_text(json.dumps(at_80))
    assert [t for t, _ in map_report.point_reports("b64-4x", tmp_path)] == [40, 80]
    rows = {r["rule"]: r for r in map_report.map_rows(tmp_path)}
    assert rows["mars-adamw"]["gap"] == -0.01 and rows["mars-adamw"]["trials"]["nadamw"] == 40
    assert rows["mars-shampoo"]["gap"] == -0.009 and rows["mars-shampoo"]["trials"]["muon"] == 80


def test_the_map_table_gives_each_points_runs_and_run_hours():
    row = {"point": "b64-4x", "rule": "mars-adamw", "control": "nadamw", "gap": -0.0079,
           "interval": [-0.0166, 0.0008], "p": 0.0676, "pairs": 6,
           "trials": {"nadamw": 40, "mars-adamw": 40}, "runs": 630, "hours": 4.41}  # fmt: skip
    (line,) = map_report.format_map([row]).splitlines()[2:]
    assert line.endswith("| inconclusive | 40 | 630 (4.4) |")


def _outcome(name, winner, finals, finished=True, selection=(1.7, 1.7)):
    pairs = [[s, d] for d in (1, 2) for s in (3, 4, 5)]
    return {"optimizer": name, "finished": finished, "winner": winner,
            "heldout_pairs": pairs, "heldout_finals": finals,
            "selection_finals": list(selection)}  # fmt: skip


def _record(*outcomes, selection=None):
    """A study's record of these optimizer entries (dicts as ``tune.json`` holds them)."""
    return TuneRecord(
        path=Path("tune.json"),
        format=TUNE_RECORD_FORMAT,
        trials=0,
        selection=selection or {},
        optimizers=tuple(OptimizerEntry(**o) for o in outcomes),
        verdicts=(),
    )


def test_two_searches_pooled_take_each_optimizers_better_chosen_winner():
    """Each optimizer's winner is the one its choosing seeds prefer (never the held-out runs),
    and the verdicts are read on those with seed and data order crossed. Hand-computed: MARS-
    Shampoo - Muon = -0.01, -0.03, -0.02 on seeds 3, 4, 5, the same on both data orders, so
    all the spread is the seeds': mean -0.02, seed means' variance 0.0001, standard error
    sqrt(0.0001 / 3) = 0.005774 on 2 degrees of freedom, t(2) 4.3027 gives -0.02 +- 0.02484,
    which holds 0 (as six independent pairs it would not: -0.02 +- 0.00939)."""
    base = [1.70, 1.71, 1.72, 1.70, 1.71, 1.72]
    ahead = [b - d for b, d in zip(base, [0.01, 0.03, 0.02, 0.01, 0.03, 0.02], strict=True)]
    first = _record(
        _outcome("muon", {"lr": 1}, base, selection=(1.6, 1.7)),
        _outcome("mars-shampoo", {"lr": 1}, base, selection=(1.7, 1.7)),
    )
    second = _record(
        _outcome("muon", {"lr": 2}, ahead, selection=(1.7, 1.7)),
        _outcome("mars-shampoo", {"lr": 2}, ahead, selection=(1.6, 1.6)),
    )
    source, (verdict,) = map_report.pooled_verdicts(first, second)  # fmt: skip
    assert source == {"muon": "first", "mars-shampoo": "second"}
    assert verdict.rule == "mars-shampoo" and verdict.control == "muon"
    assert verdict.decision == "inconclusive"
    assert abs(verdict.gap.mean + 0.02) < 1e-12
    assert abs(verdict.gap.low - (-0.02 - 4.3027 * 0.0057735)) < 1e-4
    assert abs(verdict.gap.high - (-0.02 + 4.3027 * 0.0057735)) < 1e-4
    text = map_report.format_pooled(source, [verdict])
    assert "muon from the first, mars-shampoo from the second" in text
    assert "(seed x data order)" in text
    assert "| mars-shampoo | muon | " in text and text.endswith("| inconclusive |")


def test_a_second_search_holds_where_its_crossed_interval_holds_zero():
    """Hand-computed: second - first = 0.019, 0.021, 0.020 on seeds 3, 4, 5 of data order 1 and
    0.021, 0.019, 0.020 of order 2: seed and order means all 0.02, so only the residual mean
    square is left, 4e-6 / 2 = 2e-6 on 2 degrees of freedom; the mean's standard error is
    sqrt(2e-6 / 6) = 0.000577 and t(2) 4.3027 gives 0.02 +- 0.002484: it does not hold 0."""
    base = [1.70, 1.71, 1.72, 1.70, 1.71, 1.72]
    worse = [b + d for b, d in zip(base, [0.019, 0.021, 0.020, 0.021, 0.019, 0.020], strict=True)]
    noisy = [b + d for b, d in zip(base, [0.01, -0.01, 0.02, -0.02, 0.0, 0.005], strict=True)]
    first = _record(_outcome("adamw", {"lr": 0.01}, base),
                    _outcome("muon", {"lr": 0.02}, base),
                    _outcome("nadamw", {"lr": 0.01}, base),
                    _outcome("mars-adamw", {"lr": 0.01}, base))  # fmt: skip
    running = _outcome("mars-adamw", {"lr": 0.02}, noisy, finished=False)
    second = _record(_outcome("adamw", {"lr": 0.03}, worse),
                     _outcome("muon", {"lr": 0.02}, base),
                     _outcome("nadamw", {"lr": 0.015}, noisy), running)  # fmt: skip
    rows = {r["optimizer"]: r for r in map_report.second_against_first(first, second)}
    assert set(rows) == {"adamw", "muon", "nadamw"}  # an unfinished search is left out
    assert abs(rows["adamw"]["gap"].mean - 0.02) < 1e-12
    assert abs(rows["adamw"]["gap"].high - (0.02 + 4.3027 * 0.00057735)) < 1e-5
    assert not rows["adamw"]["holds"]
    assert rows["muon"]["same_point"] and rows["muon"]["holds"]
    assert rows["nadamw"]["holds"]
    text = map_report.format_second_against_first("heading", list(rows.values()))
    assert "| muon | 1.7100 ± 0.0089 | 1.7100 ± 0.0089 | the same point | yes |" in text


def test_start_independence_pairs_each_second_search_budget_with_the_firsts(tmp_path):
    """A second search extended to more trials is checked against the first search at the
    same trials, at each budget both ran; a budget only the second ran is left out."""
    base = [1.70, 1.71, 1.72, 1.70, 1.71, 1.72]
    better = [b - 0.01 for b in base]

    def write(path, trials, finals, lr):
        path.parent.mkdir(parents=True, exist_ok=True)
        outcomes = [_outcome("muon", {"lr": lr}, finals), _outcome("mars-shampoo", {"lr": 1}, base)]
        path.write_text(json.dumps({"trials": trials, "optimizers": outcomes}))

    point = tmp_path / "b64-4x"
    write(point / "tune.json", 40, base, 1)
    write(point / "trials-80" / "b64-4x" / "tune.json", 80, better, 2)
    second = point / "order-seed-1"
    write(second / "tune.json", 40, base, 3)
    write(second / "trials-80" / "order-seed-1" / "tune.json", 80, better, 4)
    write(second / "trials-120" / "order-seed-1" / "tune.json", 120, better, 5)
    sections = map_report.start_independence_sections("b64-4x", tmp_path)
    assert len(sections) == 4  # each budget's check and its pooled verdicts, 40 and 80
    assert sections[0].startswith("Start independence at b64-4x, 40 trials: a second search")
    assert sections[2].startswith("Start independence at b64-4x, 80 trials: a second search")
    for check in (sections[0], sections[2]):  # the same finals at each budget: a zero gap
        assert "| muon | " in check and "+0.0000 [+0.0000, +0.0000] | yes |" in check
    assert sections[1].startswith("Both searches pooled") and "120" not in "".join(sections)


@pytest.mark.parametrize("extra", [["--with", "gamma"], ["--with", "betas", "(0.9,0.9)"]])
def test_a_ridge_probe_refuses_a_setting_without_values_or_moved_twice(extra, monkeypatch, capsys):
    edge_probe = load_benchmark_script("studies/edge_probe.py")
    argv = ["edge_probe.py", "b16-4x", "mars-shampoo", "betas", "(0.99,0.95)", *extra]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as stopped:
        edge_probe.main()
    assert stopped.value.code == 2
    assert f"--with {extra[1]}: a setting not moved yet, then its values" in capsys.readouterr().err


def test_a_ridge_probe_refuses_a_winner_chosen_on_several_data_orders(monkeypatch):
    """A sweep runs every seed on one data order: a winner whose finalists read others cannot
    be probed on the runs that chose it, so the probe says so rather than run on order 0."""
    edge_probe = load_benchmark_script("studies/edge_probe.py")
    selection = {"seeds": [0], "finalists": 4, "final_seeds": [1, 2], "final_data_seeds": [4, 5]}
    record = _record({"optimizer": "muon", "finished": True}, selection=selection)
    monkeypatch.setattr(edge_probe, "point_reports", lambda point, folder: [(40, record)])
    with pytest.raises(ValueError, match=r"chosen on data orders 0 and \[4, 5\]: a probe"):
        edge_probe.winner_at("b64-4x", "muon")


def _live_tune_study(live):
    """A live tune journal at ``live``: Muon's 3 selection runs finished, MARS-Shampoo's first
    still training."""
    import optuna

    from torch_mars.train.study.store import open_storage

    study = optuna.create_study(
        study_name="b64-4x", storage=open_storage(f"journal:{live}"), direction="minimize"
    )
    selection = {"seeds": [0, 1, 2], "finalists": 1, "final_seeds": [6, 7]}
    search = {"kind": "tune", "optimizers": ["muon", "mars-shampoo"], "trials": 2,
              "selection": selection}  # fmt: skip
    study.set_user_attr("identity", {"search": search})
    for seed, cost_s in zip((0, 1, 2), (60.0, 90.0, 3600.0), strict=True):  # the last paused
        study.enqueue_trial({}, user_attrs={"optimizer": "muon", "seed": seed, "cost_s": cost_s})
        study.tell(study.ask(), 1.7)
    study.enqueue_trial({}, user_attrs={"optimizer": "mars-shampoo", "seed": 0})
    study.ask()  # training: not finished


def _toy_tune_study(folder: Path, *args: str) -> Path:
    """A tune study of adamw on ``harness_helpers.lr_bowl`` (a bowl in the lr alone) in
    ``folder/b64-4x/study.log``, every dimension but the lr held: 6 trials on one selection
    seed, its 4 best on one more seed, 2 held-out runs (12 runs at least, by the protocol)."""
    from torch_mars.cli import main

    live = folder / "b64-4x" / "study.log"
    held = ["beta1=0.9", "beta2=0.95", "weight_decay=0.01", "lr_1d_ratio=1", "weight_decay_1d=0"]
    main(["tune", "--objective", "harness_helpers:lr_bowl", "--optimizers", "adamw",
          "--trials", "6", "--seeds", "0", "--finalists", "4", "--final-seeds", "3",
          "--heldout-seeds", "1", "2", "--heldout-data-seeds", "1", "--fixed", *held,
          "--out-dir", str(folder), "--name", "b64-4x", "--storage", f"journal:{live}",
          *args])  # fmt: skip
    return live


def test_the_status_counts_each_studys_finished_runs_against_its_replayed_plan(tmp_path):
    """A study's plan per optimizer is its search replayed on the stored runs: at least the
    protocol's 6 + 4 + 2 = 12 while it runs, exactly what it trained once finished (here 10:
    the lr alone moves, and fewer than 4 points are finalists), so a finished study has no runs
    left; the runs left cost the median run's cost; nothing is written."""
    from torch_mars.train.study.outcomes import median_run_seconds

    live = _toy_tune_study(tmp_path, "--max-trials", "3")
    before = sorted(p.name for p in live.parent.iterdir())
    (row,) = map_report.progress_rows(tmp_path)
    assert row["study"] == "b64-4x" and row["runs"] == {"adamw": 3}
    assert row["planned"] == {"adamw": 12} and row["runs_left"] == 9
    trials, _, _ = stored_study(live.parent)
    assert row["hours_left"] == pytest.approx(9 * median_run_seconds(trials) / 3600)
    assert "| b64-4x | adamw 3/12 | 0.0 | 9 |" in map_report.format_progress([row])
    assert sorted(p.name for p in live.parent.iterdir()) == before
    _toy_tune_study(tmp_path)  # finished
    (row,) = map_report.progress_rows(tmp_path)
    assert row["runs"] == {"adamw": 10} and row["planned"] == {"adamw": 10}
    assert row["runs_left"] == 0


def test_the_status_of_a_clean_checkout_reads_each_study_from_its_snapshot(tmp_path):
    """A clean checkout holds only ``study.log.gz``: the status counts that study's runs as
    the live journal did, and writes no live journal beside it."""
    live = _toy_tune_study(tmp_path, "--max-trials", "3")
    (from_live,) = map_report.progress_rows(tmp_path)
    snapshot_journals(tmp_path)
    live.unlink()
    (from_snapshot,) = map_report.progress_rows(tmp_path)
    assert from_snapshot == from_live and from_snapshot["runs"] == {"adamw": 3}
    assert not live.exists()


def test_a_stored_study_reads_the_same_from_its_snapshot_as_from_its_live_journal(tmp_path):
    """A finished point's study is read from its live journal or, where that is gone, from its
    study.log.gz; neither file is changed."""
    live = tmp_path / "b64-4x" / "study.log"
    _live_tune_study(live)
    snapshot_journals(tmp_path / "b64-4x")
    from_live = stored_study(live.parent)
    live.rename(tmp_path / "kept.log")
    from_snapshot = stored_study(live.parent)
    assert not live.exists()
    for trials, identity, _ in (from_live, from_snapshot):
        assert [t.value for t in trials] == [1.7, 1.7, 1.7, None]
        assert identity["search"]["optimizers"] == ["muon", "mars-shampoo"]
    restore_journals(tmp_path)  # the live journal, missing, starts from its snapshot
    assert live.read_bytes() == (tmp_path / "kept.log").read_bytes()


def test_a_study_whose_live_journal_is_missing_resumes_from_its_snapshot(tmp_path):
    """A clean checkout holds only ``study.log.gz``: a command that opens the study to write
    (tune, sweep) starts from the snapshot, so it resumes rather than beginning anew beside its
    own runs (the further-pair sweeps once did); a live journal is never replaced by it, and a
    study with neither file starts empty."""
    from torch_mars.train.study.store import StorageError, open_storage

    live = tmp_path / "b64-4x" / "study.log"
    _live_tune_study(live)
    snapshot_journals(tmp_path)
    kept = live.read_bytes()
    live.unlink()
    storage = open_storage(f"journal:{live}")
    (study,) = storage.get_all_studies()
    resumed = optuna.load_study(study_name=study.study_name, storage=storage)
    assert live.read_bytes() == kept and len(resumed.trials) == 4
    # a live journal stands, whatever the snapshot beside it holds
    (tmp_path / "b64-4x" / "study.log.gz").write_bytes(b"not read")
    open_storage(f"journal:{live}")
    assert live.read_bytes() == kept
    assert not open_storage(f"journal:{tmp_path / 'new' / 'study.log'}").get_all_studies()
    assert sorted(p.name for p in live.parent.iterdir()) == ["study.log", "study.log.gz"]
    live.unlink()  # a snapshot that is not gzip: one line naming it, nothing written
    with pytest.raises(StorageError, match=r"its snapshot study\.log\.gz cannot be unpacked"):
        open_storage(f"journal:{live}")
    assert sorted(p.name for p in live.parent.iterdir()) == ["study.log.gz"]


def test_the_second_models_status_prints_its_own_studies_and_runs_nothing(
    tmp_path, monkeypatch, capsys
):
    live = _toy_tune_study(tmp_path, "--max-trials", "3")
    before = sorted(p.name for p in live.parent.iterdir())
    capsys.readouterr()
    monkeypatch.setattr(second_model, "FOLDER", tmp_path)
    monkeypatch.setattr(sys, "argv", ["second_model.py", "--status"])
    assert second_model.main() == 0
    assert "| b64-4x | adamw 3/12 |" in capsys.readouterr().out
    assert sorted(p.name for p in live.parent.iterdir()) == before


def test_an_ablation_reads_the_winner_of_the_most_trials_and_pairs_its_runs(tmp_path):
    """The ablation retrains the 80-trial winner on its held-out pairs, one sweep per data
    order; each ablated point is a paired gap to the winner as retrained (hand-computed: +0.01,
    +0.03, +0.02, +0.02: mean +0.02) and to the control."""
    fight_ablation = load_benchmark_script("studies/fight_ablation.py")
    pairs = [[3, 1], [4, 1], [3, 2], [4, 2]]
    winner = {"lr": 0.05, "gamma": 0.1}

    def record(trials, lr):
        outcome = {"optimizer": "mars-adamw", "finished": True, "trials": trials,
                   "hyperparams": {**winner, "lr": lr}, "heldout_pairs": pairs,
                   "heldout_finals": [1.70, 1.71, 1.72, 1.73]}  # fmt: skip
        control = {"optimizer": "nadamw", "finished": True, "trials": trials,
                   "heldout_pairs": pairs, "heldout_finals": [1.72, 1.72, 1.72, 1.72]}  # fmt: skip
        return {"trials": trials, "budget": {"steps": 10}, "optimizers": [outcome, control],
                "verdicts": [{"rule": "mars-adamw", "control": "nadamw"}]}  # fmt: skip

    point = tmp_path / "b64-4x"
    (point / "trials-80" / "b64-4x").mkdir(parents=True)
    (point / "tune.json").write_text(json.dumps(record(40, 0.03)))
    (point / "trials-80" / "b64-4x" / "tune.json").write_text(json.dumps(record(80, 0.05)))
    found = fight_ablation.winner_of("b64-4x", "mars-adamw", tmp_path)
    assert found["trials"] == 80 and found["hyperparams"]["lr"] == 0.05
    assert fight_ablation.data_seeds("b64-4x", "mars-adamw", tmp_path) == [1, 2]
    ablated = [1.71, 1.74, 1.74, 1.75]
    for data_seed, rows in ((1, (0, 1)), (2, (2, 3))):
        points = [
            {"hyperparams": {**winner, "clip": clip},
             "finals": {str(pairs[i][0]): finals[i] for i in rows}}
            for clip, finals in ((True, [1.70, 1.71, 1.72, 1.73]), (False, ablated))
        ]  # fmt: skip
        folder = point / fight_ablation.sweep_name("mars-adamw", "", data_seed)
        folder.mkdir()
        (folder / "sweep.json").write_text(json.dumps({"points": points}))
    rows = fight_ablation.ablation_rows("b64-4x", "mars-adamw", tmp_path)
    (own,) = [r for r in rows if r["winner"]]
    (off,) = [r for r in rows if not r["winner"]]
    assert own["finals"] == [1.70, 1.71, 1.72, 1.73] and off["values"]["clip"] is False
    assert abs(off["to_winner"].mean - 0.02) < 1e-12
    assert abs(off["to_control"].mean - (sum(ablated) / 4 - 1.72)) < 1e-12
    text = fight_ablation.format_ablation("b64-4x", "mars-adamw", rows, tmp_path)
    assert "(80 trials)" in text and "tune study's runs: 0." in text
    assert "| the winner |" in text


def test_an_ablation_sweeps_each_data_order_on_its_held_out_seeds():
    fight_ablation = load_benchmark_script("studies/fight_ablation.py")
    flags = _flags(fight_ablation.sweep_arguments("b64-4x", "mars-adamw", "", 2, 1))
    assert flags["--data-seed"] == "2" and flags["--eval-tokens"] == "131072"
    assert flags["--name"] == "ablate-mars-adamw-data2"
    assert flags["--storage"].endswith("fight-map/b64-4x/ablate-mars-adamw-data2/study.log")


def _write_edge_probe(point, optimizer, winner, probed):
    """A point's 80-trial report with ``optimizer``'s winner (its hyperparameters and finals on
    selection seeds 0-2, data order 0), and its edge probe's sweep record of ``probed``
    (hyperparameters and finals per point), in the folder the probe's settings name."""
    hyperparams, finals = winner
    selection = {"seeds": [0, 1, 2], "heldout": [3], "data_seed": 0, "heldout_data_seeds": [1],
                 "finalists": 0, "final_seeds": []}  # fmt: skip
    outcome = {"optimizer": optimizer, "finished": True, "trials": 80,
               "hyperparams": hyperparams, "selection_finals": finals}  # fmt: skip
    record = {"trials": 80, "budget": {"steps": 10}, "selection": selection,
              "optimizers": [outcome]}  # fmt: skip
    folder = point / "-".join(["edge", optimizer, *hyperparams])
    folder.mkdir(parents=True)
    (point / "tune.json").write_text(json.dumps(record))
    points = [
        {"hyperparams": values, "finals": dict(zip("012", runs, strict=True))}
        for values, runs in probed
    ]
    (folder / "sweep.json").write_text(json.dumps({"points": points}))


def test_an_edge_probe_reads_only_the_selection_runs_and_pairs_them(tmp_path):
    """An edge probe retrains the winner of the most trials with one setting past the ladder's
    end on the seeds that chose it (data order 0, no held-out run), its own value first; each
    probed value is a paired gap to the report's runs (hand-computed: -0.01, -0.02, 0.0: mean
    -0.01)."""
    edge_probe = load_benchmark_script("studies/edge_probe.py")
    flags = edge_probe.sweep_arguments("b64-4x", "nadamw", {"betas": ["(0.85,0.8)"]}, 1)
    assert "nadamw:betas=(0.85,0.9),(0.85,0.8)" in flags
    assert flags[flags.index("--seeds") + 1 : flags.index("--jobs")] == list("012678")
    assert _flags(flags)["--data-seed"] == "0" and "--heldout-seeds" not in flags
    assert _flags(flags)["--storage"].endswith("fight-map/b64-4x/edge-nadamw-betas/study.log")

    _write_edge_probe(
        tmp_path / "b64-4x",
        "nadamw",
        winner=({"betas": [0.85, 0.9]}, [1.75, 1.76, 1.74]),
        probed=[({"betas": [0.85, 0.9]}, [1.75, 1.76, 1.74]),
                ({"betas": [0.85, 0.8]}, [1.74, 1.74, 1.74])],
    )  # fmt: skip
    text = edge_probe.format_probe("b64-4x", "nadamw", ["betas"], tmp_path)
    assert "| (0.85,0.9) | 1.7500 | retrained: largest difference 0 | 3 |" in text
    assert "| (0.85,0.8) | 1.7400 | -0.0100 [" in text
    with pytest.raises(ValueError, match="not 'gamma'"):
        edge_probe.sweep_arguments("b64-4x", "nadamw", {"gamma": ["0.1"]}, 1)


def test_a_ridge_probe_moves_two_settings_together_in_one_grid(tmp_path):
    """``--with`` moves a second setting beside the first: the grid holds every combination,
    the winner's own values first; the table has a column per setting and pairs each
    combination with the winner's runs (hand-computed: -0.01, -0.03, -0.02: mean -0.02)."""
    edge_probe = load_benchmark_script("studies/edge_probe.py")
    moves = {"betas": ["(0.99,0.95)"], "gamma": ["0.025"]}
    flags = edge_probe.sweep_arguments("b16-4x", "mars-shampoo", moves, 1)
    assert "mars-shampoo:betas=(0.98,0.95),(0.99,0.95)" in flags
    assert "mars-shampoo:gamma=0.05,0.025" in flags
    assert _flags(flags)["--name"] == "edge-mars-shampoo-betas-gamma"

    _write_edge_probe(
        tmp_path / "b16-4x",
        "mars-shampoo",
        winner=({"betas": [0.98, 0.95], "gamma": 0.05}, [1.66, 1.65, 1.66]),
        probed=[({"betas": [0.98, 0.95], "gamma": 0.05}, [1.66, 1.65, 1.66]),
                ({"betas": [0.99, 0.95], "gamma": 0.025}, [1.65, 1.62, 1.64])],
    )  # fmt: skip
    text = edge_probe.format_probe("b16-4x", "mars-shampoo", ["betas", "gamma"], tmp_path)
    assert "(80 trials, betas (0.98,0.95), gamma 0.05) against betas and gamma" in text
    assert "| betas | gamma | mean | - winner [95% interval] | seeds |" in text
    assert "| (0.98,0.95) | 0.05 | 1.6567 | retrained: largest difference 0 | 3 |" in text
    assert "| (0.99,0.95) | 0.025 | 1.6367 | -0.0200 [" in text


def _winners_report(trials, outcomes, verdicts=()):
    """A ``tune.json`` record of ``(optimizer, finished, lr)`` outcomes (gamma 0.1 beside)."""
    return {"trials": trials, "verdicts": list(verdicts), "optimizers": [
        {"optimizer": n, "finished": done, "trials": trials, "winner": {"lr": lr, "gamma": 0.1}}
        for n, done, lr in outcomes]}  # fmt: skip


def test_the_second_models_winners_stand_beside_tinys_from_its_most_trials(tmp_path):
    """tiny's winner comes from the report with the most trials that finished it (NAdamW's at
    80, MARS-AdamW's at 40 where the 80-trial study has not finished it); an optimizer the
    second model has not finished gets a dash."""
    report = _winners_report
    first, second = tmp_path / "fight-map", tmp_path / "second-model"
    (first / "b16-4x" / "trials-80" / "b16-4x").mkdir(parents=True)
    (second / "b16-4x").mkdir(parents=True)
    at_40 = report(40, [("nadamw", True, 0.005), ("mars-adamw", True, 0.0256)])
    at_80 = report(80, [("nadamw", True, 0.0076), ("mars-adamw", False, 0.1)])
    (first / "b16-4x" / "tune.json").write_text(json.dumps(at_40))
    (first / "b16-4x" / "trials-80" / "b16-4x" / "tune.json").write_text(json.dumps(at_80))
    mine = report(16, [("nadamw", True, 0.00506), ("mars-adamw", False, 0.01)])
    (second / "b16-4x" / "tune.json").write_text(json.dumps(mine))
    lines = second_model.beside_first_model("b16-4x", second, first).splitlines()
    assert "| nadamw (80 / 16 trials) | lr | 0.0076 | 0.00506 |" in lines
    assert "|  | gamma | 0.1 | 0.1 |" in lines
    assert "| mars-adamw | — | finished at 40 trials | not finished |" in lines


def test_the_second_models_report_writes_each_points_winners_and_its_holm_verdicts(
    tmp_path, monkeypatch
):
    """The report step (tune's own report stubbed: it is tested with tune) writes
    beside-tiny.md at the point and verdicts.md over the model's comparisons."""
    checkout = fight_map.FightMap(tmp_path)
    first, second = checkout.folder, tmp_path / "second-model"
    verdict = {"rule": "mars-adamw", "control": "nadamw", "gap": -0.02, "interval": [-0.03, -0.01],
               "p": 0.004, "pairs": 6}  # fmt: skip
    for folder, trials in ((first, 80), (second, 16)):
        (folder / "b16-4x").mkdir(parents=True)
        outcomes = [(n, True, 0.01) for n in ("nadamw", "mars-adamw")]
        record = _winners_report(trials, outcomes, [verdict])
        (folder / "b16-4x" / "tune.json").write_text(json.dumps(record))
    monkeypatch.setattr(second_model, "MAP", checkout)
    monkeypatch.setattr(second_model, "FOLDER", second)
    monkeypatch.setattr(second_model, "torch_mars", lambda arguments: 0)
    monkeypatch.setattr(sys, "argv", ["second_model.py", "--report", "--points", "b16-4x"])
    assert second_model.main() == 0
    assert (
        "| nadamw (80 / 16 trials) | lr | 0.01 | 0.01 |"
        in (second / "b16-4x" / "beside-tiny.md").read_text()
    )
    verdicts = (second / "verdicts.md").read_text()
    assert "Holm over its 1 comparison(s)" in verdicts and "| Holm (model) |" in verdicts
    (row,) = verdicts.splitlines()[4:]
    assert row.startswith("| b16-4x | mars-adamw | nadamw |") and "| win |" in row
