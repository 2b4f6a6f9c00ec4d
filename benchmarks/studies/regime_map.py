"""The regime map (issue #36), every point through ``torch-mars tune``: AdamW, NAdamW,
MARS-AdamW, Muon and MARS-Shampoo, each tuned over its whole declared space by coordinate
descent (selection on seeds 0-2, screened on seed 0 with the best two rerun on 1-2), each
winner read on held-out seeds 3-5. b64-4x, the first point, ran two rounds of the descent
(333 runs, four and a half hours on two cores); the other points run one round (every dimension
swept once from the defaults, the lr re-swept after each accepted change), which halves
them, so that the map fits the wave (the rounds are in each point's trial counts). After its
rounds, each optimizer is tried at its peers' winners (``--peer-starts``: MARS-AdamW, AdamW and
NAdamW at each other's, MARS-Shampoo and Muon at each other's) and takes a better one: one
round left Muon at 128 sequences per step 0.056 behind its own loss at MARS-Shampoo's settings,
and the protocol, not a hand-run cross-check, must give each side the other's point. b64-4x and
b128-4x finished their rounds before peer starts existed; their studies took the new protocol
on, kept every run, and ran only the peer trials.

The points, on the `tiny` GPT and the stdlib corpus (T x 20 tokens per non-embedding
parameter, B sequences of 32 tokens per step):

- batch axis at 4x: B = 64, 128, 256 (run first: the regime where MARS-AdamW led), 16 (the
  `compare` point) and 4;
- the same tokens at 128 and 256 leave 483 and 241 steps, so those batches run at 16x too
  (1,932 and 966 steps);
- tokens axis at B = 16: 1x and 8x (4x is the batch axis's 16).

They run in the order of ``POINTS``: after the three large batches, the `compare` point and
1x (about four hours together), which give the batch axis its small end and `compare` its
tuned settings, before the 16x points (about three hours each on the AVX-512 machine), then 4
and 8x.

Each point is one study in ``benchmarks/results/regime-map/POINT/study.log`` (an Optuna
journal, kept in git: a killed or interrupted map resumes from it, on this machine or another,
and nothing finished reruns). Runs are resumable per point; points run in the order above.

    python benchmarks/studies/regime_map.py [--points b64-4x ...] [--jobs 2]
    python benchmarks/studies/regime_map.py --report   # summary.md of each point with runs, map.md,
                                                       # docs/figures/regime-map.png

The command each point runs is printed before it starts; it is the one that reproduces it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
from pathlib import Path

import optuna

from torch_mars.atomic_files import write_text_atomically
from torch_mars.cli import main as torch_mars
from torch_mars.models import GPT, gpt_config
from torch_mars.train.study.store import open_storage
from torch_mars.train.study.tune import progress_label

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "benchmarks" / "results" / "regime-map"
FIGURE = ROOT / "docs" / "figures" / "regime-map.png"
BLOCK = 32
# name: (sequences per step, multiple of 20 tokens per parameter)
POINTS: dict[str, tuple[int, int]] = {
    "b64-4x": (64, 4),
    "b128-4x": (128, 4),
    "b256-4x": (256, 4),
    "b16-4x": (16, 4),
    "b16-1x": (16, 1),
    "b256-16x": (256, 16),
    "b128-16x": (128, 16),
    "b4-4x": (4, 4),
    "b16-8x": (16, 8),
}
OPTIMIZERS = ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo")
# Rounds of coordinate descent per point (the same for every optimizer of a point).
MAX_ROUNDS: dict[str, int] = {"b64-4x": 2}
DEFAULT_MAX_ROUNDS = 1


def non_embedding_parameters(model: str = "tiny") -> int:
    gpt = GPT(gpt_config(model, 256))
    return sum(p.numel() for n, p in gpt.named_parameters() if not n.startswith(("wte", "wpe")))


def tune_arguments(point: str, jobs: int, report: bool = False) -> list[str]:
    """The ``torch-mars tune`` arguments of one point of the map."""
    batch, multiple = POINTS[point]
    folder = FOLDER.relative_to(ROOT)  # the commands run from the repository's root
    tokens = 20 * multiple * non_embedding_parameters()
    steps = tokens // (batch * BLOCK)
    arguments = (
        f"--model tiny --data stdlib --steps {steps} --batch-size {batch} "
        f"--eval-interval {max(1, steps // 10)} --eval-batches 8 "
        f"--optimizers {' '.join(OPTIMIZERS)} --seeds 0 1 2 --heldout-seeds 3 4 5 "
        f"--screen-top 2 --max-rounds {MAX_ROUNDS.get(point, DEFAULT_MAX_ROUNDS)} --peer-starts "
        f"--jobs {jobs} --name {point} "
        f"--out-dir {folder} --storage journal:{folder / point / 'study.log'}"
    )
    return shlex.split(arguments) + (["--report"] if report else [])


PAIRS = {"mars-adamw": ("adamw", "nadamw"), "mars-shampoo": ("muon",)}
# The batch rules are fitted on the points at RULE_MULTIPLE x 20 tokens per parameter, all but
# TEST_BATCH, and tested at TEST_BATCH (inside the fitted range, where a rule is meant to hold).
RULE_MULTIPLE = 4
TEST_BATCH = 128
# The relative rounding of the lr ladder's values (three significant figures).
LR_ROUNDING = 0.005


def has_runs(point: str) -> bool:
    """Whether the point's study holds a run: its journal is written when the study is first
    opened, before any run, and a report of a study without one says nothing."""
    journal = FOLDER / point / "study.log"
    if not journal.is_file():
        return False
    summaries = optuna.get_all_study_summaries(open_storage(f"journal:{journal}"))
    return any(s.study_name == point and s.n_trials for s in summaries)


def point_outcomes(point: str) -> dict[str, dict] | None:
    """Each optimizer's entry of a point's ``tune.json`` (None before its report exists)."""
    report = FOLDER / point / "tune.json"
    if not report.is_file():
        return None
    return {o["optimizer"]: o for o in json.loads(report.read_text())["optimizers"]}


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def map_rows() -> list[dict]:
    """One row per point and pair whose optimizers have all finished: the rule's held-out
    mean and std, the strongest control's, the gap in the larger of the two stds, the gap
    seed by seed (a seed is the same initialisation for every optimizer), and trial counts."""
    rows = []
    for point, (batch, multiple) in POINTS.items():
        found = point_outcomes(point)
        if found is None:
            continue
        for rule, controls in PAIRS.items():
            names = (rule, *controls)
            if not all(n in found and found[n]["finished"] for n in names):
                continue
            rule_mean, rule_std = _mean_std(found[rule]["heldout_finals"])
            best = min(controls, key=lambda c: _mean_std(found[c]["heldout_finals"])[0])
            control_mean, control_std = _mean_std(found[best]["heldout_finals"])
            gap = rule_mean - control_mean
            rows.append(
                {
                    "point": point,
                    "batch": batch,
                    "multiple": multiple,
                    "rule": rule,
                    "rule_heldout": (rule_mean, rule_std),
                    "control": best,
                    "control_heldout": (control_mean, control_std),
                    "gap": gap,
                    # in the larger of the two stds: three seeds that agree to 0.0007 must
                    # not make a gap of 0.01 look like thirteen std
                    "gap_sd": gap / max(rule_std, control_std)
                    if max(rule_std, control_std) > 0
                    else math.nan,
                    "by_seed": [
                        r - c
                        for r, c in zip(
                            found[rule]["heldout_finals"],
                            found[best]["heldout_finals"],
                            strict=True,
                        )
                    ],
                    "gamma": found[rule]["winner"]["gamma"],
                    "lr": found[rule]["winner"]["lr"],
                    "lr_band": found[rule]["good_lr_band"],
                    "runs": {n: found[n]["runs"] for n in names},
                    "failures": {n: found[n]["heldout_failures"] for n in names},
                }
            )
    return rows


def format_map(rows: list[dict]) -> str:
    lines = [
        "| point | sequences/step | x 20 tokens/param | rule | held out (seeds 3-5) | strongest "
        "control | its held out | gap (larger sd) | gap seed by seed | rule's gamma, lr | runs "
        "(rule / controls) | held-out failures |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        runs = " / ".join(str(v) for v in r["runs"].values())
        failures = " / ".join(str(v) for v in r["failures"].values())
        by_seed = " / ".join(f"{v:+.4f}" for v in r["by_seed"])
        lines.append(
            f"| {r['point']} | {r['batch']} | {r['multiple']} | {r['rule']} | "
            f"{r['rule_heldout'][0]:.4f} ± {r['rule_heldout'][1]:.4f} | {r['control']} | "
            f"{r['control_heldout'][0]:.4f} ± {r['control_heldout'][1]:.4f} | "
            f"{r['gap']:+.4f} ({r['gap_sd']:+.1f}) | {by_seed} | {r['gamma']:g}, {r['lr']:.3g} | "
            f"{runs} | {failures} |"
        )
    return "\n".join(lines)


def _fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of ``ys`` on ``xs``."""
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - x_mean) ** 2 for x in xs
    )
    return slope, y_mean - slope * x_mean


