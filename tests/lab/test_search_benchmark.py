"""The search benchmark's real runs: every design that ran at a point (each campaign's study
there, and each candidate design's own study) is read against the 80-trial references, and a
candidate design runs on the campaign's protocol with only the search changed."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from benchmark_scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
benchmark = load_script(ROOT / "benchmarks" / "studies" / "search_benchmark.py")


def test_a_candidate_design_runs_the_campaigns_protocol_with_its_own_search():
    arguments = benchmark.design_arguments("b64-4x", "lr-profiled", jobs=2, report=False)
    text = " ".join(arguments)
    assert f"--search lr-profiled {benchmark.SELECTION_FLAGS}" in text
    assert "--trials 40" in text and "--name design-lr-profiled" in text
    assert "benchmarks/results/search-benchmark/b64-4x/design-lr-profiled/study.log" in text
    # the runs the campaigns' studies trained at the point are taken, not trained again
    assert "--reuse-runs" in arguments and "benchmarks/results/campaign-3/tiny/b64-4x" in arguments
    with pytest.raises(SystemExit, match="--design must be one of"):
        benchmark.design_arguments("b64-4x", "no-such-search", jobs=2, report=False)


def test_the_real_table_reads_every_design_that_ran_at_the_point():
    designs = [design for design, _, _ in benchmark.design_reports("b64-4x")]
    assert designs[:3] == ["surface", "surface-2", "surface-3"]  # the campaigns' studies landed
    table = benchmark.real_table("b64-4x")
    assert "| surface-2 | nadamw | 1.7578 | 1.7479 | +0.0099 [-0.0062, +0.0260] |" in table
    assert "| surface-3 | mars-shampoo | 1.6623 | 1.6554 | +0.0070 [-0.0040, +0.0180] |" in table


def test_the_gaps_together_and_the_bars_reach_under_noise_alone():
    from torch_mars.train.study.verdict import PairedGap

    # two gaps of standard error 0.005 on many degrees of freedom: each reads at most 0.005
    # with probability ~0.841 (one standard error), both with ~0.708
    gaps = [
        PairedGap(0.002, 0, 0, 0.5, 12, 0.005, 10_000),
        PairedGap(0.004, 0, 0, 0.5, 12, 0.005, 10_000),
    ]
    text = benchmark.bar_reading(gaps)
    assert "mean gap +0.0030 (standard error 0.0035)" in text and "probability 0.71" in text
    # the mean's upper bound: 0.003 + 1.960 x 0.005 / sqrt(2) = 0.00993
    assert "its 95% interval's upper end +0.0099 (20000 degrees of freedom)" in text
    # on 4 degrees of freedom each, Welch-Satterthwaite gives (2 s^2)^2 / (2 s^4 / 4) = 8, and
    # 0.003 + t(8) 2.306 x 0.003536 = 0.01115
    few = [dataclasses.replace(g, dof=4) for g in gaps]
    upper = "its 95% interval's upper end +0.0112 (8 degrees of freedom)"
    assert upper in benchmark.bar_reading(few)
    # a diverged held-out run's gap is infinite, without a standard error: said, not a traceback
    diverged = [gaps[0], PairedGap(math.inf, math.inf, math.inf, 0.0, 12)]
    assert benchmark.bar_reading(diverged) == (
        "mean gap +inf; no interval and no reach: 1 of 2 gaps have no standard error (a "
        "held-out run diverged)"
    )
    table = benchmark.real_table("b64-4x")
    assert "- surface-3: mean gap +0.0042 (standard error 0.0016)" in table


def test_more_held_out_pairs_sweep_both_winners_on_seeds_no_study_read():
    references, ours = benchmark.more_pairs_arguments("b64-4x", 2, jobs=2)
    for arguments, name in ((references, "references"), (ours, benchmark.MEASURED)):
        text = " ".join(arguments)
        assert "--seeds 7 8 9 10" in text and "--data-seed 2" in text
        assert f"b64-4x/more-pairs/{name}-data2/study.log" in text
    # the references are the map's 80-trial winners, ours the current campaign's
    assert "mars-adamw:lr=0.0577" in references and "mars-adamw:lr=0.0865" in ours
    pairs = benchmark.more_pairs()
    assert len(pairs) == 12 and pairs[:4] == [(7, 1), (8, 1), (9, 1), (10, 1)]
    read = set(benchmark.PROTOCOL.heldout) | set(benchmark.PROTOCOL.seeds)
    assert not read & set(benchmark.MORE_HELDOUT)
    # a candidate design's winners alone, beside the same references' sweeps
    (design,) = benchmark.more_pairs_arguments("b64-4x", 2, jobs=2, design="surface-5")
    text = " ".join(design)
    assert "b64-4x/more-pairs/design-surface-5-data2/study.log" in text
    assert "--seeds 7 8 9 10" in text and "mars-adamw:lr=0.0577" in design


def test_the_report_reads_the_gaps_on_the_further_pairs_and_on_all_24():
    table = benchmark.real_table("b64-4x")
    assert "Twelve more held-out pairs at b64-4x (seeds 7-10 x data orders 1-3" in table
    # Muon: the first 12 pairs, the further 12, all 24 (8 seeds x 3 data orders, crossed)
    assert (
        "| muon | +0.0058 [+0.0011, +0.0104] | +0.0080 [+0.0033, +0.0127] | "
        "+0.0069 [+0.0040, +0.0098] |" in table
    )
    assert "- On all 24 pairs: mean gap +0.0026 (standard error 0.0014)" in table


def test_the_refinaled_design_is_the_campaigns_study_with_finalists_on_other_orders(
    tmp_path, monkeypatch
):
    text = " ".join(benchmark.refinal_arguments("b64-4x", jobs=2))
    assert f"--search surface-3 {benchmark.SELECTION_FLAGS} --final-data-seeds 4 5" in text
    # the study's name is the campaign's, so that its copied journal is the same study
    assert "--name b64-4x" in text and "finalists-on-orders-4-5/b64-4x/study.log" in text
    monkeypatch.setattr(benchmark, "OUT", tmp_path)
    landed = ROOT / "benchmarks/results/campaign-3/tiny/b64-4x/study.log.gz"
    benchmark.copy_study(landed, benchmark.refinal_folder("b64-4x"))
    live = tmp_path / "b64-4x" / "finalists-on-orders-4-5" / "b64-4x" / "study.log"
    assert live.with_suffix(".log.gz").read_bytes() == landed.read_bytes() and live.is_file()
    live.write_text("a journal this study has written since\n")
    benchmark.copy_study(landed, benchmark.refinal_folder("b64-4x"))  # a journal stays as it is
    assert live.read_text() == "a journal this study has written since\n"


def test_tunes_default_runs_at_a_point_from_the_neighbouring_points_winners(capsys):
    arguments = benchmark.warm_arguments("b64-4x", jobs=2)
    text = " ".join(arguments)
    # the campaign's design and protocol; no --search-seeds or order seed of its own
    assert f"--search surface-3 {benchmark.SELECTION_FLAGS} --jobs 2" in text
    assert "--name warm-from-b16-4x" in text and "b64-4x/warm-from-b16-4x/study.log" in text
    assert "benchmarks/results/campaign-3/tiny/b64-4x" in arguments  # its runs are taken
    with pytest.raises(SystemExit, match="--warm b16-4x: the recipe is b16-4x's own winners"):
        benchmark.warm_arguments("b16-4x", jobs=2)
    with pytest.raises(SystemExit) as stopped:  # from the command line: one line, exit 2
        benchmark.main(["--warm", "b16-4x"])
    assert stopped.value.code == 2
    assert "--warm b16-4x: the recipe is b16-4x's own winners" in capsys.readouterr().err


def test_the_warm_started_default_is_read_beside_the_campaigns_design():
    table = benchmark.real_table("b64-4x")
    assert (
        "| surface-3 from b16-4x's winners | mars-shampoo | 1.6734 | 1.6554 | "
        "+0.0180 [+0.0092, +0.0269] |" in table
    )
    assert "- surface-3 from b16-4x's winners: mean gap +0.0067 (standard error 0.0013)" in table


def test_the_median_of_the_choosing_runs_changes_two_winners_at_b64_4x_and_none_at_b16_4x():
    """Replayed on campaign-3's stored runs, the median picks AdamW's finalist whose seed-1 run
    blew up (1.7661, 1.8797, 1.7607: median 1.7661 against the mean winner's 1.7742) and Muon's
    at lr 0.0577; its sweep reads them on all 24 held-out pairs."""
    changed = benchmark.median_winners(*benchmark.current_searches("b64-4x"))
    assert sorted(changed) == ["adamw", "muon"]
    assert changed["adamw"][1].startswith("lr:8,") and changed["muon"][1].startswith("lr:10,")
    assert benchmark.median_winners(*benchmark.current_searches("b16-4x")) == {}
    text = " ".join(benchmark.median_arguments("b64-4x", 2, jobs=2))
    assert "--optimizers adamw muon" in text and "--seeds 3 4 5 6 7 8 9 10" in text
    assert "b64-4x/median-choosing/median-data2/study.log" in text


def test_the_median_check_is_read_by_the_rule_written_before_its_runs():
    table = benchmark.real_table("b64-4x")
    assert "| adamw | lr=0.0256 beta1=0.85 beta2=0.98 weight_decay=0.01 " in table
    assert "| +0.0055 [-0.0113, +0.0222] | +0.0228 [+0.0026, +0.0429] |" in table
    assert "| +0.0069 [+0.0040, +0.0098] | +0.0023 [-0.0043, +0.0089] |" in table
    assert "- By the median: mean gap +0.0052 (standard error 0.0022)" in table
    assert "the mean gap below the mean's): not met: the mean stays." in table


def test_the_fifth_design_is_read_by_the_rule_written_before_its_run():
    """The joint screen's real run at b64-4x: a mean gap below the third design's, but its
    largest (MARS-AdamW's, one held-out run blown up) above the third's: not adopted by the
    12-pair rule; on all 24 pairs, read after it, every gap within the bar."""
    table = benchmark.real_table("b64-4x")
    assert "| surface-5 | mars-adamw | 1.7479 | 1.7375 | +0.0104 [-0.0122, +0.0330] |" in table
    assert "- surface-5: mean gap +0.0029 (standard error 0.0023)" in table
    # the designs together: mean, largest gap and whose, how many within the bar, cost
    assert "| surface-5 | +0.0029 (0.0023) | +0.0104 (mars-adamw) | 3 of 5 | 296 | 2.0 |" in table
    assert "| surface-3 | +0.0042 (0.0016) | +0.0071 (adamw) | 1 of 5 | 303 | 2.2 |" in table
    further = table[table.index("the surface-5 design's winners") :]
    assert "| +0.0037 [-0.0030, +0.0104] | +0.0050 [+0.0008, +0.0091] |" in further
    assert "- On all 24 pairs: mean gap +0.0009 (standard error 0.0013)" in further


def test_more_pairs_with_a_design_sweeps_that_designs_winners_and_design_alone_is_refused(
    monkeypatch, capsys
):
    called = []
    monkeypatch.setattr(benchmark, "torch_mars", lambda argv: called.append(argv) or 0)
    assert benchmark.main(["--more-pairs", "b64-4x", "--design", "surface-5"]) == 0
    assert [argv[0] for argv in called] == ["sweep"] * 3  # one a held-out data order
    assert all("design-surface-5-data" in " ".join(argv) for argv in called)
    with pytest.raises(SystemExit) as refused:
        benchmark.main(["--design", "surface-5"])
    assert refused.value.code == 2
    assert "--design goes with --run, --paired or --more-pairs" in capsys.readouterr().err


def test_the_fifth_design_at_b16_4x_is_not_adopted_nadamw_over_the_bar_on_24_pairs():
    """The rule written before the fifth design's b16-4x run: adopted only if every optimizer's
    gap to its 80-trial reference on all 24 held-out pairs is at most 0.005. NAdamW's is
    +0.0087, so the third design stays tune's default."""
    table = benchmark.real_table("b16-4x")
    assert "| surface-5 | +0.0001 (0.0015) | +0.0069 (nadamw) | 4 of 5 | 223 | 2.8 |" in table
    further = table[table.index("the surface-5 design's winners") :]
    nadamw = "| nadamw | +0.0069 [-0.0089, +0.0226] | +0.0105 [+0.0052, +0.0158] | +0.0087 "
    assert nadamw in further
    assert "- On all 24 pairs: mean gap +0.0006 (standard error 0.0010)" in further
    from torch_mars.train.study.tune import DEFAULT_SEARCH

    assert DEFAULT_SEARCH == "surface-3"


def test_the_third_design_meets_the_bar_at_b16_4x_on_24_pairs():
    """Campaign-3's winners at b16-4x on all 24 held-out pairs: every gap to the 80-trial
    reference at most 0.005 (AdamW's +0.0040 the largest); the third design misses only at
    b64-4x (Muon +0.0069 there)."""
    table = benchmark.real_table("b16-4x")
    further = table[table.index("campaign-3's winners and the references") :]
    further = further[: further.index("the surface-5 design's winners")]
    gaps = {}
    for line in further.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[0] in benchmark.OPTIMIZERS:
            gaps[cells[0]] = float(cells[3].split()[0])
    assert set(gaps) == set(benchmark.OPTIMIZERS)
    assert max(gaps.values()) == gaps["adamw"] == 0.0040
    assert "- On all 24 pairs: mean gap +0.0020 (standard error 0.0009)" in further


def test_the_second_reference_sweeps_the_maps_other_80_trial_winners_on_24_pairs(capsys):
    """b64-4x's second 80-trial study (order seed 1) is swept on seeds 3-10 per held-out data
    order; a point where the map ran no second study is refused, naming the flag."""
    arguments = benchmark.second_reference_arguments("b64-4x", data_seed=2, jobs=1)
    text = " ".join(arguments)
    assert "--search-seeds 3 4 5 6 7 8 9 10 --seeds 3 4 5 6 7 8 9 10" in text
    assert "--data-seed 2" in text and "--name second-data2" in text
    assert "b64-4x/second-reference/second-data2/study.log" in text
    assert "--grid muon:lr=0.0384" in text  # the second study's Muon, where campaign-3's sits
    assert text.count("--optimizers nadamw mars-adamw muon mars-shampoo --grid") == 1
    with pytest.raises(SystemExit, match="--second-reference b16-4x: the map ran no second"):
        benchmark.second_reference_arguments("b16-4x", data_seed=1, jobs=1)
    assert benchmark.second_reference_table("b16-4x") == ""
    with pytest.raises(SystemExit) as stopped:  # from the command line: one line, exit 2
        benchmark.main(["--second-reference", "b16-4x"])
    assert stopped.value.code == 2
    assert "the map ran no second 80-trial study there" in capsys.readouterr().err


def test_adamws_second_80_trial_study_runs_on_the_maps_protocol_from_the_first_studys_journal(
    tmp_path, monkeypatch, capsys
):
    """The map's second study at b64-4x ran no AdamW: its own second study takes the map's
    protocol and the second study's order seed, in a copy of the first study's journal (whose
    recorded starts it resumes from), and its winner is swept on the 24 pairs beside the
    others'."""
    assert benchmark.second_rest_optimizers("b64-4x") == ("adamw",)
    text = " ".join(benchmark.second_rest_arguments("b64-4x", jobs=1))
    assert "--optimizers adamw --trials 80 --search lr-profiled --seeds 0 1 2" in text
    assert "--order-seed 1" in text and "--name b64-4x" in text
    assert "search-benchmark/b64-4x/second-reference-rest/b64-4x/study.log" in text
    monkeypatch.setattr(benchmark, "OUT", tmp_path)
    first = ROOT / "benchmarks/results/fight-map/b64-4x/study.log.gz"
    benchmark.copy_study(first, benchmark.second_rest_folder("b64-4x"))
    copied = benchmark.second_rest_folder("b64-4x") / "study.log.gz"
    assert copied.read_bytes() == first.read_bytes()
    assert benchmark.stored_study(copied.parent)[1]["search"]["starts"]["adamw"]
    with pytest.raises(SystemExit) as stopped:  # from the command line: one line, exit 2
        benchmark.main(["--second-reference-rest", "b16-4x"])
    assert stopped.value.code == 2
    assert "--second-reference-rest b16-4x: the map ran no second" in capsys.readouterr().err


def test_the_80_trial_reference_does_not_reproduce_itself_within_the_bar_at_b64_4x():
    """The rule written before the runs: the map's second 80-trial study at b64-4x, read on the
    24 held-out pairs against the first, is over 0.005 for Muon and MARS-Shampoo; campaign-3's
    gaps are read beside it, and against both references together."""
    table = benchmark.second_reference_table("b64-4x")
    muon = "| muon | +0.0053 [+0.0016, +0.0089] | 0.0112 | +0.0069 [+0.0040, +0.0098] | +0.0016 "
    assert muon in table  # campaign-3's Muon is within 0.005 of the second reference
    assert "| mars-shampoo | +0.0081 [+0.0015, +0.0146] | 0.0293 | +0.0046 " in table
    assert "does not reproduce itself within 0.005: muon, mars-shampoo over it." in table
    # AdamW's own second study (search_benchmark --second-reference-rest) reproduces its first
    # within the bar; against both references together campaign-3's AdamW is the one over it
    adamw = "| adamw | -0.0029 [-0.0066, +0.0007] | 0.104 | +0.0055 [-0.0113, +0.0222] | +0.0084 "
    assert adamw in table and "| +0.0069 [-0.0070, +0.0209] |" in table
    assert "within 0.005 for 4 of 5; over it: adamw." in table
    assert table in benchmark.real_table("b64-4x")


def test_by_the_five_gaps_mean_the_third_and_fifth_designs_pass_both_points_on_24_pairs():
    """The bar docs/harness.md sets beside the issue's (the mean gap over the five at most
    0.003, the upper end of its 95% interval under 0.006): on all 24 held-out pairs both
    designs meet it at b64-4x and at b16-4x, where the issue's bar (every gap at most 0.005) is
    missed at one point each."""
    b64, b16 = benchmark.real_table("b64-4x"), benchmark.real_table("b16-4x")
    for table, mean, error, upper, dof in (
        (b64, "+0.0026", "0.0014", "+0.0056", 11),  # the third design
        (b64, "+0.0009", "0.0013", "+0.0036", 27),  # the fifth
        (b16, "+0.0020", "0.0009", "+0.0039", 17),
        (b16, "+0.0006", "0.0010", "+0.0027", 14),
    ):
        line = (
            f"On all 24 pairs: mean gap {mean} (standard error {error}), its 95% interval's "
            f"upper end {upper} ({dof} degrees of freedom)"
        )
        assert line in table


def test_a_paired_design_runs_in_a_copy_of_the_campaigns_study_and_sweeps_only_changed_winners(
    monkeypatch, tmp_path
):
    """``--paired POINT --design NAME``: the candidate's search in a copy of the current
    campaign's journal at the point (its starts; its runs taken where the searches agree, the
    other studies' too), then the further pairs swept for the winners that changed: none where
    every winner is the campaign's."""
    arguments = " ".join(benchmark.paired_arguments("b64-4x", "surface-6", 2))
    assert "--search surface-6 --seeds 0" in arguments
    assert "search-benchmark/b64-4x/campaign-3-as-surface-6/b64-4x/study.log" in arguments
    assert "--name b64-4x" in arguments and "--reuse-runs" in arguments
    monkeypatch.setattr(benchmark, "OUT", tmp_path)
    monkeypatch.setattr(benchmark, "paired_arguments", lambda *_: ["--paired-study"])
    campaign = benchmark.current_study("b64-4x")
    called = []

    def tune(argv):
        called.append(argv)
        folder = benchmark.paired_folder("b64-4x", "surface-6")
        (folder / "tune.json").write_text((campaign / "tune.json").read_text())
        return 0

    monkeypatch.setattr(benchmark, "torch_mars", tune)
    assert benchmark.main(["--paired", "b64-4x", "--design", "surface-6"]) == 0
    assert called == [["tune", "--paired-study"]]  # every winner the campaign's: no sweep
    copied = tmp_path / "b64-4x" / "campaign-3-as-surface-6" / "b64-4x" / "study.log"
    assert copied.is_file() and copied.stat().st_size > 0
    assert benchmark.changed_winners("b64-4x", "surface-6") == {}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--paired", "b64-4x", "--design", "surface-3"], "is no candidate design"),  # the default
        (["--paired", "b128-4x", "--design", "surface-6"], "has no landed study there"),
        (["--paired", "b64-4x"], "--run and --paired need --design"),
    ],
)
def test_a_paired_run_a_user_gets_wrong_is_one_line_and_exit_2(monkeypatch, capsys, argv, said):
    monkeypatch.setattr(benchmark, "torch_mars", lambda argv: pytest.fail("nothing may run"))
    with pytest.raises(SystemExit) as refused:
        benchmark.main(argv)
    assert refused.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert said in error and ": error: " in error


