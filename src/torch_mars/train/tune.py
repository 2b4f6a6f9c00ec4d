"""``torch-mars tune``: every optimizer tuned by one protocol, on Optuna.

Each optimizer is tuned by coordinate descent (:mod:`.descent`) over the dimensions it has in
the declared space (:mod:`.search_space`), from its defaults; each winner is then read on
held-out seeds. A trial is one harness run (an optimizer, a point, a seed) and its value the
run's final validation loss. The study lives in an Optuna storage (:mod:`.study_store`): an
SQLite file in the study folder by default, or a shared database or journal file, so that any
number of workers (``--jobs`` here, ``--worker`` on other machines) work on one study; a killed
study resumes by replaying the descent on its finished trials, and nothing finished reruns.

A study's identity is everything that changes its results: the budget, model, data (by
content) and data seed, the optimizers, the selection protocol and the space itself. Opening a
study with other settings is refused, unless ``overwrite`` starts it afresh.

``TORCH_MARS_PAUSE_AFTER=N`` makes a worker stop still once it has finished N trials, saying
so on stderr: a test kills it there, at a point it controls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from torch_mars.train.compare import SAME_COST_CONTROLS
from torch_mars.train.descent import CoordinateDescent, DescentState, RunId, Selection
from torch_mars.train.run_archive import CURVE_COLUMNS
from torch_mars.train.run_record import TASK_METRICS, RunFolderBusy, run_folder_lock
from torch_mars.train.search_space import (
    LADDERS,
    dimensions_of,
    hyperparams_of,
    parse_point_key,
    point_key,
    point_label,
    space_record,
    start_point,
    tunable_optimizers,
    values_of,
)
from torch_mars.train.study_store import claim_lock, describe, open_storage, storage_url
from torch_mars.train.trainer import TrainConfig

PAUSE_AFTER_VARIABLE = "TORCH_MARS_PAUSE_AFTER"
# The budget fields of a TrainConfig that a study's identity holds (what changes a result).
BUDGET_FIELDS = (
    "model",
    "data",
    "steps",
    "batch_size",
    "grad_accum",
    "block_size",
    "exact",
    "schedule",
    "warmup_steps",
    "grad_clip",
    "eval_interval",
    "eval_batches",
    "data_seed",
    "device",
    "compile",
)
# Optuna's record of a trial's parameters: a wide range per dimension, so that an extended
# ladder never leaves it.
_DISTRIBUTIONS: dict[str, Any] = {
    "lr": FloatDistribution(1e-8, 100.0, log=True),
    "beta1": FloatDistribution(0.0, 1.0),
    "beta2": FloatDistribution(0.0, 1.0),
    "weight_decay": FloatDistribution(0.0, 100.0),
    "lr_1d_ratio": FloatDistribution(1e-6, 1e6, log=True),
    "weight_decay_1d": FloatDistribution(0.0, 100.0),
    "gamma": FloatDistribution(0.0, 10.0),
    "seed": IntDistribution(0, 2**31 - 1),
}
# A held-out seed "fails" when it ends this far above the winner's selection mean, or three of
# the selection seeds' std if that is more (nats).
FAILURE_MARGIN = 0.03
# The good-lr band: the lrs of the winner's last lr sweep within this share of its score.
GOOD_LR_SHARE = 0.01


@dataclass(frozen=True)
class TunePlan:
    """What a study tunes.

    Attributes:
        base: the budget and task (its optimizer, seed and hyperparams are replaced per run).
        optimizers: the optimizers, each with a search space (:func:`tunable_optimizers`).
        selection: the seeds that choose, the held-out seeds, and screening.
        study_dir: the study folder (report, run work folders, the default storage).
        storage: ``--storage`` as given (None: SQLite in ``study_dir``).
        study_name: the study's name in the storage.
        max_rounds: rounds of coordinate descent at most.
        jobs: local worker processes.
        overwrite: start the study afresh if it exists with other settings.
    """

    base: TrainConfig
    optimizers: tuple[str, ...]
    selection: Selection
    study_dir: Path
    storage: str | None = None
    study_name: str = "tune"
    max_rounds: int = 3
    jobs: int = 1
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.optimizers:
            raise ValueError("tune needs at least one optimizer")
        for name in self.optimizers:
            dimensions_of(name)  # a ValueError naming the tunable ones
        if len(set(self.optimizers)) != len(self.optimizers):
            raise ValueError(f"an optimizer is named twice: {self.optimizers}")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")
        if self.max_rounds < 1:
            raise ValueError(f"--max-rounds must be >= 1, got {self.max_rounds}")

    @property
    def url(self) -> str:
        return storage_url(self.storage, self.study_dir)

    def descents(self) -> list[CoordinateDescent]:
        return [
            CoordinateDescent(
                name, start_point(name, self.base.model), self.selection, self.max_rounds
            )
            for name in self.optimizers
        ]

    def identity(self, data_fingerprint: str) -> dict[str, Any]:
        """Everything that changes the study's results (JSON)."""
        identity = {
            "budget": {k: getattr(self.base, k) for k in BUDGET_FIELDS},
            "data_fingerprint": data_fingerprint,
            "optimizers": self.optimizers,
            "selection": dataclasses.asdict(self.selection),
            "max_rounds": self.max_rounds,
            "space": space_record(),
        }
        return json.loads(json.dumps(identity, default=str))  # as the storage keeps it


