"""Host cost of a step, counted on any device: the aten ops it dispatches and the Python
function calls it makes. On a GPU every op is at least one kernel launch (and its Python and
dispatcher overhead), so a step that dispatches thousands of small ops is launch-bound whatever
its FLOPs, and the Python around the launches is paid on the host before any of them; on a CPU
the same counts show that cost without a GPU at hand, and unlike a time they do not vary with
the machine.

>>> import torch
>>> ops = count_aten_ops(lambda: torch.ones(3).add_(1).mul_(2))
>>> sum(ops.values()), sorted(ops)
(3, ['add_.Tensor', 'mul_.Tensor', 'ones.default'])
>>> def twice(x):
...     return 2 * x
>>> count_python_calls(lambda: sorted(map(twice, [3, 1])))  # the lambda and twice, twice
3
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that multiply matrices: what Newton-Schulz costs in launches.
MATMUL_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm", "matmul", "addbmm", "_addmm_activation"})


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.counts[f"{func.__name__}"] += 1
        return func(*args, **(kwargs or {}))


def count_aten_ops(fn: Callable[[], Any]) -> Counter[str]:
    """The aten ops ``fn()`` dispatches, by overload name (``"add_.Tensor"``)."""
    counter = _OpCounter()
    with counter:
        fn()
    return counter.counts


def matmul_ops(counts: Counter[str]) -> int:
    """How many of ``counts`` multiply matrices (:data:`MATMUL_OPS`)."""
    return sum(n for name, n in counts.items() if name.split(".")[0] in MATMUL_OPS)


def count_python_calls(fn: Callable[[], Any]) -> int:
    """How many Python functions ``fn()`` calls, itself included (``sys.setprofile``'s
    ``"call"`` events; built-ins and C functions are not counted)."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
    return calls
