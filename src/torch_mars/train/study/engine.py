"""The one engine of ``torch-mars tune`` and ``torch-mars sweep``: searches replayed over the
finished runs of an Optuna study, and workers that claim and train the runs they need.

A *search* (:mod:`.surface`, :mod:`.profiled`, :mod:`.grid_search`) is a pure function of the
finished runs: ``replay(results)`` returns the runs it needs next (none once it has finished).
A *trial* is one harness run, :data:`RunId` ``(optimizer, point key, seed, data seed)``, and its
value the run's final metric. A killed study resumes by replaying its searches on what finished.

Claims a kill cannot split. Under the study's claim lock (:func:`~.store.claim_lock`) a worker
fails the RUNNING trials whose owner is gone, replays the searches, and claims the first needed
run that no live worker trains by creating its trial *in one storage write*: the trial's
parameters, its run label and its owner (host, process id and start time) go in together
(:func:`~.store.create_claimed_trial`). A kill before that write leaves no trial; a kill after
it leaves one RUNNING trial whose owner process is gone, which the next claim fails and whose
run it trains again. No trial ever waits for a worker, so no run is stored under another's
label, and none runs forever unowned.

A worker is gone when, on its own host and PID namespace, no process with its id and start
time exists (a zombie counts as gone; a worker in another namespace of this host is judged as
one on another host), and, on any host, when it has sent no heartbeat for ``stale_after_s``
(ten minutes; a worker beats every minute while it trains) or its heartbeat is stamped more
than a minute ahead of this host's clock: an owner record alone, written by anyone who can
write the storage, holds a run for ten minutes at most. Where the trial was made is never
read from a path in the study: a trial's work folder is ``study_dir/runs/trial-<number>``,
derived here, so a study handed over from elsewhere cannot make a worker read, write or delete
anything outside its own study folder.
Work folders are made and removed only under the claim lock, a folder only while no process
holds its lock.

A study's identity (:meth:`StudySpec.identity`) is everything that changes its results: the
task's budget (defaults written out), its data by content (not the path it was read from), the
searches' own settings. Opening a study with another identity is refused in one line
(:class:`StudyMismatch`); ``overwrite`` starts it afresh, and is refused while any of its
trials trains. The settings named in ``protocol_keys`` choose which runs a study asks for,
never what a run gives: a study opened with other values of those takes them on.

``TORCH_MARS_PAUSE_AFTER=N`` makes a worker stop still once it has finished N trials, saying
so on stderr: a test kills it there, at a point it controls.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import optuna
import torch
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from torch_mars.train.run_archive import CURVE_COLUMNS
from torch_mars.train.run_record import TASK_METRICS, RunFailed, RunFolderBusy, run_folder_lock
from torch_mars.train.run_shell import RUN_CONTROL_FIELDS, diverged_result, train_run
from torch_mars.train.runtime import describe_device, pause_if_asked, resolve_device
from torch_mars.train.study.pruning import RunPruned, pruning
from torch_mars.train.study.reuse import WHERE_FIELDS, copied_record, donated_run
from torch_mars.train.study.store import (
    OWNER_ATTR,
    PROTOCOL_HISTORY_ATTR,
    RunId,
    StorageError,
    add_finished_trial,
    claim_lock,
    create_claimed_trial,
    delete_study,
    describe,
    fail_trial,
    is_missing,
    load_study,
    open_storage,
    run_of,
    set_heartbeat,
    storage_url,
    study_names,
)
from torch_mars.train.task import OMITTED_AT_DEFAULT, TaskConfig, task_named, task_of

PAUSE_AFTER_VARIABLE = "TORCH_MARS_PAUSE_AFTER"
# The fields of a run's config that are the run's own, not the study's budget.
RUN_FIELDS = (
    "optimizer",
    "seed",
    "data_seed",
    "hyperparams",
    *RUN_CONTROL_FIELDS,
    "diagnostics",
    "dist_timeout_s",
)
# How a progress line says its run failed (a bar prints such a line, where it swallows others).
FAILED_MARK = "FAILED: "
HEARTBEAT_ATTR = "torch_mars_heartbeat"
# A finished run's cost in seconds: its worker's CPU time on a CPU (a paused or crowded worker's
# waits are not the run's), its wall time on an accelerator, whose CPU time says little.
RUN_COST_ATTR = "cost_s"
_SEED_PARAM = IntDistribution(0, 2**31 - 1)


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

    @property
    def planned_runs(self) -> int:
        """The runs the search trains at least, with every trial's budget spent (what a
        progress line counts against)."""
        ...


@dataclass(frozen=True)
class StudySpec:
    """A study: the base run (its optimizer, seeds and hyperparams are set per run), the
    searches, the seeds whose runs keep their evaluation curve, where the study lives (its
    folder is made absolute), how many local workers run it, ``settings``: the searches' own
    identity (JSON), the optimizer names its trials' ``optimizer`` parameter takes,
    ``protocol_keys``: the settings that choose runs without changing any, ``in_common``:
    a stored identity and this one reduced to what both describe (a table of optimizers that
    grew since the study began changes no result of its optimizers), and ``donors``: tune
    study folders whose finished runs of the same settings are taken instead of trained
    (:mod:`.reuse`; they change no result, so they are not in the identity); ``prune``: stop
    trials' runs early on the values they report (:mod:`.pruning`)."""

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
    in_common: Callable[[dict[str, Any], dict[str, Any]], tuple[dict, dict]] | None = None
    donors: tuple[Path, ...] = ()
    prune: bool = False

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")
        object.__setattr__(self, "study_dir", Path(os.path.abspath(self.study_dir)))

    @property
    def url(self) -> str:
        return storage_url(self.storage, self.study_dir)

    @property
    def task(self) -> str:
        return task_of(self.base).name

    def search_of(self, optimizer: str) -> Search:
        return next(s for s in self.searches if s.optimizer == optimizer)

    def work_dir(self, number: int) -> Path:
        """The work folder of trial ``number``: derived, never read from the study."""
        return self.study_dir / "runs" / f"trial-{number}"

    def identity(self) -> dict[str, Any]:
        """Everything that changes the study's results, as the storage keeps it (JSON). A
        field marked ``OMITTED_AT_DEFAULT`` in its metadata is left out at its default, so a
        setting added later keeps the identities stored before it."""
        budget = {
            f.name: getattr(self.base, f.name)
            for f in dataclasses.fields(self.base)
            if f.name not in RUN_FIELDS
            and not (f.metadata.get(OMITTED_AT_DEFAULT) and getattr(self.base, f.name) == f.default)
        }
        if budget.get("block_size", 0) is None:
            from torch_mars.models.gpt import GPT_CONFIGS

            budget["block_size"] = GPT_CONFIGS[budget["model"]].block_size
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
    """The base's data by content; where the config declares a ``version`` of its code (a
    user's training function), that version instead: the user says when results change."""
    declared = getattr(base, "version", None)
    if declared is not None:
        return f"declared version {declared}"
    return task_of(base).data_fingerprint(_study_data(base))


