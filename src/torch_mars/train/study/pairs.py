"""What a verdict's pairs must be, and what it reports beside its word (issue "Verdicts that
decide"): pairs on one machine, diverged runs counted, and the bias the search's shortfall
puts into a comparison.

- **One machine a pair.** The same run on two machine types differs (161 runs trained on both
  of ours: none equal, median 0.0026 apart), and so does the same run on one machine at
  another thread count (measured: :mod:`~.reuse`), so both sides of a pair train on one
  machine at one thread count (each run's owner record names its device and threads,
  :func:`machine_of`) and a pair whose sides did not is left out of the verdict, said
  (:func:`same_machine`).
- **Diverged runs.** A run diverged where its loss is not finite, or more than
  :data:`DIVERGED_ABOVE_MEDIAN` above the median of its side's runs on the comparison's pairs
  (a run that blew up and partly recovered); each is counted and shown, never dropped from a
  mean (:func:`diverged`).
- **The verdict's bias** ``B = (rule's winner - rule's best known) - (control's winner -
  control's best known)``, each read on the same reads: where ``B < 0`` the search served the
  rule better than its control, and a word read at the winners leans the rule's way by ``B``
  (:func:`verdict_bias`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

# Declared once for our campaigns (nats of validation loss): a run this far above its side's
# median on the same pairs counts as diverged (b64-4x's edge runs: 1.81-1.92 against medians
# near 1.73).
DIVERGED_ABOVE_MEDIAN = 0.05


def machine_of(owner: Mapping[str, Any]) -> str:
    """The machine a run trained on, from its owner record: the device and, where recorded,
    the threads it ran on (``""`` where the device is not recorded).

    >>> machine_of({"device": "AMD EPYC, AVX512", "threads": 1})
    'AMD EPYC, AVX512 · 1 thread(s)'
    >>> machine_of({"device": "AMD EPYC, AVX512"}), machine_of({})
    ('AMD EPYC, AVX512', '')
    """
    device, threads = owner.get("device"), owner.get("threads")
    if not isinstance(device, str) or not device:
        return ""
    return f"{device} · {threads} thread(s)" if isinstance(threads, int) else device


def same_machine(rule_machines: Sequence[str], control_machines: Sequence[str]) -> list[bool]:
    """For each pair, whether both sides trained on one machine (a side whose machine is
    unknown, ``""``, pairs with nothing).

    >>> same_machine(["epyc", "epyc", ""], ["epyc", "xeon", "epyc"])
    [True, False, False]
    """
    if len(rule_machines) != len(control_machines):
        raise ValueError(
            f"the pairs' machines differ in number: {len(rule_machines)} and "
            f"{len(control_machines)}"
        )
    return [bool(r) and r == c for r, c in zip(rule_machines, control_machines, strict=True)]


def diverged(values: Sequence[float], above: float = DIVERGED_ABOVE_MEDIAN) -> list[int]:
    """The indices of the diverged runs among one side's ``values`` on a comparison's pairs:
    not finite, or more than ``above`` over the median of the finite ones.

    >>> diverged([1.72, 1.73, float("nan"), 1.84, 1.74])
    [2, 3]
    """
    finite = [v for v in values if math.isfinite(v)]
    median = statistics.median(finite) if finite else math.nan
    return [
        i for i, v in enumerate(values) if not math.isfinite(v) or (finite and v > median + above)
    ]


def verdict_bias(
    rule_winner: float, rule_best: float, control_winner: float, control_best: float
) -> float:
    """``B``: how much the search's shortfall favours the rule (negative) or its control
    (positive), each side's winner against its best-known setting on the same reads.

    >>> round(verdict_bias(1.73, 1.73, 1.76, 1.74), 4)  # the control's search fell 0.02 short
    -0.02
    """
    return (rule_winner - rule_best) - (control_winner - control_best)
