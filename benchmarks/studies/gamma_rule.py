"""The gamma rule (issue "The map decided, first stage", item 3): each MARS rule's winning gamma,
gamma / (1 - beta1) and lr, fitted against the point's batch size and tokens per parameter on
three of the first stage's `tiny` points, predicts the fourth before its report is read; once
read, the miss is counted in ladder steps.

The fit is least squares in ladder positions (gamma on its ladder, lr on its 1.5x ladder,
gamma / (1 - beta1) in log2) on the features 1, log2(sequences per step) and log2(tokens per
parameter multiple): with three points it interpolates them exactly, so a prediction is the
plane through three winners, and its miss says how far a winner moves that the plane does not.
Width is fixed at `tiny`'s, so the rule says nothing yet about wider models (the second model
is one point at one width).

    python benchmarks/studies/gamma_rule.py --fit tiny/b64-4x tiny/b16-4x tiny/b256-16x \\
        --predict tiny/b4-4x     # writes CAMPAIGN/gamma-rule.md; scores it once b4-4x is read
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from lab.campaigns import campaign_folder
from lab.fight_map import POINTS, FightMap

from torch_mars.atomic_files import write_text_atomically
from torch_mars.train.study.space import LADDERS
from torch_mars.train.study.tune_record import read_tune_record

MAP = FightMap(Path(__file__).resolve().parents[2])

CAMPAIGN = campaign_folder(MAP.root, "campaign-3")  # the points the rule was fitted and scored on
RULES = ("mars-adamw", "mars-shampoo")


@dataclass(frozen=True)
class Winner:
    """A rule's winner at a point: its point's batch and tokens multiple, and its values."""

    batch: int
    multiple: int
    gamma: float
    lr: float
    beta1: float

    def targets(self) -> dict[str, float]:
        """The fitted quantities, in ladder steps (log2 for gamma / (1 - beta1))."""
        effective = self.gamma / (1 - self.beta1)
        return {
            "gamma (ladder step)": float(LADDERS["gamma"].nearest(self.gamma)),
            "lr (1.5x step)": float(LADDERS["lr"].nearest(self.lr)),
            "log2 gamma/(1-beta1)": math.log2(effective) if effective > 0 else -math.inf,
        }


def features(batch: int, multiple: int) -> list[float]:
    return [1.0, math.log2(batch), math.log2(multiple)]


def predict(fit: list[Winner], batch: int, multiple: int) -> dict[str, float]:
    """Each target at (``batch``, ``multiple``) by least squares over ``fit`` (minimum norm where
    the points do not determine the plane); NaN for a target some fit point lacks (gamma 0)."""
    x = np.array([features(w.batch, w.multiple) for w in fit])
    out = {}
    for name in fit[0].targets():
        y = np.array([w.targets()[name] for w in fit])
        if not np.all(np.isfinite(y)):
            out[name] = math.nan
            continue
        coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
        out[name] = float(np.array(features(batch, multiple)) @ coefficients)
    return out


def winner_of(label: str, rule: str) -> Winner | None:
    """``rule``'s winner at the campaign point ``label`` (``MODEL/POINT``), None until read."""
    report = CAMPAIGN / label / "tune.json"
    if not report.is_file():
        return None
    entry = read_tune_record(report).entry(rule)
    if entry is None or not entry.finished:
        return None
    batch, multiple = POINTS[label.split("/", 1)[1]]
    values = entry.winner
    return Winner(batch, multiple, values["gamma"], values["lr"], values["beta1"])


def fitted(rule: str, fit_labels: list[str]) -> list[Winner] | None:
    """``rule``'s winners at every point of ``fit_labels``; None until all are read."""
    fit = [winner_of(label, rule) for label in fit_labels]
    return None if None in fit else fit


# A GPT-2-small user's point (llm.c's 124M recipe: 512 sequences of 1,024 tokens a step, 10B
# tokens, about 4 x 20 tokens per parameter) in the plane's units, two ways: by sequences per
# step, and by tokens per step counted in `tiny`'s 32-token sequences.
GPT2_SMALL = {"512 sequences a step": (512, 4), "524,288 tokens a step": (16384, 4)}
MARIN_GAMMA = "flat over 0.0125-0.05 at 130M-520M parameters, 0.1 always worse"


def gamma_at(step: float) -> str:
    """The gamma a fitted ladder position names: the nearest level, said where the plane runs
    past the ladder's ends."""
    ladder = LADDERS["gamma"]
    top = len(ladder.levels) - 1
    nearest = min(max(round(step), 0), top)
    past = " (past the ladder's end)" if step < -0.5 or step > top + 0.5 else ""
    return f"{ladder.value(nearest):g}{past}"


def rule_text(fit_labels: list[str], left_out: str) -> str:
    """The prediction at ``left_out`` from the winners at ``fit_labels``, and its miss once the
    left-out point is read; then what the same plane says of a GPT-2-small run, beside Marin's
    gamma, an extrapolation the text names as one (no width term, 32-token sequences)."""
    batch, multiple = POINTS[left_out.split("/", 1)[1]]
    batches = [POINTS[label.split("/", 1)[1]][0] for label in fit_labels]
    predictions = [
        f"The gamma rule: fitted on {', '.join(fit_labels)}; predicts {left_out} "
        f"({batch} sequences per step, {multiple} x 20 tokens per parameter).",
        "",
        "| rule | quantity | predicted | read | miss (steps) |",
        "|---|---|---:|---:|---:|",
    ]
    users = [
        "",
        "What it would tell a GPT-2-small user (an extrapolation: the plane has no width term, "
        f"was fitted on {min(batches)}-{max(batches)} sequences of 32 tokens a step at `tiny`'s "
        "width, and a GPT-2-small step lies outside it however it is counted; Marin's gamma: "
        f"{MARIN_GAMMA}):",
        "",
        "| rule | counted as | gamma (ladder step) | gamma |",
        "|---|---|---:|---:|",
    ]
    for rule in RULES:
        fit = fitted(rule, fit_labels)
        if fit is None:
            predictions.append(f"| {rule} | (fit points not all read yet) | | | |")
            users.append(f"| {rule} | (fit points not all read yet) | | |")
            continue
        read = winner_of(left_out, rule)
        for name, value in predict(fit, batch, multiple).items():
            actual = read.targets()[name] if read else math.nan
            miss = f"{abs(value - actual):.1f}" if read and math.isfinite(actual) else "—"
            shown = f"{actual:.1f}" if read else "not read"
            predictions.append(f"| {rule} | {name} | {value:.1f} | {shown} | {miss} |")
        for counted, (user_batch, user_multiple) in GPT2_SMALL.items():
            step = predict(fit, user_batch, user_multiple)["gamma (ladder step)"]
            users.append(f"| {rule} | {counted} | {step:.1f} | {gamma_at(step)} |")
    return "\n".join(predictions + users)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", nargs=3, required=True, metavar="MODEL/POINT")
    parser.add_argument("--predict", required=True, metavar="MODEL/POINT")
    args = parser.parse_args(argv)
    text = rule_text(args.fit, args.predict)
    write_text_atomically(CAMPAIGN / "gamma-rule.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