class StudyMismatch(ValueError):
    """A study exists in the storage with other settings."""


def _differences(stored: Any, wanted: Any, prefix: str = "") -> list[str]:
    if isinstance(stored, dict) and isinstance(wanted, dict):
        out = []
        for key in sorted(set(stored) | set(wanted)):
            out += _differences(stored.get(key), wanted.get(key), f"{prefix}{key}.")
        return out
    if stored == wanted:
        return []
    return [f"{prefix.rstrip('.')}: {_brief(stored)} there, {_brief(wanted)} here"]


def _brief(value: Any) -> str:
    """A setting as a one-line message shows it: a long list by its first items and length.

    >>> _brief(list(range(64)))
    '[0, 1, 2, ... 64 items]'
    """
    if isinstance(value, list | tuple) and len(value) > 6:
        return f"[{', '.join(map(repr, value[:3]))}, ... {len(value)} items]"
    return repr(value)


def _protocol_of(identity: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    search = identity.get("search", {})
    return {key: search.get(key) for key in keys}


def _comparable(identity: dict[str, Any], keys: Sequence[str] = ()) -> dict[str, Any]:
    """``identity`` without what never changes a result: where the data was read from (its
    content is in ``data``) and, with ``keys``, the protocol."""
    budget = {k: v for k, v in identity.get("budget", {}).items() if k not in WHERE_FIELDS}
    search = {k: v for k, v in identity.get("search", {}).items() if k not in keys}
    return {**identity, "budget": budget, "search": search}


def open_study(
    spec: StudySpec,
    read_only: bool = False,
    before_taking: Callable[[optuna.Study], None] | None = None,
) -> optuna.Study:
    """Create the study, or open it and check that its identity is the spec's
    (:class:`StudyMismatch` otherwise; ``spec.overwrite`` deletes and recreates it, unless a
    trial of it is training). Where only the protocol differs, the study takes the spec's.
    ``read_only`` (a report) never changes a study that exists: it neither takes a protocol nor
    deletes; and it never creates one (a name with no study is a ValueError). ``before_taking``
    checks the study before it takes a new protocol and may refuse it (raise): a refused
    command writes nothing."""
    url = spec.url
    if read_only and is_missing(url):  # a report makes no folder or file
        raise ValueError(f"no study {spec.study_name!r} in {describe(url)} to report (no file)")
    storage = open_storage(url, create=not read_only)
    identity = spec.identity()
    keys = spec.protocol_keys
    if read_only and spec.study_name not in study_names(storage):
        raise ValueError(
            f"no study {spec.study_name!r} in {describe(url)} to report (its names: "
            f"{', '.join(sorted(study_names(storage))) or 'none'})"
        )
    with claim_lock(url, storage, spec.study_name):
        if spec.study_name in study_names(storage):
            study = load_study(storage, spec.study_name)
            stored = study.user_attrs.get("identity")
            seen, wanted = stored, identity
            if stored is not None and spec.in_common is not None:
                seen, wanted = spec.in_common(stored, identity)
            if seen is not None and _comparable(seen) == _comparable(wanted):
                return study
            if seen is not None and _comparable(seen, keys) == _comparable(wanted, keys):
                if read_only:
                    return study
                if before_taking is not None:
                    before_taking(study)
                changed = _differences(_protocol_of(seen, keys), _protocol_of(wanted, keys))
                past = {"protocol": _protocol_of(stored, keys), "until": time.time()}
                study.set_user_attr(PROTOCOL_HISTORY_ATTR, [*protocol_history(study), past])
                study.set_user_attr("identity", identity)
                print(
                    f"study {spec.study_name!r} takes a new protocol "
                    f"({'; '.join(changed)}); its finished runs all count",
                    file=sys.stderr,
                )
                return study
            if read_only or not spec.overwrite:
                changed = _differences(_comparable(seen or {}), _comparable(wanted))
                raise StudyMismatch(
                    f"study {spec.study_name!r} in {describe(url)} was run with other settings "
                    f"({'; '.join(changed[:3])}); give this one another name (--name or "
                    "--out-dir; name= or out_dir= in Python), or start it afresh (--overwrite, "
                    "without --report; in Python, remove its folder)"
                )
            live = [t for t in _running(study) if not _owner_is_gone(t, _STALE_AFTER_S)]
            if live:
                left = max(_hold_left_s(t, _STALE_AFTER_S) for t in live)
                raise StudyMismatch(
                    f"--overwrite: study {spec.study_name!r} in {describe(url)} has "
                    f"{len(live)} trial(s) training now (first: {_owner_text(live[0])}); "
                    "it is not deleted while they train. A worker that trains nothing holds "
                    f"its trial {_STALE_AFTER_S:.0f} s past its last heartbeat: stop those "
                    f"processes, or run --overwrite again in {left:.0f} s"
                )
            delete_study(storage, spec.study_name)
        study = optuna.create_study(
            study_name=spec.study_name,
            storage=storage,
            direction="minimize" if TASK_METRICS[spec.task].lower_is_better else "maximize",
        )
        study.set_user_attr("identity", identity)
    return study


def protocol_history(study: optuna.Study) -> list[dict[str, Any]]:
    """The protocols a study ran under before its current one, oldest first: each
    ``{"protocol": ..., "until": unix time}``, written by :func:`open_study`."""
    return list(study.user_attrs.get(PROTOCOL_HISTORY_ATTR, []))


def ran_under(study: optuna.Study, spec: StudySpec) -> bool:
    """Whether ``study`` ran under ``spec``'s protocol: its current one or one in its history.
    A report of such a protocol replays that protocol's search over the stored runs."""
    keys = spec.protocol_keys
    wanted = _protocol_of(spec.identity(), keys)
    current = _protocol_of(study.user_attrs.get("identity", {}), keys)
    # a key that became a protocol key after a past protocol was recorded (``search``) had,
    # then, the value the study's settings still hold
    pasts = [{**current, **past["protocol"]} for past in protocol_history(study)]
    return wanted == current or wanted in pasts


def join_study(url: str, study_name: str) -> tuple[optuna.Study, dict[str, Any]]:
    """An existing study and its identity (for a worker that joins it)."""
    storage = open_storage(url, create=False)
    if study_name not in study_names(storage):
        raise ValueError(f"no study {study_name!r} in {describe(url)}")
    study = load_study(storage, study_name)
    identity = study.user_attrs.get("identity")
    if identity is None:
        raise ValueError(f"study {study_name!r} in {describe(url)} is not a torch-mars study")
    return study, identity


def _optimizer_choices(
    trials: Sequence[optuna.trial.FrozenTrial], spec: StudySpec
) -> CategoricalDistribution:
    """The ``optimizer`` parameter's choices: those the study's trials already use (Optuna
    refuses another set for the same parameter), else the spec's. An optimizer added to the
    table after a study began is then no choice of it: its trials carry it in their user
    attributes only."""
    for trial in trials:
        stored = trial.distributions.get("optimizer")
        if isinstance(stored, CategoricalDistribution):
            return stored
    return CategoricalDistribution(spec.optimizer_choices)


def failed_runs(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[RunId, str]:
    """Each run that failed with its message (the training raised, or returned no number)."""
    return {
        run: str(trial.user_attrs["error"])
        for trial in trials
        if trial.state == TrialState.FAIL
        and "error" in trial.user_attrs
        and (run := run_of(trial)) is not None
    }


def nothing_trained(trials: Sequence[optuna.trial.FrozenTrial]) -> str | None:
    """A line saying that no run of the study finished with a number (every one failed, with the
    first message, or diverged), or None where one did."""
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if any(t.user_attrs.get("final") is not None for t in complete):
        return None
    if complete and not failed_runs(trials):
        return f"no run finished with a number: all {len(complete)} diverged (NaN or inf)"
    failed = failed_runs(trials)
    first = next(iter(failed.values()), None)
    if first is None:
        return "no run finished"
    return f"no run finished: all {len(failed)} failed (first: {first})"


def finished_results(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[RunId, float]:
    """Each finished run's final metric (NaN for a diverged run, infinity for a pruned one:
    worst, and not a divergence)."""
    results: dict[RunId, float] = {}
    for trial in trials:
        run = run_of(trial)
        if run is not None and trial.state == TrialState.PRUNED and "pruned" in trial.user_attrs:
            results[run] = math.inf
            continue
        failed_itself = trial.state == TrialState.FAIL and "error" in trial.user_attrs
        if run is not None and (trial.state == TrialState.COMPLETE or failed_itself):
            if "final" not in trial.user_attrs:  # a diverged run stores None, never nothing
                raise ValueError(
                    f"trial {trial.number} of the study is {trial.state.name} without its "
                    "final record: the journal lost a line or was edited (restore it from its "
                    "study.log.gz snapshot, or fail that trial in the storage to train its run "
                    "again)"
                )
            final = trial.user_attrs["final"]
            if final is not None and (
                isinstance(final, bool) or not isinstance(final, int | float)
            ):
                raise ValueError(
                    f"trial {trial.number} of the study stores final {final!r}, not a number: "
                    "the study's data were changed outside tune (fail that trial in the storage "
                    "to train its run again)"
                )
            results[run] = math.nan if final is None else final
    return results


class AskedFor(Mapping[RunId, float]):
    """Finished results that keep each run a replay asks for: the runs its protocol reads,
    not the study's others (another budget's, another protocol's)."""

    def __init__(self, results: Mapping[RunId, float]) -> None:
        self._results = results
        self.asked: set[RunId] = set()

    def __getitem__(self, run: RunId) -> float:
        self.asked.add(run)
        return self._results[run]

    def __contains__(self, run: object) -> bool:
        self.asked.add(run)  # type: ignore[arg-type]
        return run in self._results

    def __iter__(self) -> Iterator[RunId]:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)


def study_progress(spec: StudySpec, trials: Sequence[optuna.trial.FrozenTrial]) -> tuple[int, int]:
    """``(finished, planned)``: the finished runs the searches read (not the study's others:
    another budget's, another protocol's), and the runs they plan: a finished search's exactly,
    an unfinished one's at least :attr:`Search.planned_runs`, more where its replay already
    asks for more (a finalist no trial scored). So the first never passes the second."""
    results = finished_results(trials)
    finished = planned = 0
    for search in spec.searches:
        asked = AskedFor(results)
        needed = search.replay(asked).needed
        # its own runs: a search that reads its peers' winners replays them too
        read = len({run for run in asked.asked & results.keys() if run[0] == search.optimizer})
        finished += read
        planned += max(search.planned_runs, read + len(needed)) if needed else read
    return finished, planned


# ---------------------------------------------------------------- owners


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), "" where the
    system cannot say, None if no live process has that id (a zombie is not live)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    except OSError:
        fields = []
    if fields:
        return None if fields[0] in ("Z", "X") else fields[19]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return ""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    """This process's PID namespace (Linux), "" where the system cannot say: a pid means one
    process only inside its namespace (two containers on one host share its name and boot)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


# The revision of the optimizers' default step paths a run trained on: 2 since MARS groups on
# CPU of at most 2**24 elements take foreach (same maths, other last digits; absent before).
STEP_DEFAULTS = 2


def owner_record(device: str) -> dict[str, Any]:
    """Who claims a trial: this process, on this host, boot and PID namespace, its device (the
    machine: GPU name, or CPU model and vector instructions) and the step defaults it runs."""
    return {
        "host": socket.gethostname(),
        "boot": _boot_id(),
        "pid_namespace": _pid_namespace(),
        "pid": os.getpid(),
        "pid_start": _process_start(os.getpid()),
        "started": time.time(),
        "device": device,
        "threads": torch.get_num_threads(),
        "step_defaults": STEP_DEFAULTS,
    }


def _owner_is_gone(trial: optuna.trial.FrozenTrial, stale_after_s: float) -> bool:
    """Whether a RUNNING trial's worker has died (see the module's docstring). A RUNNING trial
    with no owner was not claimed by this engine (nor by any kill of it): it is gone."""
    owner = trial.system_attrs.get(OWNER_ATTR)
    if not isinstance(owner, dict):
        return True
    beat = _last_beat(trial)
    if beat is None:
        return True  # a record that is no time proves nothing
    now = time.time()
    if beat > now + _CLOCK_SLACK_S:
        return True  # a heartbeat from the future proves nothing
    stale = now - beat > stale_after_s
    same_host = owner.get("host") == socket.gethostname() and owner.get("boot") == _boot_id()
    # a record from before namespaces were recorded reads as this one's, as it was then
    namespace = owner.get("pid_namespace", _pid_namespace())
    if same_host and namespace == _pid_namespace():
        start = _process_start(int(owner.get("pid", -1)))
        if start is None or (bool(start) and start != owner.get("pid_start")):
            return True
    return stale  # a live process too must prove it trains: its heartbeat


def _last_beat(trial: optuna.trial.FrozenTrial) -> float | None:
    """When a RUNNING trial's owner last proved it trains (its last heartbeat, else its claim),
    in seconds since the epoch; None where the record is no time."""
    owner = trial.system_attrs.get(OWNER_ATTR)
    started = owner.get("started", 0.0) if isinstance(owner, dict) else 0.0
    try:
        return float(trial.system_attrs.get(HEARTBEAT_ATTR, started))
    except (TypeError, ValueError):
        return None


def _hold_left_s(trial: optuna.trial.FrozenTrial, stale_after_s: float) -> float:
    """Seconds until a RUNNING trial's owner counts as gone unless it beats again."""
    beat = _last_beat(trial)
    return 0.0 if beat is None else max(0.0, stale_after_s - (time.time() - beat))


