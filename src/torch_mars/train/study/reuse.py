"""Finished runs taken from other tune studies instead of trained again (``tune --reuse-runs``).

A run's result is a function of its identity: the study's budget and data (its identity's
``budget`` and ``data``, where the data were read from aside), the optimizer and its
hyperparameters, the seed and the data order. On one machine, with one torch, a run trained
twice gives the same floats (measured: campaign-3's first 14 trials per optimizer at b64-4x read
campaign-2's values to the last digit), so a search design run again at a point where another
design already trained part of its path need not train that part. A run is taken from a donor
study only where every one of those agrees: the donor's budget and data equal the study's, its
trial's parameters (the optimizer's hyperparameters as the trial records them, seed, data
order) equal the ones this study would record, it trained on this worker's device with as many
threads (the same run on another CPU, or on one thread where this worker runs two, differs in
the last digits and then by up to 0.005 in the final loss: measured at b64-4x between the map's
AMD EPYC runs and this Intel Xeon's), and, where this study keeps the run's evaluation curve,
the donor kept it too. A taken run is marked (:data:`COPIED_ATTR`: the donor's
folder and trial number) and keeps its donor's owner record, so reports count it apart from the
runs trained here (:func:`~.outcomes.run_cost`). A donor's failed runs are never taken (they
train again), its diverged runs are (a divergence is a result).

A study that re-reads another (``tune --reread STUDY``; campaign-4's re-read of campaign-3's
first stage, whose searches ran on an Intel Xeon) begins from that study's starts and takes its
selection runs (the selection seeds on the selection's data order: they choose the finalists)
whichever machine, threads or step defaults trained them, so that the search walks the same
path; the finalists' other seeds, the peers' reads and the held-out pairs train here, so that no
verdict pairs runs across machines.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from torch_mars.train.study.space import Point, parse_point_key
from torch_mars.train.study.store import (
    RunId,
    load_study,
    open_storage,
    owner_of,
    run_of,
    stored_study,
    study_names,
)

# The system attribute of a trial taken from another study: {"study": folder, "trial": number}.
COPIED_ATTR = "copied_from"
# A budget's fields that say where the data were read from, not what they are (the identity's
# ``data`` is their content).
WHERE_FIELDS = ("data",)


def budget_content(identity: Mapping[str, Any]) -> dict[str, Any]:
    """A study identity's budget but where its data were read from (:data:`WHERE_FIELDS`)."""
    return {k: v for k, v in identity.get("budget", {}).items() if k not in WHERE_FIELDS}


def runs_train_alike(identity: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether a run id trains the same in two studies: equal budgets (but where the data were
    read from) and equal data, by content."""
    return (
        budget_content(identity) == budget_content(other)
        and identity.get("data") == other.get("data")
        and identity.get("task") == other.get("task")
    )


# The files a study folder keeps its storage in: tune's default SQLite, or a journal (live or
# its snapshot).
STUDY_FILES = ("study.db", "study.log", "study.log.gz")


def _donor_study(folder: Path) -> tuple[list[optuna.trial.FrozenTrial], dict[str, Any]]:
    """The trials and identity of the one study in ``folder``'s storage, read without
    changing it."""
    if not (folder / "study.db").is_file():
        trials, identity, _ = stored_study(folder)
        return trials, identity
    storage = open_storage(f"sqlite:///{folder / 'study.db'}", create=False)
    names = study_names(storage)
    if len(names) != 1:
        raise ValueError(f"--reuse-runs: {folder}/study.db holds {len(names)} studies, not one")
    (name,) = names
    study = load_study(storage, name)
    return study.get_trials(deepcopy=False), study.user_attrs["identity"]


@functools.lru_cache(maxsize=8)
def _donor_trials(folder: Path, identity_json: str) -> dict[RunId, optuna.trial.FrozenTrial]:
    """The finished runs of the tune study in ``folder`` (its live journal or snapshot) by run
    id, where its runs train as the study of ``identity_json`` does; empty where they do not."""
    trials, identity = _donor_study(folder)
    if identity.get("search", {}).get("kind") != "tune":
        raise ValueError(f"--reuse-runs: {folder} is not a tune study (its runs have no point key)")
    if not runs_train_alike(json.loads(identity_json), identity):
        return {}
    found: dict[RunId, optuna.trial.FrozenTrial] = {}
    for trial in trials:
        run = run_of(trial)
        if trial.state == TrialState.COMPLETE and run is not None and "final" in trial.user_attrs:
            found[run] = trial
    return found


def check_donors(folders: tuple[Path, ...], flag: str = "--reuse-runs") -> tuple[Path, ...]:
    """``folders`` made absolute, each holding a study journal (a ValueError naming ``flag``
    and the one that does not)."""
    checked = []
    for folder in folders:
        if not any((folder / name).is_file() for name in STUDY_FILES):
            raise ValueError(f"{flag}: {folder} holds no study ({', '.join(STUDY_FILES)})")
        checked.append(folder.resolve())
    return tuple(checked)


def reread_study(folder: Path) -> tuple[Path, dict[str, tuple[Point, ...]]]:
    """The tune study in ``folder`` that ``tune --reread`` walks again: its folder made
    absolute and the starts each of its optimizers began with."""
    (checked,) = check_donors((Path(folder),), "--reread")
    _, identity = _donor_study(checked)
    if identity.get("search", {}).get("kind") != "tune":
        raise ValueError(f"--reread: {folder} is not a tune study")
    starts = identity["search"].get("starts") or {}
    return checked, {name: tuple(map(parse_point_key, keys)) for name, keys in starts.items()}


def donated_run(
    donors: tuple[Path, ...],
    identity: Mapping[str, Any],
    run: RunId,
    params: Mapping[str, Any],
    needs_curve: bool,
    trainer: Mapping[str, Any],
) -> tuple[Path, optuna.trial.FrozenTrial] | None:
    """The first donor's finished trial of ``run`` whose parameters equal ``params`` (the
    values this study would record), that trained where and as this worker would (``trainer``:
    the ``device``, ``threads`` and ``step_defaults`` of its owner record; a donor run from
    before ``step_defaults`` was recorded ran the older defaults; empty: wherever and however it
    trained, for the selection's runs of ``tune --reread``) and that kept its curve where
    ``needs_curve``, and whose stored ``final`` is a result (a number, or None for a diverged
    run; anything else is trained here, not copied in); None where no donor has one."""
    wanted = json.dumps(
        {"task": identity["task"], "budget": identity["budget"], "data": identity["data"]},
        sort_keys=True,
    )
    for folder in donors:
        trial = _donor_trials(folder, wanted).get(run)
        if trial is None or trial.params != dict(params):
            continue
        owner = owner_of(trial)
        if any(owner.get(k) != trainer[k] for k in trainer):
            continue
        if needs_curve and "curve" not in trial.user_attrs:
            continue
        if not _a_result(trial.user_attrs.get("final", "absent")):
            continue  # a donor's record that is no result: trained here instead
        return folder, trial
    return None


def _a_result(final: Any) -> bool:
    """Whether a stored ``final`` is a run's result: a real number, or None (diverged)."""
    return final is None or (isinstance(final, int | float) and not isinstance(final, bool))


def copied_record(folder: Path, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """What a taken run's trial records besides its parameters: the donor's result and owner,
    and where it came from."""
    return {COPIED_ATTR: {"study": str(folder), "trial": trial.number}}


__all__ = [
    "COPIED_ATTR",
    "WHERE_FIELDS",
    "budget_content",
    "check_donors",
    "copied_record",
    "donated_run",
    "reread_study",
    "runs_train_alike",
]
