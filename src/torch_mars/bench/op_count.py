"""Host cost of a step, counted on any device: the aten ops it dispatches. On a GPU every op is
at least one kernel launch (and its Python and dispatcher overhead), so a step that dispatches
thousands of small ops is launch-bound whatever its FLOPs; on a CPU the same count shows that
cost without a GPU at hand.

>>> import torch
>>> ops = count_aten_ops(lambda: torch.ones(3).add_(1).mul_(2))
>>> sum(ops.values()), sorted(ops)
(3, ['add_.Tensor', 'mul_.Tensor', 'ones.default'])
"""

from __future__ import annotations

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
