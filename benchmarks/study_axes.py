"""The controls and the two axes of the tuned study (issues #13 and #24), with the protocol of
benchmarks/study_compare.py (lr grids spaced 1.5x, search seed 0, each winner on seeds 0-2),
fixed here before any result was seen. Resumable: finished runs are never rerun.

Controls, at the `compare` budget:
- ``nadamw``: Adam with Nesterov momentum at a constant mu = beta1 (torch_mars.train.nadamw),
  tuned like the others (7-point lr grid x betas {(0.9, 0.95), (0.95, 0.99)}). Unclipped
  approximate MARS's first moment is a quasi-hyperbolic momentum, Nesterov's at gamma = 1 - beta1:
  NAdamW has that shape without the variance reduction. The same-cost control of MARS-AdamW.
- ``nadam``: torch's NAdam (Dozat's momentum schedule, about beta1 / 2 over these runs), the
  control the earlier study ran under the name nadamw; kept as it was measured.
- ``gamma0``: MARS-AdamW with gamma = 0 (AdamW on a per-tensor clip of g), tuned the same way.
- ``exact``: each MARS rule's winner (from the study's stage B) in the exact mode, seeds 0-2.
- ``exact-compute``: the exact mode at equal compute: approximate MARS-AdamW trained on twice
  the tokens (a second forward and backward buys that), lr re-tuned on a 5-point grid around its
  winner's, seeds 0-2, against ``exact``.
Axes (AdamW, MARS-AdamW, Muon, MARS-Shampoo at their stage-B betas/gamma/momentum, and NAdamW,
lr re-tuned on a 5-point 1.5x grid at every point):
- ``batch``: 4 and 64 sequences per step at the same 819,200 tokens (16 is the study itself);
  the grid is centred on the batch-16 lr times sqrt(batch / 16).
- ``tokens``: the `tiny` config (24,736 non-embedding parameters) trained for 1x, 4x and 8x of
  20 tokens per parameter, on a 7-point grid for the Adam pair and a 5-point one for the
  Newton-Schulz pair. The axis optimizers that ``--winners`` tuned take part: the Adam pair
  from the CPU study, all four from ``--winners study-compare-h100``. NAdamW, which no stage B
  tuned, sweeps its betas at the 4x point (run first) on the Adam pair's grid, and keeps that
  point's winning betas at 1x, 8x and on the batch axis.
- ``batch-tiny``: the batch axis where a CPU affords it: the same optimizers on `tiny` at
  4x 20 tokens per parameter with 4, 16 and 64 sequences per step (the same tokens; 16 is the
  tokens axis's 4x point), each grid centred on that point's tuned lr times sqrt(batch / 16).
- ``weight-decay``: NAdamW with weight decay 1e-2 (MARS-AdamW's on its matrices) instead of 0.1,
  on `tiny` at 8x and 4x (the Adam pair's 7-point grid), then at 4 and 64 sequences per step
  (a 5-point grid around that point's tuned lr), betas kept from each point's winner: the
  control with MARS-AdamW's weight decay, which the axes did not sweep.
- ``adamw-weight-decay``: the same for AdamW, at the same points: how much of MARS-AdamW's lead
  over AdamW is its weight decay.
Each lr grid of the axes gains a 1.5x point beyond an edge that holds the best lr, up to three
times (as in study_compare's stage A); the gain is then read at each optimizer's tuned lr.

    python benchmarks/study_axes.py [--jobs 6] [--folder study-axes-h100] [--data stdlib]
        [--winners study-compare-h100]
        [--stages controls exact-compute batch tokens batch-tiny weight-decay adamw-weight-decay]

``--stages`` with no stage redraws ``axes.png`` and prints the map's table from ``axes.json``.
Where benchmarks/study_seeds.py ``--select-on-mean`` and study_ablations.py ``--batch 64`` have
run, the batch panel also shows their held-out check at 64 sequences per step (hollow markers:
every lr and MARS-AdamW's gamma chosen on the mean of seeds 0-2, the gap read on seeds 3-5 to
the control that is best there, which favours the control).

Writes benchmarks/results/FOLDER/<sweep>/ (run folders, sweep.json, summary.md, figures), then
``axes.json`` and ``axes.png`` (each MARS rule's gain over its base, in units of the base's
std, against batch size and against tokens per parameter).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
from pathlib import Path

from study_compare import EXTENSIONS, MINI_BUDGET, STEP, extend_at_edges, tiny_budget

from torch_mars.train.sweep import SweepPlan, SweepReport, run_sweep, write_report
from torch_mars.train.trainer import TrainConfig

RESULTS = Path(__file__).resolve().parent / "results"
TOKENS_PER_STEP = MINI_BUDGET.batch_size * 128
BATCHES = (4, 64)
AXIS_OPTIMIZERS = ("adamw", "mars-adamw", "muon", "mars-shampoo", "nadamw")
# Each MARS rule's same-cost controls: its base, and the Nesterov momentum its first moment is
# shaped like (torch.optim.Muon's momentum is Nesterov's already).
# NADAMW_WD is NAdamW at MARS-AdamW's matrix weight decay (the ``weight-decay`` stage), a control
# wherever that stage ran.
NADAMW_WD = "nadamw-wd0.01"
CONTROLS = {"mars-adamw": ("adamw", "nadamw", NADAMW_WD), "mars-shampoo": ("muon",)}
# Axis optimizers that no stage B tuned: their betas are swept at the tiny 4x point.
UNTUNED = ("nadamw",)
TOKEN_MULTIPLES = (1, 4, 8)
TINY_BATCHES = (4, 16, 64)
TINY_BATCH_MULTIPLE = 4
ADAM_TINY_LRS = (1.3e-3, 2e-3, 3e-3, 4.5e-3, 6.7e-3, 1e-2, 1.5e-2)
# Muon's tuned rate on `tiny` at 4x (docs/results.md, MARS-M against Muon) was 3e-2.
NEWTON_SCHULZ_TINY_LRS = (1.3e-2, 2e-2, 3e-2, 4.5e-2, 6.7e-2)
TINY_LRS = {
    "adamw": ADAM_TINY_LRS,
    "mars-adamw": ADAM_TINY_LRS,
    "muon": NEWTON_SCHULZ_TINY_LRS,
    "mars-shampoo": NEWTON_SCHULZ_TINY_LRS,
    "nadamw": ADAM_TINY_LRS,
}
BETAS = ((0.9, 0.95), (0.95, 0.99))


def study_parser(doc: str, multiple: bool = False) -> argparse.ArgumentParser:
    """The arguments every study of this folder takes: ``--jobs``, ``--folder`` (default
    ``study-axes``) and, with ``multiple``, the tokens axis's point ``--multiple``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--folder", default="study-axes")
    if multiple:
        parser.add_argument(
            "--multiple", type=int, choices=TOKEN_MULTIPLES, default=TINY_BATCH_MULTIPLE,
            help="the tokens axis's point: this many x 20 tokens per parameter",
        )  # fmt: skip
    return parser


