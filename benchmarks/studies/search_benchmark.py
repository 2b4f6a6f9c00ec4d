"""The search benchmark (issue "A search that finds the optimum at a budget users can afford"):
which search design, at how many trials and selection seeds, reaches each optimizer's 80-trial
optimum of the fight map.

Two stages, as HPOBench and YAHPO screen optimisers before real runs decide:

``--surrogate POINT``: a screen in seconds, training nothing. Runs are deterministic on one
machine, so a run that any study stored at the point (the map's 80-trial study, each campaign's,
the references', a candidate design's: every study there with the same budget and data) answers
that run asked again exactly; any other run reads, per optimizer, a Gaussian process fitted on
every stored run of the selection's data order, its mean plus the seeds' measured noise. Every
design runs from the current campaign's starts at the point (what ``tune`` starts from) on
``--replicates`` orders and noise draws; a winner is scored by the process's mean. The table:
design x trials -> per optimizer the winner's mean gap to the 80-trial winner's (negative:
better; worst draw and the share of dimensions moved by trial 12 in brackets), and runs per
optimizer.

Real runs decide: each design is a campaign's protocol (``campaign.py``; the study of campaign
NAME at ``NAME/tiny/POINT`` is its design's run), and ``--references POINT`` reads each
optimizer's 80-trial winner of the map on the same 12 held-out runs (seeds 3-6 x data orders
1-3; one ``sweep`` of the five winners per data order, journals in
``search-benchmark/POINT/references-dataN/``), so that the gap to the reference is paired.
``--report POINT`` writes ``search-benchmark/POINT.md`` from the reports alone: per design and
optimizer the design's winner minus the reference on the held-out runs (crossed interval), its
trials, dimensions moved, and each design's runs and CPU hours at the point.
``--more-pairs POINT`` sweeps the current campaign's winners and the references on twelve
further held-out pairs (seeds 7-10 x data orders 1-3, ``search-benchmark/POINT/more-pairs/``);
the report then reads the gaps on those and on all 24 pairs (with ``--design NAME``, a
candidate design's winners instead, read beside the same references' sweeps). ``--refinal
POINT`` re-reads the current campaign's study at POINT with its finalists on other data orders
(:data:`REFINAL_ORDERS`; a copy of its journal in ``search-benchmark/POINT/finalists-on-orders-
4-5/``): the same first phase, only the finalists' runs and any new winner's held-out runs
trained. ``--warm POINT`` runs tune's default there as a user of ``tiny`` runs it now, from the
recipe (b16-4x's winners: a warm start from a neighbouring point;
``search-benchmark/POINT/warm-from-b16-4x/``). ``--second-reference POINT`` sweeps the map's
second 80-trial study's winners (another order seed; b64-4x alone ran one) on all 24 held-out
pairs (``search-benchmark/POINT/second-reference/``): the reference read against itself.
``--second-reference-rest POINT`` runs the second 80-trial study of the optimizers the map's
did not run (AdamW), from the first study's recorded starts (a copy of its journal in
``search-benchmark/POINT/second-reference-rest/``), then sweeps its winner on the same 24
pairs, so that the reference against itself reads all five.

``--pattern-move`` screens one more idea without training (``search-benchmark/pattern-move.md``):
the sixth design (``surface-6``: the third, where a step that gained is taken once more the
same way before the fit chooses the next, Hooke and Jeeves' pattern move), on toys whose
valley lies several steps along one dimension, replayed on the current campaign's stored
studies (where it would leave their path), and on the surrogate at b64-4x and b16-4x.

``--paired POINT --design NAME`` runs a candidate design in a copy of the current campaign's
study at POINT (``search-benchmark/POINT/CAMPAIGN-as-NAME/``): the campaign's starts, its runs
taken wherever the two searches agree, the design's own runs where it asks for others, and each
winner that changes swept on the further 12 pairs; the report reads it paired with the
campaign's search, against the first reference and against both where a second ran.

A candidate design not yet any campaign's runs as its own study, on the campaign's protocol
with ``--search NAME``: ``--design NAME --run POINT`` (``search-benchmark/POINT/design-NAME/``,
resumable, landed like a campaign's); the table reads it beside the campaigns'.

    python benchmarks/studies/search_benchmark.py --surrogate b64-4x b16-4x
    python benchmarks/studies/search_benchmark.py --references b64-4x --jobs 2
    python benchmarks/studies/search_benchmark.py --design surface-3 --run b64-4x --jobs 2
    python benchmarks/studies/search_benchmark.py --more-pairs b64-4x --jobs 2
    python benchmarks/studies/search_benchmark.py --more-pairs b64-4x --design surface-5
    python benchmarks/studies/search_benchmark.py --refinal b64-4x --jobs 2
    python benchmarks/studies/search_benchmark.py --warm b64-4x --jobs 2
    python benchmarks/studies/search_benchmark.py --second-reference b64-4x --jobs 1
    python benchmarks/studies/search_benchmark.py --second-reference-rest b64-4x --jobs 1
    python benchmarks/studies/search_benchmark.py --pattern-move --replicates 24
    python benchmarks/studies/search_benchmark.py --paired b64-4x --design surface-6 --jobs 2
    python benchmarks/studies/search_benchmark.py --report b64-4x
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import math
import shlex
import shutil
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from lab.campaigns import (
    CAMPAIGN_TRIALS,
    CAMPAIGNS,
    SELECTION_FLAGS,
    campaign_folder,
    tune_studies_at,
)
from lab.fight_map import OPTIMIZERS, POINTS, FightMap

from torch_mars.atomic_files import write_text_atomically
from torch_mars.bench.table import markdown_table
from torch_mars.cli import main as torch_mars
from torch_mars.train.study.engine import finished_results
from torch_mars.train.study.profiled import ProfiledSearch
from torch_mars.train.study.reuse import runs_train_alike
from torch_mars.train.study.selection import PROTOCOL, Selection, badness
from torch_mars.train.study.space import (
    LADDERS,
    Point,
    dimensions_of,
    parse_point_key,
    point_key,
    start_point,
)
from torch_mars.train.study.store import refuse_link, restore_journals, stored_study
from torch_mars.train.study.surface import DESIGNS as SURFACE_DESIGNS
from torch_mars.train.study.tune import SEARCHES, plan_of_identity
from torch_mars.train.study.tune_record import OptimizerEntry, TuneRecord, read_tune_record
from torch_mars.train.study.verdict import (
    PairedGap,
    crossed_gap,
    student_t_quantile,
    student_t_two_sided_p,
)

MAP = FightMap(Path(__file__).resolve().parents[2])
OUT = MAP.root / "benchmarks" / "results" / "search-benchmark"
# The campaign whose searches this benchmark measured and replays (its studies, its winners).
MEASURED = "campaign-3"
BUDGETS = (12, 20, 40)
# The bar: each optimizer's held-out gap to its 80-trial reference at most this (issue "A search
# that finds the optimum at a budget users can afford").
BAR = 0.005
# Twelve more held-out pairs with PROTOCOL's data orders: seeds that no selection, finalist or
# held-out run of any study reads on those orders (the map's finalists read 6-8 on order 0).
MORE_HELDOUT = (7, 8, 9, 10)
# The finalists' data orders of the re-finaled design: one per final seed, disjoint from the
# selection's (0) and the held-out ones (1-3).
REFINAL_ORDERS = (4, 5)
# The point whose winners are ``tiny``'s recipe now (recipes.CAMPAIGN_B16): tune's default
# elsewhere starts there.
WARM_FROM = "b16-4x"
# The map's second 80-trial study at a point (another order seed), where it ran one: the
# reference read against itself.
SECOND_ORDER_SEED = 1
SECOND_REFERENCE = f"order-seed-{SECOND_ORDER_SEED}"
# The map's selection: three seeds a trial, four finalists on three more.
MAP_SELECTION = Selection(
    seeds=(0, 1, 2),
    heldout=(3, 4, 5),
    heldout_data_seeds=(1, 2),
    finalists=4,
    final_seeds=(6, 7, 8),
)
# design name -> (search, selection): the default protocol (one seed a trial) or the map's
DESIGNS: dict[str, tuple[str, Selection]] = {
    "surface-5, 1 seed": ("surface-5", PROTOCOL),
    "surface-4, 1 seed": ("surface-4", PROTOCOL),
    "surface-3, 1 seed": ("surface-3", PROTOCOL),
    "surface-2, 1 seed": ("surface-2", PROTOCOL),
    "surface, 1 seed": ("surface", PROTOCOL),
    "lr-profiled, 1 seed": ("lr-profiled", PROTOCOL),
    "lr-profiled, 3 seeds": ("lr-profiled", MAP_SELECTION),
}


class StoredLandscape:
    """One optimizer's loss at any point of its space: a Gaussian process fitted on every
    stored run of a finished study on the selection's data order (each seed's final, a white
    noise term for the seeds' spread), whose mean is the landscape and whose draws add the
    seeds' measured noise. One function for both, so that a design is scored on the same
    landscape it searched; a point whose setting diverged in the study at an lr no larger
    diverges."""

    def __init__(self, optimizer: str, runs: Mapping[tuple[str, int, int], float]) -> None:
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        self.dimensions = dimensions_of(optimizer)
        by_point: dict[str, list[float]] = collections.defaultdict(list)
        for (key, _, data), value in runs.items():
            if data == 0:
                by_point[key].append(value)
        spreads = [
            statistics.stdev(v)
            for v in by_point.values()
            if len(v) >= 3 and all(map(math.isfinite, v))
        ]
        self.noise = statistics.median(spreads)
        self.diverged = [
            parse_point_key(k) for k, v in by_point.items() if not all(map(math.isfinite, v))
        ]
        finite = [(k, v) for k, vs in by_point.items() for v in vs if math.isfinite(v)]
        x = np.array([self._x(k) for k, _ in finite])
        y = np.array([v for _, v in finite])
        kernel = ConstantKernel(1.0) * RBF([2.0] * len(self.dimensions), (0.3, 50.0))
        kernel += WhiteKernel(self.noise**2, (1e-8, 1e-1))
        self.model = GaussianProcessRegressor(kernel, normalize_y=True, random_state=0).fit(x, y)
        self._cache: dict[str, float] = {}

    def _x(self, key: str) -> list[int]:
        point = parse_point_key(key)
        return [point[d] for d in self.dimensions]

    def _diverges(self, point: dict[str, int]) -> bool:
        return any(
            all(point[d] == p[d] for d in self.dimensions if d != "lr") and point["lr"] >= p["lr"]
            for p in self.diverged
        )

    def mean(self, key: str) -> float:
        """The modelled mean at the point ``key``; NaN where it diverges."""
        if key not in self._cache:
            if self._diverges(parse_point_key(key)):
                self._cache[key] = math.nan
            else:
                self._cache[key] = float(self.model.predict(np.array([self._x(key)]))[0])
        return self._cache[key]

    def draw(self, key: str, rng: np.random.Generator) -> float:
        mean = self.mean(key)
        return mean if math.isnan(mean) else mean + rng.normal(0.0, self.noise)


def stored_runs(point: str) -> dict[tuple, float]:
    """Every finished run stored at ``point`` by a study whose runs train as the 80-trial
    study's do (``reuse.runs_train_alike``): the map's, each campaign's, the references', each
    candidate design's."""
    _, identity, _ = stored_study(MAP.study_folder(point))
    folders = tune_studies_at(MAP.root, "tiny", point)
    folders += sorted((OUT / point).glob("references-*"))
    runs: dict[tuple, float] = {}
    for folder in folders:
        if not any((folder / f).is_file() for f in ("study.log", "study.log.gz")):
            continue
        trials, theirs, _ = stored_study(folder)
        if runs_train_alike(identity, theirs):
            runs.update(finished_results(trials))
    return runs


