"""The gamma to take (issue "The map, second stage", item 3): for each MARS rule, one gamma
whose loss at every point of campaign-4's map is within the campaign's margin of the point's
winner, read on the point's pairs, or the table that shows no single gamma is.

First a screen on the searches' own trials: at each read point of campaign-3 and campaign-4,
the best selection score the point's search found at each gamma of the ladder (any setting of
the other dimensions, the lr profiled), less the best it found at any gamma; a gamma the search
never scored at a point is a blank, not a zero. A selection score is one seed on one data
order, and the settings beside each gamma were chosen by the search: the screen only chooses
each rule's candidate (the gamma its best trial took at the most points), declared once
(``--declare``: ``gamma-to-take.json``) before any run at a candidate.

Then the answer, on pairs: at each point whose winner takes another gamma, the winner at the
candidate, its lr re-profiled (``campaign.py --gamma-to-take``), against the winner on the
pairs the rule reads there, by campaign-4's two-look design, Holm over the comparisons so
realised (which depend on the winners, chosen on selection runs, never on a pair). The
candidate holds at a point where the adjusted interval of winner - candidate lies above
-margin (at most the margin behind), fails where it lies below, and holds by construction
where the winner takes it. Where one look reads neither, ``campaign.py --second-look`` plans
the rule more pairs at the point from the read's spread, and ``--gamma-to-take`` then reads
the candidate's study on them (the reading itself: ``lab/gamma_reads.py``).

    python benchmarks/studies/gamma_to_take.py            # results/campaign-4/gamma-to-take.md
    python benchmarks/studies/gamma_to_take.py --declare  # once: gamma-to-take.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import date
from pathlib import Path

from lab.campaigns import campaign_folder
from lab.gamma_reads import gamma_reads, winner_gamma

from torch_mars.atomic_files import write_text_atomically
from torch_mars.train.study.engine import finished_results
from torch_mars.train.study.family_reads import comparison_notes
from torch_mars.train.study.space import LADDERS
from torch_mars.train.study.store import stored_study, stored_study_folders
from torch_mars.train.study.tune import plan_of_identity

ROOT = Path(__file__).resolve().parents[2]
RULES = ("mars-adamw", "mars-shampoo")
CAMPAIGNS = ("campaign-3", "campaign-4")
CAMPAIGN = campaign_folder(ROOT, "campaign-4")
OUT = CAMPAIGN / "gamma-to-take.md"
DECLARATION = CAMPAIGN / "gamma-to-take.json"


def searched_gammas(folder: Path) -> dict[str, tuple[float, list[tuple[float, float]]]]:
    """Per rule the study in ``folder`` searched: the gamma its search started from and each
    trial's (gamma, selection score), in the order the search scored them."""
    trials, identity, history = stored_study(folder)
    plan = plan_of_identity(identity, folder, None, folder.name, history)
    results = finished_results(trials)
    found: dict[str, tuple[float, list[tuple[float, float]]]] = {}
    for search in plan.searches():
        if search.optimizer not in RULES or "gamma" not in search.dimensions:
            continue
        start = LADDERS["gamma"].value(search.starts[0]["gamma"])
        scored = [
            (LADDERS["gamma"].value(point["gamma"]), score)
            for point, score in search.replay(results).trials
        ]
        found[search.optimizer] = (start, scored)
    return found


def shortfalls(scored: list[tuple[float, float]]) -> dict[float, float]:
    """Per gamma of the trials ``scored`` ((gamma, score) each): its best finite score less the
    best at any gamma (empty where no score is finite)."""
    best: dict[float, float] = {}
    for gamma, score in scored:
        if math.isfinite(score):
            best[gamma] = min(best.get(gamma, math.inf), score)
    floor = min(best.values(), default=math.inf)
    return {g: s - floor for g, s in sorted(best.items())}


def screened_folders() -> list[tuple[str, Path]]:
    """Each screened point's label (``CAMPAIGN/MODEL/POINT``) and study folder, at each read
    point of :data:`CAMPAIGNS`; a point campaign-4 re-reads from campaign-3 counted once (a
    re-read walks the earlier campaign's selection: the same trials)."""
    found: list[tuple[str, Path]] = []
    seen: set[str] = set()
    for name in CAMPAIGNS:
        for folder in stored_study_folders(campaign_folder(ROOT, name)):
            if ".gamma=" in folder.name or folder.parent.parent.name != name:
                continue
            point = f"{folder.parent.name}/{folder.name}"
            if name != CAMPAIGNS[0] and point in seen:
                continue
            seen.add(point)
            found.append((f"{name}/{point}", folder))
    return found


