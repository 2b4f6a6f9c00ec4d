"""The map decided (issue "The map decided, first stage"): a campaign declared whole before its
first run, then run point by point on one protocol (one selection seed a trial, 4 finalists on
two more seeds, each winner held out on 4 seeds x 3 data orders) and one search design.

Each campaign has its folder, ``benchmarks/results/NAME/``, and its search (:data:`CAMPAIGNS`):
``campaign`` ran the first surface design (b64-4x finished; closed when the search benchmark
showed that design short of its references), ``campaign-2`` the second (b64-4x finished; closed
when it too fell short at b64-4x), ``campaign-3`` runs the third, tune's default; each
campaign's b64-4x study is its design's real run in the search benchmark.
``NAME/campaign.json`` is the declaration: every point (the nine of ``tiny`` in their order, the
second model's two), the optimizers at each, the trial budget, the protocol's flags, the first
stage, and the family of comparisons Holm runs over. It is written once (``--declare``) and
committed before any run; every later command reads it and refuses to run if the file differs
from what this script declares (a family changed mid-campaign): a changed design is a new
campaign in a new folder, never an edit.

Each point is one study, ``NAME/MODEL/POINT/study.log`` (a journal), resumable and landed like
the map's: ``--snapshot`` gzips each live journal beside itself (whole records only, so a
study still training may land and resume elsewhere), each command snapshots the studies it ran
or reported when it ends (a report never lands beside an older journal), and a point whose
journal is missing starts from its snapshot. README's and docs/results.md's generated block
reads the newest campaign.

    python benchmarks/studies/campaign.py --declare        # once, before the first run
    python benchmarks/studies/campaign.py --stage 1    # the first stage, in order
    python benchmarks/studies/campaign.py --points tiny/b64-4x   # one worker a core
    python benchmarks/studies/campaign.py --snapshot | --status
    python benchmarks/studies/campaign.py --report  # each begun point's report, then
        # verdicts.md: every declared comparison, Holm over the family, pending ones said
        # and map.png: each declared point's gap per rule, its word, pending ones marked
    python benchmarks/studies/campaign.py --campaign campaign --report  # the closed one
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from lab.campaigns import (
    CAMPAIGN_TRIALS,
    CAMPAIGNS,
    CURRENT,
    SELECTION_FLAGS,
    STATE_BEGIN,
    STATE_END,
    WINNERS_BEGIN,
    WINNERS_END,
    campaign_folder,
    format_campaign_table,
    format_lead,
    format_winners_table,
    later_stage_points,
    plot_campaign,
    replace_block,
    tune_studies_at,
)
from lab.fight_map import BLOCK, EVAL_TOKENS, POINTS, FightMap, steps_at
from lab.gamma_reads import gamma_reads
from lab.map_report import format_progress, progress_rows

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.train.runtime import describe_device, resolve_device
from torch_mars.train.study.engine import start_afresh
from torch_mars.train.study.family import EQUIVALENCE_MARGIN
from torch_mars.train.study.family_reads import campaign_rows, fixed_gamma_folder
from torch_mars.train.study.outcomes import median_run_seconds
from torch_mars.train.study.pairs import machine_of
from torch_mars.train.study.profiled import planned_runs
from torch_mars.train.study.selection import PROTOCOL, Selection
from torch_mars.train.study.space import shares_space
from torch_mars.train.study.store import (
    restore_journals,
    snapshot_journals,
    stored_study,
    stored_study_folders,
)
from torch_mars.train.study.tune_record import read_tune_record
from torch_mars.train.study.two_stage import Stage, design_of, second_stage_pairs
from torch_mars.train.study.workers import threads_per_run

MAP = FightMap(Path(__file__).resolve().parents[2])
ROOT = MAP.root
SECOND_MODEL_DATA = "../shared/data/text/python311-docs.txt.gz"
# Where a model's studies from before the campaigns are (a point of the same budget there
# prices the campaign's point before it begins).
EARLIER_STUDIES = {"tiny-w64": ROOT / "benchmarks" / "results" / "second-model"}
ALL_FIVE = ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo")
PAIRS = (("mars-adamw", ("adamw", "nadamw")), ("mars-shampoo", ("muon",)))


def folder_of(name: str) -> Path:
    return campaign_folder(ROOT, name)


def declaration_of(name: str) -> Path:
    return folder_of(name) / "campaign.json"


def protocol_of(name: str) -> str:
    if name == "campaign-4":
        return declared_second_stage()["protocol"]
    return f"--search {CAMPAIGNS[name]} {SELECTION_FLAGS}"


# campaign-4 (issues #82, #83): every pair of a verdict its own seed and data order, drawn
# once from these ranges (disjoint from the selection's seed 0 and order 0 and the finalists'
# 1-5), by a generator seeded with PAIR_DRAW_SEED; a point's first stage reads the first
# FIRST_PAIRS, its second stage the next ones, up to PAIR_CAP in all.
PAIR_RANGE = (1000, 9999)
PAIR_DRAW_SEED = 4
FIRST_PAIRS = 12
PAIR_CAP = 64
SECOND_STAGE_POINTS = (
    "tiny/b16-1x",
    "tiny/b256-4x",
    "tiny/b128-4x",
    "tiny-w64/b16-4x",
    "tiny/b128-16x",
    "tiny/b16-8x",
)


def control_comparisons(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The declared point ``entry``'s comparisons of each MARS rule against its same-cost
    controls that the point runs."""
    out = []
    for rule, controls in PAIRS:
        ran = [c for c in controls if c in entry["optimizers"]]
        if rule in entry["optimizers"] and ran:
            out.append(
                {"model": entry["model"], "point": entry["point"], "rule": rule, "controls": ran}
            )
    return out