def surrogate_table(
    point: str,
    replicates: int,
    designs: Mapping[str, tuple[type[ProfiledSearch], Selection]] | None = None,
) -> str:
    """The surrogate screen at ``point`` of ``designs`` (name -> search class and selection;
    every one of :data:`DESIGNS` unless given)."""
    if designs is None:
        designs = {name: (SEARCHES[s], selection) for name, (s, selection) in DESIGNS.items()}
    trials, identity, history = stored_study(MAP.study_folder(point))
    # every optimizer the study ran, those its latest protocol left out (b16-4x's Shampoo pair) too
    ran = {o: None for o in OPTIMIZERS if any(r[0] == o for r in finished_results(trials))}
    identity = {**identity, "search": {**identity["search"], "optimizers": list(ran)}}
    reference = plan_of_identity(identity, Path("/nonexistent"), None, "x", history)
    references = {
        o: s.replay(finished_results(trials)).point
        for o, s in zip(reference.optimizers, reference.searches(), strict=True)
    }
    _, current, current_history = stored_study(current_study(point))
    plan = plan_of_identity(current, Path("/nonexistent"), None, "x", current_history)
    stored = stored_runs(point)
    lines = [
        f"Surrogate screen at {point} ({replicates} orders and noise draws; a run stored at the "
        f"point answers exactly ({len(stored)} stored), others a Gaussian process fitted on the "
        f"stored runs; starts: campaign {MEASURED}'s): the winner's modelled mean minus the "
        "80-trial winner's, mean over draws (worst draw; share of dimensions moved by trial 12).",
        "",
        "| design | trials | " + " | ".join(plan.optimizers) + " | runs / optimizer |",
        "|---|---:|" + "---:|" * (len(plan.optimizers) + 1),
    ]
    lands = {
        optimizer: StoredLandscape(
            optimizer, {(k, s, d): v for (o, k, s, d), v in stored.items() if o == optimizer}
        )
        for optimizer in plan.optimizers
    }

    def answer(run: tuple, rng: np.random.Generator) -> float:
        return stored[run] if run in stored else lands[run[0]].draw(run[1], rng)

    for name, (search_class, selection) in designs.items():
        for budget in BUDGETS:
            cells, runs = [], []
            for optimizer, starts in ((o, plan.starts_of(o)) for o in plan.optimizers):
                land = lands[optimizer]
                target = land.mean(point_key(references[optimizer]))
                gaps, moved = [], []
                for replicate in range(replicates):
                    rng = np.random.default_rng(replicate)
                    search = search_class(
                        optimizer, starts, selection, budget, order_seed=replicate
                    )
                    state, results = search.run_to_the_end(lambda run, rng=rng: answer(run, rng))
                    gaps.append(badness(land.mean(point_key(state.point))) - target)
                    start = starts[0]
                    early = [p for p, _ in state.trials[:12]]
                    moved.append(
                        sum(any(p[d] != start[d] for p in early) for d in start) / len(start)
                    )
                    runs.append(len(results))
                finite = [g for g in gaps if math.isfinite(g)]
                mean, worst, share = statistics.fmean(finite), max(gaps), statistics.fmean(moved)
                cells.append(f"{mean:+.4f} ({worst:+.4f}; {share:.0%})")
            lines.append(
                f"| {name} | {budget} | " + " | ".join(cells) + f" | {statistics.fmean(runs):.0f} |"
            )
    return "\n".join(lines)


# The pattern move's toys: (dimension, ladder steps from the start to the valley's floor), the
# optimizers, and the screen orders each reads.
TOY_VALLEYS = (("weight_decay", 4), ("weight_decay_1d", -4), ("lr_1d_ratio", 5))
TOY_OPTIMIZERS = ("adamw", "mars-adamw")
TOY_ORDERS = range(8)


