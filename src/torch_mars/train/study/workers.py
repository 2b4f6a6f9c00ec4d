"""The workers of a study (:mod:`.engine`): each claims a run the searches need in one
storage write under the study's claim lock, trains it in the run's work folder with a
heartbeat, and tells its result; ``run_workers`` starts them (``--jobs``) and returns when all
have ended, however they ended. See :mod:`.engine` for why a claim is one write and when a
worker counts as gone."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import multiprocessing
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from torch_mars.train.run_archive import CURVE_COLUMNS
from torch_mars.train.run_record import TASK_METRICS, RunFailed, RunFolderBusy, run_folder_lock
from torch_mars.train.run_shell import diverged_result, train_run
from torch_mars.train.runtime import describe_device, pause_if_asked, resolve_device
from torch_mars.train.study.engine import (
    _SEED_PARAM,
    _STALE_AFTER_S,
    FAILED_MARK,
    HEARTBEAT_ATTR,
    PAUSE_AFTER_VARIABLE,
    RUN_COST_ATTR,
    STEP_DEFAULTS,
    Search,
    StudySpec,
    _optimizer_choices,
    _owner_is_gone,
    _owner_text,
    _running,
    _study_data,
    finished_results,
    owner_record,
    study_progress,
)
from torch_mars.train.study.pruning import RunPruned, pruning
from torch_mars.train.study.reuse import copied_record, donated_run
from torch_mars.train.study.store import (
    OWNER_ATTR,
    RunId,
    add_finished_trial,
    claim_lock,
    create_claimed_trial,
    fail_trial,
    load_study,
    open_storage,
    run_of,
    set_heartbeat,
)

# ---------------------------------------------------------------- claims


@dataclass
class Claim:
    """A run this worker holds: its trial, its work folder and the folder's held lock; where
    the study prunes and the run is a trial's, the finished trials of its optimizer the
    pruner compares it with (None: not pruned)."""

    trial: optuna.Trial
    run: RunId
    work_dir: Path
    lock: contextlib.ExitStack
    prune_against: tuple[optuna.trial.FrozenTrial, ...] | None = None


def _check_runs_folder(runs: Path) -> None:
    """Refuse a study whose ``runs`` folder is a link, in one line, before anything is claimed."""
    if runs.is_symlink():
        raise ValueError(
            f"{runs} is a link (to {os.readlink(runs)}): a study's work folders lie inside its "
            "own folder; remove the link and run again"
        )


def _remove_work_dir(work_dir: Path) -> None:
    """Remove a work folder of this study that no process holds (under the claim lock). The
    engine writes and deletes only inside the study folder: a ``runs`` folder that is a link is
    refused in one line, and a work folder that is a link is unlinked, never followed."""
    _check_runs_folder(work_dir.parent)
    if work_dir.is_symlink():
        work_dir.unlink()
        return
    if not work_dir.is_dir():
        return
    with contextlib.suppress(RunFolderBusy), run_folder_lock(work_dir):
        shutil.rmtree(work_dir)


def by_runs_left(searches: Sequence[Search], results: Mapping[RunId, float]) -> list[Search]:
    """``searches``, the one with the most planned runs left after ``results`` first (ties in
    the given order): the order in which runs are claimed."""
    done = collections.Counter(run[0] for run in results)
    return sorted(searches, key=lambda s: done[s.optimizer] - s.planned_runs)


def needed_runs(searches: Sequence[Search], results: Mapping[RunId, float]) -> list[RunId]:
    """The runs the searches need next, those of the search with the most planned runs left
    first (:func:`by_runs_left`): the searches then end together, and a worker that one
    search's next step makes wait takes another's run instead of idling at the end. The
    order changes no result: a search's replay is the same whatever order its runs finish in."""
    return [
        run for search in by_runs_left(searches, results) for run in search.replay(results).needed
    ]


