"""The one engine of ``torch-mars tune`` and ``torch-mars sweep``: searches replayed over the
finished runs of an Optuna study, and workers that claim and train the runs they need.

A *search* (a coordinate descent, :mod:`.descent`, or a plain grid, :mod:`.sweep`) is a pure
function of the finished runs: ``replay(results)`` returns the runs it needs next (none once it
has finished). A *trial* is one harness run, ``(optimizer, point key, seed)``, and its value
the run's final metric. Workers claim needed runs under the study's claim lock
(:mod:`.study_store`), so no run is claimed twice, and train each in a fresh work folder that
they lock while it trains and remove once its trial is told: nothing of another attempt is ever
removed or overwritten. A killed study resumes by replaying its searches on what finished.

A study's identity (:meth:`StudySpec.identity`) is everything that changes its results: the
task's budget, model and data (by content where the task can say), the searches' own settings.
Opening a study with another identity is refused in one line (:class:`StudyMismatch`), unless
``overwrite`` starts it afresh. The settings named in ``protocol_keys`` (a descent's rounds,
its seeds, its optimizers) choose which runs a study asks for, never what a run gives: a study
opened with other values of those only takes them on (the old ones kept in the study's
``protocol_history``), and every finished run counts under the new protocol.

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
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import optuna
import torch
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import TrialState

from torch_mars.train.run_archive import CURVE_COLUMNS
from torch_mars.train.run_record import TASK_METRICS, RunFolderBusy, run_folder_lock
from torch_mars.train.run_shell import RUN_CONTROL_FIELDS
from torch_mars.train.runtime import describe_device, pause_if_asked, resolve_device
from torch_mars.train.study_store import claim_lock, describe, open_storage, storage_url
from torch_mars.train.task import TaskConfig, task_named, task_of

PAUSE_AFTER_VARIABLE = "TORCH_MARS_PAUSE_AFTER"
# A run's identity in a study: (optimizer, point key, seed).
RunId = tuple[str, str, int]
# The fields of a run's config that are the run's own, not the study's budget.
RUN_FIELDS = (
    "optimizer",
    "seed",
    "hyperparams",
    *RUN_CONTROL_FIELDS,
    "diagnostics",
    "dist_timeout_s",
)


class SearchState(Protocol):
    needed: list[RunId]


class Search(Protocol):
    """What the engine asks of a search."""

    optimizer: str

    def replay(self, results: Mapping[RunId, float]) -> SearchState: ...

    def hyperparams(self, key: str) -> dict[str, Any]:
        """The harness hyperparameters of the point ``key``."""
        ...

    def trial_params(self, key: str) -> dict[str, tuple[Any, BaseDistribution]]:
        """The point as Optuna parameters (what a dashboard plots)."""
        ...

    def label(self, key: str) -> str: ...


@dataclass(frozen=True)
class StudySpec:
    """A study: the base run (its optimizer, seed and hyperparams are set per run), the
    searches, the seeds whose runs keep their evaluation curve, where the study lives, how many
    local workers run it, ``settings``: the searches' own identity (JSON), the optimizer
    names its trials' ``optimizer`` parameter takes, and ``protocol_keys``: the settings that
    choose runs without changing any (see the module's docstring)."""

    base: TaskConfig
    searches: tuple[Search, ...]
    curve_seeds: tuple[int, ...]
    study_dir: Path
    settings: dict[str, Any]
    optimizer_choices: tuple[str, ...]
    storage: str | None = None
    study_name: str = "study"
    jobs: int = 1
    overwrite: bool = False
    protocol_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")

    @property
    def url(self) -> str:
        return storage_url(self.storage, self.study_dir)

    @property
    def task(self) -> str:
        return task_of(self.base).name

    def search_of(self, optimizer: str) -> Search:
        return next(s for s in self.searches if s.optimizer == optimizer)

    def identity(self) -> dict[str, Any]:
        """Everything that changes the study's results, as the storage keeps it (JSON)."""
        budget = {
            f.name: getattr(self.base, f.name)
            for f in dataclasses.fields(self.base)
            if f.name not in RUN_FIELDS
        }
        identity = {
            "task": self.task,
            "budget": budget,
            "data": _data_fingerprint(self.base),
            "search": self.settings,
        }
        return json.loads(json.dumps(identity, default=str))


def budget_of(identity: dict[str, Any]) -> TaskConfig:
    """The base config a stored identity describes (what a joining worker trains)."""
    return task_named(identity["task"]).config_of_budget({**identity["budget"], "quiet": True})


_LOADED: dict[tuple[str, str], Any] = {}


def _study_data(base: TaskConfig) -> Any:
    """The study's data, read once per process: every trial of a study trains on the data
    whose fingerprint is in its identity, checked when the study opens."""
    task = task_of(base)
    key = (task.name, base.data)
    if key not in _LOADED:
        _LOADED[key] = task.load_data(base)
    return _LOADED[key]


def _data_fingerprint(base: TaskConfig) -> str:
    """The base's data by content."""
    return task_of(base).data_fingerprint(_study_data(base))


class StudyMismatch(ValueError):
    """A study exists in the storage with other settings."""


def _differences(stored: Any, wanted: Any, prefix: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(wanted, dict):
        out = []
        for key in sorted(set(stored) | set(wanted)):
            out += _differences(stored.get(key), wanted.get(key), f"{prefix}{key}.")
        return out
    return [] if stored == wanted else [f"{prefix.rstrip('.')}: {stored!r} there, {wanted!r} here"]


def _protocol_of(identity: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    search = identity.get("search", {})
    return {key: search.get(key) for key in keys}


def _without_protocol(identity: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    search = {k: v for k, v in identity.get("search", {}).items() if k not in keys}
    return {**identity, "search": search}


def open_study(spec: StudySpec, take_protocol: bool = True) -> optuna.Study:
    """Create the study, or open it and check that its identity is the spec's
    (:class:`StudyMismatch` otherwise; ``spec.overwrite`` deletes and recreates it). Where only
    the protocol differs, the study takes the spec's (unless ``take_protocol`` is False: a
    report reads the study without changing it)."""
    url = spec.url
    storage = open_storage(url)
    identity = spec.identity()
    keys = spec.protocol_keys
    with claim_lock(url, storage, spec.study_name):
        names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
        if spec.study_name in names:
            study = optuna.load_study(study_name=spec.study_name, storage=storage)
            stored = study.user_attrs.get("identity")
            if stored == identity:
                return study
            if stored is not None and _without_protocol(stored, keys) == _without_protocol(
                identity, keys
            ):
                if take_protocol:
                    changed = _differences(_protocol_of(stored, keys), _protocol_of(identity, keys))
                    history = study.user_attrs.get("protocol_history", [])
                    past = {"protocol": _protocol_of(stored, keys), "until": time.time()}
                    study.set_user_attr("protocol_history", [*history, past])
                    study.set_user_attr("identity", identity)
                    print(
                        f"study {spec.study_name!r} takes a new protocol "
                        f"({'; '.join(changed)}); its finished runs all count",
                        file=sys.stderr,
                    )
                return study
            if not spec.overwrite:
                changed = _differences(stored or {}, identity)
                raise StudyMismatch(
                    f"study {spec.study_name!r} in {describe(url)} was run with other settings "
                    f"({'; '.join(changed[:3])}); pass --overwrite to start it afresh, or "
                    "--name for another study"
                )
            optuna.delete_study(study_name=spec.study_name, storage=storage)
        study = optuna.create_study(
            study_name=spec.study_name,
            storage=storage,
            direction="minimize" if TASK_METRICS[spec.task].lower_is_better else "maximize",
        )
        study.set_user_attr("identity", identity)
    return study


def join_study(url: str, study_name: str) -> tuple[optuna.Study, dict[str, Any]]:
    """An existing study and its identity (for a worker that joins it)."""
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


def _worker_is_gone(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a RUNNING trial's worker, on this machine, has died: its work folder's lock is
    free (the operating system releases it with its holder). The folder is then removed, under
    that lock."""
    worker = trial.system_attrs.get("torch_mars_worker")
    if not worker or worker.get("host") != socket.gethostname():
        return False
    work_dir = Path(worker["work_dir"])
    if not work_dir.is_dir():
        return True
    try:
        with run_folder_lock(work_dir):
            shutil.rmtree(work_dir)
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


@dataclass
class Claim:
    """A run this worker holds: its trial, its work folder and the folder's held lock."""

    trial: optuna.Trial
    run: RunId
    work_dir: Path
    lock: contextlib.ExitStack


def claim(spec: StudySpec, study: optuna.Study, stale_after_s: float) -> Claim | bool | None:
    """Under the claim lock: fail the trials of dead workers, then claim the first needed run
    that no worker is training. None when other workers hold every needed run; False when the
    study is finished."""
    storage = study._storage
    with claim_lock(spec.url, storage, spec.study_name):
        trials = study.get_trials(deepcopy=False)
        running: set[RunId] = set()
        for trial in trials:
            if trial.state != TrialState.RUNNING:
                continue
            if _worker_is_gone(trial) or _stale_elsewhere(trial, stale_after_s):
                storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            elif (run := _run_of(trial)) is not None:
                running.add(run)
        results = finished_results(trials)
        needed = [run for search in spec.searches for run in search.replay(results).needed]
        if not needed:
            return False
        free = [run for run in needed if run not in running]
        if not free:
            return None
        run = free[0]
        optimizer, key, seed = run
        folder = Path(spec.study_dir) / "runs" / optimizer
        folder.mkdir(parents=True, exist_ok=True)
        work_dir = Path(tempfile.mkdtemp(prefix=f"seed{seed}-", dir=folder))
        lock = contextlib.ExitStack()
        lock.enter_context(run_folder_lock(work_dir))
        search = spec.search_of(optimizer)
        choices = CategoricalDistribution(spec.optimizer_choices)
        params = {"optimizer": (optimizer, choices), "seed": (seed, _SEED_PARAM)}
        params |= {f"{optimizer}.{name}": p for name, p in search.trial_params(key).items()}
        study.enqueue_trial(
            {name: value for name, (value, _) in params.items()},
            user_attrs={
                "optimizer": optimizer,
                "point": key,
                "seed": seed,
                "label": search.label(key),
            },
        )
        trial = study.ask({name: distribution for name, (_, distribution) in params.items()})
        storage.set_trial_system_attr(
            trial._trial_id,
            "torch_mars_worker",
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "work_dir": str(work_dir),
                "started": time.time(),
                "device": describe_device(resolve_device(spec.base.device)),
            },
        )
        return Claim(trial, run, work_dir, lock)


_SEED_PARAM = optuna.distributions.IntDistribution(0, 2**31 - 1)


def train_claimed(spec: StudySpec, claimed: Claim) -> dict[str, Any]:
    """Train a claimed run in ``work_dir/run`` (its log lines to ``work_dir/log.txt``); its
    final metric (None if it diverged), its summary and, for :attr:`StudySpec.curve_seeds`, its
    evaluation curve."""
    from torch_mars.train.compare import train_run
    from torch_mars.train.metrics import read_metrics
    from torch_mars.train.run_shell import diverged_result

    optimizer, key, seed = claimed.run
    run_dir = claimed.work_dir / "run"
    config = dataclasses.replace(
        spec.base,
        optimizer=optimizer,
        seed=seed,
        hyperparams=spec.search_of(optimizer).hyperparams(key),
        run_dir=run_dir,
        quiet=True,
    )
    with (claimed.work_dir / "log.txt").open("w") as log, contextlib.redirect_stdout(log):
        try:
            result = train_run(config, _study_data(config))
        except FloatingPointError as error:
            print(f"diverged: {error}")
            result = diverged_result(config)
    summary = {
        k: v if not isinstance(v, float) or math.isfinite(v) else None
        for k, v in result.as_dict().items()
        if k != "run_dir"
    }
    record: dict[str, Any] = {"final": summary["final"], "summary": summary}
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


def _heartbeat(study: optuna.Study, trial_id: int, stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        study._storage.set_trial_system_attr(trial_id, "torch_mars_heartbeat", time.time())


def work(
    spec: StudySpec,
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
    storage = open_storage(spec.url)
    study = optuna.load_study(study_name=spec.study_name, storage=storage)
    worse = math.inf if TASK_METRICS[spec.task].lower_is_better else -math.inf
    trained = 0
    while max_trials is None or trained < max_trials:
        claimed = claim(spec, study, stale_after_s)
        if claimed is False:
            break
        if claimed is None:
            time.sleep(poll_s)
            continue
        stop = threading.Event()
        beat = threading.Thread(
            target=_heartbeat,
            args=(study, claimed.trial._trial_id, stop, heartbeat_s),
            daemon=True,
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
            # under the claim lock, so that no worker checks this folder while it goes
            with claim_lock(spec.url, storage, spec.study_name):
                study.tell(claimed.trial, value)
                shutil.rmtree(claimed.work_dir)
        trained += 1
        if progress is not None:
            final = "diverged" if record["final"] is None else f"{record['final']:.4f}"
            optimizer, key, seed = claimed.run
            label = spec.search_of(optimizer).label(key)
            progress(f"{optimizer} {label} seed {seed}: {final}")
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


def _worker_process(
    spec: StudySpec, index: int, threads: int, gpus: int, max_trials: int | None
) -> int:
    _die_with_parent()
    torch.set_num_threads(threads)
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    return work(
        spec,
        progress=lambda line: print(f"[worker {index}] {line}", flush=True),
        max_trials=max_trials,
    )


def run_workers(
    spec: StudySpec,
    progress: Callable[[str], None] | None = None,
    max_trials: int | None = None,
) -> int:
    """Run ``spec.jobs`` workers (in this process for one) until the study is finished, or
    each has trained ``max_trials``; each takes its share of the cores, and one GPU each where
    there are GPUs. Returns the runs trained here."""
    if spec.jobs == 1:
        return work(spec, progress, max_trials=max_trials)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    threads = max(1, (os.cpu_count() or 1) // spec.jobs)
    context = multiprocessing.get_context("spawn")
    with context.Pool(spec.jobs) as pool:
        counts = pool.starmap(
            _worker_process, [(spec, i, threads, gpus, max_trials) for i in range(spec.jobs)]
        )
    return sum(counts)
