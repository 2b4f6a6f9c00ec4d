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

import dataclasses
import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import optuna
import torch
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from torch_mars.train.run_record import TASK_METRICS
from torch_mars.train.run_shell import RUN_CONTROL_FIELDS
from torch_mars.train.study.reuse import budget_content
from torch_mars.train.study.space import Fixed
from torch_mars.train.study.store import (
    OWNER_ATTR,
    PROTOCOL_HISTORY_ATTR,
    RunId,
    claim_lock,
    delete_study,
    describe,
    is_missing,
    load_study,
    open_storage,
    run_of,
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

    def hyperparams(self, key: str, fixed: Fixed = ()) -> dict[str, Any]:
        """The harness hyperparameters of the point ``key`` with the study's ``fixed`` values."""
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
    (:mod:`.reuse`; they change no result, so they are not in the identity);
    ``donated_anywhere``: the ``(seed, data order)`` runs a donor's trial is taken for
    whichever machine trained it (:func:`~.reuse.donated_run`); ``prune``: stop
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
    donated_anywhere: frozenset[tuple[int, int]] = frozenset()
    prune: bool = False
    # the values the study holds (``--fixed``: ``(dimension, value)`` pairs), each search's
    # ``held`` dimensions: merged into a run's settings by its search's ``hyperparams``
    fixed: Fixed = ()

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
    search = {k: v for k, v in identity.get("search", {}).items() if k not in keys}
    return {**identity, "budget": budget_content(identity), "search": search}


def study_storage(
    url: str, study_name: str, read_only: bool = False
) -> optuna.storages.BaseStorage:
    """The storage at ``url`` that the study ``study_name`` lives in, opened (a command opens
    it once and hands it on); ``read_only`` (a report) makes no folder or file: a storage that
    does not exist is a ValueError naming the study."""
    if read_only and is_missing(url):
        raise ValueError(f"no study {study_name!r} in {describe(url)} to report (no file)")
    return open_storage(url, create=not read_only)


def open_study(
    spec: StudySpec,
    read_only: bool = False,
    before_taking: Callable[[optuna.Study], None] | None = None,
    storage: optuna.storages.BaseStorage | None = None,
) -> optuna.Study:
    """Create the study, or open it and check that its identity is the spec's
    (:class:`StudyMismatch` otherwise; ``spec.overwrite`` deletes and recreates it, unless a
    trial of it is training). Where only the protocol differs, the study takes the spec's.
    ``read_only`` (a report) never changes a study that exists: it neither takes a protocol nor
    deletes; and it never creates one (a name with no study is a ValueError). ``before_taking``
    checks the study before it takes a new protocol and may refuse it (raise): a refused
    command writes nothing. ``storage``: the command's opening of :func:`study_storage` (opened
    here where None)."""
    url = spec.url
    if storage is None:
        storage = study_storage(url, spec.study_name, read_only)
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
            _delete_unless_training(study, storage, url, "--overwrite")
        study = optuna.create_study(
            study_name=spec.study_name,
            storage=storage,
            direction="minimize" if TASK_METRICS[spec.task].lower_is_better else "maximize",
        )
        study.set_user_attr("identity", identity)
    return study


def _delete_unless_training(
    study: optuna.Study, storage: optuna.storages.BaseStorage, url: str, asked_by: str
) -> None:
    """Delete ``study`` (its caller holds its claim lock), unless a trial of it is training:
    a :class:`StudyMismatch` naming ``asked_by`` then, and nothing deleted."""
    live = [t for t in _running(study) if not _owner_is_gone(t, _STALE_AFTER_S)]
    if live:
        left = max(_hold_left_s(t, _STALE_AFTER_S) for t in live)
        raise StudyMismatch(
            f"{asked_by}: study {study.study_name!r} in {describe(url)} has "
            f"{len(live)} trial(s) training now (first: {_owner_text(live[0])}); "
            "it is not deleted while they train. A worker that trains nothing holds "
            f"its trial {_STALE_AFTER_S:.0f} s past its last heartbeat: stop those "
            f"processes, or run {asked_by} again in {left:.0f} s"
        )
    delete_study(storage, study.study_name)


def start_afresh(url: str, study_name: str, asked_by: str) -> bool:
    """Delete the study ``study_name`` in the storage ``url`` under its claim lock, whatever
    settings it ran with, so that the next command trains it from nothing (a study whose runs
    cannot be read, say: its pairs trained on another machine or thread count than the runs
    they pair with); refused (:class:`StudyMismatch` naming ``asked_by``) while a trial of it
    trains. False where there is no such study."""
    if is_missing(url):
        return False
    storage = study_storage(url, study_name)
    with claim_lock(url, storage, study_name):
        if study_name not in study_names(storage):
            return False
        _delete_unless_training(load_study(storage, study_name), storage, url, asked_by)
    return True


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


def join_study(
    storage: optuna.storages.BaseStorage, url: str, study_name: str
) -> tuple[optuna.Study, dict[str, Any]]:
    """An existing study of the opened ``storage`` (at ``url``, named in errors) and its
    identity (for a worker that joins it, or a plan resumed as its study began)."""
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
    """``(finished, planned)`` summed over the study's searches (:func:`search_progress`). So
    the first never passes the second."""
    results = finished_results(trials)
    counts = [search_progress(search, results) for search in spec.searches]
    return sum(f for f, _ in counts), sum(p for _, p in counts)


def search_progress(search: Search, results: Mapping[RunId, float]) -> tuple[int, int]:
    """``(finished, planned)`` of one search over the study's finished ``results``: the runs it
    reads (not the study's others: another budget's, another protocol's), and the runs it
    plans: a finished search's exactly (a search whose trial budget cannot be spent, every
    dimension but the lr held, plans fewer than its trials), an unfinished one's at least
    :attr:`Search.planned_runs`, more where its replay already asks for more (a finalist no
    trial scored)."""
    asked = AskedFor(results)
    needed = search.replay(asked).needed
    # its own runs: a search that reads its peers' winners replays them too
    read = len({run for run in asked.asked & results.keys() if run[0] == search.optimizer})
    return read, max(search.planned_runs, read + len(needed)) if needed else read


# ---------------------------------------------------------------- owners

# A worker on another host that sent no heartbeat for this long is gone (it beats every minute).
_STALE_AFTER_S = 600.0
# How far ahead of this host's clock another host's may run before its heartbeat is refused.
_CLOCK_SLACK_S = 60.0


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


__all__ = [
    "PAUSE_AFTER_VARIABLE",
    "RunId",
    "Search",
    "StudyMismatch",
    "StudySpec",
    "budget_of",
    "finished_results",
    "join_study",
    "open_study",
    "protocol_history",
    "study_storage",
]