def valley(optimizer: str, dimension: str, far: int) -> tuple[Point, int, Callable]:
    """The toy loss: a straight-sided valley ``far`` steps along ``dimension`` from the start
    (at the ladder's end where that is nearer), a shallow bowl around the start in every other
    dimension; its start, its floor's offset from the start along ``dimension``, and its
    noise-free value at a point."""
    start = start_point(optimizer, "tiny")
    ladder = LADDERS[dimension]
    floor = start[dimension] + far
    while not ladder.has(floor):
        floor -= 1 if far > 0 else -1

    def true_loss(point: Point) -> float:
        away = abs(point[dimension] - floor)
        bowl = sum((point[d] - start[d]) ** 2 for d in point if d != dimension)
        return 2.0 + 0.004 * away + 0.002 * bowl

    return start, floor - start[dimension], true_loss


def toy_table() -> str:
    """The pattern move against the third design on the toys (:func:`valley`): per optimizer
    and valley, the winner's mean regret over :data:`TOY_ORDERS` and the steps each order's
    winner went along the valley's dimension."""
    rows = []
    for optimizer in TOY_OPTIMIZERS:
        for dimension, far in TOY_VALLEYS:
            start, floor, true_loss = valley(optimizer, dimension, far)
            cells = [optimizer, f"{dimension} {floor:+d}"]
            for design in (SEARCHES["surface-3"], SEARCHES["surface-6"]):
                regrets, reached = [], []
                for order in TOY_ORDERS:
                    search = design(
                        optimizer, (start,), PROTOCOL, CAMPAIGN_TRIALS, order_seed=order
                    )
                    state, _ = search.run_to_the_end(
                        lambda run, f=true_loss: f(parse_point_key(run[1])) + 1e-4 * run[2]
                    )
                    regrets.append(true_loss(state.point) - 2.0)
                    reached.append(state.point[dimension] - start[dimension])
                cells += [
                    f"{statistics.fmean(regrets):.4f}",
                    " ".join(f"{r:+d}" for r in reached),
                ]
            rows.append(cells)
    header = [
        "optimizer",
        "valley floor (steps)",
        "surface-3: regret",
        f"surface-3: steps reached, orders {TOY_ORDERS.start}-{TOY_ORDERS.stop - 1}",
        "surface-6: regret",
        "surface-6: steps reached",
    ]
    return markdown_table(header, rows)


def replay_table() -> str:
    """The current campaign's studies replayed with the sixth design on the runs they stored:
    per search, the campaign's path and winner, or the trial where it would ask for a run the
    campaign did not train."""
    rows = []
    folder = campaign_folder(MAP.root, MEASURED)
    for model in ("tiny", "tiny-w64"):
        for study in sorted((folder / model).glob("*")):
            if not (study / "study.log.gz").is_file():
                continue
            trials, identity, history = stored_study(study)
            plan = plan_of_identity(identity, study, None, study.name, history)
            results = finished_results(trials)
            for search in plan.searches():
                pattern = dataclasses.replace(search, design=SURFACE_DESIGNS["surface-6"])
                state = pattern.replay(results)
                where = (
                    f"leaves the campaign's path at trial {len(state.trials) + 1}"
                    if state.needed
                    else "the campaign's path and winner"
                )
                rows.append([f"{model}/{study.name}", search.optimizer, where])
    return markdown_table(["point", "optimizer", "surface-6, replayed"], rows)


def pattern_move_report(replicates: int) -> str:
    """The sixth design, a pattern move, screened beside the third (toys, the current
    campaign's studies replayed, the surrogate at b64-4x and b16-4x), in
    ``search-benchmark/pattern-move.md``."""
    designs = {
        "surface-3, 1 seed": (SEARCHES["surface-3"], PROTOCOL),
        "surface-6, 1 seed": (SEARCHES["surface-6"], PROTOCOL),
    }
    parts = [
        "The sixth design (surface-6, a pattern move) screened beside the third "
        "(`python benchmarks/studies/search_benchmark.py --pattern-move`; no training).",
        "",
        "Toys: regret of the winner (noise-free loss above the valley floor's) at 40 trials, "
        f"mean over screen orders {TOY_ORDERS.start}-{TOY_ORDERS.stop - 1}, and the steps each "
        "went along the valley's dimension.",
        "",
        toy_table(),
        "",
        f"{MEASURED}'s studies replayed with the sixth design on the runs they stored:",
        "",
        replay_table(),
    ]
    for point in ("b64-4x", "b16-4x"):
        parts += ["", surrogate_table(point, replicates, designs)]
    return "\n".join(parts)


def current_study(point: str) -> Path:
    """The current campaign's study at ``point`` (its report's folder too)."""
    return campaign_folder(MAP.root, MEASURED) / "tiny" / point


def reported(report: Path) -> TuneRecord:
    """The ``tune.json`` report ``report``."""
    return read_tune_record(report)


def reference_report(point: str) -> tuple[OptimizerEntry, ...]:
    """The map's 80-trial study at ``point``, as its report has it (the references)."""
    return reported(MAP.folder / point / "trials-80" / point / "tune.json").optimizers