def screened(
    folders: list[tuple[str, Path]] | None = None,
) -> dict[str, list[tuple[str, dict[float, float]]]]:
    """Per rule, each screened point with its shortfall per gamma (:func:`shortfalls`)."""
    rows: dict[str, list[tuple[str, dict[float, float]]]] = {rule: [] for rule in RULES}
    for label, folder in screened_folders() if folders is None else folders:
        for rule, (_, scored) in searched_gammas(folder).items():
            gaps = shortfalls(scored)
            if gaps:
                rows[rule].append((label, gaps))
    return rows


def start_table(folders: list[tuple[str, Path]]) -> list[str]:
    """Whether each search moved gamma off its start: per rule and screened point, the start,
    the gamma of the search's best trial and of the winner (campaign-4's where it has read the
    point), and how many trials scored below, at and above the start; then, per rule, how
    often the winner kept the start and how often the search tried both sides of it."""
    lines = [
        "## Where the searches moved gamma",
        "",
        "Per point: the gamma the search started from, the gamma its best selection trial "
        "took, the winner's (campaign-4's where it has read the point), and the trials below, "
        "at and above the start. A winner's gamma at the start is a finding only as far as "
        "the search scored gammas on both sides of it.",
        "",
        "| rule | point | start | best trial's | winner's | trials below / at / above the start |",
        "|---|---|---:|---:|---:|---|",
    ]
    tally = {rule: [0, 0, 0] for rule in RULES}  # points, winner at start, of those both sides
    for label, folder in folders:
        name, point = label.split("/", 1)
        read_now = (CAMPAIGN / point / "tune.json").is_file()
        winner_root = CAMPAIGN if read_now else campaign_folder(ROOT, name)
        for rule, (start, scored) in searched_gammas(folder).items():
            finite = [(g, s) for g, s in scored if math.isfinite(s)]
            if not finite:
                continue
            best = min(finite, key=lambda t: t[1])[0]
            winner = winner_gamma(winner_root, point, rule)
            below = sum(g < start for g, _ in scored)
            above = sum(g > start for g, _ in scored)
            at = len(scored) - below - above
            shown = "—" if winner is None else f"{winner:g}"
            lines.append(
                f"| {rule} | {label} | {start:g} | {best:g} | {shown} | {below} / {at} / {above} |"
            )
            tally[rule][0] += 1
            if winner is not None and math.isclose(winner, start):
                tally[rule][1] += 1
                tally[rule][2] += below > 0 and above > 0
    lines.append("")
    for rule, (points, kept, both) in tally.items():
        lines.append(
            f"- {rule}: the winner took the start at {kept} of {points} points; at {both} of "
            f"those the search had scored gammas on both sides of it."
        )
    return lines


def candidate(points: list[tuple[str, dict[float, float]]]) -> float:
    """The gamma the rule's best trial took at the most screened ``points`` (a tie: the one
    whose worst shortfall over the points is smaller, then the smaller gamma)."""
    taken: dict[float, int] = {}
    for _, gaps in points:
        for gamma, shortfall in gaps.items():
            taken[gamma] = taken.get(gamma, 0) + (shortfall == 0)
    if not taken:
        raise ValueError("no screened point scored any gamma")

    def worst(gamma: float) -> float:
        return max(gaps.get(gamma, math.inf) for _, gaps in points)

    return min(taken, key=lambda g: (-taken[g], worst(g), g))


def screen_table(rows: dict[str, list[tuple[str, dict[float, float]]]]) -> list[str]:
    """The screen as markdown lines: per rule a row per point, a column per gamma."""
    gammas = LADDERS["gamma"].levels
    lines = [
        "## The screen: the searches' own trials",
        "",
        "Each cell: the best selection score at that gamma less the best at any gamma, at the "
        "point (0: the gamma the search's best trial took; — : no trial at that gamma). It "
        "chose the candidates (docstring of benchmarks/studies/gamma_to_take.py).",
    ]
    for rule in RULES:
        lines += ["", f"### {rule}", ""]
        lines.append("| point | " + " | ".join(f"gamma {g:g}" for g in gammas) + " |")
        lines.append("|---|" + "---:|" * len(gammas))
        worst = {g: 0.0 for g in gammas}
        for label, gaps in rows[rule]:
            cells = [f"{gaps[g]:.4f}" if g in gaps else "—" for g in gammas]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
            for g in gammas:
                worst[g] = max(worst[g], gaps.get(g, math.inf))
        cells = ["—" if math.isinf(w) else f"{w:.4f}" for w in worst.values()]
        lines.append("| worst over the points | " + " | ".join(cells) + " |")
    return lines


