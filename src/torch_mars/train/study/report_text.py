"""A ``torch-mars tune`` study's report in words (``summary.md``): the answer first, the table,
one sentence per thing the reader must know (failures, fixed dimensions, search depth, held-out
divergence, peers' winners), the finalists, the ladders and the machines; each generated from
:mod:`.outcomes`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import optuna

from torch_mars.train.compare import mean_std_text
from torch_mars.train.study.outcomes import (
    OptimizerOutcome,
    Verdict,
    copied_runs,
    run_cost,
    verdicts,
)
from torch_mars.train.study.pairs import DIVERGED_ABOVE_MEDIAN, diverged
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.space import (
    LADDERS,
    Fixed,
    Ladders,
    Point,
    ladder_of,
    point_key,
    values_of,
)
from torch_mars.train.study.tune import (
    DEFAULT_SEARCH,
    TunePlan,
    finalists_drawn,
)

# The tuning curve's rows in the report: the expected best after this many trials.
CURVE_ROWS = (1, 2, 5, 10, 20, 40, 80)


def progress_label(finished: bool, runs: int) -> str:
    """How far an optimizer's tuning has got, as the reports print it: "" once finished,
    "unfinished" while it has runs but is still searching, "not started" with no run."""
    return "" if finished else "unfinished" if runs else "not started"


def format_tune_table(
    plan: TunePlan,
    found: Sequence[OptimizerOutcome],
    found_verdicts: Sequence[Verdict] | None = None,
) -> str:
    """The report: per optimizer its trials, held-out mean ± std, selection mean and winner;
    each MARS rule's gap to its strongest control (``found_verdicts``, default: over the
    study's own family); the tuning curves."""
    sel = plan.selection
    heldout = (
        f"held out: {sel.heldout_text()}"
        if sel.pairs
        else f"held out: seeds {','.join(map(str, sel.heldout))} x data orders "
        f"{','.join(map(str, sel.heldout_data_seeds))}"
    )
    ranked = sorted(found, key=lambda o: (math.isnan(o.heldout_mean), o.heldout_mean))
    if found_verdicts is None:
        found_verdicts = verdicts(found, pairs=sel.heldout_pairs())
    lines = [*answer_sentences(plan, ranked, found_verdicts), ""]
    if getattr(plan.base, "direction", "minimize") == "maximize":
        lines += [
            "Every value below is the function's score negated (direction maximize), so that "
            "lower is better throughout: -0.9500 is a score of 0.9500.",
            "",
        ]
    lines += [
        f"| optimizer | trials | {heldout} | selection (seeds "
        f"{','.join(map(str, sel.choosing_seeds))}, data order {sel.data_seed}"
        f"{sel.final_orders_text()}) | "
        "dimensions moved |",
        "|---|---:|---:|---:|---:|",
    ]
    for o in ranked:
        progress = progress_label(o.finished, len(o.trial_scores))
        status = f" ({progress})" if progress else ""
        states = o.heldout_states(sel.heldout_pairs(o.optimizer))
        lost = sum(state in ("diverged", "failed") for state in states)
        note = (
            f" ({lost} of {len(states)} lost: diverged or failed, not in this mean)" if lost else ""
        )
        lines.append(
            f"| {o.optimizer}{status} | {len(o.trial_scores)} | "
            f"{mean_std_text(o.heldout_finals)}{note} | {mean_std_text(o.selection_finals)} | "
            f"{o.moved_text} |"
        )
    lines += [
        "",
        *failure_sentences(ranked, sel),
        *fixed_sentences(plan.fixed, plan.ladders, plan.extra),
        *moved_sentences(ranked),
        *depth_sentences(ranked),
        *heldout_sentences(ranked, sel),
        *peer_sentences(ranked, plan.all_ladders),
        *pruned_sentences(ranked, plan.prune),
    ]
    if found_verdicts:
        lines += [
            "",
            "| rule | strongest control | gap, Holm-adjusted interval (the word's) | p | "
            "word (declared family) | diverged runs (rule, control) | B |",
            "|---|---|---:|---:|---|---:|---:|",
        ]
        lines += [
            f"| {v.rule} | {v.control} | {v.interval_text()} | {v.gap.p:.3g} | "
            f"{v.decision_text} | {v.diverged[0]}, {v.diverged[1]} | {v.bias_text()} |"
            for v in found_verdicts
        ]
        if sel.peer_winners:
            lines += [
                "",
                "B: how far a word read at the two searches' own winners would have leant the "
                "rule's way (negative) or its control's, on the choosing runs: (rule's own "
                "winner - its best-known setting) - (control's own winner - its best-known). "
                "Every word above is read at the best-known settings.",
            ]
    rows = [k for k in CURVE_ROWS if k <= plan.trials]
    lines += [
        "",
        "Tuning curves: the expected best selection score after k trials, in random order.",
        "",
        "| optimizer | " + " | ".join(f"k={k}" for k in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for o in ranked:
        curve = o.curve
        cells = [f"{curve[k - 1]:.4f}" if k <= len(curve) else "—" for k in rows]
        lines.append(f"| {o.optimizer} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [
        f"- {o.optimizer}: {_winner_text(o.winner, plan.all_ladders)}" for o in ranked if o.winner
    ]
    if sel.finalists:
        lines += ["", finalists_table(sel, ranked, plan.search, plan.all_ladders)]
    return "\n".join(lines)


def answer_sentences(
    plan: TunePlan, ranked: Sequence[OptimizerOutcome], found_verdicts: Sequence[Verdict]
) -> list[str]:
    """The report's answer in words, first: the best optimizer held out (and by how much it
    leads the next), then one sentence per comparison with its interval, its word and the
    budget it was read at. ``ranked``: best held-out mean first."""
    plural = "" if plan.trials == 1 else "s"
    counts = sorted({len(plan.selection.heldout_pairs(o)) for o in plan.optimizers})
    runs = "-".join(map(str, (counts[0], counts[-1]) if len(counts) > 1 else counts))
    budget = f"{plan.trials} trial{plural} each, {runs} held-out runs"
    read = [o for o in ranked if not math.isnan(o.heldout_mean)]
    sel = plan.selection
    if len(read) < len(ranked) or not read:
        waiting = [
            o.optimizer
            for o in ranked
            if not o.finished or "waiting" in o.heldout_states(sel.heldout_pairs(o.optimizer))
        ]
        if waiting:
            return [
                f"**Answer:** not yet: {', '.join(waiting)} still without every held-out run "
                f"({budget}); the same command resumes."
            ]
        lost = [
            f"{o.optimizer}'s winner lost {o.lost_text(sel.heldout_pairs(o.optimizer))}"
            for o in ranked
            if o not in read
        ]
        return [
            f"**Answer:** none: the study has finished ({budget}) and no verdict is read from "
            f"a winner that lost held-out runs: {'; '.join(lost)}. A failed run scores its "
            "point worst and is not trained again; a diverged run is a result of its setting."
        ]
    best, *rest = read
    negated = getattr(plan.base, "direction", "minimize") == "maximize"
    quantity = "held-out mean of the score negated" if negated else "held-out mean"
    lead = (
        f", {rest[0].heldout_mean - best.heldout_mean:.4f} ahead of {rest[0].optimizer}"
        if rest
        else ""
    )
    lines = [
        f"**Answer** ({budget}; {quantity}, lower is better): best overall "
        f"**{best.optimizer}**, {best.heldout_mean:.4f}{lead}."
    ]
    for v in found_verdicts:
        caveat = " (provisional: comparisons of the declared family are pending)"
        left = (
            f" ({v.left_out} pair(s) both read left out: their sides trained on two machines "
            "or thread counts)"
            if v.left_out
            else ""
        )
        lines.append(
            f"- {word_sentence(v.decision, v.rule, v.control)} on this model at this budget: "
            f"{v.rule} - {v.control} = {v.interval_text()} held out, **{v.decision}**"
            f"{caveat if v.provisional else ''}{left}."
        )
    return lines


def word_sentence(word: str, rule: str, control: str) -> str:
    """What a word says of ``rule`` against ``control``, the one sentence every report uses.

    >>> word_sentence("inconclusive", "mars-adamw", "nadamw")
    'not shown different nor equivalent: mars-adamw against nadamw'
    """
    return {
        "win": f"{rule} beat {control}",
        "loss": f"{control} beat {rule}",
        "equivalent": f"{rule} and {control} equivalent (within the margin)",
        "inconclusive": f"not shown different nor equivalent: {rule} against {control}",
    }.get(word, f"{rule} against {control}: not read yet")


def failure_sentences(found: Sequence[OptimizerOutcome], sel: Selection) -> list[str]:
    """Per optimizer with failed runs: how many of the runs it reads failed, and the first
    message. A failed run scores its point worst (never the mean of its other seeds), and a
    winner with a failed held-out run gets no verdict."""
    lines = []
    for o in found:
        if not o.failures:
            continue
        (seed, data), message = next((r[2:], m) for r, m in o.failures.items())
        winner = point_key(o.winner)
        pairs = sel.heldout_pairs(o.optimizer)
        heldout = any(r[1] == winner and (r[2], r[3]) in pairs for r in o.failures)
        verdict = "; its winner has failed held-out runs: no verdict" if heldout else ""
        lines.append(
            f"- FAILED: {len(o.failures)} of {o.optimizer}'s {len(o.runs)} runs (first, seed "
            f"{seed} data order {data}: {message}){verdict}."
        )
    return lines


def fixed_sentences(fixed: Fixed, ladders: Ladders = (), extra: Ladders = ()) -> list[str]:
    """The dimensions the study held at a value, those it stepped on your values, and your
    own dimensions: a line each, none where there were none."""
    lines = []
    if fixed:
        held = ", ".join(f"{d} {v:g}" for d, v in fixed)
        lines.append(f"- Fixed for every optimizer that has them, never tuned: {held}.")
    if ladders:
        yours = "; ".join(f"{d} {', '.join(f'{v:g}' for v in values)}" for d, values in ladders)
        lines.append(f"- Searched on your values: {yours}.")
    if extra:
        own = "; ".join(f"{d} {', '.join(f'{v:g}' for v in values)}" for d, values in extra)
        lines.append(f"- Your own dimensions, tuned for every optimizer alike: {own}.")
    return lines


# A dimension is called tuned once its search scored it at this many values (its start and at
# least one step each way, or two steps one way): one other value scored once is a move, not a
# tuning (issue "Your model, round 2").
TUNED_DEPTH = 3


def depth_sentences(found: Sequence[OptimizerOutcome]) -> list[str]:
    """Per optimizer with trials: how many values each dimension was scored at, and a WARNING
    naming the dimensions scored at fewer than :data:`TUNED_DEPTH` (moved, or left at the
    start, but not tuned: a short search for them)."""
    lines = []
    for o in found:
        if not o.trial_scores or not o.values_scored:
            continue
        counts = ", ".join(f"{d} {n}" for d, n in o.values_scored.items())
        short = [d for d, n in o.values_scored.items() if n < TUNED_DEPTH]
        lines.append(f"- {o.optimizer}: values scored per dimension: {counts}.")
        if short:
            lines.append(
                f"- WARNING: {o.optimizer}'s search is short: {', '.join(short)} scored at fewer "
                f"than {TUNED_DEPTH} values, not tuned (more trials would tune them)."
            )
    return lines


def moved_sentences(found: Sequence[OptimizerOutcome]) -> list[str]:
    """Per optimizer with trials, in words: which dimensions its search moved away from its
    start, and a warning where it moved only the lr (its other dimensions are its defaults:
    more trials, or fewer dimensions, would tune them)."""
    lines = []
    for o in found:
        if not o.trial_scores:
            continue
        still = [d for d in o.dimensions if d not in o.moved]
        if o.moved == ("lr",) and still:
            lines.append(
                f"- WARNING: {o.optimizer}'s search moved only the lr in {len(o.trial_scores)} "
                f"trials; {', '.join(still)} stayed at their defaults."
            )
        else:
            kept = f"; never moved: {', '.join(still)}" if still else " (every dimension)"
            lines.append(f"- {o.optimizer}'s search moved {', '.join(o.moved) or 'nothing'}{kept}.")
    return lines


def heldout_sentences(found: Sequence[OptimizerOutcome], sel: Selection) -> list[str]:
    """Per optimizer whose held-out runs have all finished: its worst run, how many lie more
    than 3 standard deviations from the median (a blow-up a mean would hide), and how many
    diverged by the declared rule (:func:`~.pairs.diverged`: counted, never dropped)."""
    lines = []
    for o in found:
        worst, far = o.heldout_extremes(sel.heldout_pairs(o.optimizer))
        if worst is not None:
            value, (seed, data) = worst
            lost = len(diverged(o.heldout_finals))
            lines.append(
                f"- {o.optimizer}'s worst held-out run: {value:.4f} (seed {seed}, data order "
                f"{data}); runs over 3 std from the median: {far}; diverged (more than "
                f"{DIVERGED_ABOVE_MEDIAN:g} above its median, or not finite): {lost} of "
                f"{len(o.heldout_finals)}."
            )
    return lines


def pruned_sentences(found: Sequence[OptimizerOutcome], prune: bool) -> list[str]:
    """Where the study prunes: per optimizer, how many of its trials' runs were stopped early."""
    if not prune:
        return []
    counts = ", ".join(f"{o.optimizer} {o.pruned} of {len(o.trial_scores)}" for o in found)
    return [
        f"- Pruned trials (stopped where a reported value was worse than the median of the same "
        f"optimizer's finished trial runs at that step; each scores worst): {counts}."
    ]


def peer_sentences(found: Sequence[OptimizerOutcome], ladders: Ladders = ()) -> list[str]:
    """Per optimizer whose peers' winners were read on its space: a control beaten by its
    peer's setting (its search stopped short, and it is read at that setting), or that its own
    winner held."""
    lines = []
    for o in found:
        if not o.peer_points:
            continue
        if o.best_known_from is None:
            peers = ", ".join(f"{n} {s:.4f}" for n, _, s in o.peer_points)
            lines.append(
                f"- {o.optimizer}'s own winner ({o.own_score:.4f} on the choosing runs) held "
                f"against its peers' winners moved onto its space ({peers})."
            )
            continue
        score = next(s for n, _, s in o.peer_points if n == o.best_known_from)
        lines.append(
            f"- {o.optimizer} at {o.best_known_from}'s winner moved onto its space scored "
            f"{score:.4f} on the choosing runs against its own winner's {o.own_score:.4f}: its "
            f"search stopped {o.shortfall:.4f} short, and it is read at that setting "
            f"({_winner_text(o.winner, ladders)})."
        )
    return lines


def finalists_table(
    sel: Selection,
    found: Sequence[OptimizerOutcome],
    search: str = DEFAULT_SEARCH,
    ladders: Ladders = (),
) -> str:
    """Each optimizer's finalists (as the ``search`` design draws them), each with its score
    on the selection seeds and its mean over the finalists' seeds too (the winner first)."""
    drawn = finalists_drawn(search)
    lines = [
        f"Finalists: {sel.finalists} points of each search ({drawn}) re-read on seeds "
        f"{','.join(map(str, sel.final_seeds))}{sel.final_orders_text()}; the best mean over seeds "
        f"{','.join(map(str, sel.choosing_seeds))} wins (the search's own best is marked *).",
        "",
        f"| optimizer | point | seeds {','.join(map(str, sel.seeds))} | "
        f"seeds {','.join(map(str, sel.choosing_seeds))} |",
        "|---|---|---:|---:|",
    ]
    for o in found:
        best = min((score for _, score, _ in o.finalists), default=math.nan)
        for point, score, final in o.finalists:
            mark = "*" if score == best else ""
            lines.append(
                f"| {o.optimizer} | {_winner_text(point, ladders)} | {score:.4f}{mark} | "
                f"{final:.4f} |"
            )
    return "\n".join(lines)


def _winner_text(point: Point, ladders: Ladders = ()) -> str:
    return ", ".join(f"{d} {v:g}" for d, v in values_of(point, ladders).items())


def ladder_note(ladders: Ladders = ()) -> str:
    """One line per dimension: its ladder (yours where given), for the report's readers."""
    lines = []
    for dimension in LADDERS:
        ladder = ladder_of(dimension, ladders)
        if ladder.levels:
            lines.append(f"{dimension}: {', '.join(f'{v:g}' for v in ladder.levels)}")
        else:
            lines.append(f"{dimension}: {ladder.anchor:g} x {ladder.factor:g}^k")
    return "; ".join(lines)


def devices_note(trials: Sequence[optuna.trial.FrozenTrial]) -> str:
    """The devices the study's finished runs trained on, with their runs and cost: a run's
    floats depend on the kernels its device runs, so a study run on several is said to be."""
    notes = []
    for device, c in run_cost(trials).items():
        recorded = [t for t in c["threads"] if t != "?"]
        threads = (
            f"{'/'.join(recorded)} thread(s) per run"
            + (" where recorded" if "?" in c["threads"] else "")
            if recorded
            else "threads per run not recorded"
        )
        notes.append(f"{device} ({c['runs']} runs, {c['hours']:.2f} h of run time, {threads})")
    copied = copied_runs(trials)
    if copied:
        notes.append(f"{copied} runs taken from other studies, trained there (--reuse-runs)")
    return "; ".join(notes) or "no runs"
