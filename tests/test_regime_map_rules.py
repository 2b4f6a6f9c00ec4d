"""The regime map's batch rules (benchmarks/studies/regime_map.py): fitted on every batch but
the test batch, they recover a power law of lr and a line of gamma in log2(batch), and say
whether the prediction falls inside the test batch's tuned good-lr band; the robustness table
says how far each optimizer has got, the map gives each gap seed by seed, and a point whose
study holds no run gets no report."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load_benchmark_script


@pytest.fixture(scope="module")
def regime_map():
    return load_benchmark_script("studies/regime_map.py")


def _row(batch: int, lr: float, gamma: float, band: tuple[float, float]) -> dict:
    return {
        "rule": "mars-adamw",
        "multiple": 4,
        "batch": batch,
        "lr": lr,
        "gamma": gamma,
        "lr_band": band,
    }


def test_a_power_law_of_lr_and_a_log_line_of_gamma_are_recovered(regime_map):
    test_batch = regime_map.TEST_BATCH
    rows = [
        _row(
            b,
            0.002 * b**0.5,
            0.02 * (b.bit_length() - 1),
            (0.002 * b**0.5 / 1.2, 0.002 * b**0.5 * 1.2),
        )
        for b in (16, 64, test_batch, 256)
    ]
    text = regime_map.batch_rules(rows)
    line = next(line for line in text.splitlines() if line.startswith("- mars-adamw"))
    assert "lr = 0.002 * B^+0.50" in line
    assert "gamma = 0 +0.02 * log2(B)" in line
    assert f"predicts lr {0.002 * test_batch**0.5:.3g}, inside" in line
    assert f"gamma {0.02 * 7:.3g} against" in line


def test_a_prediction_outside_the_tuned_band_is_said_to_be(regime_map):
    rows = [_row(b, 0.01, 0.05, (0.009, 0.011)) for b in (16, 64, 256)]
    rows.append(_row(regime_map.TEST_BATCH, 0.03, 0.05, (0.025, 0.035)))
    assert "predicts lr 0.01, outside the tuned band 0.025-0.035" in regime_map.batch_rules(rows)


def test_a_power_law_that_misses_its_own_fitted_batches_says_where(regime_map):
    """Flat lr from 4 to 16, then linear in batch: a power law fitted through all of it passes
    outside the small and the large batches' own bands."""
    rows = [
        _row(4, 0.0256, 0.05, (0.0171, 0.0384)),
        _row(16, 0.0171, 0.05, (0.0171, 0.0384)),
        _row(64, 0.0384, 0.05, (0.0384, 0.0577)),
        _row(256, 0.195, 0.05, (0.13, 0.292)),
        _row(regime_map.TEST_BATCH, 0.0865, 0.05, (0.0577, 0.0865)),
    ]
    line = regime_map.batch_rules(rows).splitlines()[1]
    assert "its lr misses its own fitted batches' bands at 4 (0.0151, band 0.0171-0.0384)" in line
    assert "64 (0.0601, band 0.0384-0.0577), 256 (0.12, band 0.13-0.292))" in line
    assert "16 (" not in line


def test_a_power_law_through_its_own_bands_claims_no_miss(regime_map):
    rows = [_row(b, 0.002 * b**0.5, 0.05, (0.0015 * b**0.5, 0.0025 * b**0.5)) for b in (4, 16, 64)]
    assert "misses" not in regime_map.batch_rules(rows)


def test_fewer_than_two_fit_batches_give_no_rule(regime_map):
    rows = [_row(64, 0.01, 0.05, (0.009, 0.011)), _row(regime_map.TEST_BATCH, 0.01, 0.05, None)]
    assert "fewer than two batches to fit" in regime_map.batch_rules(rows)


def test_a_gap_is_read_in_the_larger_of_the_two_stds(regime_map, tmp_path, monkeypatch):
    """Three control seeds that agree to 0.0007 do not make a 0.01 gap thirteen std."""

    def entry(name, finals, **extra):
        return {
            "optimizer": name,
            "finished": True,
            "heldout_finals": finals,
            "winner": {"lr": 0.01, **extra},
            "good_lr_band": None,
            "runs": 10,
            "heldout_failures": 0,
        }

    found = [
        entry("muon", [1.7021, 1.7035, 1.7032]),
        entry("mars-shampoo", [1.7135, 1.7212, 1.7022], gamma=0.05),
    ]
    (tmp_path / "b128-4x").mkdir()
    (tmp_path / "b128-4x" / "tune.json").write_text(json.dumps({"optimizers": found}))
    monkeypatch.setattr(regime_map, "FOLDER", tmp_path)
    (row,) = regime_map.map_rows()
    assert row["control"] == "muon"
    assert row["gap_sd"] == pytest.approx(row["gap"] / row["rule_heldout"][1])
    assert 0.9 < row["gap_sd"] < 1.1