def _power_law_at(slope: float, intercept: float, batch: int) -> float:
    """The power law fitted in log2-log2 space (:func:`_fit_line`), read at ``batch``."""
    return 2 ** (intercept + slope * math.log2(batch))


def _inside_band(lr: float, band: tuple[float, float] | None) -> bool:
    """Whether ``lr`` is inside a good-lr band; the ladder's values are rounded to three
    figures (0.0865 for 0.08650), so within that rounding of an edge is inside."""
    low, high = band or (math.nan, math.nan)
    slack = 1 + LR_ROUNDING
    return low / slack <= lr <= high * slack


def batch_rules(rows: list[dict]) -> str:
    """How each MARS rule's tuned lr and gamma move with batch at 4x, fitted on every batch but
    :data:`TEST_BATCH` (lr as a power of the batch, gamma linear in log2 of it) and tested
    there: is the predicted lr inside the tuned winner's good-lr band, and how far is the
    predicted gamma from the one its descent chose? A power law that misses the bands of the
    batches it was fitted on says so: there it does not describe the lr."""
    lines = [
        f"Rules of lr and gamma against batch at 4x, fitted without {TEST_BATCH} and tested there:"
    ]
    for rule in PAIRS:
        mine = {r["batch"]: r for r in rows if r["rule"] == rule and r["multiple"] == RULE_MULTIPLE}
        tuned = ", ".join(
            f"{b}: lr {mine[b]['lr']:.3g}, gamma {mine[b]['gamma']:g}" for b in sorted(mine)
        )
        fit = sorted(b for b in mine if b != TEST_BATCH)
        if len(fit) < 2:
            lines.append(f"- {rule} ({tuned or 'no point yet'}): fewer than two batches to fit")
            continue
        logs = [math.log2(b) for b in fit]
        lr_slope, lr_intercept = _fit_line(logs, [math.log2(mine[b]["lr"]) for b in fit])
        gamma_slope, gamma_intercept = _fit_line(logs, [mine[b]["gamma"] for b in fit])
        rule_text = (
            f"lr = {2**lr_intercept:.3g} * B^{lr_slope:+.2f}, "
            f"gamma = {gamma_intercept:.3g} {gamma_slope:+.3g} * log2(B)"
        )
        fitted = {b: _power_law_at(lr_slope, lr_intercept, b) for b in fit}
        misses = [
            f"{b} ({fitted[b]:.3g}, band {band[0]:.3g}-{band[1]:.3g})"
            for b in fit
            if (band := mine[b]["lr_band"]) and not _inside_band(fitted[b], band)
        ]
        if misses:
            rule_text += f" (its lr misses its own fitted batches' bands at {', '.join(misses)})"
        test = mine.get(TEST_BATCH)
        if test is None:
            lines.append(f"- {rule} ({tuned}): {rule_text}; {TEST_BATCH} not finished yet")
            continue
        lr_at = _power_law_at(lr_slope, lr_intercept, TEST_BATCH)
        gamma_at = gamma_intercept + gamma_slope * math.log2(TEST_BATCH)
        low, high = test["lr_band"] or (math.nan, math.nan)
        verdict = "inside" if _inside_band(lr_at, test["lr_band"]) else "outside"
        lines.append(
            f"- {rule} ({tuned}): {rule_text}; at {TEST_BATCH} it predicts lr {lr_at:.3g}, "
            f"{verdict} the tuned band {low:.3g}-{high:.3g}, and gamma {gamma_at:.3g} "
            f"against the tuned {test['gamma']:g}"
        )
    return "\n".join(lines)


