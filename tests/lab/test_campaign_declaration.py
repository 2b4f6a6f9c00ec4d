"""A campaign is declared before its first run and never changes mid-way: each committed
campaign.json is exactly what campaign.py declares for it (every point of tiny's map in its
order, the second model's two, the first stage, the family Holm runs over, its search design),
and an edited declaration is refused before anything runs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from lab.fight_map import FightMap

from benchmark_scripts import load_script
from torch_mars.train.study.tune import DEFAULT_SEARCH

ROOT = Path(__file__).resolve().parents[2]
campaign = load_script(ROOT / "benchmarks" / "studies" / "campaign.py")


@pytest.mark.parametrize("name", ["campaign", "campaign-2"])
def test_each_committed_declaration_is_the_declared_campaign(name):
    stored = campaign.check_declaration(name)
    assert stored["protocol"].startswith(f"--search {campaign.CAMPAIGNS[name]} ")
    labels = [f"{p['model']}/{p['point']}" for p in stored["points"]]
    assert labels[:9] == [f"tiny/{p}" for p in (
        "b64-4x", "b16-4x", "b256-16x", "b128-16x", "b4-4x", "b128-4x", "b256-4x", "b16-1x",
        "b16-8x",
    )]  # fmt: skip
    assert labels[9:] == ["tiny-w64/b16-4x", "tiny-w64/b64-4x"]
    assert stored["first_stage"] == [
        "tiny/b64-4x", "tiny/b16-4x", "tiny/b256-16x", "tiny/b4-4x", "tiny-w64/b64-4x",
    ]  # fmt: skip
    assert len(stored["family"]) == 10 and stored["trials"] == 40


def test_the_current_campaign_runs_tunes_default_search():
    assert campaign.CAMPAIGNS[campaign.CURRENT] == DEFAULT_SEARCH


def test_an_edited_declaration_is_refused_before_any_run(tmp_path, monkeypatch):
    edited = json.loads(campaign.declaration_of(campaign.CURRENT).read_text())
    edited["family"] = edited["family"][:1]  # a family cut down after the results
    folder = tmp_path / "benchmarks" / "results" / campaign.CURRENT
    folder.mkdir(parents=True)
    (folder / "campaign.json").write_text(json.dumps(edited))
    monkeypatch.setattr(campaign, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="differs from the campaign this script declares"):
        campaign.main(["--stage", "1"])


def test_a_campaigns_point_takes_the_runs_the_other_studies_there_trained():
    entry = {"model": "tiny", "point": "b64-4x", "data": "stdlib", "optimizers": ["adamw"]}
    arguments = campaign.arguments_of("campaign-3", entry, jobs=2, report=False)
    donors = arguments[arguments.index("--reuse-runs") + 1 : arguments.index("--model")]
    assert "benchmarks/results/fight-map/b64-4x" in donors
    assert "benchmarks/results/campaign-2/tiny/b64-4x" in donors
    assert "benchmarks/results/campaign-3/tiny/b64-4x" not in donors  # the study itself
    # a report trains nothing and takes nothing
    assert "--reuse-runs" not in campaign.arguments_of("campaign-3", entry, jobs=2, report=True)


def test_a_runs_cost_per_step_and_per_token_is_fitted_from_two_or_more_points():
    a, b = 0.008, 8e-6  # seconds a step, seconds a token
    runs = [(s, k, a * s + b * k) for s, k in ((966, 1_978_368), (3864, 1_978_368))]
    assert campaign.fit_run_cost(runs) == pytest.approx((a, b))
    assert campaign.fit_run_cost(runs[:1]) is None


def test_the_points_not_begun_are_costed_from_the_begun_points_of_their_model(monkeypatch):
    """b4-4x's 300 runs at the cost the begun points of `tiny` fit (each point's median run,
    so one run stretched by a pause does not move it); the second model, with no point begun,
    is said unknown."""
    import optuna

    from torch_mars.train.study.engine import RUN_COST_ATTR

    a, b = 0.008, 8e-6

    def stored(folder):
        steps, tokens = campaign.run_budget(f"tiny/{folder.name}")
        costs = [a * steps + b * tokens] * 4 + [10 * (a * steps + b * tokens)]
        runs = [optuna.trial.create_trial(value=1.0, user_attrs={RUN_COST_ATTR: c}) for c in costs]
        return runs, {}, []

    monkeypatch.setattr(campaign, "stored_study", stored)
    declared = campaign.declared("campaign-3")
    begun, waiting = ["tiny/b64-4x", "tiny/b16-4x"], ["tiny/b4-4x", "tiny-w64/b64-4x"]
    text = campaign.waiting_text("campaign-3", declared, begun, waiting)
    steps, tokens = campaign.run_budget("tiny/b4-4x")
    hours = 300 * (a * steps + b * tokens) / 3600
    assert f"| tiny/b4-4x | 300 | {hours:.1f} | 8.0 ms a step + 8.00 µs a token" in text
    assert "| tiny-w64/b64-4x | 240 | — | fewer than two begun points of tiny-w64 |" in text


def test_a_point_of_a_model_not_yet_begun_is_priced_by_its_earlier_study_at_that_budget(
    monkeypatch, tmp_path
):
    import optuna

    from torch_mars.train.study.engine import RUN_COST_ATTR

    earlier = tmp_path / "benchmarks" / "results" / "second-model"
    (earlier / "b64-4x").mkdir(parents=True)
    (earlier / "b64-4x" / "study.log.gz").write_bytes(b"")
    steps, _ = campaign.run_budget("tiny-w64/b64-4x")

    def stored(folder):
        runs = [
            optuna.trial.create_trial(value=1.0, user_attrs={RUN_COST_ATTR: c})
            for c in (100.0, 120.0, 600.0)
        ]
        return runs, {"budget": {"steps": steps if folder.parent == earlier else 1}}, []

    monkeypatch.setattr(campaign, "stored_study", stored)
    monkeypatch.setattr(campaign, "ROOT", tmp_path)
    monkeypatch.setattr(campaign, "EARLIER_STUDIES", {"tiny-w64": earlier})
    text = campaign.earlier_estimate("tiny-w64/b64-4x", 240)
    assert text.startswith(f"{240 * 120 / 3600:.1f} | the median run of second-model/b64-4x")
    assert "(2.0 min, wall time)" in text
    # another budget there, or no earlier study, says unknown
    monkeypatch.setattr(campaign, "run_budget", lambda label: (steps + 1, 0))
    assert campaign.earlier_estimate("tiny-w64/b64-4x", 240).startswith("— | fewer than two")
    assert campaign.earlier_estimate("tiny-w64/b16-4x", 240).startswith("— | fewer than two")


def test_campaign_4_declares_its_pairs_and_two_looks_before_its_first_run():
    stored = campaign.check_declaration("campaign-4")
    pairs = stored["pairs"]["declared"]
    assert len(pairs) == 64 == stored["pairs"]["cap"] and stored["pairs"]["first_stage"] == 12
    seeds, orders = [s for s, _ in pairs], [o for _, o in pairs]
    assert len(set(seeds)) == 64 and len(set(orders)) == 64 and min(seeds + orders) >= 1000
    assert len(stored["family"]) == 44  # 11 points x (2 controls + 2 without the correction)
    assert sum("@gamma=0" in e["controls"][0] for e in stored["family"]) == 22


def test_a_second_look_extends_the_declared_pairs_and_plans_from_the_spread(monkeypatch):
    from torch_mars.train.study.family import Comparison, Decision
    from torch_mars.train.study.family_reads import CampaignRow
    from torch_mars.train.study.verdict import PairedGap

    protocol = campaign.protocol_at("campaign-4", "tiny/b16-8x", {"muon": 12, "nadamw": 20})
    listed, fewer = protocol.split(" --pairs ")[1].split(" --pairs-read ")
    assert listed.split() == [f"{s}:{o}" for s, o in campaign.declared_pairs()[:20]]
    assert fewer == "muon=12"  # a second look widens only its sides
    declared, pairs = campaign.protocol_of("campaign-4").split(" --pairs ")
    # the declaration's "opponent": each side at its best-known setting
    entry = next(e for e in campaign.declared("campaign-4")["points"] if e["point"] == "b16-8x")
    assert campaign.protocol_at(
        "campaign-4", "tiny/b16-8x", campaign.counts_at("campaign-4", entry)
    ) == (f"{declared} --peer-winners on --stable-winners off --pairs {pairs}")
    old = campaign.arguments_of("campaign-3", campaign.declared("campaign-3")["points"][0], 2, True)
    assert old[old.index("--peer-winners") + 1] == "off"  # its winners were its searches' own
    scope = "tiny/b16-8x"
    noisy = PairedGap(-0.003, -0.01, 0.004, 0.3, 12, 0.003, 11, ((-0.003, 0.003, 12),))
    clear = PairedGap(-0.02, -0.03, -0.01, 0.0001, 12, 0.002, 11, ((-0.02, 0.002, 12),))
    rows = [
        CampaignRow(Comparison("mars-adamw", ("nadamw",), scope), "nadamw", noisy,
                    Decision("inconclusive", False, -0.012, 0.006, 0.05 / 44)),
        CampaignRow(Comparison("mars-shampoo", ("muon",), scope), "muon", clear,
                    Decision("win", False, -0.03, -0.01, 0.05 / 44)),
    ]  # fmt: skip
    monkeypatch.setattr(campaign, "campaign_rows", lambda declaration: rows)
    planned = campaign.second_look_counts("campaign-4", entry)
    # the inconclusive one plans more pairs for its two sides; the win's sides and the
    # bystander keep their first 12
    assert 12 < planned["mars-adamw"] == planned["nadamw"] <= 64
    assert planned["adamw"] == planned["muon"] == planned["mars-shampoo"] == 12


def test_the_corrections_worth_reads_the_rule_against_itself_at_gamma_0_on_the_points_pairs(
    tmp_path, monkeypatch
):
    from torch_mars.train.study.family import Comparison
    from torch_mars.train.study.family_reads import fixed_gamma_folder, stored_verdicts

    pairs = [[1000 + k, 2000 + k] for k in range(4)]
    point = {
        "optimizers": [
            {"optimizer": "mars-adamw", "finished": True, "heldout_pairs": pairs,
             "heldout_finals": [1.70, 1.71, 1.69, 1.70],
             "winner": {"lr": 0.0865, "beta1": 0.9, "beta2": 0.95, "gamma": 0.1}},
            {"optimizer": "nadamw", "heldout_pairs": pairs,
             "heldout_finals": [1.72, 1.72, 1.71, 1.73]},
        ],
        "verdicts": [{"rule": "mars-adamw", "control": "nadamw", "pairs": 4}],
    }  # fmt: skip
    (tmp_path / "tiny" / "b16-1x").mkdir(parents=True)
    (tmp_path / "tiny" / "b16-1x" / "tune.json").write_text(json.dumps(point))
    without = fixed_gamma_folder(tmp_path, "tiny/b16-1x", "mars-adamw", 0.0)
    without.mkdir()
    (without / "tune.json").write_text(json.dumps({"optimizers": [
        {"optimizer": "mars-adamw", "heldout_pairs": pairs,
         "heldout_finals": [1.705, 1.716, 1.694, 1.707]}]}))  # fmt: skip
    control = Comparison("mars-adamw", ("adamw", "nadamw"), "tiny/b16-1x")
    worth = Comparison("mars-adamw", ("mars-adamw@gamma=0",), "tiny/b16-1x")
    read = stored_verdicts(tmp_path, [control, worth])
    assert read[control][1] == "nadamw" and read[control][0].mean == pytest.approx(-0.02)
    assert read[worth][1] == "mars-adamw@gamma=0"
    assert read[worth][0].mean == pytest.approx(-0.0055)  # what the correction bought here

    monkeypatch.setattr(campaign, "folder_of", lambda name: tmp_path)
    monkeypatch.setattr(campaign, "MAP", FightMap(tmp_path))
    entry = {"model": "tiny", "data": "stdlib", "point": "b16-1x", "optimizers": ["mars-adamw"]}
    arguments = campaign.fixed_gamma_arguments("campaign-4", entry, "mars-adamw", 0.0, 1, False)
    text = " ".join(arguments)
    assert "--report" not in arguments  # trains; only report=True reports
    assert "--report" in campaign.fixed_gamma_arguments(
        "campaign-4", entry, "mars-adamw", 0.0, 1, True
    )
    assert (
        "--fixed beta1=0.9 beta2=0.95 gamma=0.0 " in text and "lr=" not in text.split("--model")[0]
    )
    assert (
        "--optimizers mars-adamw --trials 12 " in text
        and "--name b16-1x.gamma=0.mars-adamw" in text
    )


def test_campaign_4_declares_two_looks_at_a_margin_of_0_005():
    """The design campaign-4's family file declares, as its verdicts read it."""
    from torch_mars.train.study.two_stage import Design, design_of

    declared = json.loads((ROOT / "benchmarks/results/campaign-4/campaign.json").read_text())
    assert design_of(declared) == Design(alpha=0.05, margin=0.005, first=12, cap=64)