def progress(done: int, total: int) -> None:
    print(f"{done}/{total} runs", flush=True)


def grid_around(centre: float, points: int = 5) -> tuple[float, ...]:
    """``points`` values spaced ``STEP`` apart, centred on ``centre``, two significant digits."""
    half = points // 2
    return tuple(float(f"{centre * STEP**k:.2g}") for k in range(-half, half + 1))


def sweep(folder: Path, base: TrainConfig, grid: dict, jobs: int) -> SweepReport:
    plan = SweepPlan(
        base=base, grid=grid, search_seeds=(0,), seeds=(0, 1, 2), sweep_dir=folder, jobs=jobs
    )
    report = run_sweep(plan, progress)
    write_report(plan, report)
    return report


def sweep_lr_with_edges(
    folder: Path, base: TrainConfig, lrs: dict[str, list[float]], fixed: dict, jobs: int
) -> SweepReport:
    """The lr sweep of study_compare's stage A: an optimizer whose best lr is at an edge of its
    grid gets one more 1.5x point on that side, up to three times; then its winner's seeds."""
    grids = {name: list(values) for name, values in lrs.items()}
    for _ in range(EXTENSIONS + 1):
        grid = {name: {"lr": tuple(values), **fixed[name]} for name, values in grids.items()}
        report = sweep(folder, base, grid, jobs)
        best = {name: winner.hyperparams["lr"] for name, winner in report.winners.items()}
        if not extend_at_edges(grids, best):
            break
    return report


