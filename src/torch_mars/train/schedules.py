"""Learning-rate schedules as multipliers of the peak lr, a pure function of the step, so the
schedule's whole state is the step count that checkpoints already hold; one schedule type for
every task (text runs use cosine, WSD or constant, vision runs the paper's multistep)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

ScheduleName = Literal["cosine", "wsd", "constant", "multistep"]
SCHEDULES: tuple[str, ...] = ("cosine", "wsd", "constant", "multistep")
# The schedules of the text harness (multistep is the vision harness's, by epoch).
TEXT_SCHEDULES: tuple[str, ...] = ("cosine", "wsd", "constant")


@dataclass(frozen=True)
class Schedule:
    """Linear warmup over ``warmup_steps``, then

    - ``cosine``: cosine decay to ``min_ratio`` at ``total_steps``;
    - ``wsd`` (warmup-stable-decay): flat at 1 until the last ``decay_fraction`` of the steps,
      then linear decay to ``min_ratio``;
    - ``constant``: flat at 1;
    - ``multistep``: ``decay`` to the power of the number of ``milestones`` (steps) passed.

    ``min_ratio`` is ``min_lr / lr``.

    Example:
        >>> s = Schedule("cosine", total_steps=100, warmup_steps=10, min_ratio=0.1)
        >>> [round(s(t), 3) for t in (0, 9, 10, 55, 100)]
        [0.1, 1.0, 1.0, 0.55, 0.1]
        >>> s = Schedule("multistep", total_steps=40, milestones=(20, 30), decay=0.1)
        >>> [round(s(t), 4) for t in (0, 19, 20, 29, 30)]
        [1.0, 1.0, 0.1, 0.1, 0.01]
    """

    name: ScheduleName
    total_steps: int
    warmup_steps: int = 0
    min_ratio: float = 0.0
    decay_fraction: float = 0.2
    milestones: tuple[int, ...] = ()
    decay: float = 0.1

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.name!r}")
        if self.total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {self.total_steps}")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ValueError(
                f"warmup_steps must be in [0, total_steps={self.total_steps}], "
                f"got {self.warmup_steps}"
            )
        if not 0.0 <= self.min_ratio <= 1.0:
            raise ValueError(f"min_lr / lr must be in [0, 1], got {self.min_ratio}")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ValueError(f"decay_fraction must be in (0, 1], got {self.decay_fraction}")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")

    def __call__(self, step: int) -> float:
        """Multiplier of the peak lr at optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.name == "constant":
            return 1.0
        if self.name == "multistep":
            return self.decay ** sum(step >= milestone for milestone in self.milestones)
        if self.name == "cosine":
            span = max(1, self.total_steps - self.warmup_steps)
            progress = min(1.0, (step - self.warmup_steps) / span)
            return self.min_ratio + 0.5 * (1.0 - self.min_ratio) * (
                1 + math.cos(math.pi * progress)
            )
        decay_steps = max(1, round(self.total_steps * self.decay_fraction))
        decay_start = self.total_steps - decay_steps
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start) / decay_steps)
        return 1.0 - (1.0 - self.min_ratio) * progress


def scale_learning_rates(optimizer: Any, factor: float) -> None:
    """Set every param group's ``lr`` to ``factor`` times its peak, which the group keeps as
    ``peak_lr`` (recorded on the first call, and saved with the optimizer's state)."""
    for group in optimizer.param_groups:
        group.setdefault("peak_lr", group["lr"])
        group["lr"] = group["peak_lr"] * factor