def test_a_rule_widened_by_a_second_look_is_read_against_gamma_0_on_the_pairs_both_read(
    tmp_path, monkeypatch
):
    from torch_mars.train.study.family import Comparison
    from torch_mars.train.study.family_reads import fixed_gamma_folder, stored_verdicts

    pairs = [list(p) for p in campaign.declared_pairs()[:14]]
    finals = [1.70, 1.71, 1.69, 1.70] * 3
    point = {"optimizers": [
        {"optimizer": "mars-adamw", "finished": True, "heldout_pairs": pairs,
         "heldout_finals": [*finals, 1.60, 1.60],
         "winner": {"lr": 0.0865, "beta1": 0.9, "beta2": 0.95, "gamma": 0.1}},
        {"optimizer": "adamw", "finished": True, "heldout_pairs": pairs[:12],
         "heldout_finals": [1.72] * 12},
    ]}  # fmt: skip
    (tmp_path / "tiny" / "b16-1x").mkdir(parents=True)
    (tmp_path / "tiny" / "b16-1x" / "tune.json").write_text(json.dumps(point))
    without = fixed_gamma_folder(tmp_path, "tiny/b16-1x", "mars-adamw", 0.0)
    without.mkdir()
    (without / "tune.json").write_text(json.dumps({"optimizers": [
        {"optimizer": "mars-adamw", "heldout_pairs": pairs[:12],
         "heldout_finals": [1.705, 1.716, 1.694, 1.707] * 3}]}))  # fmt: skip
    worth = Comparison("mars-adamw", ("mars-adamw@gamma=0",), "tiny/b16-1x")
    [(gap, _)] = stored_verdicts(tmp_path, [worth]).values()
    assert gap.pairs == 12 and gap.mean == pytest.approx(-0.0055)  # the last two not read

    monkeypatch.setattr(campaign, "folder_of", lambda name: tmp_path)
    monkeypatch.setattr(campaign, "MAP", FightMap(tmp_path))
    entry = {"model": "tiny", "data": "stdlib", "point": "b16-1x",
             "optimizers": ["adamw", "mars-adamw"]}  # fmt: skip
    assert campaign.counts_at("campaign-4", entry) == {"adamw": 12, "mars-adamw": 14}
    # the correction's worth reads the rule's pairs at the point, not its bystander's
    arguments = campaign.fixed_gamma_arguments("campaign-4", entry, "mars-adamw", 0.0, 1, False)
    after = arguments[arguments.index("--pairs") + 1 :]
    listed = after[: next((k for k, a in enumerate(after) if a.startswith("--")), len(after))]
    assert listed == [f"{s}:{o}" for s, o in pairs] and "--pairs-read" not in arguments