def plan_of_identity(
    identity: dict[str, Any], study_dir: Path, storage: str | None, study_name: str
) -> TunePlan:
    """The plan a study's stored identity describes (what ``--worker`` joins)."""
    selection = identity["selection"]
    return TunePlan(
        base=TrainConfig(**identity["budget"], quiet=True),
        optimizers=tuple(identity["optimizers"]),
        selection=Selection(
            tuple(selection["seeds"]), tuple(selection["heldout"]), selection["screen_top"]
        ),
        study_dir=study_dir,
        storage=storage,
        study_name=study_name,
        max_rounds=identity["max_rounds"],
    )


class StudyMismatch(ValueError):
    """A study exists in the storage with other settings."""


def _differences(stored: dict[str, Any], wanted: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(stored) | set(wanted)):
        a, b = stored.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} there, {b!r} here")
    return out


_CORPORA: dict[str, Any] = {}


def _corpus(spec: str) -> Any:
    from torch_mars.data import load_corpus

    if spec not in _CORPORA:
        _CORPORA[spec] = load_corpus(spec)
    return _CORPORA[spec]


def open_study(plan: TunePlan) -> optuna.Study:
    """Create the study, or open it and check that its identity is the plan's
    (:class:`StudyMismatch`, one line, otherwise; ``plan.overwrite`` deletes and recreates it)."""
    url = plan.url
    storage = open_storage(url)
    identity = plan.identity(_corpus(plan.base.data).fingerprint())
    with claim_lock(url, storage, plan.study_name):
        names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
        if plan.study_name in names:
            study = optuna.load_study(study_name=plan.study_name, storage=storage)
            stored = study.user_attrs.get("identity")
            if stored != identity:
                if not plan.overwrite:
                    changed = _differences(stored or {}, identity)
                    raise StudyMismatch(
                        f"study {plan.study_name!r} in {describe(url)} was tuned with other "
                        f"settings ({'; '.join(changed[:3])}); pass --overwrite to start it "
                        "afresh, or --name for another study"
                    )
                optuna.delete_study(study_name=plan.study_name, storage=storage)
                names.discard(plan.study_name)
        if plan.study_name not in names:
            study = optuna.create_study(
                study_name=plan.study_name, storage=storage, direction="minimize"
            )
            study.set_user_attr("identity", identity)
    return study


def join_study(url: str, study_name: str) -> tuple[optuna.Study, dict[str, Any]]:
    """An existing study and its identity (for ``--worker``)."""
    storage = open_storage(url)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise ValueError(f"no study {study_name!r} in {describe(url)}") from None
    identity = study.user_attrs.get("identity")
    if identity is None:
        raise ValueError(f"study {study_name!r} in {describe(url)} is not a torch-mars study")
    return study, identity


def _run_of(trial: optuna.trial.FrozenTrial) -> RunId | None:
    attrs = trial.user_attrs
    if "point" not in attrs:
        return None
    return (attrs["optimizer"], attrs["point"], attrs["seed"])