def declared_pairs() -> list[list[int]]:
    """campaign-4's :data:`PAIR_CAP` pairs ``[seed, data order]``, in the order they are read:
    seeds and orders each drawn without replacement from :data:`PAIR_RANGE`."""
    draw = random.Random(PAIR_DRAW_SEED)
    population = range(PAIR_RANGE[0], PAIR_RANGE[1] + 1)
    seeds = draw.sample(population, PAIR_CAP)
    orders = draw.sample(population, PAIR_CAP)
    return [[s, o] for s, o in zip(seeds, orders, strict=True)]


def declared_second_stage() -> dict[str, Any]:
    """campaign-4, declared whole before its first run: the map's eleven points on tune's
    default search (selection seed 0 on order 0; 4 finalists each re-read on 5 more seeds, each
    on its own order: a 1-in-5 divergence shows among 6 runs with probability 0.74), every
    winner read on independent pairs (the first FIRST_PAIRS in tune, more in a second stage
    where the first cannot decide), and a family of 44 comparisons: at each point each rule
    against its strongest same-cost control and against itself at gamma = 0 (the correction's
    worth, lr re-profiled)."""
    first = " ".join(f"{s}:{o}" for s, o in declared_pairs()[:FIRST_PAIRS])
    third = declared("campaign-3")
    family = []
    for entry in third["points"]:
        family += control_comparisons(entry)
        for rule, _ in PAIRS:
            family.append(
                {
                    "model": entry["model"],
                    "point": entry["point"],
                    "rule": rule,
                    "controls": [f"{rule}@gamma=0"],
                }
            )
    return {
        "campaign": "the map, second stage: verdicts that decide",
        "trials": CAMPAIGN_TRIALS,
        "protocol": f"--search {CAMPAIGNS['campaign-4']} --seeds 0 --data-seed 0 --finalists 4 "
        f"--final-seeds 1 2 3 4 5 --final-data-seeds 1 2 3 4 5 --pairs {first}",
        "pairs": {
            "range": list(PAIR_RANGE),
            "draw_seed": PAIR_DRAW_SEED,
            "first_stage": FIRST_PAIRS,
            "cap": PAIR_CAP,
            "declared": declared_pairs(),
            "machine": "both sides of a pair on one machine type (the owner record's device)",
        },
        "verdict": {
            "alpha": 0.05,
            "margin": 0.005,
            "multiplicity": "Holm over the whole family",
            "looks": "two: the first pairs, then (inconclusive comparisons only) more pairs; "
            "inverse-normal combination of the stages' paired t, weights sqrt(first/cap) and "
            "sqrt(1 - first/cap), Pocock boundaries (torch_mars.train.study.two_stage)",
            "words": "win / loss: the adjusted interval excludes 0; equivalent: inside "
            "+-margin; else inconclusive",
            "opponent": "each side at its best-known setting at the point, chosen on reads "
            "disjoint from the pairs",
            "diverged": "a run whose loss is not finite, or more than 0.05 above its side's "
            "median on the comparison's pairs; counted and shown, never dropped from a mean",
        },
        "points": third["points"],
        "first_stage_reread": third["first_stage"],
        "second_stage": list(SECOND_STAGE_POINTS),
        "family": family,
    }