def claim(spec: StudySpec, study: optuna.Study, stale_after_s: float) -> Claim | bool | None:
    """Under the claim lock: fail the trials of gone workers, then claim the first needed run
    (:func:`needed_runs`) that no worker is training (one storage write), taking instead each
    such run a donor study finished (:mod:`.reuse`; one write each) before it. None when other
    workers hold every needed run; False when the study is finished."""
    _check_runs_folder(spec.study_dir / "runs")
    with claim_lock(spec.url, study, spec.study_name):
        trials = study.get_trials(deepcopy=False)
        running: set[RunId] = set()
        for trial in trials:
            if trial.state != TrialState.RUNNING:
                continue
            if _owner_is_gone(trial, stale_after_s):
                fail_trial(study, trial)
                _remove_work_dir(spec.work_dir(trial.number))
            elif (run := run_of(trial)) is not None:
                running.add(run)
        for trial in trials:  # a kill between a tell and its folder's removal left it
            if trial.state.is_finished() and os.path.lexists(spec.work_dir(trial.number)):
                _remove_work_dir(spec.work_dir(trial.number))
        identity = spec.identity() if spec.donors else {}
        device = describe_device(resolve_device(spec.base.device))
        trainer = {
            "device": device,
            "threads": torch.get_num_threads(),
            "step_defaults": STEP_DEFAULTS,
        }
        while True:
            needed = needed_runs(spec.searches, finished_results(trials))
            if not needed:
                return False
            prunable = prunable_runs(spec, trials) if spec.prune else set()
            free = [run for run in needed if run not in running]
            if not free:
                return None
            run = free[0]
            params, user_attrs = _trial_record(spec, trials, run)
            values = {name: value for name, (value, _) in params.items()}
            donated = (
                donated_run(
                    spec.donors,
                    identity,
                    run,
                    values,
                    run[2] in spec.curve_seeds,
                    {} if (run[2], run[3]) in spec.donated_anywhere else trainer,
                )
                if spec.donors
                else None
            )
            if donated is None:
                break
            folder, trial = donated
            add_finished_trial(
                study,
                params,
                {**user_attrs, **{k: v for k, v in trial.user_attrs.items() if k in _RESULT}},
                {**trial.system_attrs, **copied_record(folder, trial)},
                trial,
            )
            trials = study.get_trials(deepcopy=False)
        trial = create_claimed_trial(study, params, user_attrs, {OWNER_ATTR: owner_record(device)})
        work_dir = spec.work_dir(trial.number)
        _remove_work_dir(work_dir)  # a folder of a study deleted by --overwrite
        if work_dir.exists():
            fail_trial(study, study.get_trials(deepcopy=False)[trial.number])
            raise RunFolderBusy(f"{work_dir} is held by another process; the study waits for it")
        work_dir.mkdir(parents=True)
        lock = contextlib.ExitStack()
        lock.enter_context(run_folder_lock(work_dir))
        against = (
            tuple(
                t
                for t in trials
                if t.state == TrialState.COMPLETE and t.user_attrs.get("optimizer") == run[0]
            )
            if run in prunable
            else None
        )
        return Claim(trial, run, work_dir, lock, against)


def prunable_runs(spec: StudySpec, trials: Sequence[optuna.trial.FrozenTrial]) -> set[RunId]:
    """The needed runs a study that prunes may stop early: trials' runs (:mod:`.pruning`)."""
    results = finished_results(trials)
    prunable: set[RunId] = set()
    for search in spec.searches:
        state = search.replay(results)
        if getattr(state, "prunable", False):
            prunable.update(state.needed)
    return prunable


# What a trial records of its run's result (:func:`train_claimed`): a taken run's come from its
# donor.
_RESULT = ("final", "summary", "curve")


def _trial_record(
    spec: StudySpec, trials: Sequence[optuna.trial.FrozenTrial], run: RunId
) -> tuple[dict[str, tuple[Any, BaseDistribution]], dict[str, Any]]:
    """The parameters (with their distributions) and labels the trial of ``run`` records."""
    optimizer, key, seed, data_seed = run
    search = spec.search_of(optimizer)
    choices = _optimizer_choices(trials, spec)
    params: dict[str, tuple[Any, BaseDistribution]] = {
        "seed": (seed, _SEED_PARAM),
        "data_seed": (data_seed, _SEED_PARAM),
    }
    if optimizer in choices.choices:  # the user attrs name it either way
        params["optimizer"] = (optimizer, choices)
    params |= {f"{optimizer}.{name}": p for name, p in search.trial_params(key).items()}
    user_attrs = {
        "optimizer": optimizer,
        "point": key,
        "seed": seed,
        "data_seed": data_seed,
        "label": search.label(key),
    }
    return params, user_attrs


