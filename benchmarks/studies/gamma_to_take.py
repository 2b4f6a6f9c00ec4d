"""The gamma to take (issue "The map, second stage", item 3), screened on the searches' own
trials while the map's pairs are read: for each MARS rule, at each read point of campaign-3 and
campaign-4, the best selection score the point's search found at each gamma of the ladder (any
setting of the other dimensions, the lr profiled), less the best it found at any gamma. A gamma
whose shortfall is small at every point is the candidate a user could take; a gamma the search
never scored at a point is a blank, not a zero.

This is a screen, not the issue's answer: a selection score is one seed on one data order, and
the settings beside each gamma were chosen by the search. The answer reads a gamma's setting on
the point's pairs (``--gamma0`` does so for gamma = 0).

    python benchmarks/studies/gamma_to_take.py   # writes results/campaign-4/gamma-to-take.md
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from lab.campaigns import campaign_folder

from torch_mars.atomic_files import write_text_atomically
from torch_mars.train.study.engine import finished_results
from torch_mars.train.study.space import LADDERS
from torch_mars.train.study.store import stored_study, stored_study_folders
from torch_mars.train.study.tune import plan_of_identity

ROOT = Path(__file__).resolve().parents[2]
RULES = ("mars-adamw", "mars-shampoo")
CAMPAIGNS = ("campaign-3", "campaign-4")
OUT = campaign_folder(ROOT, "campaign-4") / "gamma-to-take.md"


def shortfalls(folder: Path) -> dict[str, dict[float, float]]:
    """Per rule the study in ``folder`` searched: per gamma it scored, its best selection score
    less the best at any gamma."""
    trials, identity, history = stored_study(folder)
    plan = plan_of_identity(identity, folder, None, folder.name, history)
    results = finished_results(trials)
    found: dict[str, dict[float, float]] = {}
    for search in plan.searches():
        if search.optimizer not in RULES or "gamma" not in search.dimensions:
            continue
        state = search.replay(results)
        best: dict[float, float] = {}
        for point, score in state.trials:
            if math.isfinite(score):
                gamma = LADDERS["gamma"].value(point["gamma"])
                best[gamma] = min(best.get(gamma, math.inf), score)
        if best:
            floor = min(best.values())
            found[search.optimizer] = {g: s - floor for g, s in sorted(best.items())}
    return found


def table() -> str:
    gammas = LADDERS["gamma"].levels
    rows: dict[str, list[tuple[str, dict[float, float]]]] = {rule: [] for rule in RULES}
    seen: set[str] = set()
    for name in CAMPAIGNS:
        for folder in stored_study_folders(campaign_folder(ROOT, name)):
            if ".gamma=0." in folder.name or folder.parent.parent.name != name:
                continue
            point = f"{folder.parent.name}/{folder.name}"
            if name != CAMPAIGNS[0] and point in seen:
                continue  # a re-read walks the earlier campaign's selection: the same trials
            seen.add(point)
            label = f"{name}/{point}"
            for rule, gaps in shortfalls(folder).items():
                rows[rule].append((label, gaps))
    lines = [
        "# The gamma to take: a screen on the searches' own trials",
        "",
        "Written by benchmarks/studies/gamma_to_take.py (its docstring says what this is and is "
        "not). Each cell: the best selection score at that gamma less the best at any gamma, at "
        "the point (0: the gamma the search's best trial took; — : no trial at that gamma).",
    ]
    for rule in RULES:
        lines += ["", f"## {rule}", ""]
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
    return "\n".join(lines) + "\n"


def main() -> int:
    text = table()
    write_text_atomically(OUT, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