def declare(rows: dict[str, list[tuple[str, dict[float, float]]]], path: Path) -> bool:
    """Write the gamma-to-take declaration at ``path`` from the screen ``rows`` once: each
    rule's :func:`candidate`, what chose it and how it is read; False (nothing written) where
    one is already declared."""
    if path.exists():
        return False
    declared = {
        "question": "issue #83 item 3: for each MARS rule, one gamma whose loss at every point "
        "of campaign-4's map is within the campaign's margin of that point's winner, read on "
        "the point's pairs",
        "declared": date.today().isoformat(),
        "candidates": {rule: candidate(points) for rule, points in rows.items() if points},
        "chosen_by": "the screen on the searches' selection runs (none of them a pair): the "
        "gamma the rule's best trial took at the most read points, "
        + ", ".join(sorted({label for points in rows.values() for label, _ in points})),
        "campaign": "campaign.json",
        "reading": "at each of the campaign's points and each rule whose winner read there "
        "takes another gamma: the rule at the candidate, every other dimension at the winner's, "
        "its lr re-profiled (campaign.py --gamma-to-take), against the winner on the pairs the "
        "rule reads there, by the campaign's two-look design; Holm over the comparisons so "
        "realised; the candidate holds where the adjusted interval of winner - candidate lies "
        "above -margin, fails where it lies below -margin, and holds by construction where "
        "the winner takes it",
    }
    write_text_atomically(path, json.dumps(declared, indent=2) + "\n")
    return True


def pair_reading(path: Path) -> list[str]:
    """The answer on pairs as markdown lines, from the declaration at ``path`` and the reports
    of its campaign's points and their studies at each candidate (:func:`~lab.gamma_reads.
    gamma_reads`): a row per point and rule, then per rule where its candidate stands over the
    map."""
    declared = json.loads(path.read_text())
    reads, design = gamma_reads(path)
    root, margin = (path.parent / declared["campaign"]).parent, design.margin
    family = [r for r in reads if r.comparison is not None]
    lines = [
        "## The answer, on pairs",
        "",
        f"Declared in [gamma-to-take.json](gamma-to-take.json) ({declared['declared']}): "
        + ", ".join(f"{rule} gamma {g:g}" for rule, g in declared["candidates"].items())
        + f". Gap: the winner - the winner at the candidate (its lr re-profiled), held-out "
        f"validation loss on the rule's pairs at the point; the candidate holds where the "
        f"adjusted interval lies above -{margin:g}. Holm over the {len(family)} comparisons "
        f"realised ({len(reads) - len(family)} hold by construction: the winner takes the "
        "candidate).",
        "",
        "| point | rule | winner's gamma | candidate | winner - candidate, adjusted interval | "
        "word | diverged runs (winner, candidate) | the candidate |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    tally: dict[str, dict[str, int]] = {rule: {} for rule in declared["candidates"]}
    for r in reads:
        own_text = "—" if r.own is None else f"{r.own:g}"
        state = r.state(margin)
        if r.comparison is None:
            cells = [r.label, r.rule, own_text, f"{r.candidate:g}", "—", "—", "—"]
            cells.append("holds (the winner's)")
        else:
            control = r.comparison.controls[0] if r.gap is not None else None
            lost, _ = comparison_notes(root, r.comparison, control)
            lost_text = "—" if lost is None else f"{lost[0]}, {lost[1]}"
            reading, word = "—", "pending"
            if r.gap is not None and r.decision is not None:
                reading = f"{r.gap.mean:+.4f} {r.decision.interval_text()}"
                word = r.decision.text()
            cells = [r.label, r.rule, own_text, f"{r.candidate:g}", reading, word, lost_text]
            cells.append(state)
        tally[r.rule][state] = tally[r.rule].get(state, 0) + 1
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for rule, counts in tally.items():
        total = sum(counts.values())
        states = ("holds", "fails", "not shown either way", "pending")
        parts = ", ".join(f"{state} at {counts[state]}" for state in states if state in counts)
        gamma = declared["candidates"][rule]
        if counts.get("fails"):
            answer = f"not {gamma:g}: more than {margin:g} behind the winner at {counts['fails']}"
        elif counts.get("holds", 0) == total:
            answer = f"take gamma {gamma:g}"
        else:
            answer = "open"
        lines.append(f"- {rule}, gamma {gamma:g}, over {total} points: {parts}; {answer}.")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--declare",
        action="store_true",
        help="write gamma-to-take.json (each rule's candidate, from the screen) once",
    )
    args = parser.parse_args(argv)
    folders = screened_folders()
    rows = screened(folders)
    if args.declare:
        wrote = declare(rows, DECLARATION)
        print(f"{'wrote' if wrote else 'already declared; unchanged:'} {DECLARATION}")
        return 0
    lines = ["# The gamma to take", "", *screen_table(rows), "", *start_table(folders)]
    if DECLARATION.is_file():
        lines += ["", *pair_reading(DECLARATION)]
    text = "\n".join(lines) + "\n"
    write_text_atomically(OUT, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