def declared(name: str = CURRENT) -> dict[str, Any]:
    """The campaign ``name`` as this script declares it."""
    if name == "campaign-4":
        return declared_second_stage()
    tiny = [
        {"model": "tiny", "data": "stdlib", "point": p, "optimizers": list(ALL_FIVE)}
        for p in POINTS
    ]
    second = [
        {
            "model": "tiny-w64",
            "data": SECOND_MODEL_DATA,
            "point": p,
            "optimizers": ["nadamw", "mars-adamw", "muon", "mars-shampoo"],
        }
        for p in ("b16-4x", "b64-4x")
    ]
    points = tiny + second
    first_stage = ["tiny/b64-4x", "tiny/b16-4x", "tiny/b256-16x", "tiny/b4-4x", "tiny-w64/b64-4x"]
    family = []
    for entry in points:
        if f"{entry['model']}/{entry['point']}" in first_stage:
            family += control_comparisons(entry)
    return {
        "campaign": "the map decided",
        "trials": CAMPAIGN_TRIALS,
        "protocol": protocol_of(name),
        "heldout": "seeds 3-6 x data orders 1-3 (12 crossed pairs); interval from seed and data "
        "order as crossed random effects (torch_mars.train.study.verdict.crossed_gap)",
        "verdict": "each rule against its control with the lowest held-out mean; Holm at 0.05 "
        "over the family below (the first stage's comparisons)",
        "points": points,
        "first_stage": first_stage,
        "family": family,
    }


def check_declaration(name: str = CURRENT) -> dict[str, Any]:
    """The committed declaration of ``name``, refused if it is missing or differs from
    :func:`declared`."""
    declaration = declaration_of(name)
    if not declaration.is_file():
        raise SystemExit(f"{declaration} is missing: run --declare and commit it before any run")
    try:
        stored = json.loads(declaration.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"{declaration}: not a campaign declaration ({error})") from None
    if stored != declared(name):
        raise SystemExit(
            f"{declaration} differs from the campaign this script declares: a declared "
            "campaign does not change mid-way (declare a new one under another folder)"
        )
    return stored


def pairs_read(name: str, label: str) -> dict[str, int]:
    """How many of campaign-4's declared pairs each optimizer at the point ``label`` reads now
    (its report says; a second look widens only its comparisons' sides); empty before the
    point's first report (each then reads the first :data:`FIRST_PAIRS`)."""
    report = folder_of(name) / label / "tune.json"
    if name != "campaign-4" or not report.is_file():
        return {}
    ran = read_tune_record(report).optimizers
    return {o.optimizer: max(FIRST_PAIRS, len(o.heldout_pairs)) for o in ran}


def peer_winners(name: str) -> bool:
    """Whether campaign ``name`` reads each side at its best-known setting: campaign-4's
    declaration says so ("opponent": chosen on reads disjoint from the pairs; its peers'
    winners read on the choosing runs, ``tune --peer-winners on``); the campaigns before read
    their searches' own winners, as ``tune`` did then."""
    return name == "campaign-4"


def protocol_at(name: str, label: str, counts: Mapping[str, int]) -> str:
    """The campaign's protocol at ``label`` as tune's flags for a study of the optimizers
    ``counts`` names: campaign-4's with the first ``counts[o]`` declared pairs for each
    optimizer ``o`` (``--pairs`` as many as the most, ``--pairs-read`` for those reading fewer)
    and its best-known settings (:func:`peer_winners`)."""
    protocol = protocol_of(name)
    if not peer_winners(name):  # the map's arguments read the searches' own winners
        return protocol
    most = max(counts.values())
    head = protocol.split(" --pairs ")[0]
    listed = " ".join(f"{s}:{o}" for s, o in declared_pairs()[:most])
    fewer = " ".join(f"{o}={n}" for o, n in counts.items() if n < most)
    # declared before the stable-winners rule (2026-12-07): its finalists rank by the mean
    protocol = f"{head} --peer-winners on --stable-winners off --pairs {listed}"
    return protocol + (f" --pairs-read {fewer}" if fewer else "")


def counts_at(name: str, entry: dict[str, Any]) -> dict[str, int]:
    """The pairs each optimizer of the point ``entry`` reads now (:func:`pairs_read`)."""
    read = pairs_read(name, f"{entry['model']}/{entry['point']}")
    return {o: read.get(o, FIRST_PAIRS) for o in entry["optimizers"]}