def summary_of(report: SweepReport) -> dict[str, dict]:
    return {
        s.optimizer: {
            "mean": s.final,
            "std": s.final_std,
            "point": report.winners[s.optimizer].hyperparams,
        }
        for s in report.summaries
    }


def controls(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    adam_lrs = grid_around(winners["adamw"]["lr"], 7)
    nadam = sweep(folder / "nadam-dozat", base, {"nadam": {"lr": adam_lrs, "betas": BETAS}}, jobs)
    nadamw = sweep_lr_with_edges(
        folder / "nadamw", base, {"nadamw": list(adam_lrs)}, {"nadamw": {"betas": BETAS}}, jobs
    )
    gamma0 = sweep(
        folder / "gamma0",
        base,
        {"mars-adamw": {"lr": adam_lrs, "betas": BETAS, "gamma": (0.0,)}},
        jobs,
    )
    exact_grid = {
        name: {key: (tuple(v) if isinstance(v, list) else v,) for key, v in winners[name].items()}
        for name in ("mars-adamw", "mars-lion", "mars-shampoo")
        if name in winners
    }
    exact = sweep(folder / "exact", dataclasses.replace(base, exact=True), exact_grid, jobs)
    return {
        "nadamw": summary_of(nadamw),
        "nadam": summary_of(nadam),
        "gamma0": summary_of(gamma0),
        "exact": summary_of(exact),
    }


def exact_at_equal_compute(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    """Approximate MARS-AdamW on twice the tokens of ``exact`` (equal compute), lr re-tuned."""
    point = winners["mars-adamw"]
    doubled = dataclasses.replace(base, steps=2 * base.steps, eval_interval=2 * base.eval_interval)
    lrs = {"mars-adamw": list(grid_around(point["lr"]))}
    report = sweep_lr_with_edges(
        folder / "exact-compute", doubled, lrs, {"mars-adamw": fixed_axes(point)}, jobs
    )
    exact = json.loads((folder / "exact" / "sweep.json").read_text())["summaries"]
    return {
        "approximate-2x": summary_of(report),
        "exact": {s["optimizer"]: {"mean": s["final"], "std": s["final_std"]} for s in exact},
    }


def fixed_axes(point: dict) -> dict:
    """A winner's settings other than lr, as one-value grid axes."""
    return {k: (tuple(v) if isinstance(v, list) else v,) for k, v in point.items() if k != "lr"}


def at_batch(base: TrainConfig, batch: int) -> TrainConfig:
    """``base`` with ``batch`` sequences per step and as many validation sequences as ``base``
    (eval_batches scaled by the inverse), so every point of an axis is scored on the same
    number of tokens."""
    sequences = base.eval_batches * base.batch_size
    return dataclasses.replace(base, batch_size=batch, eval_batches=max(1, sequences // batch))


def batch_axis(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    results = {}
    for batch in BATCHES:
        steps = MINI_BUDGET.steps * MINI_BUDGET.batch_size // batch
        sized = dataclasses.replace(
            at_batch(base, batch), steps=steps, eval_interval=max(1, steps // 10)
        )
        scale = (batch / MINI_BUDGET.batch_size) ** 0.5
        lrs = {name: list(grid_around(winners[name]["lr"] * scale)) for name in AXIS_OPTIMIZERS}
        fixed = {name: fixed_axes(winners[name]) for name in AXIS_OPTIMIZERS}
        report = sweep_lr_with_edges(folder / f"batch-{batch}", sized, lrs, fixed, jobs)
        results[batch] = summary_of(report)
    return results


def untuned_axes(folder: Path, name: str, multiple: int) -> dict:
    """The other axes of an optimizer in :data:`UNTUNED`: its betas swept at the 4x point, and
    that point's winner elsewhere."""
    if multiple == TINY_BATCH_MULTIPLE:
        return {"betas": BETAS}
    tuned = json.loads((folder / f"tokens-{TINY_BATCH_MULTIPLE}x" / "sweep.json").read_text())
    return fixed_axes(tuned["winners"][name])


def tokens_sweep(
    folder: Path, base: TrainConfig, winners: dict, multiple: int, jobs: int
) -> dict[str, dict]:
    """The axis optimizers that ``winners`` tuned, and those of :data:`UNTUNED`, on `tiny` for
    ``multiple`` x 20 tokens per parameter."""
    sized = tiny_budget(base, multiple)
    names = [name for name in AXIS_OPTIMIZERS if name in winners or name in UNTUNED]
    lrs = {name: list(TINY_LRS[name]) for name in names}
    fixed = {
        name: untuned_axes(folder, name, multiple) if name in UNTUNED else fixed_axes(winners[name])
        for name in names
    }
    return summary_of(sweep_lr_with_edges(folder / f"tokens-{multiple}x", sized, lrs, fixed, jobs))


def tokens_axis(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    """The 4x point first: the untuned optimizers take its betas at the others."""
    order = sorted(TOKEN_MULTIPLES, key=lambda multiple: multiple != TINY_BATCH_MULTIPLE)
    results = {multiple: tokens_sweep(folder, base, winners, multiple, jobs) for multiple in order}
    return dict(sorted(results.items()))


def tiny_batch_axis(folder: Path, base: TrainConfig, winners: dict, jobs: int) -> dict:
    """The batch axis on `tiny`. Batch 16 is the tokens axis's sweep (resumed: nothing reruns);
    the other batches centre their grids on its tuned lrs and keep its other settings."""
    results = {
        MINI_BUDGET.batch_size: tokens_sweep(folder, base, winners, TINY_BATCH_MULTIPLE, jobs)
    }
    tuned = {name: point["point"] for name, point in results[MINI_BUDGET.batch_size].items()}
    for batch in TINY_BATCHES:
        if batch == MINI_BUDGET.batch_size:
            continue
        sized = tiny_budget(at_batch(base, batch), TINY_BATCH_MULTIPLE)
        scale = (batch / MINI_BUDGET.batch_size) ** 0.5
        lrs = {name: list(grid_around(point["lr"] * scale)) for name, point in tuned.items()}
        fixed = {name: fixed_axes(point) for name, point in tuned.items()}
        report = sweep_lr_with_edges(folder / f"batch-tiny-{batch}", sized, lrs, fixed, jobs)
        results[batch] = summary_of(report)
    return dict(sorted(results.items()))


MARS_MATRIX_WEIGHT_DECAY = 1e-2
WEIGHT_DECAY_MULTIPLES = (8, 4)


def control_at_mars_weight_decay(
    folder: Path, base: TrainConfig, winners: dict, jobs: int, optimizer: str = "nadamw"
) -> dict[str, dict]:
    """``optimizer`` on `tiny` with MARS-AdamW's matrix weight decay (1e-2, on every tensor),
    lr re-tuned, betas kept from each point's winner: the tokens axis's 8x and 4x points, then
    the batch axis's 4 and 64 sequences per step (a 5-point grid around ``optimizer``'s lr
    tuned there)."""
    points = {
        f"tokens-{multiple}x": (tiny_budget(base, multiple), list(ADAM_TINY_LRS))
        for multiple in WEIGHT_DECAY_MULTIPLES
    }
    for batch in TINY_BATCHES:
        if batch != MINI_BUDGET.batch_size:
            tuned = json.loads((folder / f"batch-tiny-{batch}" / "sweep.json").read_text())
            lr = tuned["winners"][optimizer]["lr"]
            sized = tiny_budget(at_batch(base, batch), TINY_BATCH_MULTIPLE)
            points[f"batch-tiny-{batch}"] = (sized, list(grid_around(lr)))
    results = {}
    for point, (sized, lrs) in points.items():
        tuned = json.loads((folder / point / "sweep.json").read_text())
        fixed = {
            **fixed_axes(tuned["winners"][optimizer]),
            "weight_decay": (MARS_MATRIX_WEIGHT_DECAY,),
        }
        name = point.replace("tokens-", "").replace("batch-tiny-", "batch-")
        if optimizer != "nadamw":
            name = f"{optimizer}-{name}"
        report = sweep_lr_with_edges(
            folder / f"weight-decay-{name}", sized, {optimizer: lrs}, {optimizer: fixed}, jobs
        )
        results[point] = summary_of(report)
    return results


def with_weight_decay_controls(axes: dict) -> dict:
    """``axes`` with the ``weight-decay`` stage's NAdamW entered, as :data:`NADAMW_WD`, at the
    tokens and batch points it ran at (the tokens axis's 4x point is the batch axis's 16)."""
    merged = copy.deepcopy(axes)
    places = {f"tokens-{m}x": [("tokens", str(m))] for m in TOKEN_MULTIPLES}
    places[f"tokens-{TINY_BATCH_MULTIPLE}x"].append(("batch-tiny", str(MINI_BUDGET.batch_size)))
    places |= {f"batch-tiny-{b}": [("batch-tiny", str(b))] for b in TINY_BATCHES}
    for point, results in axes.get("weight-decay", {}).items():
        for axis, x in places[point]:
            if x in merged.get(axis, {}):
                merged[axis][x][NADAMW_WD] = results["nadamw"]
    return merged


def strongest_control(results: dict, mars: str) -> str | None:
    """The same-cost control of ``mars`` (:data:`CONTROLS`) with the lowest mean in
    ``results``; None when none ran."""
    ran = [name for name in CONTROLS[mars] if name in results]
    return min(ran, key=lambda name: results[name]["mean"]) if ran else None


def gap_points(results: dict, mars: str) -> list[tuple[float, float, float, float | None, str]]:
    """``(x, gap, spread, gap in control std, control)`` per axis point where ``mars`` and one
    of its controls ran: gap = MARS mean - strongest control's mean (negative: MARS ahead),
    spread = sqrt(std_control^2 + std_mars^2)."""
    points = []
    for x in sorted(results, key=float):
        pair = results[x]
        control = strongest_control(pair, mars)
        if mars in pair and control is not None:
            base, ours = pair[control], pair[mars]
            spread = (base["std"] ** 2 + ours["std"] ** 2) ** 0.5
            gap = ours["mean"] - base["mean"]
            in_std = gap / base["std"] if base["std"] else None
            points.append((float(x), gap, spread, in_std, control))
    return points


# The 64-sequence point's held-out check: MARS-AdamW's gammas there (the tuned 0.05 and the
# ablations' 0.1 and 0.2; the other ablations change more than gamma) and every control run.
HELD_OUT_BATCH = 64
HELD_OUT_GAMMAS = {"mars-adamw": 0.05, "gamma-0.1": 0.1, "gamma-0.2": 0.2}
# Shorter names of study_seeds.py's NAdamW rows at MARS-AdamW's settings, for the figure.
HELD_OUT_LABELS = {
    "nadamw-wd0.01-betas-0.9": "nadamw, MARS-AdamW's betas and wd",
    "nadamw-wd0.01-betas-0.9-routed": "nadamw, MARS-AdamW's recipe",
}


def held_out_checks(folder: Path) -> dict[str, tuple[float, float, float, float, str]]:
    """Per MARS rule, ``(x, gap, spread, gap in control std, label)`` of the held-out check at
    :data:`HELD_OUT_BATCH` sequences per step (see the module docstring); {} before it ran."""
    seeds_file = folder / f"more-seeds-batch-{HELD_OUT_BATCH}-mean.json"
    ablations_file = folder / f"ablations-batch-{HELD_OUT_BATCH}.json"
    if not (seeds_file.exists() and ablations_file.exists()):
        return {}
    rows = json.loads(seeds_file.read_text())
    ablations = json.loads(ablations_file.read_text())
    candidates = {"mars-adamw": rows["mars-adamw"]}
    for name in HELD_OUT_GAMMAS:
        if name in ablations:
            row = ablations[name]
            held = {"mean": row["mean"], "std": row["std"]}
            candidates[name] = {"seeds 0-2": row["seeds 0-2"], "held out": held}
    pairs = {
        "mars-adamw": (candidates, [n for n in rows if n.startswith(("adamw", "nadamw"))]),
        "mars-shampoo": ({"mars-shampoo": rows.get("mars-shampoo")}, ["muon"]),
    }
    checks = {}
    for mars, (ours_by_name, control_names) in pairs.items():
        controls = {n: rows[n] for n in control_names if n in rows}
        ours_by_name = {n: row for n, row in ours_by_name.items() if row is not None}
        if not controls or not ours_by_name:
            continue
        ours_name = min(ours_by_name, key=lambda n: ours_by_name[n]["seeds 0-2"]["mean"])
        control = min(controls, key=lambda n: controls[n]["held out"]["mean"])
        ours, base = ours_by_name[ours_name]["held out"], controls[control]["held out"]
        gap = ours["mean"] - base["mean"]
        spread = (ours["std"] ** 2 + base["std"] ** 2) ** 0.5
        label = HELD_OUT_LABELS.get(control, control)
        if mars == "mars-adamw":
            label = f"gamma {HELD_OUT_GAMMAS[ours_name]} vs {label}"
        checks[mars] = (float(HELD_OUT_BATCH), gap, spread, gap / base["std"], label)
    return checks


def plot_axes(axes: dict, path: Path, checks: dict | None = None) -> None:
    """The regime map: one panel per axis that has results, each MARS rule's gap to its
    strongest same-cost control in nats (error bars: the two stds combined), each point
    labelled with that control and the gap in its std; ``checks`` (:func:`held_out_checks`)
    drawn hollow on the batch panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {
        "batch": ("sequences per step (same tokens)", True),
        "tokens": ("tokens per parameter / 20 (tiny, 16 sequences per step)", False),
        "batch-tiny": ("sequences per step (tiny, 4 x 20 tokens/param)", True),
    }
    shown = [name for name in panels if axes.get(name)]
    if not shown:
        return
    figure, subplots = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4.5), squeeze=False)
    for panel, name in zip(subplots[0], shown, strict=True):
        label, log = panels[name]
        ticks = sorted(float(x) for x in axes[name])
        low, high = ticks[0], ticks[-1]
        for pair, mars in enumerate(CONTROLS):
            points = gap_points(axes[name], mars)
            if not points:
                continue
            xs, gaps, spreads, stds, controls = zip(*points, strict=True)
            # The pairs share x values: the second is drawn 2% of the axis to the right, so
            # that the error bars do not hide each other.
            if log:
                xs = tuple(x * (high / low) ** (0.02 * pair) for x in xs)
            else:
                xs = tuple(x + (high - low) * 0.02 * pair for x in xs)
            shown_controls = "/".join(CONTROLS[mars])
            line = panel.errorbar(
                xs, gaps, yerr=spreads, marker="o", capsize=3,
                label=f"{mars} - best of {shown_controls}",
            )  # fmt: skip
            for x, gap, in_std, control in zip(xs, gaps, stds, controls, strict=True):
                text = control + (f" {in_std:+.1f} sd" if in_std is not None else "")
                panel.annotate(text, (x, gap), textcoords="offset points", fontsize=7,
                               xytext=(6, 4 - 12 * pair), color=line[0].get_color())  # fmt: skip
            if name == "batch-tiny" and checks and mars in checks:
                x, gap, spread, in_std, text = checks[mars]
                x *= (high / low) ** (0.02 * pair + 0.05)
                color = line[0].get_color()
                panel.errorbar(
                    [x], [gap], yerr=[spread], marker="o", capsize=3, color=color,
                    markerfacecolor="white", linestyle="none",
                    label=f"{mars}, held out: lr on seeds 0-2, read on 3-5",
                )  # fmt: skip
                panel.annotate(f"{text} {in_std:+.1f} sd", (x, gap), textcoords="offset points",
                               fontsize=7, xytext=(-8, -12), ha="right", color=color)  # fmt: skip
        panel.margins(x=0.15)
        if log:
            panel.set_xscale("log", base=2)
        panel.set_xticks(ticks, [f"{x:g}" for x in ticks])
        panel.set_xlabel(label)
        panel.set_ylabel(
            "MARS - strongest same-cost control\n(final val loss, nats/byte; < 0: MARS ahead)"
        )
        panel.axhline(0, color="grey", linewidth=0.8)
        panel.legend(fontsize=8)
    figure.suptitle("Where MARS wins: the gap to its strongest same-cost control (3 seeds each)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def control_table(axes: dict) -> str:
    """The regime map as a Markdown table: per axis point and MARS rule, its mean ± std, its
    strongest same-cost control's, and the gap (MARS - control) in nats and in that control's
    std."""
    labels = {
        "tokens": "tokens/param ÷ 20",
        "batch-tiny": "sequences/step",
        "batch": "sequences/step (mini)",
    }
    lines = [
        "| axis | point | MARS rule | MARS | strongest control | control | MARS - control |",
        "|---|---:|---|---:|---|---:|---:|",
    ]
    for axis, label in labels.items():
        for x in sorted(axes.get(axis, {}), key=float):
            results = axes[axis][x]
            for mars in CONTROLS:
                control = strongest_control(results, mars)
                if mars not in results or control is None:
                    continue
                ours, base = results[mars], results[control]
                gap = ours["mean"] - base["mean"]
                lines.append(
                    f"| {label} | {x} | {mars} | {ours['mean']:.4f} ± {ours['std']:.4f} | "
                    f"{control} | {base['mean']:.4f} ± {base['std']:.4f} | "
                    f"{gap:+.4f} ({gap / base['std']:+.1f} sd) |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = study_parser(__doc__)
    parser.add_argument("--winners", default="study-compare", help="the study whose winners to use")
    parser.add_argument("--data", default=MINI_BUDGET.data)
    parser.add_argument(
        "--stages",
        nargs="*",
        choices=(
            "controls",
            "exact-compute",
            "batch",
            "tokens",
            "batch-tiny",
            "weight-decay",
            "adamw-weight-decay",
        ),
        default=["controls", "batch", "tokens"],
    )
    args = parser.parse_args()
    folder = RESULTS / args.folder
    base = dataclasses.replace(MINI_BUDGET, data=args.data)
    winners = json.loads((RESULTS / args.winners / "betas" / "sweep.json").read_text())["winners"]
    axes_file = folder / "axes.json"
    axes = json.loads(axes_file.read_text()) if axes_file.exists() else {}
    stages = {
        "controls": controls,
        "exact-compute": exact_at_equal_compute,
        "batch": batch_axis,
        "tokens": tokens_axis,
        "batch-tiny": tiny_batch_axis,
        "weight-decay": control_at_mars_weight_decay,
        "adamw-weight-decay": functools.partial(control_at_mars_weight_decay, optimizer="adamw"),
    }
    for stage in args.stages:
        axes[stage] = stages[stage](folder, base, winners, args.jobs)
        folder.mkdir(parents=True, exist_ok=True)
        axes_file.write_text(json.dumps(axes, indent=2) + "\n")
    mapped = with_weight_decay_controls(json.loads(axes_file.read_text()))
    plot_axes(mapped, folder / "axes.png", held_out_checks(folder))
    print(control_table(mapped))


if __name__ == "__main__":
    main()
