"""Stopping a trial's run early on the values it reports (``tune(prune=True)``,
``torch-mars tune --prune``), with Optuna's median pruner.

Only a trial's runs are pruned: the runs a search scores points on to compare them, never a
finalist's, a peer's winner's or a held-out read (:class:`~.selection.Needs` says which). A
run is compared with the finished trial runs *of its own optimizer* only (an optimizer whose
curves fall later is not cut by another's), through a view of the study that holds just
those (:class:`OwnTrials`): Optuna's :class:`~optuna.pruners.MedianPruner` stops it where its
best reported value so far is worse than the median of theirs at the same step, once
:data:`STARTUP_RUNS` of them have finished. A pruned run scores worst (it never wins, a
finalist is never drawn from it), its trial is marked PRUNED, and it is not trained again; the
report counts them per optimizer. A run reports through ``report(step, value)``: a function
that reports nothing is never pruned.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

# Each optimizer's finished trial runs before any of its runs is pruned, and the steps of a run
# before it may be (Optuna's defaults).
STARTUP_RUNS = 5
WARMUP_STEPS = 0

_CHECK: contextvars.ContextVar[Callable[[int, float], None] | None] = contextvars.ContextVar(
    "torch_mars_prune_check", default=None
)


class RunPruned(Exception):
    """Raised inside a run's ``report`` where the pruner stops it."""

    def __init__(self, step: int, value: float) -> None:
        super().__init__(f"pruned at step {step} (value {value:.4g})")
        self.step = step
        self.value = value


class OwnTrials:
    """What an Optuna pruner reads of a study: its direction (lower is better throughout a
    tune study) and, here, only the given trials (one optimizer's finished trial runs)."""

    direction = StudyDirection.MINIMIZE

    def __init__(self, trials: Sequence[FrozenTrial]) -> None:
        self._trials = list(trials)

    def get_trials(
        self, deepcopy: bool = False, states: Sequence[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return [t for t in self._trials if states is None or t.state in states]


def pruner() -> optuna.pruners.BasePruner:
    """The pruner every study that prunes uses, declared once."""
    return optuna.pruners.MedianPruner(n_startup_trials=STARTUP_RUNS, n_warmup_steps=WARMUP_STEPS)


def check_report(step: int, value: float) -> None:
    """Called by a run's ``report`` with each value (lower is better): raises
    :class:`RunPruned` where the run is pruned; nothing where the run is not prunable."""
    check = _CHECK.get()
    if check is not None:
        check(step, value)


@contextlib.contextmanager
def pruning(trial: optuna.Trial, own: Sequence[FrozenTrial]) -> Iterator[None]:
    """While the block runs, each value its run reports is recorded as the trial's
    intermediate value (the dashboard shows the curve) and judged against ``own``, the
    finished trial runs of the same optimizer."""
    view = OwnTrials([t for t in own if t.intermediate_values])
    judge = pruner()
    seen: dict[int, float] = {}

    def check(step: int, value: float) -> None:
        seen[step] = value
        trial.report(value, step)
        frozen = FrozenTrial(
            number=trial.number,
            state=TrialState.RUNNING,
            value=None,
            datetime_start=None,
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={},
            intermediate_values=dict(seen),
            trial_id=0,  # the pruner reads its values only
        )
        if judge.prune(view, frozen):  # type: ignore[arg-type]
            raise RunPruned(step, value)

    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)
