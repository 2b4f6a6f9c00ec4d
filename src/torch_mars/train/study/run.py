"""The one door of a ``tune`` study: ``torch-mars tune`` and ``torch_mars.tune`` both build
their plan with :func:`tune_plan` and run it with :func:`run_study`, so a study runs the same way
whichever door opened it (its stored starts kept on a resume, its family declared before its
first run, its failures shown as they happen, its report written, a study where nothing
finished said so)."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import optuna

from torch_mars.train.study.engine import (
    FAILED_MARK,
    join_study,
    nothing_trained,
    open_study,
    protocol_history,
    study_progress,
    study_storage,
)
from torch_mars.train.study.reuse import budget_content, check_donors, reread_study
from torch_mars.train.study.selection import protocol_selection
from torch_mars.train.study.space import (
    check_extra,
    check_fixed,
    check_ladders,
    free_dimensions,
    ladder_of,
    point_key,
)
from torch_mars.train.study.store import check_study_name, describe
from torch_mars.train.study.tune import (
    DEFAULT_SEARCH,
    DEFAULT_TRIALS,
    TunePlan,
    declare_family,
    default_optimizers,
    report_plan,
    stored_starts,
)
from torch_mars.train.study.tune_record import TuneRecord, read_tune_record
from torch_mars.train.study.tune_report import WrittenReport, write_tune_report
from torch_mars.train.study.two_stage import Design, Stage, drawn_pairs, second_look
from torch_mars.train.study.workers import run_workers
from torch_mars.train.task import task_of


def tune_plan(
    base: Any,
    *,
    study_dir: Path,
    name: str,
    optimizers: Sequence[str] | None = None,
    trials: int | None = None,
    search: str | None = None,
    seeds: Sequence[int] | None = None,
    heldout_seeds: Sequence[int] | None = None,
    data_seed: int = 0,
    heldout_data_seeds: Sequence[int] | None = None,
    finalists: int | None = None,
    final_seeds: Sequence[int] | None = None,
    final_data_seeds: Sequence[int] = (),
    pairs: Sequence[tuple[int, int]] = (),
    pairs_read: Mapping[str, int] | None = None,
    peer_winners: bool | None = None,
    stable_winners: bool | None = None,
    fixed: Mapping[str, float] | None = None,
    ladders: Mapping[str, Sequence[float]] | None = None,
    family_file: Path | None = None,
    order_seed: int = 0,
    max_rounds: int | None = None,
    storage: str | None = None,
    jobs: int = 1,
    overwrite: bool = False,
    reuse_runs: Sequence[str | Path] = (),
    reread: str | Path | None = None,
    known_winners: Sequence[str | Path] = (),
    extra_space: Mapping[str, Sequence[float]] | None = None,
    prune: bool = False,
    two_looks: bool = False,
) -> TunePlan:
    """The plan of a ``tune`` study, built here for both doors (``torch-mars tune`` maps its
    flags onto these keywords, ``torch_mars.tune`` passes its own): one set of defaults. A
    setting left None takes the protocol's (:func:`~.selection.protocol_selection`; the
    optimizers :func:`~.tune.default_optimizers` of ``base``'s task, ``trials`` and ``search``
    :data:`~.tune.DEFAULT_TRIALS` and ``DEFAULT_SEARCH``). ``base``: the budget and task
    (a :class:`~torch_mars.train.trainer.TrainConfig` or an objective's config); ``study_dir``:
    the study folder; ``name``: the study's name in its storage. ``two_looks``: the words read
    on independent pairs the study draws (:func:`~.two_stage.drawn_pairs`), the first
    ``Design().first``, then up to ``Design().cap`` where a word is inconclusive (training only
    the sides of those words). ``pairs_read``: the optimizers that read only the first n of
    ``pairs`` (a second look's bystanders). ``reread``:
    a stored tune study whose selection this one walks again (its starts; its selection runs
    taken whichever machine trained them; :attr:`~.tune.TunePlan.reread`). ``known_winners``:
    stored tune studies of the same budget whose winners (each optimizer's, moved onto this
    study's ladders) are read on the choosing runs beside the peers' winners
    (:func:`known_settings`)."""
    looks = Design() if two_looks else None
    if looks is not None:
        if pairs or pairs_read or heldout_seeds is not None or heldout_data_seeds is not None:
            raise ValueError(
                "two_looks: the two looks read independent pairs of their own (drawn once, the "
                "same for every study); give no pairs, pairs_read, heldout_seeds or "
                "heldout_data_seeds"
            )
        pairs = drawn_pairs(looks.first)
    reread_dir, starts = reread_study(Path(reread)) if reread is not None else (None, None)
    objective = task_of(base).name == "objective"
    chosen = default_optimizers(objective) if optimizers is None else tuple(optimizers)
    selection = protocol_selection(
        seeds,
        heldout_seeds,
        data_seed,
        heldout_data_seeds,
        finalists,
        final_seeds,
        final_data_seeds,
        pairs,
        peer_winners,
        stable_winners,
        tuple((pairs_read or {}).items()),
    )
    plan = TunePlan(
        base=base,
        optimizers=chosen,
        selection=selection,
        study_dir=study_dir,
        trials=DEFAULT_TRIALS if trials is None else trials,
        search=DEFAULT_SEARCH if search is None else search,
        fixed=check_fixed(dict(fixed or {}), chosen),
        ladders=check_ladders(dict(ladders or {}), chosen),
        family_file=family_file,
        order_seed=order_seed,
        max_rounds=max_rounds,
        storage=storage,
        study_name=check_study_name(name),
        jobs=jobs,
        overwrite=overwrite,
        reuse=check_donors(tuple(Path(folder) for folder in reuse_runs)),
        starts=starts,
        reread=reread_dir,
        extra=check_extra(dict(extra_space or {})),
        prune=prune,
        looks=looks,
    )
    if not known_winners:
        return plan
    return dataclasses.replace(plan, known=known_settings(plan, known_winners))


def known_settings(
    plan: TunePlan, folders: Sequence[str | Path]
) -> tuple[tuple[str, str, str], ...]:
    """Per optimizer of ``plan``, the winner each tune study in ``folders`` found for it (read
    from its report), on ``plan``'s ladders, holding the dimensions that study tuned and
    ``plan`` tunes: ``(optimizer, folder as given, point key)``. A study of another budget (its
    winner is another point's), or with no report, is refused by name."""
    budget = budget_content(plan.spec().identity())
    known = []
    for folder in folders:
        try:
            record = read_tune_record(Path(folder))
        except ValueError as error:
            raise ValueError(f"--known-winners: {error}") from None
        if budget_content({"budget": record.budget}) != budget:
            raise ValueError(f"--known-winners: {folder} tuned another budget than this study")
        for optimizer in plan.optimizers:
            entry = record.entry(optimizer)
            if entry is None or not entry.finished or not entry.winner:
                continue
            free = set(free_dimensions(optimizer, plan.held)) | {d for d, _ in plan.extra}
            point = {
                d: ladder_of(d, plan.all_ladders).nearest(v)
                for d, v in entry.winner.items()
                if d in free
            }
            known.append((optimizer, str(folder), point_key(point)))
    return tuple(known)


# The command line's flag for each keyword of :func:`tune_plan` that does not spell it alike
# (``--heldout-seeds`` for ``heldout_seeds``): one map, for errors said to a Python caller.
_FLAG_OF = {"ladders": "--ladder", "family_file": "--family", "study_dir": "--out-dir"}


def keyword_spelling(message: str) -> str:
    """An error of the plan as a Python caller of :func:`torch_mars.tune` reads it: each
    command-line flag it names spelt as the keyword (``trials`` for ``--trials``).

    >>> keyword_spelling("--final-seeds [1]: a seed is named twice; see --ladder")
    'final_seeds [1]: a seed is named twice; see ladders'
    """
    keywords = [k for k in inspect.signature(tune_plan).parameters if k != "base"]
    flags = {_FLAG_OF.get(k, "--" + k.replace("_", "-")): k for k in keywords}
    pattern = re.compile("|".join(re.escape(f) for f in sorted(flags, key=len, reverse=True)))
    return pattern.sub(lambda m: flags[m.group(0)], message)


# How a study shows its progress: a bar on stderr (a failed run's line printed over it), a
# line per run on stdout, or nothing.
Show = Literal["bar", "lines", "none"]


@dataclass(frozen=True)
class StudyRun:
    """What :func:`run_study` did: the plan it reported (a report of a study that never ran
    under the given protocol reports the study's own), the study, the report as written (its
    text, record and files), the runs trained here, a line saying nothing finished (None
    where something did, or where the time budget stopped the work first), and one saying the
    time budget stopped it."""

    plan: TunePlan
    study: optuna.Study
    report: WrittenReport
    trained: int
    nothing: str | None
    # a line saying the wall-clock budget ended the work before the study finished (None else)
    stopped: str | None = None


def announce(plan: TunePlan, url: str) -> str:
    """One line: what the study tunes, on what, by which protocol, where."""
    budget = plan.base
    what = (
        budget.objective
        if task_of(budget).name == "objective"
        else f"{budget.model}, {budget.steps} steps of "
        f"{budget.batch_size * budget.grad_accum} sequences"
    )
    sel = plan.selection
    finalists = (
        f" (its {sel.finalists} best also on seeds {list(sel.final_seeds)}"
        f"{sel.final_orders_text()})"
        if sel.finalists
        else ""
    )
    looks = plan.looks
    budget = (
        f"; two looks: every word on the first {looks.first} pairs, then on up to {looks.cap} "
        f"where one is inconclusive (at most {looks.cap - looks.first} more runs an optimizer)"
        if looks is not None
        else ""
    )
    return (
        f"tune {', '.join(plan.optimizers)} on {what}; {plan.trials} trials each "
        f"({plan.search} search); selection seeds {list(sel.seeds)}{finalists}, held out "
        f"{sel.heldout_text()}{budget}; study "
        f"{plan.study_name!r} in {describe(url)}; {plan.jobs} worker(s)"
    )


def run_study(
    plan: TunePlan,
    *,
    report_only: bool = False,
    max_trials: int | None = None,
    time_budget_s: float | None = None,
    show: Show = "bar",
    announce_to: str | None = "stdout",
    storage: optuna.storages.BaseStorage | None = None,
) -> StudyRun:
    """Open (or create) ``plan``'s study, train what it still needs (``max_trials``: at most
    that many runs here; ``time_budget_s``: no run begun after that many seconds, the study
    resuming later), and write its report. ``report_only`` changes and creates nothing.
    ``announce_to``: where the opening line goes (``"stdout"``, ``"stderr"``, or None).
    The study's storage is opened once (``storage``, where the caller opened it already) and
    every step of the command reads it; a worker process opens its own."""
    if time_budget_s is not None and not (math.isfinite(time_budget_s) and time_budget_s > 0):
        raise ValueError(f"the time budget must be > 0 seconds, got {time_budget_s}")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our lines say what Optuna's would
    try:
        stop_at = None if time_budget_s is None else time.time() + time_budget_s
        if storage is None:
            url = plan.spec().url
            storage = study_storage(url, plan.study_name, read_only=report_only)
        return _run_study(plan, storage, report_only, max_trials, stop_at, show, announce_to)
    finally:
        optuna.logging.set_verbosity(verbosity)


def _run_study(
    plan: TunePlan,
    storage: optuna.storages.BaseStorage,
    report_only: bool,
    max_trials: int | None,
    stop_at: float | None,
    show: Show,
    announce_to: str | None,
) -> StudyRun:
    from tqdm import tqdm

    plan = resumed_plan(plan, storage)
    spec = plan.spec()
    study = open_study(
        spec,
        read_only=report_only,
        before_taking=lambda stored: declare_family(stored, plan),
        storage=storage,
    )
    trained = 0
    if report_only:
        plan = report_plan(study, plan)
    else:
        declare_family(study, plan)
        if announce_to is not None:
            stream = sys.stdout if announce_to == "stdout" else sys.stderr
            print(announce(plan, spec.url), file=stream, flush=True)
        done, planned = study_progress(spec, study.get_trials(deepcopy=False))
        bar = tqdm(
            total=planned,
            initial=done,
            unit="run",
            desc=f"tune {plan.study_name}",
            disable=show != "bar",
        )

        def progress(line: str) -> None:
            bar.update()
            if show == "lines":
                print(line, flush=True)
            elif show == "bar" and FAILED_MARK in line:
                bar.write(line)  # a failure is shown as it happens, over the bar

        # worker processes (jobs > 1) print their own lines, none when nothing is shown
        shown = None if show == "none" else progress
        trained = run_workers(spec, shown, max_trials, stop_at, study=study)
        bar.close()
    written = write_tune_report(plan, study)
    trials = study.get_trials(deepcopy=False)
    stopped = None
    if not report_only and stop_at is not None and max_trials is None:
        done, planned = study_progress(spec, trials)
        if done < planned:  # the workers ended before the study: the budget ended them
            stopped = (
                f"the time budget ended the work at {done} of {planned} runs; the same call "
                "resumes the study"
            )
    nothing = None if report_only or stopped else nothing_trained(trials)
    wider = None if report_only or stopped or nothing else second_look_plan(plan, written.record)
    if wider is not None:
        if announce_to is not None:
            stream = sys.stdout if announce_to == "stdout" else sys.stderr
            bystanders = dict(wider.selection.pairs_read)
            sides = ", ".join(o for o in plan.optimizers if o not in bystanders)
            print(
                f"second look: {len(wider.selection.pairs)} pairs for {sides}, where a word read "
                f"on the first {len(plan.selection.pairs)} is inconclusive",
                file=stream,
                flush=True,
            )
        more = _run_study(wider, storage, report_only, max_trials, stop_at, show, announce_to)
        return dataclasses.replace(more, trained=trained + more.trained)
    return StudyRun(plan, study, written, trained, nothing, stopped)


def second_look_plan(plan: TunePlan, record: TuneRecord) -> TunePlan | None:
    """``plan`` with the pairs its second look reads (None: a study without two looks, one
    whose first look left no word inconclusive, or one that looked twice already): each
    comparison inconclusive on its first look alone, read from its ``record`` just written, plans
    its pairs from its spread (:func:`~.two_stage.second_look`); only those comparisons' sides
    read them, every other optimizer its first pairs (``Selection.pairs_read``)."""
    looks, sel = plan.looks, plan.selection
    if looks is None or len(sel.pairs) != looks.first:
        return None
    first, sides = [], set()
    for entry in record.verdicts:
        numbers = [entry.gap, entry.error, entry.level]
        if entry.decision != "inconclusive" or entry.pairs != looks.first:
            continue
        if all(isinstance(v, int | float) and math.isfinite(v) for v in numbers):
            first.append((Stage(entry.gap, entry.error, looks.first), entry.level))
            sides |= {entry.rule, entry.control}
    wanted = second_look(first, looks, looks.first)
    if wanted <= looks.first:
        return None
    bystanders = tuple((o, looks.first) for o in plan.optimizers if o not in sides)
    wider = dataclasses.replace(sel, pairs=drawn_pairs(wanted), pairs_read=bystanders)
    return dataclasses.replace(plan, selection=wider)


def resumed_plan(plan: TunePlan, storage: optuna.storages.BaseStorage) -> TunePlan:
    """``plan`` as the study it names in the opened ``storage`` resumes it: the
    starts the study began with (:func:`~.tune.stored_starts`: the defaults move when a map's
    winners become them, and a study resumed from new starts would walk another path past its
    runs), and, where the study looked twice, the pairs it reads already. A new study, or one
    to be overwritten, is the plan as given."""
    if plan.overwrite:
        return plan
    try:
        study, identity = join_study(storage, plan.spec().url, plan.study_name)
    except ValueError:
        return plan  # no such study yet
    plan = dataclasses.replace(plan, starts=stored_starts(identity, protocol_history(study)))
    stored = identity.get("search", {}).get("selection", {})
    read = tuple(tuple(p) for p in stored.get("pairs") or [])
    looked_twice = plan.looks is not None and len(read) > len(plan.selection.pairs)
    if looked_twice and read == drawn_pairs(len(read)):
        bystanders = tuple((o, int(n)) for o, n in stored.get("pairs_read") or [])
        wider = dataclasses.replace(plan.selection, pairs=read, pairs_read=bystanders)
        plan = dataclasses.replace(plan, selection=wider)
    return plan