def test_a_paired_run_whose_tune_fails_stops_with_its_code_before_reading_a_report(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(benchmark, "OUT", tmp_path)
    monkeypatch.setattr(benchmark, "paired_arguments", lambda *_: ["--paired-study"])
    called = []
    monkeypatch.setattr(benchmark, "torch_mars", lambda argv: called.append(argv) or 3)
    assert benchmark.main(["--paired", "b64-4x", "--design", "surface-6"]) == 3
    assert called == [["tune", "--paired-study"]]  # no tune.json read, no sweep


def test_the_pattern_move_screen_reads_both_designs_on_toys_whose_floor_is_on_the_ladder():
    """The toys of ``--pattern-move``: each valley's floor on its dimension's ladder (clipped
    to its end), and the sixth design no worse than the third on any of them."""
    for optimizer in benchmark.TOY_OPTIMIZERS:
        for dimension, far in benchmark.TOY_VALLEYS:
            start, floor, true_loss = benchmark.valley(optimizer, dimension, far)
            assert benchmark.LADDERS[dimension].has(start[dimension] + floor)
            assert (
                0 < abs(floor) <= abs(far)
                and true_loss({**start, dimension: start[dimension] + floor}) == 2.0
            )
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in benchmark.toy_table().splitlines()[2:]
    ]
    assert len(rows) == len(benchmark.TOY_OPTIMIZERS) * len(benchmark.TOY_VALLEYS)
    assert all(float(row[4]) <= float(row[2]) for row in rows)


def test_the_sixth_design_changes_no_winner_at_either_point_and_is_not_adopted():
    """The rule written before the sixth design's paired runs: adopted only if AdamW's gap to
    both references at b64-4x falls within 0.005 (and b16-4x stays within the bar). Its walk in
    campaign-3's studies chose every winner the third design chose, so AdamW stays +0.0069 and
    the third design stays tune's default."""
    for point in ("b64-4x", "b16-4x"):
        assert benchmark.changed_winners(point, "surface-6") == {}
    at_64 = benchmark.paired_table("b64-4x", "surface-6")
    assert "| adamw | campaign-3's | +0.0055 [-0.0113, +0.0222] |" in at_64
    assert "+0.0069 [-0.0070, +0.0209] | +0.0069 [-0.0070, +0.0209] |" in at_64
    assert "- Against both references: 4 of 5 within 0.005 (over it: adamw)" in at_64
    at_16 = benchmark.paired_table("b16-4x", "surface-6")
    assert "- Against the first reference: 5 of 5 within 0.005; winners changed: none." in at_16
    from torch_mars.train.study.tune import DEFAULT_SEARCH

    assert DEFAULT_SEARCH == "surface-3"