def robustness_table() -> str:
    """Per point and optimizer: held-out seeds that failed, and the good-lr band's width."""
    lines = [
        "| point | " + " | ".join(OPTIMIZERS) + " |",
        "|---|" + "---:|" * len(OPTIMIZERS),
    ]
    for point in POINTS:
        found = point_outcomes(point)
        if found is None:
            continue
        cells = []
        for name in OPTIMIZERS:
            entry = found.get(name)
            if entry is None or not entry["finished"]:
                cells.append(progress_label(False, entry["runs"] if entry else 0))
                continue
            band = entry["good_lr_band"]
            width = f"{band[1] / band[0]:.2g}x" if band else "-"
            cells.append(f"{entry['heldout_failures']}/{len(entry['heldout_finals'])}, {width}")
        lines.append(f"| {point} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_map(rows: list[dict], out_path: Path) -> Path | None:
    """Each rule's held-out gap to its strongest control (in the larger of the two held-out
    stds) against batch size, one line per token budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return None
    figure, axes = plt.subplots(1, len(PAIRS), figsize=(11, 4.5), sharey=True)
    for axis, rule in zip(axes, PAIRS, strict=True):
        for multiple in sorted({r["multiple"] for r in rows}):
            mine = sorted(
                (r["batch"], r["gap_sd"])
                for r in rows
                if r["rule"] == rule and r["multiple"] == multiple
            )
            if mine:
                axis.plot(*zip(*mine, strict=True), marker="o", label=f"{multiple}x20 tokens/param")
        axis.axhline(0, color="black", linewidth=0.8)
        for bound in (-2, 2):
            axis.axhline(bound, color="grey", linewidth=0.6, linestyle="--")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("sequences per step")
        axis.set_title(f"{rule} - strongest of {', '.join(PAIRS[rule])}")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axes[0].set_ylabel("held-out gap, in the larger std of the two (< 0: MARS ahead)")
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)
    plt.close(figure)
    return out_path


def write_map() -> None:
    rows = map_rows()
    text = "\n\n".join(
        [
            format_map(rows),
            batch_rules(rows),
            "Robustness: held-out seeds that failed (ended above the selection seeds' mean by "
            "more than max(0.03, 3 of their std)), and the width of the good-lr band (first "
            "selection seed within 1% of the winner's):",
            robustness_table(),
        ]
    )
    write_text_atomically(FOLDER / "map.md", text + "\n")
    plot_map(rows, FIGURE)
    print(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", nargs="+", choices=list(POINTS), default=list(POINTS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--report",
        action="store_true",
        help="write the reports of the points with runs, train nothing",
    )
    args = parser.parse_args()
    os.chdir(ROOT)
    for point in args.points:
        if args.report and not has_runs(point):
            continue
        arguments = tune_arguments(point, args.jobs, args.report)
        print("torch-mars tune " + shlex.join(arguments), flush=True)
        code = torch_mars(["tune", *arguments])
        if code:
            return code
    write_map()
    return 0


if __name__ == "__main__":
    sys.exit(main())