def train_claimed(spec: StudySpec, claimed: Claim) -> dict[str, Any]:
    """Train a claimed run in ``work_dir/run`` (its log lines to ``work_dir/log.txt``); its
    final metric (None if it diverged), its summary and, for :attr:`StudySpec.curve_seeds`, its
    evaluation curve."""
    from torch_mars.train.metrics import read_metrics

    optimizer, key, seed, data_seed = claimed.run
    run_dir = claimed.work_dir / "run"
    config = dataclasses.replace(
        spec.base,
        optimizer=optimizer,
        seed=seed,
        hyperparams=spec.search_of(optimizer).hyperparams(key, spec.fixed),
        run_dir=run_dir,
        quiet=True,
    )
    if hasattr(config, "data_seed"):
        config = dataclasses.replace(config, data_seed=data_seed)
    clock = time.process_time if resolve_device(config.device).type == "cpu" else time.perf_counter
    began = clock()
    pruned = (
        pruning(claimed.trial, claimed.prune_against)
        if claimed.prune_against is not None
        else contextlib.nullcontext()
    )
    with (claimed.work_dir / "log.txt").open("w") as log, contextlib.redirect_stdout(log):
        try:
            with pruned:
                result = train_run(config, _study_data(config))
        except RunPruned as stopped:
            print(f"pruned: {stopped}")
            return {"final": None, "pruned": stopped.step, RUN_COST_ATTR: clock() - began}
        except FloatingPointError as error:
            print(f"diverged: {error}")
            result = diverged_result(config)
        except RunFailed as error:
            print(f"failed: {error}")
            return {"final": None, "error": str(error)}
    summary = {
        k: v if not isinstance(v, float) or math.isfinite(v) else None
        for k, v in result.as_dict().items()
        if k != "run_dir"
    }
    record: dict[str, Any] = {
        "final": summary["final"],
        "summary": summary,
        RUN_COST_ATTR: clock() - began,
    }
    if seed not in spec.curve_seeds:
        return record  # a study keeps the evaluation curves of its final runs only
    metric = TASK_METRICS[spec.task].key
    columns = CURVE_COLUMNS[spec.task]
    rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    record["curve"] = {
        "columns": list(columns),
        "rows": [
            [row.get(c) if _finite(row.get(c)) else None for c in columns]
            for row in rows
            if row.get(metric) is not None
        ],
    }
    return record


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _heartbeat(study: optuna.Study, trial: optuna.Trial, stop: threading.Event, every_s: float):
    while not stop.wait(every_s):
        with contextlib.suppress(Exception):  # a missed beat is retried at the next
            set_heartbeat(study, trial, HEARTBEAT_ATTR, time.time())


def work(
    spec: StudySpec,
    progress: Callable[[str], None] | None = None,
    poll_s: float = 1.0,
    heartbeat_s: float = 60.0,
    stale_after_s: float = _STALE_AFTER_S,
    max_trials: int | None = None,
    stop_at: float | None = None,
    study: optuna.Study | None = None,
) -> int:
    """One worker: claim needed runs and train them until the study is finished, until it has
    trained ``max_trials``, or until the Unix time ``stop_at`` (a wall-clock budget: no run is
    claimed after it; the one in flight finishes); returns the number of runs it trained. While
    other workers hold every needed run, it waits for them, looking again every ``poll_s``
    seconds. ``study``: the study as this process opened it already (opened here where None:
    a worker process opens its own)."""
    if study is None:
        study = load_study(open_storage(spec.url, create=False), spec.study_name)
    worse = math.inf if TASK_METRICS[spec.task].lower_is_better else -math.inf
    trained = 0
    said_waiting = False
    while (max_trials is None or trained < max_trials) and not past(stop_at):
        claimed = claim(spec, study, stale_after_s)
        if claimed is False:
            break
        if claimed is None:
            if not said_waiting:
                said_waiting = True
                held = _running(study)
                first = f" (first: {_owner_text(held[0])})" if held else ""
                print(
                    f"waiting: live workers hold every run the study needs now{first}; a worker "
                    f"counts as gone after {stale_after_s:.0f} s without a heartbeat",
                    file=sys.stderr,
                )
            time.sleep(poll_s)
            continue
        said_waiting = False
        stop = threading.Event()
        beat = threading.Thread(
            target=_heartbeat, args=(study, claimed.trial, stop, heartbeat_s), daemon=True
        )
        beat.start()
        with claimed.lock:
            try:
                record = train_claimed(spec, claimed)
            finally:
                stop.set()
                beat.join()
            for name, value in record.items():
                claimed.trial.set_user_attr(name, value)
            value = record["final"] if record["final"] is not None else worse
            with claim_lock(spec.url, study, spec.study_name):
                if "error" in record:  # failed with its message; a failed run is not retried
                    study.tell(claimed.trial, state=TrialState.FAIL)
                elif "pruned" in record:  # stopped early: it scores worst, never retried
                    study.tell(claimed.trial, state=TrialState.PRUNED)
                else:
                    study.tell(claimed.trial, value)
                shutil.rmtree(claimed.work_dir)
        trained += 1
        if progress is not None:
            final = (
                f"{FAILED_MARK}{record['error']}"
                if "error" in record
                else f"pruned at step {record['pruned']}"
                if "pruned" in record
                else "diverged"
                if record["final"] is None
                else f"{record['final']:.4f}"
            )
            optimizer, key, seed, data_seed = claimed.run
            label = spec.search_of(optimizer).label(key)
            done, planned = study_progress(spec, study.get_trials(deepcopy=False))
            progress(
                f"{done}/{planned} runs · {optimizer} {label} seed {seed} data {data_seed}: {final}"
            )
        pause_if_asked(PAUSE_AFTER_VARIABLE, trained, "finished trials")
    return trained