def second_look_counts(name: str, entry: dict[str, Any]) -> dict[str, int]:
    """The pairs each optimizer of the point ``entry`` reads after its second look: the sides
    of its inconclusive comparisons their first pairs plus the most any of those plans from
    its measured spread (:func:`~torch_mars.train.study.two_stage.second_stage_pairs`, at the
    level its word was read at over the whole family), up to the cap, and likewise a rule whose
    gamma to take one look read neither side of the margin (:mod:`lab.gamma_reads`: its study
    at the candidate then follows the rule's pairs, ``--gamma-to-take``); every other optimizer
    what it reads now (none gains where no comparison is inconclusive, one was already looked
    at twice, or the point is not read yet)."""
    label = f"{entry['model']}/{entry['point']}"
    rows = [r for r in campaign_rows(declaration_of(name)) if r.comparison.scope == label]
    design = design_of(json.loads(declaration_of(name).read_text()))
    counts = counts_at(name, entry)
    wanted, sides = FIRST_PAIRS, set()
    for row in rows:
        gap = row.gap
        if gap is None or row.decision.word != "inconclusive" or len(gap.stages) != 1:
            continue
        extra = second_stage_pairs(Stage(*gap.stages[0]), design, row.decision.level)
        wanted = max(wanted, FIRST_PAIRS + extra)
        sides |= {row.comparison.rule, row.control}  # a control at gamma = 0 is no optimizer
    declaration = folder_of(name) / "gamma-to-take.json"
    reads = gamma_reads(declaration)[0] if declaration.is_file() else []
    for read in (r for r in reads if r.label == label and r.gap is not None):
        if read.state(design.margin) != "not shown either way" or len(read.gap.stages) != 1:
            continue
        level = read.decision.level if read.decision is not None else math.nan
        extra = second_stage_pairs(Stage(*read.gap.stages[0]), design, level)
        wanted = max(wanted, FIRST_PAIRS + extra)
        sides.add(read.rule)  # its study at the candidate follows the rule's pairs
    wanted = min(wanted, PAIR_CAP)
    return {o: max(n, wanted) if o in sides else n for o, n in counts.items()}


# The correction's worth (campaign-4's RULE vs RULE@gamma=0), set 2026-12-06 before any such
# run, and the gamma to take (RULE vs RULE@gamma=CANDIDATE, gamma-to-take.json, 2026-12-07):
# the rule's winner at the point with gamma fixed and every other dimension held at the
# winner's, its lr re-profiled by tune's default search over this many trials (with nothing
# else free it spends them on the lr), its finalists on the campaign's five more seeds, and
# read on the pairs the rule reads at the point.
FIXED_GAMMA_TRIALS = 12
RULES = ("mars-adamw", "mars-shampoo")


def gamma_to_take(name: str) -> dict[str, float]:
    """Each rule's candidate gamma as campaign ``name``'s gamma-to-take declaration states it
    (written by ``gamma_to_take.py --declare`` before any run at a candidate); empty where
    none is declared."""
    declared = folder_of(name) / "gamma-to-take.json"
    if not declared.is_file():
        return {}
    return {rule: float(g) for rule, g in json.loads(declared.read_text())["candidates"].items()}


def point_winner(name: str, label: str, rule: str) -> dict[str, Any] | None:
    """The setting ``rule`` is read at (its best-known) at the point ``label`` of campaign
    ``name``, from the point's report; None until the report has it."""
    point_report = folder_of(name) / label / "tune.json"
    if not point_report.is_file():
        return None
    ran = read_tune_record(point_report).entry(rule)
    if ran is None or not ran.finished or not ran.winner:
        return None
    return dict(ran.winner)


def fixed_gamma_arguments(
    name: str, entry: dict[str, Any], rule: str, gamma: float, jobs: int, report: bool
) -> list[str] | None:
    """``torch-mars tune``'s arguments for ``rule`` at ``gamma`` at the point ``entry`` of
    campaign-4 (:data:`FIXED_GAMMA_TRIALS`); None until the point's report has the rule's
    winner (:func:`point_winner`)."""
    label = f"{entry['model']}/{entry['point']}"
    winner = point_winner(name, label, rule)
    if winner is None:
        return None
    held = {d: v for d, v in winner.items() if d not in ("lr", "gamma")}
    fixed = ["--fixed", *(f"{d}={v}" for d, v in sorted({**held, "gamma": gamma}.items()))]
    return fixed + MAP.tune_arguments(
        entry["point"],
        jobs,
        FIXED_GAMMA_TRIALS,
        report,
        model=entry["model"],
        data=entry["data"],
        optimizers=(rule,),
        protocol=protocol_at(name, label, {rule: counts_at(name, entry)[rule]}),
        study=fixed_gamma_folder(folder_of(name), label, rule, gamma),
    )


# campaign-4's best-known settings at a point read, beside the peers' winners, the winners of
# the stored studies of the point whose searches spent the most trials (KNOWN_TRIALS: the map's
# references), where they tuned the same budget; set 2026-12-07, before any pair of a
# first-stage point was read (the second-stage points have no such study).
KNOWN_TRIALS = 80


def known_winner_studies(entry: dict[str, Any]) -> list[Path]:
    """The folders of the stored reports at the point ``entry`` whose searches spent
    :data:`KNOWN_TRIALS` trials or more and tuned the campaign's budget there."""
    if entry["model"] != "tiny":
        return []
    results = ROOT / "benchmarks" / "results"
    steps, _ = run_budget(f"{entry['model']}/{entry['point']}")
    budget = {"model": "tiny", "steps": steps, "batch_size": POINTS[entry["point"]][0]}
    budget["eval_tokens"] = EVAL_TOKENS
    found = []
    for folder in ("fight-map", "search-benchmark"):
        for report in sorted((results / folder / entry["point"]).glob("**/tune.json")):
            record = read_tune_record(report)
            same = all(record.budget.get(k) == v for k, v in budget.items())
            if record.trials >= KNOWN_TRIALS and same:
                found.append(report.parent)
    return found


