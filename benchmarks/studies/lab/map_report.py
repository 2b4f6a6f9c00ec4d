"""The reports of a map of studies (the fight map's, a second model's, a campaign's): each
study's progress, each point's verdicts under Holm's correction over the map, a second search
against the first, both pooled, and the map's figure. Every function reads the folder it is
given; none knows where a checkout keeps its results (:class:`.fight_map.FightMap` does)."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

from lab.fight_map import POINTS
from torch_mars.train.compare import mean_std_text
from torch_mars.train.plots import save_figure
from torch_mars.train.study.engine import finished_results, search_progress
from torch_mars.train.study.outcomes import (
    OptimizerOutcome,
    Verdict,
    median_run_seconds,
    run_cost,
    verdicts,
)
from torch_mars.train.study.store import stored_study, stored_study_folders
from torch_mars.train.study.tune import plan_of_identity
from torch_mars.train.study.tune_record import TuneRecord, read_tune_record
from torch_mars.train.study.verdict import PairedGap, crossed_gap, holm_decisions


def progress_rows(folder: Path) -> list[dict]:
    """Each study under ``folder`` (a point's, its second searches', its side studies'), read
    from its live journal or else its snapshot: its finished runs per optimizer, their run
    hours, and, for a tune study, the runs left and their run hours at the median run so far
    (one run stretched by a pause does not stretch the estimate), and the runs each search
    plans, its stored runs replayed (:func:`~torch_mars.train.study.engine.search_progress`:
    a finished search's exactly, an unfinished one's at least)."""
    import optuna

    rows = []
    for study_dir in stored_study_folders(folder):
        trials, identity, history = stored_study(study_dir)
        runs = collections.Counter(
            t.user_attrs.get("optimizer")
            for t in trials
            if t.state == optuna.trial.TrialState.COMPLETE
        )
        search = identity.get("search", {})
        optimizers = search.get("optimizers", sorted(runs))
        planned: dict[str, int] = {}
        if search.get("kind") == "tune":
            plan = plan_of_identity(identity, study_dir, None, study_dir.name, history)
            results = finished_results(trials)
            planned = {s.optimizer: search_progress(s, results)[1] for s in plan.searches()}
        hours = sum(c["hours"] for c in run_cost(trials).values())
        left = sum(max(planned[o] - runs[o], 0) for o in optimizers) if planned else None
        typical = median_run_seconds(trials)
        rows.append(
            {
                "study": str(study_dir.relative_to(folder)),
                "runs": dict(runs),
                "planned": planned,
                "optimizers": optimizers,
                "hours": hours,
                "runs_left": left,
                "hours_left": left * typical / 3600
                if left is not None and typical is not None
                else None,
            }
        )
    return rows


def format_progress(rows: list[dict]) -> str:
    """The table of :func:`progress_rows`; the run hours left are the planned runs not yet
    finished at the study's median run so far (divide by the workers for wall time)."""
    lines = [
        "| study | finished runs per optimizer (of planned) | run hours | runs left "
        "| run hours left |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        planned = row["planned"] or {}
        counts = ", ".join(
            f"{o} {row['runs'].get(o, 0)}" + (f"/{planned[o]}" if o in planned else "")
            for o in row["optimizers"]
        )
        left = "—" if row["runs_left"] is None else str(row["runs_left"])
        hours_left = "—" if row["hours_left"] is None else f"{row['hours_left']:.1f}"
        lines.append(f"| {row['study']} | {counts} | {row['hours']:.1f} | {left} | {hours_left} |")
    return "\n".join(lines)


def study_reports(study: Path) -> list[tuple[int, TuneRecord]]:
    """A study's reports (``tune.json`` records) at each budget it ran, its own and those in
    ``trials-N/``, fewest trials first, each with its trials per optimizer."""
    paths = [study / "tune.json", *study.glob(f"trials-*/{study.name}/tune.json")]
    found = []
    for path in paths:
        if path.is_file():
            record = read_tune_record(path)
            found.append((record.trials, record))
    return sorted(found, key=lambda item: item[0])


def point_reports(point: str, folder: Path) -> list[tuple[int, TuneRecord]]:
    """The reports of a point's study (the map's) at each budget it ran (:func:`study_reports`)."""
    return study_reports(folder / point)


def start_independence_sections(point: str, folder: Path) -> list[str]:
    """``map.md``'s start-independence check at ``point``: for each second search
    (``order-seed-N/``) at each budget where the first search has a report of the same trials,
    the second's winners against the first's (:func:`second_against_first`), then both
    searches pooled (:func:`pooled_verdicts`)."""
    firsts = dict(point_reports(point, folder))
    sections = []
    for second in sorted((folder / point).glob("order-seed-*")):
        seed = int(second.name.removeprefix("order-seed-"))
        for budget, record in study_reports(second):
            if budget not in firsts:
                continue
            heading = (
                f"Start independence at {point}, {budget} trials: a second search (order seed "
                f"{seed}, the defaults of its day as starts) against the first, on the same "
                "held-out runs."
            )
            checked = second_against_first(firsts[budget], record)
            sections.append(format_second_against_first(heading, checked))
            sections.append(format_pooled(*pooled_verdicts(firsts[budget], record)))
    return sections


def map_rows(folder: Path) -> list[dict]:
    """Each point's verdicts, each rule's from the point's report with the most trials that
    reads it (a budget extended for one pair replaces that pair's verdict only)."""
    rows = []
    for point in POINTS:
        by_rule: dict[str, dict] = {}
        for _, record in point_reports(point, folder):
            trials = {o.optimizer: o.trials for o in record.optimizers}
            runs = sum(c["runs"] for c in record.cost.values())
            hours = sum(c["hours"] for c in record.cost.values())
            for verdict in record.verdicts:
                by_rule[verdict.rule] = {
                    "point": point, "trials": trials, "runs": runs, "hours": hours,
                    **dataclasses.asdict(verdict),
                }  # fmt: skip
        rows += by_rule.values()
    return rows


def format_map(rows: list[dict], over: str = "map") -> str:
    """The map's table: each comparison's gap and interval as its point's report read it (seed
    and data order as crossed effects), decided by Holm's correction over every comparison of
    ``rows`` (the ``over``: the map's, or a second model's), with its point's runs and run
    hours (summed wall time of one-thread runs: CPU hours)."""
    gaps = [PairedGap(r["gap"], *r["interval"], r["p"], r["pairs"]) for r in rows]
    decisions = holm_decisions(gaps)
    lines = [
        "| point | rule | strongest control | gap, 95% interval (seed x data order) | p | "
        f"Holm ({over}) | trials each | point's runs (run hours) |",
        "|---|---|---|---:|---:|---|---:|---:|",
    ]
    for row, gap, decision in zip(rows, gaps, decisions, strict=True):
        counts = sorted(set(row["trials"].values()))
        lines.append(
            f"| {row['point']} | {row['rule']} | {row['control']} | {gap.text()} | "
            f"{gap.p:.3g} | {decision} | {'/'.join(map(str, counts))} | "
            f"{row.get('runs', 0)} ({row.get('hours', 0.0):.1f}) |"
        )
    return "\n".join(lines)


def second_against_first(first: TuneRecord, second: TuneRecord) -> list[dict]:
    """Per optimizer finished in both of two searches of a point (their ``tune.json`` records;
    another order seed, or another trial budget): the second's winner against the first's on
    the same held-out runs, as a gap (second - first) with its 95% interval, seed and data
    order crossed effects (None where both found the same point); the answer holds where the
    interval holds 0."""
    firsts = {o.optimizer: o for o in first.optimizers}
    rows = []
    for second_outcome in second.optimizers:
        first_outcome = firsts.get(second_outcome.optimizer)
        if first_outcome is None or not (first_outcome.finished and second_outcome.finished):
            continue
        if second_outcome.heldout_pairs != first_outcome.heldout_pairs:
            raise ValueError("the two searches read their winners on different held-out runs")
        same = first_outcome.winner == second_outcome.winner
        gap = (
            None
            if same
            else crossed_gap(
                second_outcome.heldout_finals,
                first_outcome.heldout_finals,
                [tuple(p) for p in first_outcome.heldout_pairs],
            )
        )
        rows.append(
            {
                "optimizer": second_outcome.optimizer,
                "same_point": same,
                "first": first_outcome.heldout_finals,
                "second": second_outcome.heldout_finals,
                "gap": gap,
                "holds": gap is None or gap.low <= 0.0 <= gap.high,
            }
        )
    return rows


def format_second_against_first(heading: str, rows: list[dict]) -> str:
    """The table of :func:`second_against_first` for ``map.md``, under ``heading``."""
    lines = [
        heading,
        "",
        "| optimizer | first's winner, held out | second's winner, held out | "
        "second - first [95% interval] | same answer |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        first, second = row["first"], row["second"]
        lines.append(
            f"| {row['optimizer']} | {mean_std_text(first)} | {mean_std_text(second)} | "
            f"{'the same point' if row['same_point'] else row['gap'].text()} | "
            f"{'yes' if row['holds'] else 'no'} |"
        )
    return "\n".join(lines)


def pooled_verdicts(first: TuneRecord, second: TuneRecord) -> tuple[dict[str, str], list[Verdict]]:
    """Both searches of a point read as one search of twice the trials: per optimizer finished
    in both (their ``tune.json`` records), the winner with the lower mean over its choosing
    seeds (the selection's and the finalists', the same seeds in both), then the study's
    verdicts (:func:`~torch_mars.train.study.outcomes.verdicts`) on those winners, seed and
    data order crossed effects of their held-out runs. Returns which
    search each winner came from and the verdicts."""
    firsts = {o.optimizer: o for o in first.optimizers if o.finished}
    chosen: list[OptimizerOutcome] = []
    source: dict[str, str] = {}
    for outcome in second.optimizers:
        name = outcome.optimizer
        if name not in firsts or not outcome.finished:
            continue
        if outcome.heldout_pairs != firsts[name].heldout_pairs:
            raise ValueError("the two searches read their winners on different held-out runs")
        if len(outcome.selection_finals) != len(firsts[name].selection_finals):
            raise ValueError(f"{name}: the two searches chose on different seeds")
        better = min(
            (firsts[name], outcome), key=lambda o: sum(o.selection_finals)
        )  # ties: the first search
        source[name] = "first" if better is firsts[name] else "second"
        chosen.append(
            OptimizerOutcome(
                optimizer=name,
                finished=True,
                winner=better.winner,
                trial_scores=[],
                selection_finals=better.selection_finals,
                heldout_finals=better.heldout_finals,
                rounds=0,
                lr_profiles=[],
                winner_score=sum(better.selection_finals) / len(better.selection_finals),
            )
        )
    pairs = [tuple(p) for p in first.optimizers[0].heldout_pairs] if chosen else None
    return source, verdicts(chosen, pairs=pairs)


def format_pooled(source: dict[str, str], found: list[Verdict]) -> str:
    """The table of :func:`pooled_verdicts` for ``map.md``."""
    lines = [
        "Both searches pooled (each optimizer's winner: the better mean over its choosing seeds "
        "of the two searches' winners; "
        + ", ".join(f"{name} from the {which}" for name, which in source.items())
        + "):",
        "",
        "| rule | strongest control | gap, 95% interval (seed x data order) | p | Holm (these) |",
        "|---|---|---:|---:|---|",
    ]
    lines += [
        f"| {v.rule} | {v.control} | {v.gap.text()} | {v.gap.p:.3g} | {v.decision} |" for v in found
    ]
    return "\n".join(lines)


def plot_map(rows: list[dict], out_path: Path) -> Path:
    """The map's figure: per MARS rule, each point's gap to its strongest control with
    its 95% interval and the trials it was searched with, against sequences per step (one
    series per multiple of 20 tokens per parameter); below zero MARS is ahead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rules = sorted({row["rule"] for row in rows})
    figure, axes = plt.subplots(1, len(rules), figsize=(5 * len(rules), 3.6), squeeze=False)
    for axis, rule in zip(axes[0], rules, strict=True):
        by_multiple: dict[int, list[tuple[int, dict]]] = {}
        for row in rows:
            if row["rule"] == rule:
                batch, multiple = POINTS[row["point"]]
                by_multiple.setdefault(multiple, []).append((batch, row))
        for multiple, points in sorted(by_multiple.items()):
            points.sort(key=lambda item: item[0])
            batches = [batch for batch, _ in points]
            gaps = [row["gap"] for _, row in points]
            below = [row["gap"] - row["interval"][0] for _, row in points]
            above = [row["interval"][1] - row["gap"] for _, row in points]
            axis.errorbar(
                batches, gaps, yerr=[below, above], marker="o", capsize=3,
                label=f"{multiple}x20 tokens/param",
            )  # fmt: skip
            for batch, row in points:  # the budget each verdict was searched with
                if row.get("trials"):
                    axis.annotate(
                        f"{max(row['trials'].values())} trials", (batch, row["gap"]),
                        textcoords="offset points", xytext=(6, 4), fontsize=7,
                    )  # fmt: skip
        controls = sorted({row["control"] for row in rows if row["rule"] == rule})
        axis.axhline(0.0, color="grey", linewidth=0.8)
        axis.set_xscale("log", base=2)
        ticks = sorted({batch for batch, _ in POINTS.values()})
        axis.set_xticks(ticks, [str(batch) for batch in ticks])
        axis.set_xlabel("sequences per step")
        axis.set_ylabel("held-out gap (nats), 95% interval")
        axis.set_title(f"{rule} - strongest of {', '.join(controls)}")
        axis.legend(fontsize=8)
    return save_figure(figure, out_path)
