"""Weight decay as an axis of its own (issue #24): each optimizer of the regime map on `tiny` at
4 x 20 tokens per parameter, 16 sequences per step (the point `torch-mars compare` runs), with
its weight decay in :data:`WEIGHT_DECAYS` and its lr re-tuned at each value, by the protocol
of benchmarks/study_axes.py, fixed here before any result was seen:

- every setting but lr and weight decay is the optimizer's winner on the tokens axis at that
  point (betas, gamma, Muon's momentum; NAdamW's betas from its own sweep there);
- lr on a 5-point 1.5x grid centred on that winner's lr, extended past an edge that holds the
  best lr up to three times, search seed 0, the best lr on seeds 0-2;
- ``weight_decay`` is the optimizer's own knob: every tensor for AdamW and NAdamW, the matrices
  for the MARS rules and Muon (their 1-D tensors keep their AdamW path's 0.1).

Where the study already ran a value (the tokens axis at each optimizer's default, the
``weight-decay`` and ``adamw-weight-decay`` stages at 1e-2), its sweep is read, not rerun; those
used the 7-point grid. Resumable: finished runs are never rerun.

    python benchmarks/study_weight_decay.py [--jobs 2] [--folder study-axes] [--multiple 4]
        [--optimizers mars-adamw adamw nadamw muon mars-shampoo]
    python benchmarks/study_weight_decay.py --optimizers   # redraw and print only

Writes benchmarks/results/FOLDER/weight-decay-axis[-Mx]/<optimizer>-wd<value>/ (run folders,
sweep.json, summary.md), FOLDER/weight-decay-axis[-Mx].json, and a figure of final val loss
against weight decay, one line per optimizer, error bars over the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

from study_axes import (
    AXIS_OPTIMIZERS,
    CONTROLS,
    RESULTS,
    TINY_BATCH_MULTIPLE,
    fixed_axes,
    grid_around,
    study_parser,
    summary_of,
    sweep_lr_with_edges,
)
from study_compare import MINI_BUDGET, tiny_budget

WEIGHT_DECAYS = (0.0, 3e-3, 1e-2, 3e-2, 0.1)
# The Adam rule first: MARS-AdamW's own weight decay (1e-2, the paper's) was never tuned.
ORDER = ("mars-adamw", "adamw", "nadamw", "muon", "mars-shampoo")


def measured_sweeps(folder: Path, multiple: int) -> list[Path]:
    """The sweeps at this point that ran some optimizer at one weight decay."""
    names = (f"tokens-{multiple}x", f"weight-decay-{multiple}x", f"weight-decay-adamw-{multiple}x")
    return [folder / name for name in names if (folder / name / "sweep.json").exists()]


def weight_decays_in(sweep: Path, optimizer: str) -> set[float]:
    """The weight decays ``optimizer``'s runs in ``sweep`` trained with."""
    values = set()
    for line in (sweep / "runs.jsonl").read_text().splitlines():
        config = json.loads(line)["config"]
        if config["optimizer"] == optimizer:
            values.add(float(config["hyperparams"]["weight_decay"]))
    return values


def already_measured(folder: Path, multiple: int, optimizer: str, decay: float) -> dict | None:
    """``optimizer`` at ``decay`` from a sweep that ran it there and at no other value."""
    for sweep in measured_sweeps(folder, multiple):
        if weight_decays_in(sweep, optimizer) == {decay}:
            summaries = json.loads((sweep / "sweep.json").read_text())["summaries"]
            winners = json.loads((sweep / "sweep.json").read_text())["winners"]
            for summary in summaries:
                if summary["optimizer"] == optimizer:
                    return {
                        "mean": summary["final"],
                        "std": summary["final_std"],
                        "point": {**winners[optimizer], "weight_decay": decay},
                        "sweep": sweep.name,
                    }
    return None