def test_a_point_lands_its_journal_when_its_command_ends_even_a_stopped_one(
    toy_campaign, monkeypatch
):
    """The report a command writes and the journal it read land together; a command that
    stops (a failed or interrupted tune) still lands the runs it finished."""
    journal = toy_campaign.folder / "tiny" / "b64-4x" / "study.log"

    def tune(argv: list[str]) -> int:
        journal.parent.mkdir(parents=True, exist_ok=True)
        with journal.open("ab") as live:
            live.write(b'{"op_code": 0}\n{"op_code": 1')  # the second record torn mid-write
        return 1

    monkeypatch.setattr(campaign, "torch_mars", tune)
    monkeypatch.setattr(campaign, "arguments_of", lambda *args: [])
    assert campaign.main(["--campaign", "campaign-4", "--points", "tiny/b64-4x"]) == 1
    landed = gzip.decompress(journal.with_suffix(".log.gz").read_bytes())
    assert landed == b'{"op_code": 0}\n'


def test_a_point_is_never_trained_on_another_thread_count_than_its_pairs(
    toy_campaign, monkeypatch, capsys
):
    called = toy_campaign.called
    monkeypatch.setattr(campaign, "this_machine", lambda jobs: f"cpu · {3 - jobs} thread(s)")
    monkeypatch.setattr(campaign, "arguments_of", lambda *args: [])
    entry = {"optimizer": "nadamw", "heldout_machines": ["cpu · 1 thread(s)"] * 12}
    point = toy_campaign.point("tiny/b64-4x")
    (point / "tune.json").write_text(json.dumps({"optimizers": [entry]}))
    for argv in (["--points", "tiny/b64-4x", "--jobs", "1"], ["--points", "tiny/nowhere"]):
        with pytest.raises(SystemExit) as refused:
            campaign.main(["--campaign", "campaign-4", *argv])
        assert refused.value.code == 2 and called == []
    assert "this command trains on cpu · 2 thread(s)" in capsys.readouterr().err
    assert (
        campaign.main(["--campaign", "campaign-4", "--points", "tiny/b64-4x", "--jobs", "2"]) == 0
    )
    assert len(called) == 1


