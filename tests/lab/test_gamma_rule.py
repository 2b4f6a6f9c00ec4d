"""The gamma rule's fit (benchmarks/studies/gamma_rule.py): a plane in log2 batch and log2
tokens through three winners predicts a fourth on that plane exactly, in ladder steps, and a
gamma of 0 (no log) is said, not fitted."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmark_scripts import load_script

rule = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "studies" / "gamma_rule.py")


def test_three_winners_on_a_plane_predict_the_fourth_on_it():
    # gamma one ladder step up per 4x batch, lr one 1.5x step up per 4x batch, beta1 fixed
    def winner(batch, multiple):
        steps = math.log2(batch) / 2
        return rule.Winner(batch, multiple, gamma=[0.025, 0.05, 0.1, 0.2, 0.4][int(steps) - 1],
                           lr=1e-3 * 1.5 ** (10 + steps), beta1=0.9)  # fmt: skip

    fit = [winner(16, 4), winner(64, 4), winner(256, 16)]
    predicted = rule.predict(fit, 4, 4)
    truth = winner(4, 4).targets()
    for name in ("gamma (ladder step)", "lr (1.5x step)", "log2 gamma/(1-beta1)"):
        assert predicted[name] == pytest.approx(truth[name], abs=0.51), name


def test_a_gamma_of_zero_is_not_fitted_in_log_space():
    fit = [
        rule.Winner(b, 4, gamma=g, lr=0.01, beta1=0.9)
        for b, g in ((16, 0.0), (64, 0.1), (256, 0.2))
    ]
    assert math.isnan(rule.predict(fit, 4, 4)["log2 gamma/(1-beta1)"])


def test_a_fitted_gamma_past_the_ladder_is_named_as_such():
    assert rule.gamma_at(2.2) == "0.05"
    assert rule.gamma_at(7.4) == "0.4 (past the ladder's end)"
    assert rule.gamma_at(-1.0) == "0 (past the ladder's end)"


def test_the_rule_says_what_its_plane_tells_a_gpt2_small_user_and_where_it_runs_out(monkeypatch):
    """On a plane where gamma climbs one ladder step per 4x batch, 512 sequences a step lands
    half a step past 256's gamma, and 524,288 tokens a step (16,384 of `tiny`'s sequences)
    past the ladder's top, said so."""
    gammas = {16: 0.05, 64: 0.1, 256: 0.2}

    def winner_of(label, _rule):
        batch, multiple = rule.POINTS[label.split("/", 1)[1]]
        return rule.Winner(batch, multiple, gamma=gammas[batch], lr=0.01, beta1=0.9) if (
            batch in gammas) else None  # fmt: skip

    monkeypatch.setattr(rule, "winner_of", winner_of)
    text = rule.rule_text(["tiny/b64-4x", "tiny/b16-4x", "tiny/b256-16x"], "tiny/b4-4x")
    assert "| mars-adamw | gamma (ladder step) | 1.0 | not read | — |" in text
    assert "| mars-shampoo | 512 sequences a step | 4.5 | 0.2 |" in text
    assert "| mars-adamw | 524,288 tokens a step | 7.0 | 0.4 (past the ladder's end) |" in text
    assert "fitted on 16-256 sequences" in text


def test_the_prediction_committed_before_b4_4x_is_scored_from_its_report():
    """Scored from the stored reports (training nothing): the lr lands, gamma does not
    (MARS-AdamW two ladder steps off, MARS-Shampoo one), and the stored file says the same."""
    text = rule.rule_text(["tiny/b64-4x", "tiny/b16-4x", "tiny/b256-16x"], "tiny/b4-4x")
    assert "| mars-adamw | gamma (ladder step) | 3.0 | 1.0 | 2.0 |" in text
    assert "| mars-adamw | lr (1.5x step) | 5.0 | 5.0 | 0.0 |" in text
    assert "| mars-shampoo | gamma (ladder step) | 1.0 | 2.0 | 1.0 |" in text
    assert (rule.CAMPAIGN / "gamma-rule.md").read_text() == text + "\n"