def finished_results(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[RunId, float]:
    """Each finished run's final metric (NaN for a diverged run)."""
    results: dict[RunId, float] = {}
    for trial in trials:
        run = _run_of(trial)
        if run is not None and trial.state == TrialState.COMPLETE:
            final = trial.user_attrs.get("final")
            results[run] = math.nan if final is None else final
    return results


def frontier(plan: TunePlan, results: dict[RunId, float]) -> list[DescentState]:
    return [descent.replay(results) for descent in plan.descents()]


def _worker_is_gone(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a RUNNING trial's worker, on this machine, has died: its work folder's lock is
    free (the operating system releases it with its holder)."""
    worker = trial.system_attrs.get("torch_mars_worker")
    if not worker or worker.get("host") != socket.gethostname():
        return False
    work_dir = Path(worker["work_dir"])
    if not work_dir.is_dir():
        return True
    try:
        with run_folder_lock(work_dir):
            _remove_work_folder(work_dir)
            return True
    except RunFolderBusy:
        return False


def _stale_elsewhere(trial: optuna.trial.FrozenTrial, stale_after_s: float) -> bool:
    """Whether a RUNNING trial of a worker on another machine has sent no heartbeat for
    ``stale_after_s`` seconds."""
    worker = trial.system_attrs.get("torch_mars_worker")
    if not worker or worker.get("host") == socket.gethostname():
        return False
    beat = trial.system_attrs.get("torch_mars_heartbeat", worker.get("started", 0.0))
    return time.time() - beat > stale_after_s


def _trial_params(optimizer: str, point: dict[str, int], seed: int) -> dict[str, Any]:
    return {
        "optimizer": optimizer,
        **{f"{optimizer}.{d}": v for d, v in values_of(point).items()},
        "seed": seed,
    }


def _trial_distributions() -> dict[str, Any]:
    return {
        "optimizer": CategoricalDistribution(tuple(tunable_optimizers())),
        "seed": _DISTRIBUTIONS["seed"],
    }


def _claim(
    plan: TunePlan, study: optuna.Study, stale_after_s: float
) -> tuple[optuna.Trial, RunId, Path, contextlib.ExitStack] | bool | None:
    """Under the claim lock: fail the trials of dead workers, then claim the first needed run
    that no worker is training. Returns (trial, run, run folder, its held lock), None when
    every needed run is taken by another worker, or False when the study is finished."""
    storage = study._storage
    with claim_lock(plan.url, storage, plan.study_name):
        trials = study.get_trials(deepcopy=False)
        running: set[RunId] = set()
        for trial in trials:
            if trial.state != TrialState.RUNNING:
                continue
            if _worker_is_gone(trial) or _stale_elsewhere(trial, stale_after_s):
                storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            elif (run := _run_of(trial)) is not None:
                running.add(run)
        states = frontier(plan, finished_results(trials))
        needed = [run for state in states for run in state.needed]
        if not needed:
            return False
        free = [run for run in needed if run not in running]
        if not free:
            return None
        run = free[0]
        optimizer, key, seed = run
        folder = Path(plan.study_dir) / "runs" / optimizer
        folder.mkdir(parents=True, exist_ok=True)
        # a fresh folder per attempt, locked by this worker while it trains: nothing of
        # another attempt is ever removed or overwritten
        work_dir = Path(tempfile.mkdtemp(prefix=f"seed{seed}-", dir=folder))
        held = contextlib.ExitStack()
        held.enter_context(run_folder_lock(work_dir))
        point = parse_point_key(key)
        params = _trial_params(optimizer, point, seed)
        stage = "heldout" if seed in plan.selection.heldout else "search"
        study.enqueue_trial(
            params,
            user_attrs={
                "optimizer": optimizer,
                "point": key,
                "seed": seed,
                "stage": stage,
                "label": point_label(point),
            },
        )
        distributions = {
            **_trial_distributions(),
            **{f"{optimizer}.{d}": _DISTRIBUTIONS[d] for d in point},
        }
        trial = study.ask(distributions)
        storage.set_trial_system_attr(
            trial._trial_id,
            "torch_mars_worker",
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "work_dir": str(work_dir),
                "started": time.time(),
            },
        )
        return trial, run, work_dir, held


def _train(plan: TunePlan, run: RunId, work_dir: Path) -> dict[str, Any]:
    """Train one run in ``work_dir/run`` (its log lines to ``work_dir/log.txt``); its final
    metric (None if it diverged), training time and, on a held-out seed, its evaluation
    curve."""
    from torch_mars.train.compare import train_run
    from torch_mars.train.metrics import read_metrics

    optimizer, key, seed = run
    run_dir = work_dir / "run"
    config = dataclasses.replace(
        plan.base,
        optimizer=optimizer,
        seed=seed,
        hyperparams=hyperparams_of(optimizer, parse_point_key(key), plan.base.model),
        run_dir=run_dir,
        quiet=True,
    )
    metric = TASK_METRICS["text"].key
    record: dict[str, Any] = {"final": None}
    with (work_dir / "log.txt").open("w") as log, contextlib.redirect_stdout(log):
        try:
            result = train_run(config, _corpus(config.data))
            if math.isfinite(result.final):
                record["final"] = result.final
            record["train_time_s"] = result.train_time_s
        except FloatingPointError as error:
            print(f"diverged: {error}")
    if seed not in plan.selection.heldout:
        return record  # a study keeps the evaluation curves of its winners only
    columns = CURVE_COLUMNS["text"]
    rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    record["curve"] = [
        [row.get(c) if _finite(row.get(c)) else None for c in columns]
        for row in rows
        if row.get(metric) is not None
    ]
    return record


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _heartbeat(study: optuna.Study, trial_id: int, stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        study._storage.set_trial_system_attr(trial_id, "torch_mars_heartbeat", time.time())


def work(
    plan: TunePlan,
    progress: Callable[[str], None] | None = None,
    poll_s: float = 1.0,
    heartbeat_s: float = 60.0,
    stale_after_s: float = 600.0,
    max_trials: int | None = None,
) -> int:
    """One worker: claim needed runs and train them until the study is finished, or until it
    has trained ``max_trials``; returns the number of runs it trained. While other workers hold
    every needed run, it waits for them, looking again every ``poll_s`` seconds. A RUNNING
    trial of a dead worker on this machine (its work folder unlocked), or of one elsewhere
    silent for ``stale_after_s``, is failed and its run claimed again."""
    storage = open_storage(plan.url)
    study = optuna.load_study(study_name=plan.study_name, storage=storage)
    pause_after = os.environ.get(PAUSE_AFTER_VARIABLE)
    trained = 0
    while max_trials is None or trained < max_trials:
        claimed = _claim(plan, study, stale_after_s)
        if claimed is False:
            return trained
        if claimed is None:
            time.sleep(poll_s)
            continue
        trial, run, work_dir, held = claimed
        stop = threading.Event()
        beat = threading.Thread(
            target=_heartbeat, args=(study, trial._trial_id, stop, heartbeat_s), daemon=True
        )
        beat.start()
        with held:
            try:
                record = _train(plan, run, work_dir)
            finally:
                stop.set()
                beat.join()
            for name, value in record.items():
                trial.set_user_attr(name, value)
            value = record["final"] if record["final"] is not None else math.inf
            # under the claim lock, so that no worker checks this folder while it goes
            with claim_lock(plan.url, storage, plan.study_name):
                study.tell(trial, value)
                _remove_work_folder(work_dir)
        trained += 1
        if progress is not None:
            final = "diverged" if record["final"] is None else f"{record['final']:.4f}"
            progress(f"{run[0]} {point_label(parse_point_key(run[1]))} seed {run[2]}: {final}")
        if pause_after is not None and trained == int(pause_after):
            print(f"\ntune paused after {trained} finished trials", file=sys.stderr, flush=True)
            threading.Event().wait()
    return trained


def _remove_work_folder(work_dir: Path) -> None:
    """Remove a finished run's work folder; called while its lock is held. Its record is the
    trial's."""
    import shutil

    shutil.rmtree(work_dir)


def _worker_process(
    plan: TunePlan, index: int, threads: int, gpus: int, max_trials: int | None
) -> int:
    torch.set_num_threads(threads)
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    return work(
        plan,
        progress=lambda line: print(f"[worker {index}] {line}", flush=True),
        max_trials=max_trials,
    )


def run_workers(
    plan: TunePlan,
    progress: Callable[[str], None] | None = None,
    max_trials: int | None = None,
) -> int:
    """Run ``plan.jobs`` workers (in this process for one) until the study is finished, or
    each has trained ``max_trials``; each takes its share of the cores, and one GPU each where
    there are GPUs. Returns the runs trained here."""
    if plan.jobs == 1:
        return work(plan, progress, max_trials=max_trials)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    threads = max(1, (os.cpu_count() or 1) // plan.jobs)
    context = multiprocessing.get_context("spawn")
    with context.Pool(plan.jobs) as pool:
        counts = pool.starmap(_worker_process, [(plan, i, threads, gpus) for i in range(plan.jobs)])
    return sum(counts)


# ---------------------------------------------------------------- the report


@dataclass
class OptimizerOutcome:
    """One optimizer's tuning: its winner, the winner's selection and held-out finals, how many
    runs and distinct points it took, its rounds, and the robustness figures."""

    optimizer: str
    finished: bool
    winner: dict[str, int]
    selection_finals: list[float]
    heldout_finals: list[float]
    runs: int
    points: int
    rounds: int
    heldout_failures: int
    good_lr_band: tuple[float, float] | None
    lr_sweeps: list[list[tuple[float, float]]]

    @property
    def heldout_mean(self) -> float:
        return statistics.fmean(self.heldout_finals) if self.heldout_finals else math.nan

    @property
    def heldout_std(self) -> float:
        return statistics.stdev(self.heldout_finals) if len(self.heldout_finals) > 1 else 0.0


def outcomes(plan: TunePlan, trials: Sequence[optuna.trial.FrozenTrial]) -> list[OptimizerOutcome]:
    """Each optimizer's outcome from the study's trials (as far as it has got)."""
    results = finished_results(trials)
    found = []
    for descent, state in zip(plan.descents(), frontier(plan, results), strict=True):
        name = descent.optimizer
        key = point_key(state.point)
        sel = [results.get((name, key, s), math.nan) for s in plan.selection.seeds]
        held = [
            results[(name, key, s)] for s in plan.selection.heldout if (name, key, s) in results
        ]
        mine = [run for run in results if run[0] == name]
        spread = statistics.stdev(sel) if len(sel) > 1 else 0.0
        margin = max(FAILURE_MARGIN, 3 * spread)
        failures = sum(1 for v in held if not v <= statistics.fmean(sel) + margin)
        lr_sweeps = [
            [
                (values_of(p)["lr"], results.get((name, point_key(p), plan.selection.seeds[0])))
                for p in sorted(sweep.tried, key=lambda p: p["lr"])
            ]
            for sweep in state.sweeps
            if sweep.dimension == "lr"
        ]
        found.append(
            OptimizerOutcome(
                optimizer=name,
                finished=state.finished,
                winner=state.point,
                selection_finals=sel,
                heldout_finals=held,
                runs=len(mine),
                points=len({run[1] for run in mine}),
                rounds=state.rounds,
                heldout_failures=failures,
                good_lr_band=_good_lr_band(descent, state, results),
                lr_sweeps=[[(lr, v) for lr, v in s if v is not None] for s in lr_sweeps],
            )
        )
    return found


def _good_lr_band(
    descent: CoordinateDescent, state: DescentState, results: dict[RunId, float]
) -> tuple[float, float] | None:
    """The lowest and highest lr of the last lr sweep whose first-seed final is within
    :data:`GOOD_LR_SHARE` of the winner's."""
    sweeps = [s for s in state.sweeps if s.dimension == "lr"]
    if not sweeps:
        return None
    seed = descent.selection.seeds[0]
    best = results.get((descent.optimizer, point_key(state.point), seed))
    if best is None or math.isnan(best):
        return None
    good = [
        values_of(p)["lr"]
        for p in sweeps[-1].tried
        if results.get((descent.optimizer, point_key(p), seed), math.inf)
        <= best * (1 + GOOD_LR_SHARE)
    ]
    return (min(good), max(good)) if good else None


def _winner_text(name: str, point: dict[str, int]) -> str:
    return ", ".join(f"{d} {v:g}" for d, v in values_of(point).items())


def format_tune_table(plan: TunePlan, found: Sequence[OptimizerOutcome]) -> str:
    """The report's table: per optimizer its held-out mean ± std, its gap to the strongest
    same-cost control in that control's held-out std, the selection mean, the trial counts and
    the robustness figures; then each winner's settings."""
    by_name = {o.optimizer: o for o in found}
    seeds_sel = ",".join(map(str, plan.selection.seeds))
    seeds_out = ",".join(map(str, plan.selection.heldout))

    def gap(o: OptimizerOutcome) -> str:
        controls = [by_name[c] for c in SAME_COST_CONTROLS.get(o.optimizer, ()) if c in by_name]
        controls = [c for c in controls if c.heldout_finals]
        if not controls or not o.heldout_finals:
            return "—"
        best = min(controls, key=lambda c: c.heldout_mean)
        difference = o.heldout_mean - best.heldout_mean
        sds = f" ({difference / best.heldout_std:+.1f} sd)" if best.heldout_std > 0 else ""
        return f"{difference:+.4f} vs {best.optimizer}{sds}"

    def mean_std(values: list[float]) -> str:
        if not values:
            return "—"
        if len(values) == 1:
            return f"{values[0]:.4f}"
        return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"

    def band(o: OptimizerOutcome) -> str:
        if o.good_lr_band is None:
            return "—"
        low, high = o.good_lr_band
        return f"{low:.3g} to {high:.3g} ({high / low:.2g}x)"

    lines = [
        f"| optimizer | held-out seeds {seeds_out} | vs strongest control | selection seeds "
        f"{seeds_sel} | runs | points | rounds | held-out failures | good-lr band |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ranked = sorted(found, key=lambda o: (math.isnan(o.heldout_mean), o.heldout_mean))
    for o in ranked:
        status = "" if o.finished else " (running)"
        lines.append(
            f"| {o.optimizer}{status} | {mean_std(o.heldout_finals)} | {gap(o)} | "
            f"{mean_std(o.selection_finals)} | {o.runs} | {o.points} | {o.rounds} | "
            f"{o.heldout_failures}/{len(o.heldout_finals)} | {band(o)} |"
        )
    lines.append("")
    lines += [f"- {o.optimizer}: {_winner_text(o.optimizer, o.winner)}" for o in ranked]
    return "\n".join(lines)


def plot_tune_lr(found: Sequence[OptimizerOutcome], out_path: Path) -> Path | None:
    """Final loss (first selection seed) against lr for each optimizer's lr sweeps, the last
    (at the winner's other settings) drawn solid, earlier ones faint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [o for o in found if any(len(s) > 1 for s in o.lr_sweeps)]
    if not drawn:
        return None
    figure, axis = plt.subplots(figsize=(8, 5))
    for index, o in enumerate(drawn):
        colour = f"C{index}"
        sweeps = [s for s in o.lr_sweeps if len(s) > 1]
        for sweep in sweeps[:-1]:
            axis.plot(*zip(*sweep, strict=True), color=colour, alpha=0.2, linewidth=1)
        axis.plot(*zip(*sweeps[-1], strict=True), color=colour, marker="o", label=o.optimizer)
    axis.set_xscale("log")
    axis.set_xlabel("peak learning rate")
    axis.set_ylabel("final validation loss (first selection seed)")
    axis.set_title("lr sweeps of the descent (faint: before the last accepted change)")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    figure.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_path, dpi=120)
    plt.close(figure)
    return out_path


def report_json(plan: TunePlan, found: Sequence[OptimizerOutcome]) -> dict[str, Any]:
    return {
        "selection": dataclasses.asdict(plan.selection),
        "budget": {k: str(getattr(plan.base, k)) for k in BUDGET_FIELDS},
        "optimizers": [
            {
                "optimizer": o.optimizer,
                "finished": o.finished,
                "winner": values_of(o.winner),
                "hyperparams": {
                    k: list(v) if isinstance(v, tuple) else v
                    for k, v in hyperparams_of(o.optimizer, o.winner, plan.base.model).items()
                },
                "selection_finals": [None if math.isnan(v) else v for v in o.selection_finals],
                "heldout_finals": o.heldout_finals,
                "runs": o.runs,
                "points": o.points,
                "rounds": o.rounds,
                "heldout_failures": o.heldout_failures,
                "good_lr_band": o.good_lr_band,
            }
            for o in found
        ],
    }


def write_tune_report(plan: TunePlan, study: optuna.Study) -> list[Path]:
    """``summary.md``, ``tune.json`` and ``lr.png`` in the study folder."""
    found = outcomes(plan, study.get_trials(deepcopy=False))
    folder = Path(plan.study_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.md").write_text(
        format_tune_table(plan, found) + f"\n\nLadders: {ladder_note()}.\n"
    )
    (folder / "tune.json").write_text(json.dumps(report_json(plan, found), indent=2) + "\n")
    written = [folder / "summary.md", folder / "tune.json"]
    figure = plot_tune_lr(found, folder / "lr.png")
    if figure is not None:
        written.append(figure)
    return written


def ladder_note() -> str:
    """One line per dimension: its ladder, for the report's readers."""
    lines = []
    for dimension, ladder in LADDERS.items():
        if ladder.levels:
            lines.append(f"{dimension}: {', '.join(f'{v:g}' for v in ladder.levels)}")
        else:
            lines.append(f"{dimension}: {ladder.anchor:g} x {ladder.factor:g}^k")
    return "; ".join(lines)
