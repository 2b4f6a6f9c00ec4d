"""The family of comparisons, declared before a study's first run: Holm runs over all of it
(a comparison not read yet is pending, p taken as 1, and the others' words provisional); a
study keeps the family it declared and refuses a command line that would add a comparison;
and a campaign's table and each point's own report give every comparison the same word."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from lab.campaigns import format_campaign_table

from torch_mars.train.study.family import Comparison, campaign_family, decide
from torch_mars.train.study.family_reads import campaign_rows
from torch_mars.train.study.outcomes import OptimizerOutcome, sibling_gaps, verdicts
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.tune import FAMILY_ATTR, TunePlan, declare_family
from torch_mars.train.study.tune_report import report_json
from torch_mars.train.study.verdict import PairedGap, student_t_quantile
from torch_mars.train.trainer import TrainConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)


def gap(mean: float, p: float) -> PairedGap:
    """A gap on 12 pairs whose standard error agrees with its p value."""
    error = abs(mean) / student_t_quantile(p, 11) if mean else 0.0045
    return PairedGap(mean, mean - 0.01, mean + 0.01, p, 12, error, 11)


def test_holm_runs_over_the_whole_family_and_pending_comparisons_make_the_rest_provisional():
    a, b, c = (Comparison("mars-adamw", ("nadamw",), s) for s in ("x", "y", "z"))
    # with three comparisons declared, p 0.02 is no win (0.02 > 0.05 / 3) even alone
    decided = decide([a, b, c], {a: gap(-0.01, 0.02)})
    assert decided[a].word == "inconclusive" and decided[a].provisional
    assert decided[b].word == decided[c].word == "pending"
    # a family of one would have called it a win: the declared family is what decides
    assert decide([a], {a: gap(-0.01, 0.02)})[a].word == "win"
    final = decide([a, b, c], {a: gap(-0.01, 0.001), b: gap(0.02, 0.01), c: gap(0.0, 0.9)})
    assert [final[k].text() for k in (a, b, c)] == ["win", "loss", "inconclusive"]


def plan(optimizers: tuple[str, ...], tmp_path: Path, **settings) -> TunePlan:
    return TunePlan(TrainConfig(model="tiny"), optimizers, PROTOCOL, tmp_path / "s", **settings)


def test_a_study_keeps_the_family_it_declared_before_its_first_run(tmp_path):
    study = optuna.create_study()
    declare_family(study, plan(("nadamw", "mars-adamw"), tmp_path))
    stored = study.user_attrs[FAMILY_ATTR]
    assert stored == {"scope": "", "family": [
        {"scope": "", "rule": "mars-adamw", "controls": ["nadamw"]},
    ]}  # fmt: skip
    declare_family(study, plan(("mars-adamw",), tmp_path))  # fewer: its comparison pending
    with pytest.raises(ValueError, match="does not change mid-study"):
        declare_family(study, plan(("nadamw", "mars-adamw", "muon", "mars-shampoo"), tmp_path))
    assert study.user_attrs[FAMILY_ATTR] == stored


def test_a_late_declaration_covers_every_optimizer_the_study_has_runs_of(tmp_path):
    study = optuna.create_study()
    for name in ("muon", "mars-shampoo"):  # a pair tuned first, before families were declared
        study.add_trial(optuna.trial.create_trial(value=2.0, user_attrs={"optimizer": name}))
    declare_family(study, plan(("adamw", "nadamw", "mars-adamw"), tmp_path))
    keys = [r["rule"] for r in study.user_attrs[FAMILY_ATTR]["family"]]
    assert sorted(keys) == ["mars-adamw", "mars-shampoo"]


def declaration(tmp_path: Path) -> Path:
    path = tmp_path / "campaign" / "campaign.json"
    path.parent.mkdir()
    family = [
        {"model": "tiny", "point": p, "rule": "mars-adamw", "controls": ["nadamw"]}
        for p in ("b64-4x", "b16-4x")
    ]
    path.write_text(json.dumps({"family": family}))
    return path


def outcome(name: str, offset: float, wobble: float = 0.0) -> OptimizerOutcome:
    """Held-out finals on the 12 pairs: seed and data-order effects, ``wobble`` of noise."""
    finals = [
        2.0 + offset + 0.001 * (i % 4) + 0.0005 * (i // 4) + wobble * (-1) ** i * (i % 3)
        for i in range(12)
    ]
    return OptimizerOutcome(name, True, {}, [2.0], [2.0], finals, 0, [], winner_score=2.0)


def test_a_campaign_point_refuses_a_comparison_its_declaration_lacks(tmp_path):
    path = declaration(tmp_path)
    point = plan(("nadamw", "mars-adamw", "muon", "mars-shampoo"), tmp_path, family_file=path)
    point = TunePlan(**{**point.__dict__, "study_dir": path.parent / "tiny" / "b64-4x"})
    with pytest.raises(ValueError, match="mars-shampoo vs muon"):
        declare_family(optuna.create_study(), point)


def test_each_point_and_the_campaign_table_give_every_comparison_the_same_word(tmp_path):
    path = declaration(tmp_path)
    family = campaign_family(path)
    pairs = PROTOCOL.heldout_pairs()
    leads = {"tiny/b64-4x": -0.02, "tiny/b16-4x": 0.0004}
    for scope, lead in leads.items():  # each point reports in turn, the second seeing the first
        folder = path.parent / scope
        folder.mkdir(parents=True)
        found = [outcome("nadamw", 0.0), outcome("mars-adamw", lead, wobble=0.003)]
        point = TunePlan(
            TrainConfig(model="tiny"), ("nadamw", "mars-adamw"), PROTOCOL, folder, family_file=path
        )
        read = verdicts(
            found,
            pairs=pairs,
            family=family,
            scope=scope,
            others=sibling_gaps(folder, family, scope),
        )
        (folder / "tune.json").write_text(json.dumps(report_json(point, found, (), read)))
    rows = campaign_rows(path)
    assert [row.decision.word for row in rows] == ["win", "inconclusive"]
    assert not any(row.decision.provisional for row in rows)
    last = json.loads((path.parent / "tiny" / "b16-4x" / "tune.json").read_text())["verdicts"]
    assert [v["decision"] for v in last] == [rows[1].decision.word]
    assert "| tiny/b64-4x | mars-adamw | nadamw |" in format_campaign_table(rows)
    # each point's diverged runs per side and B reach the campaign's table
    assert rows[0].diverged == (0, 0) and rows[0].bias is None
    assert "| win (provisional) |" not in format_campaign_table(rows)
    assert "| win | 0, 0 | — |" in format_campaign_table(rows)
    first = path.parent / "tiny" / "b64-4x" / "tune.json"
    report = json.loads(first.read_text())
    report["verdicts"][0]["bias"] = -0.0021  # as a point that read peers' winners records it
    first.write_text(json.dumps(report))
    assert "| win | 0, 0 | -0.0021 |" in format_campaign_table(campaign_rows(path))


def test_a_control_at_a_fixed_gamma_is_the_rule_itself_and_any_other_is_refused(tmp_path):
    from torch_mars.train.study.family import fixed_gamma
    from torch_mars.train.study.family_reads import fixed_gamma_folder

    assert fixed_gamma("mars-adamw@gamma=0", "mars-adamw") == 0.0
    assert fixed_gamma("mars-adamw@gamma=0.1", "mars-adamw") == 0.1
    for control in ("mars-shampoo@gamma=0.1", "mars-adamw@gamma=-1", "mars-adamw@gamma=x"):
        assert fixed_gamma(control, "mars-adamw") is None, control
    # the study a fixed gamma is read from sits beside the point's; gamma = 0's name unchanged
    assert fixed_gamma_folder(tmp_path, "tiny/b16-1x", "mars-adamw", 0.0).name == (
        "b16-1x.gamma=0.mars-adamw"
    )
    assert fixed_gamma_folder(tmp_path, "tiny/b16-1x", "mars-adamw", 0.05).name == (
        "b16-1x.gamma=0.05.mars-adamw"
    )
    family = [
        {"model": "m", "point": "p", "rule": "mars-adamw", "controls": ["mars-adamw@gamma=0.1"]},
        {"model": "m", "point": "p", "rule": "mars-adamw", "controls": ["mars-lion@gamma=0"]},
    ]
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps({"family": family[:1]}))
    assert campaign_family(path) == [Comparison("mars-adamw", ("mars-adamw@gamma=0.1",), "m/p")]
    path.write_text(json.dumps({"family": family}))
    with pytest.raises(ValueError, match=r"comparison 2 .*mars-lion@gamma=0.*itself at a fixed"):
        campaign_family(path)