def _owner_text(trial: optuna.trial.FrozenTrial) -> str:
    owner = trial.system_attrs.get(OWNER_ATTR) or {}
    return f"trial {trial.number} on {owner.get('host')}, process {owner.get('pid')}"


def _running(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


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


_STALE_AFTER_S = 600.0
# How far ahead of this host's clock another host's may run before its heartbeat is refused.
_CLOCK_SLACK_S = 60.0


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
                donated_run(spec.donors, identity, run, values, run[2] in spec.curve_seeds, trainer)
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
        hyperparams=spec.search_of(optimizer).hyperparams(key),
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
) -> int:
    """One worker: claim needed runs and train them until the study is finished, until it has
    trained ``max_trials``, or until the Unix time ``stop_at`` (a wall-clock budget: no run is
    claimed after it; the one in flight finishes); returns the number of runs it trained. While
    other workers hold every needed run, it waits for them, looking again every ``poll_s``
    seconds."""
    storage = open_storage(spec.url, create=False)
    study = load_study(storage, spec.study_name)
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


def run_workers(
    spec: StudySpec,
    progress: Callable[[str], None] | None = None,
    max_trials: int | None = None,
    stop_at: float | None = None,
) -> int:
    """Run ``spec.jobs`` workers (in this process for one) until the study is finished, each
    has trained ``max_trials``, or the wall-clock budget ends at ``stop_at`` (:func:`work`);
    each takes its share of the cores, and one GPU each where there are GPUs.
    ``progress(line)`` is called as each run finishes here; worker processes print their lines
    themselves (prefixed ``[worker N]``), and none where ``progress`` is None. Returns when
    every worker has ended, however it ended (a killed worker's trial is trained again by the
    others); the count is the runs this process's study gained."""
    if spec.jobs == 1:
        return work(spec, progress, max_trials=max_trials, stop_at=stop_at)
    study = load_study(open_storage(spec.url, create=False), spec.study_name)
    before = len(finished_results(study.get_trials(deepcopy=False)))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    threads = max(1, (os.cpu_count() or 1) // spec.jobs)
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
        work(spec, progress, stop_at=stop_at)
    return len(finished_results(study.get_trials(deepcopy=False))) - before


__all__ = [
    "PAUSE_AFTER_VARIABLE",
    "Claim",
    "RunId",
    "Search",
    "StorageError",
    "StudyMismatch",
    "StudySpec",
    "budget_of",
    "claim",
    "finished_results",
    "join_study",
    "open_study",
    "protocol_history",
    "run_workers",
    "work",
]