def arguments_of(
    name: str,
    entry: dict[str, Any],
    jobs: int,
    report: bool,
    counts: Mapping[str, int] | None = None,
) -> list[str]:
    """``torch-mars tune``'s arguments for the point ``entry`` of campaign ``name``: its
    declared family, the campaign's protocol (campaign-4's with ``counts[o]`` of its declared
    pairs for each optimizer ``o``, default as many as each reads, :func:`counts_at`), and
    every other tune study stored at the point
    as a donor of the runs it already trained (``--reuse-runs``; runs repeat exactly on one
    machine, and the engine takes none trained elsewhere). The points campaign-4 re-reads from
    campaign-3's first stage (its ``first_stage_reread``) walk campaign-3's selection study
    again (``--reread``: its starts, its selection runs whichever machine trained them,
    campaign-3's an Intel Xeon's); their finalists' other seeds, peers' reads and pairs train
    here."""
    label = f"{entry['model']}/{entry['point']}"
    family = ["--family", str(declaration_of(name).relative_to(ROOT))]
    study = folder_of(name) / label
    reread = (
        folder_of("campaign-3") / label
        if label in declared(name).get("first_stage_reread", ())
        else None
    )
    donors = [
        str(f.relative_to(ROOT))
        for f in tune_studies_at(ROOT, entry["model"], entry["point"])
        if f not in (study, reread)
    ]
    reuse = ["--reuse-runs", *donors] if donors and not report else []
    if reread is not None:
        reuse += ["--reread", str(reread.relative_to(ROOT))]
    known = known_winner_studies(entry) if peer_winners(name) else []
    if known:
        reuse += ["--known-winners", *(str(f.relative_to(ROOT)) for f in known)]
    return (
        family
        + reuse
        + MAP.tune_arguments(
            entry["point"],
            jobs,
            CAMPAIGN_TRIALS,
            report,
            model=entry["model"],
            data=entry["data"],
            optimizers=tuple(entry["optimizers"]),
            protocol=protocol_at(name, label, counts or counts_at(name, entry)),
            study=study,
        )
    )


def run_budget(label: str) -> tuple[int, int]:
    """A run's steps and tokens at the campaign point ``label`` (``MODEL/POINT``)."""
    model, point = label.split("/", 1)
    steps = steps_at(point, model)
    return steps, steps * POINTS[point][0] * BLOCK


def fit_run_cost(runs: list[tuple[int, int, float]]) -> tuple[float, float] | None:
    """Seconds a run costs per step and per token, ``(a, b)``, least squares through the
    origin on ``(steps, tokens, seconds)`` of two or more points (a step's fixed cost, which
    small batches pay most, and the cost of its tokens); None below two."""
    if len(runs) < 2:
        return None
    x = np.array([[steps, tokens] for steps, tokens, _ in runs], dtype=float)
    y = np.array([seconds for _, _, seconds in runs])
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(a), float(b)


def earlier_estimate(label: str, runs: int) -> str:
    """The last two cells of a waiting point's row where too few points of its model are begun:
    ``runs`` at the median run of the model's earlier study at the same point and budget
    (:data:`EARLIER_STUDIES`; its runs timed by the wall clock, beside whatever ran then), or
    unknown."""
    model, point = label.split("/", 1)
    unknown = f"— | fewer than two begun points of {model} |"
    if model not in EARLIER_STUDIES:
        return unknown
    folder = EARLIER_STUDIES[model] / point
    if (folder / "study.log").is_file() or (folder / "study.log.gz").is_file():
        trials, identity, _ = stored_study(folder)
        typical = median_run_seconds(trials)
        if typical is not None and identity.get("budget", {}).get("steps") == run_budget(label)[0]:
            where = folder.relative_to(ROOT / "benchmarks" / "results")
            return (
                f"{runs * typical / 3600:.1f} | the median run of {where}, the model's earlier "
                f"study at this budget ({typical / 60:.1f} min, wall time) |"
            )
    return unknown


def selection_of(name: str) -> Selection:
    """The selection protocol campaign ``name`` declares (tune's default for the first three)."""
    if name != "campaign-4":
        return dataclasses.replace(PROTOCOL, peer_winners=False, stable_winners=False)
    first = [tuple(p) for p in declared_pairs()[:FIRST_PAIRS]]
    finals = (1, 2, 3, 4, 5)
    return Selection(
        seeds=(0,),
        heldout=(),
        heldout_data_seeds=(),
        finalists=4,
        final_seeds=finals,
        final_data_seeds=finals,
        pairs=tuple(first),
        peer_winners=peer_winners(name),
    )