def _die_with_parent() -> None:
    """Have the kernel end this worker when its parent dies, however it dies (Linux): a
    worker orphaned by a killed ``tune`` would go on claiming runs."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def past(stop_at: float | None) -> bool:
    """Whether a wall-clock budget ending at the Unix time ``stop_at`` is spent."""
    return stop_at is not None and time.time() >= stop_at


def _worker_process(
    spec: StudySpec,
    index: int,
    threads: int,
    gpus: int,
    max_trials: int | None,
    stop_at: float | None,
    lines: bool,
) -> None:
    _die_with_parent()
    torch.set_num_threads(threads)
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    work(
        spec,
        progress=(lambda line: print(f"[worker {index}] {line}", flush=True)) if lines else None,
        max_trials=max_trials,
        stop_at=stop_at,
    )


def threads_per_run(jobs: int) -> int:
    """The threads each run trains on with ``jobs`` workers on this machine: one worker trains
    in this process at torch's own count, more split the cores between them. A run's last
    digits depend on it, so a verdict pairs runs of one count (:func:`~.pairs.machine_of`)."""
    return torch.get_num_threads() if jobs == 1 else max(1, (os.cpu_count() or 1) // jobs)


def run_workers(
    spec: StudySpec,
    progress: Callable[[str], None] | None = None,
    max_trials: int | None = None,
    stop_at: float | None = None,
    study: optuna.Study | None = None,
) -> int:
    """Run ``spec.jobs`` workers (in this process for one) until the study is finished, each
    has trained ``max_trials``, or the wall-clock budget ends at ``stop_at`` (:func:`work`);
    each takes its share of the cores, and one GPU each where there are GPUs.
    ``progress(line)`` is called as each run finishes here; worker processes print their lines
    themselves (prefixed ``[worker N]``), and none where ``progress`` is None. Returns when
    every worker has ended, however it ended (a killed worker's trial is trained again by the
    others); the count is the runs this process's study gained. ``study``: the study as this
    process opened it already (opened here where None); each worker process opens its own, as
    a process cannot share another's connection or file handle."""
    if study is None:
        study = load_study(open_storage(spec.url, create=False), spec.study_name)
    if spec.jobs == 1:
        return work(spec, progress, max_trials=max_trials, stop_at=stop_at, study=study)
    before = len(finished_results(study.get_trials(deepcopy=False)))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    threads = threads_per_run(spec.jobs)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=_worker_process,
            args=(spec, i, threads, gpus, max_trials, stop_at, progress is not None),
        )
        for i in range(spec.jobs)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    lost = [i for i, w in enumerate(workers) if w.exitcode != 0]
    if lost:
        print(f"worker(s) {lost} ended abnormally; their trials are retrained", file=sys.stderr)
    if lost and max_trials is None:  # what the lost workers left, so that the study is done here
        work(spec, progress, stop_at=stop_at, study=study)
    return len(finished_results(study.get_trials(deepcopy=False))) - before


__all__ = ["Claim", "claim", "needed_runs", "run_workers", "work"]
