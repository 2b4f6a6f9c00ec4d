"""The map redone as a fight that decides (issue "A fight that decides"): every point through
``torch-mars tune`` with one trial budget per optimizer, the lr-profiled search, a validation
set of 131,072 fixed tokens, and each winner read on seeds 3-5 x data orders 1-2, which no
selection saw. Two pairs: MARS-AdamW against the better of AdamW and NAdamW, MARS-Shampoo
against Muon; each gap is a paired 95% interval, decided by Holm's correction over every
comparison of the map.

The points (the `tiny` GPT on the stdlib corpus, T x 20 tokens per non-embedding parameter, B
sequences of 32 tokens per step) run in the order that decides most first: b64-4x, b16-4x (the
`compare` point), b256-16x, b128-16x, b4-4x, then b128-4x, b256-4x, b16-1x, b16-8x.

Each point is one study, an Optuna journal at ``benchmarks/results/fight-map/POINT/study.log``.
The live journal is not committed: ``--snapshot`` gzips it beside itself (``study.log.gz``,
about 20x smaller), which is what lands; a point whose journal is missing starts from its
snapshot. So a map interrupted anywhere resumes, on this machine or another, and nothing
finished reruns.

    python benchmarks/studies/fight_map.py [--points b64-4x ...] [--jobs 2]  # 80 trials each
    python benchmarks/studies/fight_map.py --points b16-4x --optimizers muon mars-shampoo
        # a pair first; the study's report at 80 in b16-4x/trials-80/b16-4x/, at 40 (the
        # first budget, --trials 40) in b16-4x/: a budget's report never replaces another's
    python benchmarks/studies/fight_map.py --snapshot   # study.log.gz of every point with runs
    python benchmarks/studies/fight_map.py --status     # each study's runs per optimizer, time left
    python benchmarks/studies/fight_map.py --report     # each point's report, map.md, map.png
    python benchmarks/studies/fight_map.py --points b64-4x --order-seed 1  # a second search
        [--optimizers nadamw mars-adamw muon mars-shampoo]  # of the optimizers it checks

The command each point runs is printed before it starts; it is the one that reproduces it.
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import sys
from pathlib import Path

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.models import GPT, gpt_config
from torch_mars.train.compare import mean_std_text
from torch_mars.train.plots import save_figure
from torch_mars.train.study.profiled import planned_runs
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.store import (
    load_study,
    open_storage,
    restore_journals,
    snapshot_journals,
    study_names,
)
from torch_mars.train.study.tune import OptimizerOutcome, Verdict, run_cost, verdicts
from torch_mars.train.study.verdict import PairedGap, holm_decisions, paired_gap

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "benchmarks" / "results" / "fight-map"
BLOCK = 32
EVAL_TOKENS = 131_072
# name: (sequences per step, multiple of 20 tokens per parameter), in the order they run
POINTS: dict[str, tuple[int, int]] = {
    "b64-4x": (64, 4),
    "b16-4x": (16, 4),
    "b256-16x": (256, 16),
    "b128-16x": (128, 16),
    "b4-4x": (4, 4),
    "b128-4x": (128, 4),
    "b256-4x": (256, 4),
    "b16-1x": (16, 1),
    "b16-8x": (16, 8),
}
OPTIMIZERS = ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo")
# Every optimizer's trials at a point. The map began at 40; at b64-4x 40 more moved three
# winners of five (Muon's by 0.0115, MARS-Shampoo's by 0.0210 held out) and both verdicts, so
# it runs at 80 (docs/results.md, "The search's budget").
TRIALS = 80
# The first budget's reports are the point's own (POINT/summary.md), every other's in
# POINT/trials-N/POINT/: the same study extended, its first trials the same.
FIRST_TRIALS = 40
# Each search's best points re-read on three more seeds before a winner is named: at b64-4x a
# second search's Muon ranked 0.0015 ahead on seeds 0-2 and was 0.0056 behind on the held-out
# runs (docs/harness.md, "Finalists").
FINALISTS = 4
FINAL_SEEDS = (6, 7, 8)
# The map's search and seeds, written out: the defaults of ``tune`` moved on since.
MAP_PROTOCOL = (
    "--search lr-profiled --seeds 0 1 2 --heldout-seeds 3 4 5 --data-seed 0 "
    f"--heldout-data-seeds 1 2 --finalists {FINALISTS} --final-seeds "
    + " ".join(map(str, FINAL_SEEDS))
)


def non_embedding_parameters(model: str = "tiny") -> int:
    gpt = GPT(gpt_config(model, 256))
    return sum(p.numel() for n, p in gpt.named_parameters() if not n.startswith(("wte", "wpe")))


def study_folder(point: str, order_seed: int = 0) -> Path:
    """Where a point's study lives: ``POINT/``, and a second search with another order seed
    (the check that a search's answer does not depend on its order) in ``POINT/order-seed-N/``,
    outside the map's verdicts."""
    return FOLDER / point if order_seed == 0 else FOLDER / point / f"order-seed-{order_seed}"


def budget_folder(point: str, trials: int, order_seed: int = 0) -> Path | None:
    """Where the reports of a point's study at ``trials`` other than :data:`FIRST_TRIALS` land:
    ``trials-N/`` in the study's folder (the same study and journal, extended or cut; its
    report in ``trials-N/NAME/``); None at the first budget, whose reports are the study's."""
    return None if trials == FIRST_TRIALS else study_folder(point, order_seed) / f"trials-{trials}"


def tune_arguments(
    point: str,
    jobs: int,
    trials: int,
    report: bool = False,
    order_seed: int = 0,
    *,
    study: Path | None = None,
    reports_in: Path | None = None,
    model: str = "tiny",
    data: str = "stdlib",
    optimizers: tuple[str, ...] = OPTIMIZERS,
    protocol: str = "",
) -> list[str]:
    """The ``torch-mars tune`` arguments of one point of the map (of its second search with
    ``order_seed`` > 0); ``study``, ``model``, ``data``, ``optimizers``: the same protocol at
    the point for another model and corpus, in the folder ``study``; ``reports_in``: the folder
    its report's folder goes in, where not beside the study's (:func:`budget_folder`);
    ``protocol``: the search and seed flags (the map's, :data:`MAP_PROTOCOL`, unless given)."""
    protocol = protocol or MAP_PROTOCOL
    batch, multiple = POINTS[point]
    study = (study or study_folder(point, order_seed)).relative_to(ROOT)  # run from the root
    out_dir = reports_in.relative_to(ROOT) if reports_in else study.parent
    steps = 20 * multiple * non_embedding_parameters(model) // (batch * BLOCK)
    arguments = (
        f"--model {model} --data {data} --steps {steps} --batch-size {batch} "
        f"--eval-interval {steps} --eval-tokens {EVAL_TOKENS} "
        f"--optimizers {' '.join(optimizers)} --trials {trials} {protocol} "
        f"--jobs {jobs} --name {study.name} --order-seed {order_seed} "
        f"--out-dir {out_dir} --storage journal:{study / 'study.log'}"
    )
    return shlex.split(arguments) + (["--report"] if report else [])


def flag_value(value: object) -> str:
    """A hyperparameter as ``--grid`` spells it: a tuple or list in parentheses."""
    if isinstance(value, list | tuple):
        return "(" + ",".join(str(v) for v in value) + ")"
    return str(value)


def winners_sweep_arguments(
    point: str,
    winners: dict[str, dict],
    folder: Path,
    name: str,
    seeds: tuple[str, ...],
    jobs: int,
    data_seed: int = 0,
) -> list[str]:
    """A ``torch-mars sweep`` of one point per optimizer, ``winners``' hyperparameters, at the
    map's budget for ``point``, each run on ``seeds`` and the data order ``data_seed``; the
    study ``name`` in ``folder`` (under the root), its journal ``folder/name/study.log``."""
    tune = tune_arguments(point, jobs, trials=1)
    budget = tune[: tune.index("--optimizers")]
    grids = [
        part
        for optimizer, hyperparams in winners.items()
        for key, value in hyperparams.items()
        for part in ("--grid", f"{optimizer}:{key}={flag_value(value)}")
    ]
    where = folder.relative_to(ROOT)
    return [
        *budget,
        "--data-seed",
        str(data_seed),
        "--optimizers",
        *winners,
        *grids,
        "--search-seeds",
        *seeds,
        "--seeds",
        *seeds,
        "--jobs",
        str(jobs),
        "--out-dir",
        str(where),
        "--name",
        name,
        "--storage",
        f"journal:{where / name / 'study.log'}",
    ]


def journal(point: str, order_seed: int = 0) -> Path:
    return study_folder(point, order_seed) / "study.log"


def progress_rows(folder: Path = FOLDER) -> list[dict]:
    """Each study under ``folder`` with a live journal (a point's, its second searches', its
    side studies'): its finished runs per optimizer, their run hours, and, for a tune study,
    the runs left and their run hours at the mean so far, and the runs its protocol plans per
    optimizer (at least: :func:`~torch_mars.train.study.profiled.planned_runs`)."""
    import optuna

    rows = []
    for live in sorted(folder.glob("*/**/study.log")):
        storage = open_storage(f"journal:{live}", create=False)
        (name,) = study_names(storage)
        study = load_study(storage, name)
        trials = study.get_trials(deepcopy=False)
        runs = collections.Counter(
            t.user_attrs.get("optimizer")
            for t in trials
            if t.state == optuna.trial.TrialState.COMPLETE
        )
        search = study.user_attrs.get("identity", {}).get("search", {})
        planned = None
        if search.get("kind") == "tune":
            planned = planned_runs(search["trials"], Selection.of_record(search["selection"]))
        optimizers = search.get("optimizers", sorted(runs))
        hours = sum(c["hours"] for c in run_cost(trials).values())
        left = sum(max(planned - runs[o], 0) for o in optimizers) if planned else None
        finished = sum(runs.values())
        rows.append(
            {
                "study": str(live.parent.relative_to(folder)),
                "runs": dict(runs),
                "planned": planned,
                "optimizers": optimizers,
                "hours": hours,
                "runs_left": left,
                "hours_left": left * hours / finished if left is not None and finished else None,
            }
        )
    return rows


def format_progress(rows: list[dict]) -> str:
    """The table of :func:`progress_rows`; the run hours left are the planned runs not yet
    finished at the study's mean run time so far (divide by the workers for wall time)."""
    lines = [
        "| study | finished runs per optimizer (of planned) | run hours | runs left "
        "| run hours left |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        of = f"/{row['planned']}" if row["planned"] else ""
        counts = ", ".join(f"{o} {row['runs'].get(o, 0)}{of}" for o in row["optimizers"])
        left = "—" if row["runs_left"] is None else str(row["runs_left"])
        hours_left = "—" if row["hours_left"] is None else f"{row['hours_left']:.1f}"
        lines.append(f"| {row['study']} | {counts} | {row['hours']:.1f} | {left} | {hours_left} |")
    return "\n".join(lines)


def study_reports(study: Path) -> list[tuple[int, dict]]:
    """A study's reports (``tune.json`` records) at each budget it ran, its own and those in
    ``trials-N/``, fewest trials first, each with its trials per optimizer."""
    paths = [study / "tune.json", *study.glob(f"trials-*/{study.name}/tune.json")]
    found = []
    for path in paths:
        if path.is_file():
            record = json.loads(path.read_text())
            found.append((record["trials"], record))
    return sorted(found, key=lambda item: item[0])


def point_reports(point: str, folder: Path = FOLDER) -> list[tuple[int, dict]]:
    """The reports of a point's study (the map's) at each budget it ran (:func:`study_reports`)."""
    return study_reports(folder / point)


def start_independence_sections(point: str, folder: Path = FOLDER) -> list[str]:
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


def map_rows(folder: Path = FOLDER) -> list[dict]:
    """Each point's verdicts, each rule's from the point's report with the most trials that
    reads it (a budget extended for one pair replaces that pair's verdict only)."""
    rows = []
    for point in POINTS:
        by_rule: dict[str, dict] = {}
        for _, record in point_reports(point, folder):
            trials = {o["optimizer"]: o["trials"] for o in record["optimizers"]}
            cost = record.get("cost", {}).values()
            runs = sum(c["runs"] for c in cost)
            hours = sum(c["hours"] for c in cost)
            for verdict in record["verdicts"]:
                by_rule[verdict["rule"]] = {
                    "point": point, "trials": trials, "runs": runs, "hours": hours, **verdict,
                }  # fmt: skip
        rows += by_rule.values()
    return rows


def format_map(rows: list[dict], over: str = "map") -> str:
    """The map's table: each comparison's paired gap and interval, decided by Holm's
    correction over every comparison of ``rows`` (the ``over``: the map's, or a second
    model's), with its point's runs and run hours (summed wall time of one-thread runs: CPU
    hours)."""
    gaps = [PairedGap(r["gap"], *r["interval"], r["p"], r["pairs"]) for r in rows]
    decisions = holm_decisions(gaps)
    lines = [
        f"| point | rule | strongest control | paired gap [95% interval] | p | Holm ({over}) | "
        "trials each | point's runs (run hours) |",
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


def second_against_first(first: dict, second: dict) -> list[dict]:
    """Per optimizer finished in both of two searches of a point (their ``tune.json`` records;
    another order seed, or another trial budget): the second's winner against the first's on
    the same held-out runs, as a paired gap (second - first) with its 95% interval (None where
    both found the same point); the answer holds where the interval holds 0."""
    firsts = {o["optimizer"]: o for o in first["optimizers"]}
    rows = []
    for second_outcome in second["optimizers"]:
        first_outcome = firsts.get(second_outcome["optimizer"])
        if first_outcome is None or not (first_outcome["finished"] and second_outcome["finished"]):
            continue
        if second_outcome["heldout_pairs"] != first_outcome["heldout_pairs"]:
            raise ValueError("the two searches read their winners on different held-out runs")
        same = first_outcome["winner"] == second_outcome["winner"]
        gap = (
            None
            if same
            else paired_gap(second_outcome["heldout_finals"], first_outcome["heldout_finals"])
        )
        rows.append(
            {
                "optimizer": second_outcome["optimizer"],
                "same_point": same,
                "first": first_outcome["heldout_finals"],
                "second": second_outcome["heldout_finals"],
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


def pooled_verdicts(first: dict, second: dict) -> tuple[dict[str, str], list[Verdict]]:
    """Both searches of a point read as one search of twice the trials: per optimizer finished
    in both (their ``tune.json`` records), the winner with the lower mean over its choosing
    seeds (the selection's and the finalists', the same seeds in both), then the study's
    verdicts (:func:`~torch_mars.train.study.tune.verdicts`) on those winners. Returns which
    search each winner came from and the verdicts."""
    firsts = {o["optimizer"]: o for o in first["optimizers"] if o["finished"]}
    chosen: list[OptimizerOutcome] = []
    source: dict[str, str] = {}
    for outcome in second["optimizers"]:
        name = outcome["optimizer"]
        if name not in firsts or not outcome["finished"]:
            continue
        if outcome["heldout_pairs"] != firsts[name]["heldout_pairs"]:
            raise ValueError("the two searches read their winners on different held-out runs")
        if len(outcome["selection_finals"]) != len(firsts[name]["selection_finals"]):
            raise ValueError(f"{name}: the two searches chose on different seeds")
        better = min(
            (firsts[name], outcome), key=lambda o: sum(o["selection_finals"])
        )  # ties: the first search
        source[name] = "first" if better is firsts[name] else "second"
        chosen.append(
            OptimizerOutcome(
                optimizer=name,
                finished=True,
                winner=better["winner"],
                trial_scores=[],
                selection_finals=better["selection_finals"],
                heldout_finals=better["heldout_finals"],
                rounds=0,
                lr_profiles=[],
                winner_score=sum(better["selection_finals"]) / len(better["selection_finals"]),
            )
        )
    return source, verdicts(chosen)


def format_pooled(source: dict[str, str], found: list[Verdict]) -> str:
    """The table of :func:`pooled_verdicts` for ``map.md``."""
    lines = [
        "Both searches pooled (each optimizer's winner: the better mean over its choosing seeds "
        "of the two searches' winners; "
        + ", ".join(f"{name} from the {which}" for name, which in source.items())
        + "):",
        "",
        "| rule | strongest control | paired gap [95% interval] | p | Holm (these) |",
        "|---|---|---:|---:|---|",
    ]
    lines += [
        f"| {v.rule} | {v.control} | {v.gap.text()} | {v.gap.p:.3g} | {v.decision} |" for v in found
    ]
    return "\n".join(lines)


def plot_map(rows: list[dict], out_path: Path) -> Path:
    """The map's figure: per MARS rule, each point's paired gap to its strongest control with
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
        axis.set_ylabel("held-out gap (nats), paired 95% interval")
        axis.set_title(f"{rule} - strongest of {', '.join(controls)}")
        axis.legend(fontsize=8)
    return save_figure(figure, out_path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", nargs="+", choices=list(POINTS), default=list(POINTS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--snapshot", action="store_true")
    parser.add_argument(
        "--status",
        action="store_true",
        help="each study's finished runs so far and its run hours left (changes nothing)",
    )
    parser.add_argument(
        "--optimizers",
        nargs="+",
        choices=OPTIMIZERS,
        default=list(OPTIMIZERS),
        help="a subset (a pair first, or a second search's); each verdict is read where its "
        "rule and controls all ran",
    )
    parser.add_argument(
        "--order-seed",
        type=int,
        default=0,
        help="> 0: a second search of each point with this order seed, in POINT/order-seed-N/",
    )
    args = parser.parse_args()
    if args.status:
        print(format_progress(progress_rows()))
        return 0
    if args.snapshot:
        for point in args.points:
            for written in snapshot_journals(FOLDER / point):
                print(f"wrote {written.relative_to(ROOT)}")
        return 0
    for point in args.points:
        restore_journals(FOLDER / point)
        if args.report and not journal(point, args.order_seed).is_file():
            continue
        arguments = tune_arguments(
            point,
            args.jobs,
            args.trials,
            args.report,
            args.order_seed,
            reports_in=budget_folder(point, args.trials, args.order_seed),
            optimizers=tuple(args.optimizers),
        )
        print("torch-mars tune " + shlex.join(arguments), flush=True)
        code = torch_mars(["tune", *arguments])
        if code:
            return code
    if args.report and args.order_seed == 0:
        rows = map_rows()
        text = format_map(rows) + "\n"
        for point in POINTS:
            reports = point_reports(point)
            for budget, record in reports[1:]:
                heading = (
                    f"Budget at {point}: the same search extended to {budget} trials (second) "
                    f"against its {reports[0][0]} (first), on the same held-out runs."
                )
                checked = second_against_first(reports[0][1], record)
                text += "\n" + format_second_against_first(heading, checked) + "\n"
            for section in start_independence_sections(point):
                text += "\n" + section + "\n"
        write_text_atomically(FOLDER / "map.md", text)
        print(f"wrote {(FOLDER / 'map.md').relative_to(ROOT)}")
        if rows:
            print(f"wrote {plot_map(rows, FOLDER / 'map.png').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