def waiting_text(name: str, campaign: dict[str, Any], begun: list[str], waiting: list[str]) -> str:
    """The first stage's points not begun: their planned runs and their run hours as
    estimated from the points of the same model begun (:func:`fit_run_cost` on each begun
    point's median run), or said unknown where fewer than two are."""
    folder = folder_of(name)
    optimizers = {f"{e['model']}/{e['point']}": e["optimizers"] for e in campaign["points"]}
    lines = [
        "| point not begun | runs planned | run hours (estimated) | from |",
        "|---|---:|---:|---|",
    ]
    for label in waiting:
        model = label.split("/", 1)[0]
        measured = []
        for done in (b for b in begun if b.split("/", 1)[0] == model):
            typical = median_run_seconds(stored_study(folder / done)[0])
            if typical is not None:
                measured.append((*run_budget(done), typical))
        selection, chosen = selection_of(name), optimizers[label]
        peers = sum(a != b and shares_space(a, b) for a in chosen for b in chosen)
        choosing = len(selection.choosing_pairs()) if selection.peer_winners else 0
        runs = planned_runs(CAMPAIGN_TRIALS, selection) * len(chosen) + peers * choosing
        if label in campaign.get("first_stage_reread", ()):  # its selection runs are taken
            runs -= CAMPAIGN_TRIALS * len(selection.seeds) * len(chosen)
        fit = fit_run_cost(measured)
        if fit is None:
            lines.append(f"| {label} | {runs} | {earlier_estimate(label, runs)}")
            continue
        steps, tokens = run_budget(label)
        hours = runs * (fit[0] * steps + fit[1] * tokens) / 3600
        lines.append(
            f"| {label} | {runs} | {hours:.1f} | {fit[0] * 1e3:.1f} ms a step + "
            f"{fit[1] * 1e6:.2f} µs a token, fitted on {len(measured)} begun points' median run |"
        )
    return "\n".join(lines)


def state_text(name: str, campaign: dict[str, Any]) -> str:
    """Where the campaign stands: the first stage's points begun and not, each begun study's
    runs and run hours, done and left (at its median run so far), and each point not begun
    with its planned runs and estimated run hours (:func:`waiting_text`)."""
    folder = folder_of(name)
    held = stored_study_folders(folder)
    stage, which = (
        (campaign["first_stage"], "First stage")
        if "first_stage" in campaign
        else (campaign["second_stage"], "Second stage")
    )
    reread = list(campaign.get("first_stage_reread", ()))
    begun = [p for p in stage + reread if folder / p in held]
    waiting = [p for p in stage + reread if p not in begun]
    later = [p for p in later_stage_points(campaign) if p not in stage + reread]
    reread_line = (
        [
            f"First stage re-read (campaign-3's selection walked again, `tune --reread`): "
            f"{sum(p in begun for p in reread)} of {len(reread)} points begun "
            f"({', '.join(p for p in reread if p in begun) or 'none'}).",
            "",
        ]
        if reread
        else []
    )
    names = list(CAMPAIGNS)
    older = names.index(name) < names.index(CURRENT)
    closed = [f"Closed: campaign {CURRENT} supersedes it.", ""] if older else []
    return "\n".join(
        [
            *closed,
            f"{which}: {sum(p in begun for p in stage)} of {len(stage)} points begun "
            f"({', '.join(p for p in stage if p in begun) or 'none'}); not begun: "
            f"{', '.join(p for p in waiting if p in stage) or 'none'}. "
            f"Declared for other stages: {', '.join(later) or 'none'}.",
            "",
            *reread_line,
            format_progress(progress_rows(folder)),
            *(["", waiting_text(name, campaign, begun, waiting)] if waiting else []),
            *(["", *unpaired] if (unpaired := unpaired_lines(name)) else []),
        ]
    )


def unpaired_lines(name: str) -> list[str]:
    """A line per study beside a point (a rule at a fixed gamma) whose pairs trained on no
    machine and thread count the point's pairs did: none of its pairs is read, its comparison
    shows pending, and the command that trains it again is named."""
    folder = folder_of(name)
    lines = []
    for study in sorted(folder.glob("*/*.gamma=*")):
        scope, _, rest = f"{study.parent.name}/{study.name}".partition(".gamma=")
        gamma, _, rule = rest.rpartition(".")
        theirs = pairs_machines(study / "tune.json", rule) - {""}
        points = pairs_machines(folder / scope / "tune.json", rule) - {""}
        if theirs and points and not theirs & points:
            flag = "--gamma0" if float(gamma) == 0 else "--gamma-to-take"
            lines.append(
                f"- {study.name}: not read; its pairs trained on {', '.join(sorted(theirs))}, "
                f"the point's on {', '.join(sorted(points))} (`campaign.py --points {scope} "
                f"{flag}` with the point's --jobs trains it afresh)."
            )
    return lines


