"""A ``torch-mars tune`` study's figure (``tune.png``): each optimizer's tuning curve with its
band, from :mod:`.outcomes`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from torch_mars.train.study.curves import best_so_far
from torch_mars.train.study.outcomes import OptimizerOutcome
from torch_mars.train.study.space import (
    LADDERS,
)
from torch_mars.train.study.verdict import (
    student_t_quantile,
)


def plot_tune(found: Sequence[OptimizerOutcome], out_path: Path) -> Path | None:
    """Four panels: each optimizer's lr profiles (faint) with its winner's drawn solid; its
    tuning curve (expected best after k trials; dashed: best so far in the search's order); its
    winner's held-out mean with a 95% interval over the held-out runs; and its winner's
    evaluation curve on the held-out runs (their mean at each step), where runs report more
    than one point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [o for o in found if o.trial_scores]
    if not drawn:
        return None
    figure, ((left, right), (heldout, curves)) = plt.subplots(2, 2, figsize=(12, 9))
    for index, o in enumerate(drawn):
        colour = f"C{index}"
        winner_lr = LADDERS["lr"].value(o.winner["lr"])
        for profile in o.lr_profiles:
            finite = [(lr, v) for lr, v in profile if math.isfinite(v)]
            if len(finite) < 2:
                continue
            mine = (winner_lr, o.winner_score) in finite
            left.plot(
                *zip(*finite, strict=True),
                color=colour,
                alpha=1.0 if mine else 0.15,
                marker="o" if mine else None,
                label=o.optimizer if mine else None,
            )
        ks = range(1, len(o.trial_scores) + 1)
        right.plot(ks, o.curve, color=colour, label=o.optimizer)
        right.plot(ks, best_so_far(o.trial_scores), color=colour, linestyle="--", alpha=0.6)
        if o.heldout_complete and len(o.heldout_finals) > 1:
            half = _t_half_width(o.heldout_finals)
            heldout.errorbar([index], [o.heldout_mean], yerr=[half], fmt="o", color=colour)
        mean_curve = _mean_curve(o.heldout_curves)
        if len(mean_curve) > 1:
            curves.plot(*zip(*mean_curve, strict=True), color=colour, label=o.optimizer)
    left.set_xscale("log")
    left.set_xlabel("peak learning rate")
    left.set_ylabel("selection score (mean final metric)")
    left.set_title("lr profiles (solid: the winner's)")
    right.set_xlabel("trials")
    right.set_ylabel("best selection score")
    right.set_title("tuning curves (dashed: best so far in search order)")
    heldout.set_xticks(range(len(drawn)), [o.optimizer for o in drawn], fontsize=8)
    heldout.set_ylabel("held-out final metric")
    heldout.set_title("each winner held out: mean, 95% interval over its runs")
    curves.set_xlabel("step")
    curves.set_ylabel("metric on the held-out runs (mean)")
    curves.set_title(
        "each winner's curve, held out"
        if curves.get_legend_handles_labels()[1]
        else "no run reported a curve of more than one point"
    )
    for axis in (left, right, heldout, curves):
        axis.grid(alpha=0.3, which="both")
        if axis.get_legend_handles_labels()[1]:
            axis.legend(fontsize=8)
    from torch_mars.train.plots import save_figure

    return save_figure(figure, out_path)


def _t_half_width(values: Sequence[float]) -> float:
    """Half the 95% t interval of the mean of ``values`` (independent runs)."""
    quantile = student_t_quantile(0.05, len(values) - 1)
    return quantile * statistics.stdev(values) / math.sqrt(len(values))


def _mean_curve(curves: Sequence[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The mean of ``curves`` at each step all of them reported."""
    if not curves:
        return []
    steps = set.intersection(*({step for step, _ in c} for c in curves))
    return [
        (step, statistics.fmean(v for c in curves for at, v in c if at == step))
        for step in sorted(steps)
    ]