def finals_on_24_pairs(point: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The current campaign's winners' finals and the 80-trial references' on all 24 held-out
    pairs at ``point`` (the first 12, then :func:`more_pairs`), per optimizer: ``(ours,
    references)``, NaN where a run is missing."""
    folder = OUT / point / "more-pairs"
    further_references = swept_finals(folder / "references", more_pairs())
    further = swept_finals(folder / MEASURED, more_pairs())
    first = reference_finals(point)
    ours = {
        e.optimizer: [math.nan if v is None else v for v in e.heldout_finals] + further[e.optimizer]
        for e in reported(current_study(point) / "tune.json").optimizers
    }
    return ours, {name: first[name] + further_references[name] for name in ours}


def second_reference_file(point: str) -> Path:
    """The report of the map's second 80-trial study at ``point`` (:data:`SECOND_REFERENCE`);
    only b64-4x's exists."""
    return MAP.folder / point / SECOND_REFERENCE / "trials-80" / SECOND_REFERENCE / "tune.json"


def second_reference_report(point: str) -> list[dict]:
    """The map's second 80-trial study at ``point``, as its report has it."""
    report = second_reference_file(point)
    if not report.is_file():
        raise SystemExit(f"--second-reference {point}: the map ran no second 80-trial study there")
    return reported(report).optimizers


def second_rest_folder(point: str) -> Path:
    """Where the optimizers the map's second 80-trial study at ``point`` did not run have their
    second study: a copy of the first study's journal (its folder's name is the study's)."""
    return OUT / point / "second-reference-rest" / point


def second_rest_optimizers(point: str) -> tuple[str, ...]:
    """The map's optimizers its second 80-trial study at ``point`` did not run (AdamW)."""
    ran = {o.optimizer for o in second_reference_report(point)}
    return tuple(o for o in OPTIMIZERS if o not in ran)


def second_rest_arguments(point: str, jobs: int) -> list[str]:
    """``torch-mars tune`` of :func:`second_rest_optimizers` at ``point`` on the map's protocol
    and the second study's order seed, in :func:`second_rest_folder`: the copied journal keeps
    the starts the first study recorded, and a run both searches ask for is taken from it."""
    trials = reported(second_reference_file(point)).trials
    return MAP.tune_arguments(
        point,
        jobs,
        trials,
        order_seed=SECOND_ORDER_SEED,
        study=second_rest_folder(point),
        optimizers=second_rest_optimizers(point),
    )


def second_winners(point: str, rest: bool) -> dict[str, dict]:
    """The second 80-trial study's winners at ``point`` (the map's, or with ``rest`` the study
    of the optimizers it did not run): harness hyperparameters by optimizer."""
    ran = (
        reported(second_rest_folder(point) / "tune.json").optimizers
        if rest
        else second_reference_report(point)
    )
    return {o.optimizer: o.hyperparams for o in ran}


def second_reference_arguments(
    point: str, data_seed: int, jobs: int, rest: bool = False
) -> list[str]:
    """A ``torch-mars sweep`` of the second 80-trial study's winners at ``point`` (with
    ``rest``, those of :func:`second_rest_arguments`' study) on the 24 held-out pairs' seeds and
    data order ``data_seed``."""
    seeds = tuple(str(s) for s in (*PROTOCOL.heldout, *MORE_HELDOUT))
    name = f"second-rest-data{data_seed}" if rest else f"second-data{data_seed}"
    folder = OUT / point / "second-reference"
    winners = second_winners(point, rest)
    return MAP.winners_sweep_arguments(point, winners, folder, name, seeds, jobs, data_seed)


def second_finals(point: str) -> dict[str, list[float]]:
    """The second 80-trial study's winners' finals on all 24 held-out pairs at ``point``, per
    optimizer (the map's second study's, then those of its rest); empty where no second study
    ran or until every swept run has finished."""
    if not second_reference_file(point).is_file():
        return {}
    pairs = PROTOCOL.heldout_pairs() + more_pairs()
    folder = OUT / point / "second-reference"
    swept = swept_finals(folder / "second", pairs)
    rest = swept_finals(folder / "second-rest", pairs)
    second = {o.optimizer: swept[o.optimizer] for o in second_reference_report(point)}
    for name in OPTIMIZERS:
        if name not in second and not any(math.isnan(v) for v in rest[name]):
            second[name] = rest[name]
    if any(math.isnan(v) for values in second.values() for v in values):
        return {}
    return second


def mean_of_references(first: list[float], second: list[float]) -> list[float]:
    """Both 80-trial references read as one: on each held-out pair the mean of the two
    winners' finals."""
    return [(a + b) / 2 for a, b in zip(first, second, strict=True)]


def second_reference_table(point: str) -> str:
    """The reference against itself (the rule in docs/harness.md, written before the runs):
    the second 80-trial study's winners minus the first's on all 24 held-out pairs, beside the
    current campaign's gap to the first; empty where no second study ran or until every swept
    run has finished."""
    second = second_finals(point)
    if not second:
        return ""
    pairs = PROTOCOL.heldout_pairs() + more_pairs()
    names = list(second)
    ours, references = finals_on_24_pairs(point)
    lines = [
        f"The reference against itself at {point}: the map's second 80-trial study (another "
        "order seed, the same protocol; the optimizers it did not run in their own study from "
        "the first study's starts, search-benchmark/POINT/second-reference-rest/) swept on all "
        f"24 held-out pairs (search-benchmark/POINT/second-reference/); second - first "
        f"reference, and {MEASURED}'s winners minus each reference and minus both (on each pair "
        "the mean of the two references' finals), with crossed intervals.",
        "",
        f"| optimizer | second - first | p | {MEASURED} - first | {MEASURED} - second | "
        f"{MEASURED} - both |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    gaps, to_boths = [], []
    for name in names:
        first, campaign = references[name], ours[name]
        both = mean_of_references(first, second[name])
        gap = crossed_gap(second[name], first, pairs)
        to_first = crossed_gap(campaign, first, pairs)
        to_second = crossed_gap(campaign, second[name], pairs)
        to_both = crossed_gap(campaign, both, pairs)
        gaps.append(gap)
        to_boths.append(to_both)
        lines.append(
            f"| {name} | {gap.text()} | {gap.p:.3g} | {to_first.text()} | {to_second.text()} | "
            f"{to_both.text()} |"
        )
    over = [n for n, g in zip(names, gaps, strict=True) if g.mean > BAR]
    verdict = (
        f"the reference does not reproduce itself within {BAR}: {', '.join(over)} over it"
        if over
        else f"the reference reproduces itself within {BAR} for all {len(names)}"
    )
    lines += ["", f"- By the rule written before the runs: {verdict}."]
    short = [n for n, g in zip(names, to_boths, strict=True) if g.mean > BAR]
    lines.append(
        f"- Against both references together: {MEASURED}'s winners within {BAR} for "
        f"{len(names) - len(short)} of {len(names)}"
        + (f"; over it: {', '.join(short)}." if short else ".")
    )
    return "\n".join(lines)


def reference_winners(point: str) -> dict[str, dict]:
    """Each optimizer's 80-trial winner of the map at ``point``: its harness hyperparameters."""
    return {o.optimizer: o.hyperparams for o in reference_report(point)}


def reference_arguments(point: str, data_seed: int, jobs: int) -> list[str]:
    """A plain-grid sweep of the five 80-trial winners on the held-out seeds, data order
    ``data_seed``, at the point's budget."""
    seeds = tuple(str(s) for s in PROTOCOL.heldout)
    name = f"references-data{data_seed}"
    winners = reference_winners(point)
    return MAP.winners_sweep_arguments(point, winners, OUT / point, name, seeds, jobs, data_seed)


def reference_finals(point: str) -> dict[str, list[float]]:
    """Each reference winner's finals on the held-out pairs, in :data:`PROTOCOL`'s order (NaN
    where a run is missing)."""
    return swept_finals(OUT / point / "references", PROTOCOL.heldout_pairs())


def swept_finals(prefix: Path, pairs: list[tuple[int, int]]) -> dict[str, list[float]]:
    """Each optimizer's finals on ``pairs`` (seed, data order), read from the sweeps
    ``PREFIX-dataN`` of every data order (NaN where a run is missing)."""
    values: dict[tuple[str, int, int], float] = {}
    for data_seed in sorted({d for _, d in pairs}):
        folder = prefix.with_name(f"{prefix.name}-data{data_seed}")
        if not (folder / "study.log").is_file() and not (folder / "study.log.gz").is_file():
            continue
        trials, _, _ = stored_study(folder)
        for (optimizer, _, seed, data), value in finished_results(trials).items():
            values[(optimizer, seed, data)] = value
    return {name: [values.get((name, s, d), math.nan) for s, d in pairs] for name in OPTIMIZERS}


def more_pairs() -> list[tuple[int, int]]:
    """The further held-out pairs, in :data:`PROTOCOL`'s order (data order outer)."""
    return [(s, d) for d in PROTOCOL.heldout_data_seeds for s in MORE_HELDOUT]


def further_study(point: str, design: str | None) -> tuple[str, Path]:
    """The sweep tag and the study folder of the winners read on the further pairs: the current
    campaign's study at ``point``, or the candidate ``design``'s own."""
    if design is None:
        return MEASURED, current_study(point)
    return f"design-{design}", design_folder(point, design)


def more_pairs_arguments(
    point: str, data_seed: int, jobs: int, design: str | None = None
) -> list[list[str]]:
    """The ``torch-mars sweep``s on :data:`MORE_HELDOUT` x data order ``data_seed``: the
    80-trial references and the current campaign's winners at ``point`` (one sweep each: a
    sweep holds one point per optimizer); with ``design``, that candidate's winners alone (the
    references' sweeps are the campaign's)."""
    seeds = tuple(str(s) for s in MORE_HELDOUT)
    tag, study = further_study(point, design)
    ran = reported(study / "tune.json").optimizers
    ours = {o.optimizer: o.hyperparams for o in ran}
    folder = OUT / point / "more-pairs"
    sweeps = [(tag, ours)] if design else [("references", reference_winners(point)), (tag, ours)]
    return [
        MAP.winners_sweep_arguments(
            point, winners, folder, f"{name}-data{data_seed}", seeds, jobs, data_seed
        )
        for name, winners in sweeps
    ]


def more_pairs_table(point: str, design: str | None = None) -> str:
    """The current campaign's winners (or the candidate ``design``'s) against the references
    on the held-out pairs of the table and on :data:`MORE_HELDOUT`'s: the gap on each set, on
    both together, per held-out data order, and on the selection's own runs (seeds 0-2 on data
    order 0, which both the design and the map read: where a gap the held-out runs show is
    absent, no selection on that data order could have seen it). Empty until every further run
    has finished."""
    tag, study = further_study(point, design)
    if not (study / "tune.json").is_file():
        return ""
    folder = OUT / point / "more-pairs"
    references = swept_finals(folder / "references", more_pairs())
    ours = swept_finals(folder / tag, more_pairs())
    first = reference_finals(point)
    ran = reported(study / "tune.json").optimizers
    if any(math.isnan(v) for o in ran for v in ours[o.optimizer] + references[o.optimizer]):
        return ""
    chosen_on = {o.optimizer: o.selection_finals for o in reference_report(point)}
    orders = PROTOCOL.heldout_data_seeds
    whose = f"{MEASURED}'s" if design is None else f"the {design} design's"
    lines = [
        f"Twelve more held-out pairs at {point} (seeds {MORE_HELDOUT[0]}-{MORE_HELDOUT[-1]} x "
        f"data orders {orders[0]}-{orders[-1]}, read by no study): {whose} winners and the "
        "references swept on them (search-benchmark/POINT/more-pairs/), design - reference "
        "with crossed intervals; then the mean gap per held-out data order over all 24 pairs, "
        "and on the runs both selections read (seeds 0-2, data order 0: the design's selection "
        "seed and finalist seeds, the map's selection seeds).",
        "",
        "| optimizer | first 12 pairs | further 12 pairs | all 24 pairs | p (24) | "
        + " / ".join(f"order {d}" for d in orders)
        + " | selection's runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    gaps = []
    for entry in ran:
        name = entry.optimizer
        mine = [math.nan if v is None else v for v in entry.heldout_finals]
        pairs = [tuple(p) for p in entry.heldout_pairs]
        further = more_pairs()
        design, reference = mine + ours[name], first[name] + references[name]
        early = crossed_gap(mine, first[name], pairs)
        later = crossed_gap(ours[name], references[name], further)
        both = crossed_gap(design, reference, pairs + further)
        gaps.append(both)
        differences = collections.defaultdict(list)
        for (_, order), a, b in zip(pairs + further, design, reference, strict=True):
            differences[order].append(a - b)
        by_order = " / ".join(f"{statistics.fmean(differences[d]):+.4f}" for d in orders)
        selected = statistics.fmean(entry.selection_finals) - statistics.fmean(chosen_on[name][:3])
        lines.append(
            f"| {name} | {early.text()} | {later.text()} | {both.text()} | {both.p:.3g} | "
            f"{by_order} | {selected:+.4f} |"
        )
    lines += ["", f"- On all 24 pairs: {bar_reading(gaps)}."]
    return "\n".join(lines)


def by_median(search: ProfiledSearch) -> ProfiledSearch:
    """``search`` with each finalist judged by the median of its choosing runs instead of their
    mean (robust to one run that blew up); the trials' scores are unchanged."""

    class ByMedian(type(search)):
        def score(self, results, point, pairs=None):
            if pairs is None:
                return super().score(results, point)
            values = [results[self.run(point, s, d)] for s, d in pairs]
            return math.nan if any(math.isnan(v) for v in values) else statistics.median(values)

    fields = dataclasses.fields(search)
    return ByMedian(**{f.name: getattr(search, f.name) for f in fields if f.init})


def current_searches(point: str) -> tuple[dict[str, ProfiledSearch], dict]:
    """The current campaign's searches at ``point`` as its study recorded them, by optimizer,
    and the study's finished runs."""
    study = current_study(point)
    trials, identity, history = stored_study(study)
    plan = plan_of_identity(identity, study, None, study.name, history)
    return {s.optimizer: s for s in plan.searches()}, finished_results(trials)


def median_winners(
    searches: Mapping[str, ProfiledSearch], results: Mapping
) -> dict[str, tuple[str, str]]:
    """``searches`` (:func:`current_searches`) replayed on their stored runs ``results`` with
    the finalists judged by their median (:func:`by_median`): each optimizer whose winner that
    changes, with its winner's key by the mean and by the median."""
    changed = {}
    for name, search in searches.items():
        mean, median = search.replay(results), by_median(search).replay(results)
        if point_key(mean.point) != point_key(median.point):
            changed[name] = (point_key(mean.point), point_key(median.point))
    return changed


def median_arguments(point: str, data_seed: int, jobs: int) -> list[str]:
    """A ``torch-mars sweep`` of the winners the median changes (:func:`median_winners`) on the
    24 held-out pairs' seeds and data order ``data_seed``."""
    searches, results = current_searches(point)
    winners = {
        name: searches[name].hyperparams(median)
        for name, (_, median) in median_winners(searches, results).items()
    }
    seeds = tuple(str(s) for s in (*PROTOCOL.heldout, *MORE_HELDOUT))
    folder = OUT / point / "median-choosing"
    return MAP.winners_sweep_arguments(
        point, winners, folder, f"median-data{data_seed}", seeds, jobs, data_seed
    )


def median_table(point: str) -> str:
    """The median check: the current campaign's winners at ``point``, each replaced where the
    median of the choosing runs picks another finalist, against the references on all 24
    held-out pairs, read by the rule written before its runs (docs/harness.md): adopted as
    worth a protocol option only if every changed gap is at most :data:`BAR` and the mean gap
    falls below the campaign's own. Empty until every swept run has finished."""
    searches, results = current_searches(point)
    changed = median_winners(searches, results)
    pairs = PROTOCOL.heldout_pairs() + more_pairs()
    swept = swept_finals(OUT / point / "median-choosing" / "median", pairs)
    if not changed or any(math.isnan(v) for name in changed for v in swept[name]):
        return ""
    ours_24, references = finals_on_24_pairs(point)
    lines = [
        f"The median of the choosing runs at {point}: {MEASURED}'s searches replayed on their "
        "stored runs with each finalist judged by its median over its three choosing runs; "
        "the winners that changes swept on all 24 held-out pairs (search-benchmark/POINT/"
        "median-choosing/); design - reference on the 24 pairs, by the mean and by the median.",
        "",
        "| optimizer | winner by the median | by the mean | by the median | p |",
        "|---|---|---:|---:|---:|",
    ]
    by_mean, by_median_gaps = [], []
    entries = reported(current_study(point) / "tune.json").optimizers
    for entry in entries:
        name = entry.optimizer
        reference = references[name]
        mean_gap = crossed_gap(ours_24[name], reference, pairs)
        median_gap = crossed_gap(swept[name], reference, pairs) if name in changed else mean_gap
        by_mean.append(mean_gap)
        by_median_gaps.append(median_gap)
        winner = searches[name].label(changed[name][1]) if name in changed else "the same"
        lines.append(
            f"| {name} | {winner} | {mean_gap.text()} | {median_gap.text()} | {median_gap.p:.3g} |"
        )
    names = [entry.optimizer for entry in entries]
    holds = all(g.mean <= BAR for n, g in zip(names, by_median_gaps, strict=True) if n in changed)
    holds &= statistics.fmean(g.mean for g in by_median_gaps) < statistics.fmean(
        g.mean for g in by_mean
    )
    lines += [
        "",
        f"- By the mean: {bar_reading(by_mean)}.",
        f"- By the median: {bar_reading(by_median_gaps)}.",
        f"- The rule written before the runs (every changed gap at most {BAR}, the mean gap "
        "below the mean's): " + ("met." if holds else "not met: the mean stays."),
    ]
    return "\n".join(lines)


def design_folder(point: str, design: str) -> Path:
    """Where a candidate design's study at ``point`` lives."""
    return OUT / point / f"design-{design}"


def design_arguments(point: str, design: str, jobs: int, report: bool) -> list[str]:
    """``torch-mars tune`` of the five optimizers at ``point`` on the campaign's protocol with
    the search ``design``."""
    if design not in SEARCHES:
        raise SystemExit(f"--design must be one of {', '.join(SEARCHES)}, not {design!r}")
    arguments = MAP.tune_arguments(
        point,
        jobs,
        CAMPAIGN_TRIALS,
        report,
        study=design_folder(point, design),
        protocol=f"--search {design} {SELECTION_FLAGS}",
    )
    return reusing_runs(arguments, point, design_folder(point, design))


def reusing_runs(arguments: list[str], point: str, study: Path) -> list[str]:
    """``arguments`` of the tune study ``study`` at ``point``, taking the runs every other tune
    study there trained (``--reuse-runs``) rather than training them again."""
    donors = [
        str(f.relative_to(MAP.root)) for f in tune_studies_at(MAP.root, "tiny", point) if f != study
    ]
    return [*arguments, "--reuse-runs", *donors] if donors else arguments


def refinal_folder(point: str) -> Path:
    """Where the current campaign's study at ``point`` is re-finaled on :data:`REFINAL_ORDERS`
    (the folder's name is the study's, as in the campaign)."""
    return OUT / point / f"finalists-on-orders-{'-'.join(map(str, REFINAL_ORDERS))}" / point


def refinal_arguments(point: str, jobs: int) -> list[str]:
    """``torch-mars tune`` of the current campaign's study at ``point`` (a copy of its journal
    in :func:`refinal_folder`) with its finalists read on :data:`REFINAL_ORDERS`: the study
    takes the new protocol, keeps its starts and its first phase, and trains only the new
    finalist runs and the held-out runs of any winner they change."""
    orders = " ".join(map(str, REFINAL_ORDERS))
    protocol = f"--search {CAMPAIGNS[MEASURED]} {SELECTION_FLAGS} --final-data-seeds {orders}"
    return MAP.tune_arguments(
        point, jobs, CAMPAIGN_TRIALS, report=False, study=refinal_folder(point), protocol=protocol
    )


def copy_study(landed: Path, folder: Path) -> None:
    """The landed journal ``landed`` (a ``study.log.gz``) into ``folder``, once (a folder that
    already holds a journal is left as it is; a link there is refused: nothing is written
    through it)."""
    for name in ("study.log", "study.log.gz"):
        refuse_link(folder / name)
    if any((folder / f).is_file() for f in ("study.log", "study.log.gz")):
        return
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(landed, folder / "study.log.gz")
    restore_journals(folder)


def warm_folder(point: str) -> Path:
    """Where tune's default runs at ``point`` from ``tiny``'s recipe as it is now."""
    return OUT / point / f"warm-from-{WARM_FROM}"


def warm_arguments(point: str, jobs: int) -> list[str]:
    """``torch-mars tune`` at ``point`` as a user of ``tiny`` runs it now: the current
    campaign's design and protocol, its searches starting from the recipe, which is the
    current campaign's winners at :data:`WARM_FROM` (a warm start from a neighbouring point;
    the study records those starts at its first run); the runs the other studies at the point
    trained are taken, not trained again."""
    if point == WARM_FROM:
        raise SystemExit(f"--warm {point}: the recipe is {point}'s own winners, no warm start")
    study = warm_folder(point)
    arguments = MAP.tune_arguments(
        point,
        jobs,
        CAMPAIGN_TRIALS,
        study=study,
        protocol=f"--search {CAMPAIGNS[MEASURED]} {SELECTION_FLAGS}",
    )
    return reusing_runs(arguments, point, study)


def paired_folder(point: str, design: str) -> Path:
    """Where the candidate ``design`` runs in a copy of the current campaign's study at
    ``point`` (the folder's name is the study's, as in the campaign)."""
    return OUT / point / f"{MEASURED}-as-{design}" / point


def paired_arguments(point: str, design: str, jobs: int) -> list[str]:
    """``torch-mars tune`` of the current campaign's study at ``point`` (a copy of its journal
    in :func:`paired_folder`) with the search ``design``: the study keeps the campaign's starts
    and protocol, takes the campaign's runs wherever the two searches agree, and trains only
    where ``design`` asks for another run, so that its winners read paired with the
    campaign's."""
    protocol = f"--search {design} {SELECTION_FLAGS}"
    study = paired_folder(point, design)
    arguments = MAP.tune_arguments(
        point, jobs, CAMPAIGN_TRIALS, report=False, study=study, protocol=protocol
    )
    return reusing_runs(arguments, point, study)


def changed_winners(point: str, design: str) -> dict[str, dict]:
    """The paired ``design``'s winners at ``point`` that differ from the current campaign's:
    harness hyperparameters by optimizer."""
    campaign = {
        o.optimizer: o.hyperparams for o in reported(current_study(point) / "tune.json").optimizers
    }
    ran = reported(paired_folder(point, design) / "tune.json").optimizers
    return {o.optimizer: o.hyperparams for o in ran if o.hyperparams != campaign.get(o.optimizer)}


def paired_sweep_arguments(point: str, design: str, data_seed: int, jobs: int) -> list[str] | None:
    """A ``torch-mars sweep`` of the paired ``design``'s changed winners
    (:func:`changed_winners`) on :data:`MORE_HELDOUT` x data order ``data_seed`` (a winner the
    campaign's search chose too reads the campaign's sweep); None where none changed."""
    winners = changed_winners(point, design)
    if not winners:
        return None
    seeds = tuple(str(s) for s in MORE_HELDOUT)
    folder = OUT / point / "more-pairs"
    name = f"{MEASURED}-as-{design}-data{data_seed}"
    return MAP.winners_sweep_arguments(point, winners, folder, name, seeds, jobs, data_seed)


def paired_table(point: str, design: str) -> str:
    """The paired ``design`` against the current campaign's search (the rule in
    docs/harness.md, written before its runs): per optimizer its winner where it changed, and
    each search's winner minus the first 80-trial reference, and minus both references where
    a second ran, on all 24 held-out pairs. Empty until every run it needs has finished."""
    study = paired_folder(point, design)
    if not (study / "tune.json").is_file():
        return ""
    ran = reported(study / "tune.json").optimizers
    if not all(o.finished for o in ran):
        return ""
    changed = changed_winners(point, design)
    swept = swept_finals(OUT / point / "more-pairs" / f"{MEASURED}-as-{design}", more_pairs())
    campaign, references = finals_on_24_pairs(point)
    second = second_finals(point)
    pairs = PROTOCOL.heldout_pairs() + more_pairs()
    ours = {}
    for entry in ran:
        name = entry.optimizer
        first_12 = [math.nan if v is None else v for v in entry.heldout_finals]
        ours[name] = first_12 + swept[name] if name in changed else campaign[name]
    if any(math.isnan(v) for values in ours.values() for v in values):
        return ""
    lines = [
        f"{design} in a copy of {MEASURED}'s study at {point} (search-benchmark/POINT/"
        f"{MEASURED}-as-{design}/): the campaign's starts and runs, {design}'s search; a "
        "changed winner swept on the further 12 pairs (search-benchmark/POINT/more-pairs/). "
        "Each search's winner minus the first 80-trial reference"
        + (
            " and minus both (on each pair the mean of the two references' finals)"
            if second
            else ""
        )
        + " on all 24 held-out pairs, with crossed intervals.",
        "",
        f"| optimizer | {design}'s winner | {design} - first | {MEASURED} - first"
        + (f" | {design} - both | {MEASURED} - both |" if second else " |"),
        "|---|---|---:|---:|" + ("---:|---:|" if second else ""),
    ]
    read, to_firsts = [], []
    for entry in ran:
        name = entry.optimizer
        winner = (
            ", ".join(f"{k} {v}" for k, v in entry.winner.items())
            if name in changed
            else f"{MEASURED}'s"
        )
        to_first = crossed_gap(ours[name], references[name], pairs)
        was_first = crossed_gap(campaign[name], references[name], pairs)
        cells = [winner, to_first.text(), was_first.text()]
        if second:
            both = mean_of_references(references[name], second[name])
            to_both = crossed_gap(ours[name], both, pairs)
            cells += [to_both.text(), crossed_gap(campaign[name], both, pairs).text()]
            read.append((name, to_both))
        else:
            read.append((name, to_first))
        to_firsts.append(to_first)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    against = "both references" if second else "the first reference"
    over = [name for name, gap in read if gap.mean > BAR]
    lines += [
        "",
        f"- Against the first reference: {bar_reading(to_firsts)}.",
        f"- Against {against}: {len(read) - len(over)} of {len(read)} within {BAR}"
        + (f" (over it: {', '.join(over)})" if over else "")
        + f"; winners changed: {', '.join(changed) or 'none'}.",
    ]
    return "\n".join(lines)


def candidate_designs() -> list[str]:
    """The searches no campaign was declared on: each runs at a point as its own study."""
    return [design for design in SEARCHES if design not in CAMPAIGNS.values()]


def design_reports(point: str) -> list[tuple[str, str, dict]]:
    """``(design, where, its report)`` of every design that ran at ``point`` (its
    ``tune.json``, :func:`reported`): each campaign's
    study there, then each candidate's not yet any campaign's (a study begun with no optimizer
    finished is left out: it has nothing to read)."""
    found = [
        (design, name, campaign_folder(MAP.root, name) / "tiny" / point / "tune.json")
        for name, design in CAMPAIGNS.items()
    ]
    found += [
        (design, f"design-{design}", design_folder(point, design) / "tune.json")
        for design in candidate_designs()
    ]
    found.append(
        (
            f"{CAMPAIGNS[MEASURED]} from {WARM_FROM}'s winners",
            f"warm-from-{WARM_FROM}",
            warm_folder(point) / "tune.json",
        )
    )
    found += [
        (
            f"{design} in {MEASURED}'s study",
            f"{MEASURED}-as-{design}",
            paired_folder(point, design) / "tune.json",
        )
        for design in candidate_designs()
    ]
    orders = ",".join(map(str, REFINAL_ORDERS))
    found.append(
        (
            f"{CAMPAIGNS[MEASURED]}, finalists on orders {orders}",
            f"{MEASURED} re-finaled",
            refinal_folder(point) / "tune.json",
        )
    )
    read = [(design, where, reported(r)) for design, where, r in found if r.is_file()]
    # a study read on independent pairs (campaign-4's) shares no held-out run with the
    # references, which were read on seeds 3-6 x data orders 1-3
    return [
        (design, where, ran)
        for design, where, ran in read
        if any(o.finished for o in ran.optimizers) and not ran.selection.get("pairs")
    ]


def real_table(point: str) -> str:
    """Each design that ran at ``point`` (:func:`design_reports`) against the 80-trial
    references on the same held-out runs."""
    references = reference_finals(point)
    lines = [
        f"Real runs at {point}: each design at 40 trials on one selection seed (4 finalists on "
        "two more) against each optimizer's 80-trial winner of the map (lr-profiled, three "
        "seeds a trial), both read on seeds 3-6 x data orders 1-3; design - reference in "
        "held-out validation loss, interval with seed and data order as crossed effects "
        "(negative: the design's winner better). A design meets the bar where every optimizer's "
        f"gap is at most +{BAR}. The best selection score by trials 12 and 20 is the shorter "
        "searches' (each a prefix of the 40-trial one) before their finalists: no held-out run "
        "reads them yet.",
        "",
        "| design | optimizer | design held out | reference held out | design - reference | p | "
        "best selection score by trial 12 / 20 / 40 | dimensions moved |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    costs, summaries, together = [], [], []
    for design, name, ran in design_reports(point):
        pairs = [tuple(p) for p in ran.optimizers[0].heldout_pairs]
        gaps: list[PairedGap] = []
        for entry in ran.optimizers:
            optimizer = entry.optimizer
            ours = [math.nan if v is None else v for v in entry.heldout_finals]
            theirs = references.get(optimizer, [])
            if len(theirs) != len(ours) or any(map(math.isnan, ours + theirs)):
                cells = f"{_mean(ours)} | {_mean(theirs)} | pending | — "
            else:
                gap = crossed_gap(ours, theirs, pairs)
                gaps.append(gap)
                cells = f"{_mean(ours)} | {_mean(theirs)} | {gap.text()} | {gap.p:.3g} "
            moved = entry.moved
            lines.append(
                f"| {design} | {optimizer} | {cells}| {_best_by(entry.trial_scores)} | "
                f"{len(moved)}: {', '.join(moved)} |"
            )
        cost = ran.cost
        runs = sum(c["runs"] for c in cost.values())
        hours = sum(c["hours"] for c in cost.values())
        copied = ran.copied_runs
        taken = f" (and {copied} taken from other studies)" if copied else ""
        costs.append(f"{design} ({name}): {runs} runs{taken}, {hours:.1f} run hours")
        if gaps and len(gaps) == len(ran.optimizers):
            summaries.append(f"- {design}: {bar_reading(gaps)}")
            names = [entry.optimizer for entry in ran.optimizers]
            together.append(design_row(design, dict(zip(names, gaps, strict=True)), runs, hours))
    lines += ["", f"Cost at {point} (one thread a run): " + "; ".join(costs) + "."]
    lines += ["", "The gaps together, and how far noise alone carries the bar:", "", *summaries]
    lines += [
        "",
        "| design | mean gap (standard error) | largest gap | within the bar | runs trained | "
        "run hours |",
        "|---|---:|---|---:|---:|---:|",
        *together,
    ]
    further = [more_pairs_table(point), *(more_pairs_table(point, d) for d in candidate_designs())]
    paired = [paired_table(point, d) for d in candidate_designs()]
    for table in (*further, median_table(point), second_reference_table(point), *paired):
        lines += ["", table] if table else []
    return "\n".join(lines)


def design_row(design: str, gaps: Mapping[str, PairedGap], runs: int, hours: float) -> str:
    """One design's row of the table of designs together: the mean gap over its optimizers
    with its standard error, its largest gap and whose, how many optimizers are within
    :data:`BAR`, and the runs and run hours it trained at the point."""
    mean = statistics.fmean(g.mean for g in gaps.values())
    error = math.sqrt(math.fsum(g.error**2 for g in gaps.values())) / len(gaps)
    worst = max(gaps, key=lambda name: gaps[name].mean)
    within = sum(g.mean <= BAR for g in gaps.values())
    return (
        f"| {design} | {mean:+.4f} ({error:.4f}) | {gaps[worst].mean:+.4f} ({worst}) | "
        f"{within} of {len(gaps)} | {runs} | {hours:.1f} |"
    )


def bar_reading(gaps: list[PairedGap]) -> str:
    """The optimizers' gaps together: their mean with its standard error (the optimizers' runs
    independent) and the upper end of its 95% interval (Student's t at the Welch-Satterthwaite
    degrees of freedom of the gaps' errors), and the chance that a design level with every
    reference (each true gap 0) reads every gap at most :data:`BAR`, from each gap's own
    standard error and degrees of freedom: the bar's reach under noise alone. A gap without a
    standard error (an infinite one, from a diverged held-out run) leaves both unread."""
    mean = statistics.fmean(g.mean for g in gaps)
    unread = [g for g in gaps if g.dof < 1 or not math.isfinite(g.error)]
    if unread:
        return (
            f"mean gap {mean:+.4f}; no interval and no reach: {len(unread)} of {len(gaps)} "
            "gaps have no standard error (a held-out run diverged)"
        )
    variances = [g.error**2 for g in gaps]
    error = math.sqrt(math.fsum(variances)) / len(gaps)
    dof = int(math.fsum(variances) ** 2 / math.fsum(g.error**4 / g.dof for g in gaps))
    chance = math.prod(1 - student_t_two_sided_p(BAR / g.error, g.dof) / 2 for g in gaps)
    return (
        f"mean gap {mean:+.4f} (standard error {error:.4f}), its 95% interval's upper end "
        f"{mean + student_t_quantile(0.05, dof) * error:+.4f} ({dof} degrees of freedom); a "
        f"design level with every reference would read every gap at most {BAR} here with "
        f"probability {chance:.2f}"
    )


def _best_by(scores: list[float | None]) -> str:
    """The best selection score a search had by trials 12, 20 and 40, in its own order (the
    shorter searches are its prefixes): what 12 or 20 trials would have chosen from, before
    their finalists."""
    finite = [math.inf if s is None or math.isnan(s) else s for s in scores]
    return " / ".join(f"{min(finite[:k]):.4f}" if len(finite) >= k else "—" for k in BUDGETS)


def _mean(values: list[float]) -> str:
    finite = [v for v in values if not math.isnan(v)]
    return f"{statistics.fmean(finite):.4f}" if finite and len(finite) == len(values) else "—"


def run_commands(runs: list[tuple[str, list[str]]]) -> int:
    """Each ``(command, arguments)`` of ``runs`` in turn, its command line printed first; the
    first nonzero exit code, or 0."""
    for command, arguments in runs:
        print(f"torch-mars {command} " + shlex.join(arguments), flush=True)
        code = torch_mars([command, *arguments])
        if code:
            return code
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--surrogate", nargs="+", choices=list(POINTS), default=[])
    parser.add_argument("--replicates", type=int, default=8)
    parser.add_argument("--references", choices=list(POINTS))
    parser.add_argument("--report", choices=list(POINTS))
    parser.add_argument(
        "--more-pairs",
        choices=list(POINTS),
        help="read the current campaign's winners and the references on 12 more held-out pairs",
    )
    parser.add_argument(
        "--median-choosing",
        choices=list(POINTS),
        help="sweep the winners the median of the choosing runs would pick, on 24 held-out pairs",
    )
    parser.add_argument(
        "--second-reference",
        choices=list(POINTS),
        help="sweep the map's second 80-trial study's winners on 24 held-out pairs (b64-4x)",
    )
    parser.add_argument(
        "--second-reference-rest",
        choices=list(POINTS),
        help="run the second 80-trial study of the optimizers the map's did not run (AdamW at "
        "b64-4x), from the first study's starts, then sweep its winner on 24 held-out pairs",
    )
    parser.add_argument(
        "--design",
        choices=list(SEARCHES),
        help="a candidate design to --run, or whose winners --more-pairs reads",
    )
    parser.add_argument("--run", choices=list(POINTS), help="run --design at POINT")
    parser.add_argument(
        "--paired",
        choices=list(POINTS),
        help="run --design in a copy of the current campaign's study at POINT (its starts and "
        "runs), then sweep its changed winners on the further 12 held-out pairs",
    )
    parser.add_argument(
        "--refinal",
        choices=list(POINTS),
        help="re-final the current campaign's study at POINT on other data orders",
    )
    parser.add_argument(
        "--warm",
        choices=list(POINTS),
        help=f"run tune's default at POINT from the recipe ({WARM_FROM}'s winners)",
    )
    parser.add_argument(
        "--pattern-move",
        action="store_true",
        help="screen the pattern move (toys, replays, surrogate; no training)",
    )
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if (args.run or args.paired) and not args.design:
        parser.error("--run and --paired need --design")
    if args.design and not (args.run or args.paired or args.more_pairs):
        parser.error("--design goes with --run, --paired or --more-pairs")
    if args.paired and args.design not in candidate_designs():
        parser.error(
            f"--paired: --design {args.design} is no candidate design (one of "
            f"{', '.join(candidate_designs())})"
        )
    if args.warm == WARM_FROM:
        parser.error(f"--warm {args.warm}: the recipe is {args.warm}'s own winners, no warm start")
    if args.paired and not (current_study(args.paired) / "study.log.gz").is_file():
        parser.error(f"--paired {args.paired}: campaign {MEASURED} has no landed study there")
    runs: list[tuple[str, list[str]]] = []
    if args.run:
        runs.append(("tune", design_arguments(args.run, args.design, args.jobs, report=False)))
    if args.references:
        runs += [
            ("sweep", reference_arguments(args.references, data_seed, args.jobs))
            for data_seed in PROTOCOL.heldout_data_seeds
        ]
    if args.refinal:
        copy_study(current_study(args.refinal) / "study.log.gz", refinal_folder(args.refinal))
        runs.append(("tune", refinal_arguments(args.refinal, args.jobs)))
    if args.warm:
        runs.append(("tune", warm_arguments(args.warm, args.jobs)))
    if args.more_pairs:
        runs += [
            ("sweep", arguments)
            for data_seed in PROTOCOL.heldout_data_seeds
            for arguments in more_pairs_arguments(
                args.more_pairs, data_seed, args.jobs, args.design
            )
        ]
    for flag, point in (
        ("--second-reference", args.second_reference),
        ("--second-reference-rest", args.second_reference_rest),
    ):
        if point and not second_reference_file(point).is_file():
            parser.error(
                f"{flag} {point}: the map ran no second 80-trial study there (b64-4x alone has one)"
            )
    if args.second_reference:
        runs += [
            ("sweep", second_reference_arguments(args.second_reference, data_seed, args.jobs))
            for data_seed in PROTOCOL.heldout_data_seeds
        ]
    if args.median_choosing:
        runs += [
            ("sweep", median_arguments(args.median_choosing, data_seed, args.jobs))
            for data_seed in PROTOCOL.heldout_data_seeds
        ]
    code = run_commands(runs)
    if code:
        return code
    if args.second_reference_rest:
        point = args.second_reference_rest
        copy_study(MAP.study_folder(point) / "study.log.gz", second_rest_folder(point))
        code = run_commands([("tune", second_rest_arguments(point, args.jobs))])
        if code:
            return code
        sweeps = [
            ("sweep", second_reference_arguments(point, data_seed, args.jobs, rest=True))
            for data_seed in PROTOCOL.heldout_data_seeds
        ]
        code = run_commands(sweeps)
        if code:
            return code
    if args.paired:
        point, design = args.paired, args.design
        arguments = paired_arguments(point, design, args.jobs)
        copy_study(current_study(point) / "study.log.gz", paired_folder(point, design))
        code = run_commands([("tune", arguments)])
        if code:
            return code
        sweeps = [
            ("sweep", sweep)
            for data_seed in PROTOCOL.heldout_data_seeds
            if (sweep := paired_sweep_arguments(point, design, data_seed, args.jobs))
        ]
        code = run_commands(sweeps)
        if code:
            return code
    if args.report:
        table = real_table(args.report)
        OUT.mkdir(parents=True, exist_ok=True)
        write_text_atomically(OUT / f"{args.report}.md", table + "\n")
        print(table)
    if args.pattern_move:
        text = pattern_move_report(args.replicates)
        print(text)
        OUT.mkdir(parents=True, exist_ok=True)
        write_text_atomically(OUT / "pattern-move.md", text + "\n")
    for point in args.surrogate:
        table = surrogate_table(point, args.replicates)
        print(table)
        OUT.mkdir(parents=True, exist_ok=True)
        write_text_atomically(OUT / f"surrogate-{point}.md", table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