def test_a_gamma_to_take_one_look_cannot_place_plans_a_second_look_for_its_rule(
    toy_campaign, monkeypatch
):
    from lab.gamma_reads import GammaRead

    from torch_mars.train.study.family import Comparison, Decision
    from torch_mars.train.study.verdict import PairedGap

    folder = toy_campaign.folder
    (folder / "gamma-to-take.json").write_text("{}")
    monkeypatch.setattr(campaign, "campaign_rows", lambda declaration: [])
    entry = next(e for e in campaign.declared("campaign-4")["points"] if e["point"] == "b16-1x")
    scope = "tiny/b16-1x"
    wide = PairedGap(-0.06, -0.13, 0.01, 0.01, 12, 0.02, 11, ((-0.06, 0.02, 12),))
    unread = GammaRead(scope, "mars-shampoo", 0.05, 0.2, Comparison("mars-shampoo", ("x",), scope))
    either_way = GammaRead(
        scope, "mars-adamw", 0.1, 0.2, Comparison("mars-adamw", ("mars-adamw@gamma=0.1",), scope),
        wide, Decision("inconclusive", False, -0.13, 0.01, 0.05 / 13),
    )  # fmt: skip
    monkeypatch.setattr(campaign, "gamma_reads", lambda path: ([either_way, unread], None))
    design = campaign.design_of(json.loads((folder / "campaign.json").read_text()))
    monkeypatch.setattr(campaign, "design_of", lambda declaration: design)
    assert either_way.state(design.margin) == "not shown either way"
    planned = campaign.second_look_counts("campaign-4", entry)
    assert 12 < planned["mars-adamw"] <= 64  # its study at 0.1 then follows these pairs
    assert all(n == 12 for o, n in planned.items() if o != "mars-adamw")


def test_a_command_without_jobs_trains_each_run_on_one_thread_as_the_pairs_did(
    toy_campaign, monkeypatch
):
    from torch_mars.train.study.workers import threads_per_run

    given: list[int] = []
    monkeypatch.setattr(
        campaign, "arguments_of", lambda name, entry, jobs, *rest: given.append(jobs) or []
    )
    assert campaign.main(["--campaign", "campaign-4", "--points", "tiny/b64-4x"]) == 0
    assert given and threads_per_run(given[0]) == 1