def weight_decay_axis(
    folder: Path, multiple: int, optimizers: list[str], jobs: int, table: Path
) -> dict:
    """Each optimizer at each of :data:`WEIGHT_DECAYS`, lr re-tuned; results land in ``table``
    after every sweep."""
    tuned = json.loads((folder / f"tokens-{multiple}x" / "sweep.json").read_text())["winners"]
    base = tiny_budget(MINI_BUDGET, multiple)
    results = json.loads(table.read_text()) if table.exists() else {}
    out = table.with_suffix("")
    for optimizer in optimizers:
        winner = tuned[optimizer]
        for decay in WEIGHT_DECAYS:
            entry = already_measured(folder, multiple, optimizer, decay)
            if entry is None:
                fixed = {**fixed_axes(winner), "weight_decay": (decay,)}
                report = sweep_lr_with_edges(
                    out / f"{optimizer}-wd{decay:g}",
                    base,
                    {optimizer: list(grid_around(winner["lr"]))},
                    {optimizer: fixed},
                    jobs,
                )
                entry = summary_of(report)[optimizer]
            results.setdefault(optimizer, {})[f"{decay:g}"] = entry
            table.write_text(json.dumps(results, indent=2) + "\n")
    return results


def best_of(results: dict, optimizer: str) -> tuple[str, dict]:
    """``optimizer``'s weight decay with the lowest mean, and its entry."""
    return min(results[optimizer].items(), key=lambda item: item[1]["mean"])


def weight_decay_table(results: dict) -> str:
    """Final val loss (mean ± std over seeds 0-2) per optimizer and weight decay, each row's best
    in bold, then each MARS rule's best against its strongest control's best."""
    decays = sorted({d for rows in results.values() for d in rows}, key=float)
    lines = [
        "| optimizer | " + " | ".join(f"wd {d}" for d in decays) + " |",
        "|---|" + "---:|" * len(decays),
    ]
    for optimizer in ORDER:
        if optimizer not in results:
            continue
        best, _ = best_of(results, optimizer)
        cells = []
        for decay in decays:
            entry = results[optimizer].get(decay)
            if entry is None:
                cells.append("not run")
                continue
            cell = f"{entry['mean']:.4f} ± {entry['std']:.4f}"
            cells.append(f"**{cell}**" if decay == best else cell)
        lines.append(f"| {optimizer} | " + " | ".join(cells) + " |")
    for mars, controls in CONTROLS.items():
        ran = [name for name in controls if name in results]
        if mars not in results or not ran:
            continue
        decay, ours = best_of(results, mars)
        control = min(ran, key=lambda name: best_of(results, name)[1]["mean"])
        control_decay, theirs = best_of(results, control)
        gap = ours["mean"] - theirs["mean"]
        lines.append(
            f"\n{mars} at its best weight decay ({decay}) - {control} at its best"
            f" ({control_decay}): {gap:+.4f} ({gap / theirs['std']:+.1f} {control} std)"
        )
    return "\n".join(lines)


def plot_weight_decay(results: dict, path: Path) -> None:
    """Final val loss against weight decay (symmetric-log x, so 0 is shown), one line per
    optimizer, error bars one std over the seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, panel = plt.subplots(figsize=(7, 4.5))
    for optimizer in ORDER:
        if optimizer not in results:
            continue
        points = sorted(results[optimizer].items(), key=lambda item: float(item[0]))
        xs = [float(decay) for decay, _ in points]
        panel.errorbar(
            xs,
            [entry["mean"] for _, entry in points],
            yerr=[entry["std"] for _, entry in points],
            marker="o",
            capsize=3,
            label=optimizer,
        )
    panel.set_xscale("symlog", linthresh=1e-3)
    panel.set_xticks(WEIGHT_DECAYS, [f"{d:g}" for d in WEIGHT_DECAYS])
    panel.set_xlabel("weight decay (lr re-tuned at each value)")
    panel.set_ylabel("final val loss (nats/byte), 3 seeds")
    panel.set_title("tiny, 4 x 20 tokens/param, 16 sequences/step")
    panel.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = study_parser(__doc__, multiple=True)
    parser.add_argument("--optimizers", nargs="*", choices=AXIS_OPTIMIZERS, default=list(ORDER))
    args = parser.parse_args()
    folder = RESULTS / args.folder
    suffix = "" if args.multiple == TINY_BATCH_MULTIPLE else f"-{args.multiple}x"
    table = folder / f"weight-decay-axis{suffix}.json"
    results = weight_decay_axis(folder, args.multiple, args.optimizers, args.jobs, table)
    if results:
        plot_weight_decay(results, table.with_suffix(".png"))
        print(weight_decay_table(results))


if __name__ == "__main__":
    main()