def test_a_prediction_at_a_band_edge_within_the_ladders_rounding_is_inside(regime_map):
    rows = [_row(64, 0.0384, 0.05, (0.0384, 0.0577)), _row(256, 0.195, 0.05, (0.13, 0.292))]
    rows.append(_row(regime_map.TEST_BATCH, 0.0865, 0.05, (0.0577, 0.0865)))
    assert "inside the tuned band 0.0577-0.0865" in regime_map.batch_rules(rows)


def test_the_robustness_table_tells_an_unbegun_optimizer_from_an_unfinished_one(
    regime_map, monkeypatch
):
    finished = {
        "optimizer": "adamw",
        "finished": True,
        "runs": 40,
        "heldout_failures": 0,
        "heldout_finals": [1.6, 1.61, 1.62],
        "good_lr_band": [0.01, 0.03],
    }
    running = {"optimizer": "muon", "finished": False, "runs": 12}
    first_point = next(iter(regime_map.POINTS))
    monkeypatch.setattr(
        regime_map,
        "point_outcomes",
        lambda point: {"adamw": finished, "muon": running} if point == first_point else None,
    )
    row = next(line for line in regime_map.robustness_table().splitlines() if first_point in line)
    cells = dict(zip(regime_map.OPTIMIZERS, row.strip("|").split("|")[1:], strict=True))
    assert cells["adamw"].strip() == "0/3, 3x"
    assert cells["muon"].strip() == "unfinished"
    assert cells["mars-shampoo"].strip() == "not started"


def test_a_point_whose_journal_holds_no_run_gets_no_report(regime_map, monkeypatch, tmp_path):
    import optuna

    from torch_mars.train.study.store import open_storage

    monkeypatch.setattr(regime_map, "FOLDER", tmp_path)
    point = "b16-8x"
    assert not regime_map.has_runs(point)
    storage = open_storage(f"journal:{tmp_path / point / 'study.log'}")
    optuna.create_study(study_name="another point", storage=storage).add_trial(
        optuna.trial.create_trial(value=1.5)
    )
    assert not regime_map.has_runs(point)
    study = optuna.create_study(study_name=point, storage=storage)
    assert not regime_map.has_runs(point)
    study.add_trial(optuna.trial.create_trial(value=1.5))
    assert regime_map.has_runs(point)


def test_the_map_gives_the_gap_to_the_strongest_control_seed_by_seed(regime_map, monkeypatch):
    def outcome(name: str, finals: list[float]) -> dict:
        winner = {"lr": 0.02, "gamma": 0.05} if name.startswith("mars") else {"lr": 0.02}
        return {
            "optimizer": name,
            "finished": True,
            "runs": 40,
            "heldout_finals": finals,
            "heldout_failures": 0,
            "good_lr_band": [0.01, 0.03],
            "winner": winner,
        }

    finals = {
        "adamw": [1.70, 1.71, 1.72],
        "nadamw": [1.60, 1.62, 1.64],
        "mars-adamw": [1.61, 1.61, 1.60],
        "muon": [1.50, 1.50, 1.50],
        "mars-shampoo": [1.51, 1.52, 1.53],
    }
    first_point = next(iter(regime_map.POINTS))
    monkeypatch.setattr(
        regime_map,
        "point_outcomes",
        lambda point: (
            {n: outcome(n, f) for n, f in finals.items()} if point == first_point else None
        ),
    )
    rows = {r["rule"]: r for r in regime_map.map_rows()}
    assert rows["mars-adamw"]["control"] == "nadamw"
    assert rows["mars-adamw"]["by_seed"] == pytest.approx([0.01, -0.01, -0.04])
    assert rows["mars-shampoo"]["by_seed"] == pytest.approx([0.01, 0.02, 0.03])
    table = regime_map.format_map(list(rows.values()))
    assert "| +0.0100 / -0.0100 / -0.0400 |" in table
    assert len({line.count("|") for line in table.splitlines()}) == 1