def this_machine(jobs: int) -> str:
    """The machine a run of this command trains on (:func:`~torch_mars.train.study.pairs.
    machine_of`): this device, at the threads ``jobs`` workers give each run."""
    device = describe_device(resolve_device("auto"))
    return machine_of({"device": device, "threads": threads_per_run(jobs)})


def pairs_machines(report: Path, optimizer: str) -> set[str]:
    """The machines ``optimizer``'s held-out pairs trained on, as the report ``report`` records
    them (empty where it has none, or records none: a report before 2026-12-07)."""
    ran = read_tune_record(report).entry(optimizer) if report.is_file() else None
    return set(ran.heldout_machines) if ran is not None else set()


def machine_mismatch(name: str, label: str, optimizers: list[str], jobs: int) -> str | None:
    """Why a command with ``jobs`` workers must not train the point ``label``'s pairs of
    ``optimizers``: they would train on another machine or thread count than its pairs so far,
    and a verdict leaves such pairs out (the runs spent for nothing); None where it may."""
    machine = this_machine(jobs)
    report = folder_of(name) / label / "tune.json"
    there = set().union(*(pairs_machines(report, o) for o in optimizers)) - {""}
    if there and there != {machine}:
        return (
            f"--jobs {jobs}: this command trains on {machine}; {label}'s pairs trained on "
            f"{', '.join(sorted(there))}, and a verdict pairs runs of one machine at one thread "
            "count only (give the --jobs they trained with)"
        )
    return None


def land(study: Path) -> None:
    """Snapshot the journal under ``study`` once its command ends (finished, stopped or
    failed), so that the report it wrote and the journal it read land together: a report is
    never committed beside a snapshot older than it, and a stopped study resumes in another
    checkout from every run it finished."""
    for written in snapshot_journals(study):
        shown = written.relative_to(ROOT) if written.is_relative_to(ROOT) else written
        print(f"wrote {shown}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--campaign", choices=list(CAMPAIGNS), default=CURRENT, help=f"default {CURRENT}"
    )
    parser.add_argument("--declare", action="store_true", help="write campaign.json (once)")
    parser.add_argument(
        "--stage",
        type=int,
        choices=[1, 2],
        help="run the first stage's points (campaign-4: 2, the second stage's six)",
    )
    parser.add_argument(
        "--points",
        nargs="+",
        default=[],
        help="MODEL/POINT labels to run (with --report: the points whose studies it re-reports, "
        "default all; the verdicts, state and map read every point's stored report)",
    )
    fixed_gamma = parser.add_mutually_exclusive_group()  # one gamma a command
    fixed_gamma.add_argument(
        "--gamma0",
        action="store_true",
        help="campaign-4: read each MARS rule's winner at the --points at gamma = 0, its lr "
        "re-profiled, on the point's pairs (the correction's worth)",
    )
    fixed_gamma.add_argument(
        "--gamma-to-take",
        action="store_true",
        help="campaign-4: read each MARS rule's winner at the --points at its declared gamma to "
        "take (gamma-to-take.json), its lr re-profiled, on the point's pairs, where the winner "
        "takes another gamma",
    )
    parser.add_argument(
        "--second-look",
        action="store_true",
        help="campaign-4: give the --points whose first look left a comparison inconclusive "
        "(or a gamma to take neither side of the margin) the pairs its spread plans (up to "
        "the cap), then read them; --gamma-to-take then widens the candidate's study alike",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="workers, each run on the cores split between them (default: one a core, each "
        "run on one thread, as campaign-4's pairs trained; a point's pairs train at one count)",
    )
    parser.add_argument("--snapshot", action="store_true")
    parser.add_argument("--status", action="store_true")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args(argv)
    name = args.campaign
    folder, declaration = folder_of(name), declaration_of(name)
    if args.declare:
        if declaration.exists():
            check_declaration(name)
            print(f"{declaration} already declared; unchanged")
            return 0
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomically(declaration, json.dumps(declared(name), indent=2) + "\n")
        print(f"wrote {declaration.relative_to(ROOT)}: commit it before any run")
        return 0
    campaign = check_declaration(name)
    by_label = {f"{e['model']}/{e['point']}": e for e in campaign["points"]}
    stages = {1: "first_stage", 2: "second_stage"}
    if args.stage and stages[args.stage] not in campaign:
        parser.error(f"--stage {args.stage}: campaign {name} declares no such stage")
    if args.stage:
        labels = campaign[stages[args.stage]]
    elif args.report:  # every run point unless --points names some (a live study is left be)
        labels = (
            args.points
            or campaign.get("first_stage")
            or (campaign["second_stage"] + campaign.get("first_stage_reread", []))
        )
    else:
        labels = args.points
    unknown = [label for label in labels if label not in by_label]
    if unknown:
        parser.error(f"--points: {unknown} are not declared ({', '.join(by_label)})")
    if args.status:
        print(state_text(name, campaign))
        return 0
    if args.snapshot:
        for entry in campaign["points"]:
            label = f"{entry['model']}/{entry['point']}"
            # the point's study and, beside it, each rule's at gamma = 0 (--gamma0) and at
            # its gamma to take (--gamma-to-take)
            candidates = gamma_to_take(name)
            studies = [folder / label] + [
                fixed_gamma_folder(folder, label, rule, gamma)
                for rule in RULES
                for gamma in sorted({0.0, candidates.get(rule, 0.0)})
            ]
            for study in studies:
                land(study)
        return 0
    if (args.second_look or args.gamma0 or args.gamma_to_take) and name != "campaign-4":
        parser.error(
            f"--second-look, --gamma0, --gamma-to-take: campaign-4's; {name} declares none"
        )
    if args.gamma0 or args.gamma_to_take:
        candidates = gamma_to_take(name)
        if args.gamma_to_take and not candidates:
            parser.error(
                f"--gamma-to-take: {name} declares no gamma to take yet "
                "(benchmarks/studies/gamma_to_take.py --declare)"
            )
        rules = {
            label: [r for r in RULES if r in by_label[label]["optimizers"]] for label in labels
        }
        for problem in (machine_mismatch(name, lb, rules[lb], args.jobs) for lb in labels):
            if problem:
                parser.error(problem)
        for label in labels:
            entry = by_label[label]
            for rule in rules[label]:
                gamma = 0.0 if args.gamma0 else candidates[rule]
                winner = point_winner(name, label, rule)
                if winner is None:
                    print(f"{label}: {rule}'s winner not read yet; no run", flush=True)
                    continue
                if args.gamma_to_take and math.isclose(winner["gamma"], gamma):
                    print(f"{label}: {rule}'s winner takes gamma {gamma:g}; no run", flush=True)
                    continue
                arguments = fixed_gamma_arguments(name, entry, rule, gamma, args.jobs, False)
                study = fixed_gamma_folder(folder, label, rule, gamma)
                trained = pairs_machines(study / "tune.json", rule) - {""}
                if trained and trained != {this_machine(args.jobs)}:
                    restore_journals(study)
                    start_afresh(f"journal:{study / 'study.log'}", study.name, "campaign.py")
                    print(
                        f"{study.name}: its pairs trained on {', '.join(sorted(trained))}, not "
                        "the point's: started afresh (its runs and report stay in git history)",
                        flush=True,
                    )
                print("torch-mars tune " + shlex.join(arguments), flush=True)
                code = torch_mars(["tune", *arguments])
                land(study)
                if code:
                    return code
        return 0
    if not args.report:
        for label in labels:
            if problem := machine_mismatch(name, label, by_label[label]["optimizers"], args.jobs):
                parser.error(problem)
    for label in labels:
        entry = by_label[label]
        restore_journals(folder / entry["model"] / entry["point"])
        if args.report and not (folder / label / "study.log").is_file():
            continue  # not begun: pending in the verdicts
        counts = None
        if args.second_look:
            counts = second_look_counts(name, entry)
            wider = [o for o, n in counts.items() if n > counts_at(name, entry)[o]]
            if not wider:
                print(f"{label}: no comparison wants a second look", flush=True)
                continue
            more = max(counts.values()) - FIRST_PAIRS
            print(f"{label}: a second look on {more} more pairs for {', '.join(wider)}", flush=True)
        arguments = arguments_of(name, entry, args.jobs, args.report, counts)
        print("torch-mars tune " + shlex.join(arguments), flush=True)
        code = torch_mars(["tune", *arguments])
        land(folder / label)
        if code:
            return code
    if args.report:
        state = state_text(name, campaign)
        write_text_atomically(folder / "state.md", state + "\n")
        rows = campaign_rows(declaration)
        table = format_campaign_table(rows)
        write_text_atomically(folder / "verdicts.md", table + "\n")
        design = design_of(campaign)
        margin = design.margin if design is not None else EQUIVALENCE_MARGIN
        plot_campaign(rows, folder / "map.png", later_stage_points(campaign), margin)
        if name == CURRENT:
            for document in (ROOT / "README.md", ROOT / "docs" / "results.md"):
                text = replace_block(document.read_text(), format_lead(rows, declaration))
                if document.name == "results.md":
                    text = replace_block(text, state, STATE_BEGIN, STATE_END)
                    winners = format_winners_table(declaration)
                    text = replace_block(text, winners, WINNERS_BEGIN, WINNERS_END)
                write_text_atomically(document, text)
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
