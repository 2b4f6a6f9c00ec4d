"""The project's campaigns (research, not the library): each (:data:`CAMPAIGNS`) one search
design run on one protocol over the map's points, in its own folder of this checkout's results
(:func:`campaign_folder`); its verdicts are the library's reading of a declared family
(:func:`torch_mars.train.study.family_reads.campaign_rows`), tabled, drawn and written into the
README's and docs/results.md's generated blocks."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from torch_mars.train.study.family import WITHOUT_CORRECTION
from torch_mars.train.study.family_reads import CampaignRow
from torch_mars.train.study.tune_record import OptimizerEntry, read_tune_record
from torch_mars.train.study.two_stage import design_of

# Each campaign's folder name -> its search design, oldest first; the newest is the current one.
CAMPAIGNS = {
    "campaign": "surface",
    "campaign-2": "surface-2",
    "campaign-3": "surface-3",
    "campaign-4": "surface-3",
}
# The campaign whose words the README and docs/results.md print: campaign-4 re-reads
# campaign-3's first stage on independent pairs and runs the map's second stage (issue #83).
CURRENT = "campaign-4"
# Every campaign's protocol: its trials per optimizer, and its selection's seeds and finalists.
CAMPAIGN_TRIALS = 40
SELECTION_FLAGS = (
    "--seeds 0 --data-seed 0 --finalists 4 --final-seeds 1 2 "
    "--heldout-seeds 3 4 5 6 --heldout-data-seeds 1 2 3"
)


def campaign_folder(root: Path, name: str) -> Path:
    """Where the campaign ``name`` keeps its declaration and studies in the checkout ``root``."""
    return root / "benchmarks" / "results" / name


def tune_studies_at(root: Path, model: str, point: str) -> list[Path]:
    """The tune studies a checkout ``root`` stores at ``point`` of ``model`` whose finished runs
    a new study there takes instead of training again (``tune --reuse-runs``): the map's (of
    ``tiny``), each campaign's, each candidate design's of the search benchmark."""
    results = root / "benchmarks" / "results"
    folders = [results / "fight-map" / point] if model == "tiny" else []
    folders += [campaign_folder(root, name) / model / point for name in CAMPAIGNS]
    if model == "tiny":
        folders += sorted((results / "search-benchmark" / point).glob("design-*"))
    return [f for f in folders if (f / "study.log").is_file() or (f / "study.log.gz").is_file()]


def format_campaign_table(rows: list[CampaignRow]) -> str:
    """The verdicts table (``verdicts.md``): scope, rule, strongest control, gap with its
    interval, p, word."""
    done = sum(row.gap is not None for row in rows)
    lines = [
        f"Holm over the declared family of {len(rows)} comparisons ({done} read, "
        f"{len(rows) - done} pending); gaps are rule - control in held-out validation loss "
        "(negative: the rule ahead). Each word is read from the Holm-adjusted interval beside "
        "it (win / loss: it excludes 0; equivalent: inside the margin; else inconclusive).",
        "",
        "| point | rule | strongest control | gap | adjusted interval (the word's) | dof | p "
        "| word | diverged runs (rule, control) | B |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in rows:
        c = row.comparison
        gap = f"{row.gap.mean:+.4f}" if row.gap else "—"
        adjusted = row.decision.interval_text() or "—"
        dof = str(row.gap.dof) if row.gap and row.gap.dof else "—"
        p = f"{row.gap.p:.3g}" if row.gap else "—"
        control = row.control or "/".join(c.controls)
        lost = f"{row.diverged[0]}, {row.diverged[1]}" if row.diverged else "—"
        bias = f"{row.bias:+.4f}" if row.bias is not None else "—"
        lines.append(
            f"| {c.scope} | {c.rule} | {control} | {gap} | {adjusted} | {dof} | {p} | "
            f"{row.decision.text()} | {lost} | {bias} |"
        )
    lines += [
        "",
        "B: how far the word would have leant the rule's way (negative) or its control's had each "
        "side been read at its own search's winner rather than its best-known setting (read "
        "from the point's report; — where the campaign read its searches' own winners).",
    ]
    return "\n".join(lines)


def reads_the_correction(row: CampaignRow) -> bool:
    """Whether ``row`` reads its rule against itself at gamma = 0 (the correction's worth)
    rather than against its strongest control: the one test the table and the figure share."""
    return row.comparison.controls[0].endswith(WITHOUT_CORRECTION)


def _lead_column(row: CampaignRow) -> str:
    """The lead table's column of ``row``: its rule against its strongest control, or against
    itself at gamma = 0 (the correction's worth)."""
    versus = "itself at gamma = 0" if reads_the_correction(row) else "control"
    return f"{row.comparison.rule} - {versus}"


def format_lead_table(rows: list[CampaignRow]) -> str:
    """The verdicts one row a point, one column a MARS rule and kind of comparison (each cell:
    the rule's held-out gap to its strongest control, or to itself at gamma = 0, with its
    interval and the word): what README and docs/results.md carry between the block markers,
    generated from the same rows as :func:`format_campaign_table`."""
    columns = list(dict.fromkeys(_lead_column(row) for row in rows))
    scopes = list(dict.fromkeys(row.comparison.scope for row in rows))
    cells = {(row.comparison.scope, _lead_column(row)): row for row in rows}
    lines = ["| point | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for scope in scopes:
        row_cells = []
        for column in columns:
            row = cells.get((scope, column))
            if row is None:
                row_cells.append("not declared")
            elif row.gap is None:
                row_cells.append(f"pending (vs {'/'.join(row.comparison.controls)})")
            else:
                row_cells.append(
                    f"{row.gap.mean:+.4f} {row.decision.interval_text()} vs {row.control}: "
                    f"**{row.decision.text()}**"
                )
        lines.append(f"| {scope} | " + " | ".join(row_cells) + " |")
    return "\n".join(lines)


def later_stage_points(campaign: dict) -> list[str]:
    """The declared points of ``campaign`` (a declaration as read) that none of its stages
    runs (its first, its second, its re-read of an earlier first stage), ``model/point``, in
    the declaration's order: the points a later stage runs."""
    scopes = [f"{e['model']}/{e['point']}" for e in campaign["points"]]
    run = [campaign.get(k, ()) for k in ("first_stage", "second_stage", "first_stage_reread")]
    return [scope for scope in scopes if not any(scope in stage for stage in run)]


# The words a campaign's tally counts, with their plurals.
TALLY_WORDS = (
    ("win", "wins"),
    ("loss", "losses"),
    ("equivalent", "equivalent"),
    ("inconclusive", "inconclusive"),
)


def _heldout_design(declared: dict) -> str:
    """How the campaign ``declared`` (a declaration as read) draws and reads its held-out
    pairs, as the lead's caption says it: crossed seeds and data orders (campaign-3 and before)
    or independent pairs with a second look (campaign-4)."""
    if "heldout" in declared:
        heldout = declared["heldout"].split(";")[0].split(" (")[0]
        return f"seed and data order as crossed effects: {heldout}"
    design = design_of(declared)
    if design is None:
        raise ValueError("the declaration states neither crossed pairs nor a two-look design")
    return (
        f"independent pairs, each on a seed and a data order of its own: {design.first} "
        f"first, up to {design.cap} where the first look cannot decide, two looks combined; "
        f"equivalent: inside ±{design.margin:g}"
    )


def _opponent(declared: dict) -> str:
    """The caption's clause on the setting each side is read at, where the campaign
    ``declared`` says (campaign-4: its best-known, not only its search's winner)."""
    opponent = declared.get("verdict", {}).get("opponent") if "pairs" in declared else None
    return f"; {opponent}" if opponent else ""


def format_lead(rows: list[CampaignRow], declaration: Path) -> str:
    """The campaign's answer as README and docs/results.md carry it between the block markers:
    a caption read from the declaration (held-out design, trials, search, family size), the
    lead table (:func:`format_lead_table`) and a tally of the words, so that every number of
    the answer comes from the stored reports and the declaration."""
    declared = json.loads(Path(declaration).read_text())
    flags = declared["protocol"].split()
    search = flags[flags.index("--search") + 1]
    done = [row for row in rows if row.gap is not None]
    versus = "rule - strongest control"
    if any(_lead_column(row).endswith("gamma = 0") for row in rows):
        versus += " and rule - itself at gamma = 0"
    caption = (
        f"Held-out validation loss, {versus} (< 0: MARS ahead), each word read from the "
        f"Holm-adjusted interval beside it ({_heldout_design(declared)}); each optimizer tuned "
        f"by {declared['trials']} trials of the {search} search, one selection seed a trial"
        f"{_opponent(declared)}; Holm over the {len(rows)} comparisons declared before the "
        f"first run ({len(done)} read, {len(rows) - len(done)} pending)."
    )
    by_word: dict[str, list[str]] = {w: [] for w, _ in TALLY_WORDS}
    for row in done:
        rule, scope = row.comparison.rule, row.comparison.scope
        named = f"{rule} at {scope}"
        if _lead_column(row).endswith("gamma = 0"):
            named = f"{rule}'s correction at {scope}"
        by_word[row.decision.word].append(named)
    parts = []
    for word, plural in TALLY_WORDS:
        named = by_word[word]
        listed = f" ({'; '.join(named)})" if named and word != "inconclusive" else ""
        parts.append(f"{len(named)} {word if len(named) == 1 else plural}{listed}")
    pending = sorted({row.comparison.scope for row in rows if row.gap is None})
    tally = "Read so far: " if pending else "Read: "
    tally += ", ".join(parts)
    if pending:
        tally += (
            f"; pending: {len(rows) - len(done)} ({', '.join(pending)}); a provisional word "
            "is read at a level the pending ones can only loosen."
        )
    else:
        tally += "."
    later = later_stage_points(declared)
    if later:
        tally += f" Declared for later stages, not run: {', '.join(later)}."
    return f"{caption}\n\n{format_lead_table(rows)}\n\n{tally}"


WINNER_COLUMNS = ("lr", "beta1", "beta2", "gamma", "weight_decay")


def _heldout_read(entry: OptimizerEntry) -> bool:
    """Whether a stored report's optimizer ``entry`` has every held-out run finished."""
    finals = entry.heldout_finals
    return bool(finals) and all(isinstance(v, float) and math.isfinite(v) for v in finals)


def stage_points(declared: dict) -> list[str]:
    """The points the campaign ``declared`` (a declaration as read) runs, ``model/point``, in
    the declaration's order: its first stage's, or its re-read and second stage's."""
    run = [*declared.get("first_stage", ()), *declared.get("first_stage_reread", ())]
    run += declared.get("second_stage", [])
    return [
        f"{e['model']}/{e['point']}"
        for e in declared["points"]
        if f"{e['model']}/{e['point']}" in run
    ]


def _setting_from(entry: OptimizerEntry) -> str:
    """Where the setting a report read ``entry`` at came from: its own search, a peer's
    winner moved onto its space, or a stored reference study of the point."""
    source = entry.best_known_from
    if not source:
        return "its search"
    return "a reference study" if "/" in source else f"{source}'s winner"


def format_winners_table(declaration: Path) -> str:
    """Each read point's winners as its report stored them: per optimizer the setting it was
    read at (its lr, beta1, beta2, gamma and weight decay, ``-`` where the optimizer has no such
    setting), where that setting came from, its held-out runs and their mean; a point where any
    held-out run is unfinished or failed is named below the table instead (no mean is read from
    a point that lost runs)."""
    declared = json.loads(Path(declaration).read_text())
    lines = [
        "| point | optimizer | "
        + " | ".join(WINNER_COLUMNS)
        + " | setting from | held-out runs | held-out mean |",
        "|---|---|" + "---:|" * len(WINNER_COLUMNS) + "---|---:|---:|",
    ]
    pending = []
    for scope in stage_points(declared):
        report = Path(declaration).parent / scope / "tune.json"
        entries = read_tune_record(report).optimizers if report.is_file() else ()
        if not entries or not all(_heldout_read(e) for e in entries):
            pending.append(scope)
            continue
        for entry in entries:
            winner, finals = entry.winner, entry.heldout_finals
            values = [f"{winner[c]:.3g}" if c in winner else "-" for c in WINNER_COLUMNS]
            held = f"{sum(finals) / len(finals):.4f}"
            cells = " | ".join(
                [scope, entry.optimizer, *values, _setting_from(entry), str(len(finals)), held]
            )
            lines.append(f"| {cells} |")
    if pending:
        lines += ["", f"Not read (a held-out run unfinished or failed): {', '.join(pending)}."]
    return "\n".join(lines)


BLOCK_BEGIN = "<!-- campaign verdicts: generated by benchmarks/studies/campaign.py --report -->"
BLOCK_END = "<!-- end of campaign verdicts -->"
# docs/results.md's state of the campaign (its state.md), generated the same way.
STATE_BEGIN = "<!-- campaign state: generated by benchmarks/studies/campaign.py --report -->"
STATE_END = "<!-- end of campaign state -->"
# docs/results.md's table of the campaign's winners, generated the same way.
WINNERS_BEGIN = "<!-- campaign winners: generated by benchmarks/studies/campaign.py --report -->"
WINNERS_END = "<!-- end of campaign winners -->"


def replace_block(text: str, block: str, begin: str = BLOCK_BEGIN, end: str = BLOCK_END) -> str:
    """``text`` with the generated block between the markers ``begin`` and ``end`` (the
    verdicts' unless given) replaced by ``block`` (the markers must be there: a file that lost
    them is an error)."""
    try:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
    except ValueError as error:
        raise ValueError(f"the generated block's markers are missing: {begin}") from error
    return f"{head}{begin}\n{block}\n{end}{tail}"


def block_of(text: str, begin: str = BLOCK_BEGIN, end: str = BLOCK_END) -> str:
    """The generated block of ``text`` between ``begin`` and ``end`` (the verdicts' unless
    given)."""
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def figure_panels(rows: list[CampaignRow]) -> dict[str, list[tuple[str, CampaignRow]]]:
    """The campaign figure's content: a panel per MARS rule and kind of comparison (against its
    strongest control; against itself at gamma = 0, the correction's worth, where declared),
    each with its declared points in the declaration's order and their rows (read or
    pending): ``{"mars-adamw - strongest control": [(scope, row), ...], ...}``."""
    panels: dict[str, list[tuple[str, CampaignRow]]] = {}
    for row in rows:
        rule = row.comparison.rule
        versus = f"{rule} at gamma = 0" if reads_the_correction(row) else "strongest control"
        panels.setdefault(f"{rule} - {versus}", []).append((row.comparison.scope, row))
    return panels


# Each word's colour on the map (pending: grey, hollow).
WORD_COLOURS = {
    "win": "tab:green",
    "loss": "tab:red",
    "equivalent": "tab:blue",
    "inconclusive": "tab:orange",
}


def plot_campaign(
    rows: list[CampaignRow], out_path: Path, later: Sequence[str] = (), margin: float = 0.0
) -> Path:
    """The campaign's map, a forest plot: per panel (:func:`figure_panels`) each declared
    point a line, in the declaration's order from the top, with the gap and the Holm-adjusted
    interval its word is read from, coloured by the word and the word written beside it; a
    point not read yet is a hollow grey mark at zero, "pending"; ``margin`` (the family's
    equivalence margin) shaded around zero; ``later``, the declared points of later stages,
    named as not run. Left of zero the rule is ahead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from torch_mars.train.plots import save_figure

    panels = figure_panels(rows)
    columns = min(len(panels), 2)
    grid = math.ceil(len(panels) / columns)
    lines = max(len(points) for points in panels.values())
    size = (7.2 * columns, 0.8 + grid * (0.9 + 0.28 * lines))
    figure, axes = plt.subplots(grid, columns, squeeze=False, figsize=size)
    for axis, (title, points) in zip(axes.flat, panels.items(), strict=False):
        for y, (_, row) in enumerate(points):
            if row.gap is None:
                axis.plot(0.0, y, marker="o", markerfacecolor="none", color="grey")
                axis.annotate("pending", (1.0, y), xycoords=("axes fraction", "data"),
                              xytext=(4, 0), textcoords="offset points", va="center",
                              fontsize=7, color="grey")  # fmt: skip
                continue
            gap, read = row.gap, row.decision
            low, high = (gap.low, gap.high) if math.isnan(read.low) else (read.low, read.high)
            colour = WORD_COLOURS.get(read.word, "black")
            axis.errorbar(gap.mean, y, xerr=[[gap.mean - low], [high - gap.mean]], marker="o",
                          capsize=3, color=colour)  # fmt: skip
            versus = "" if row.control and "@" in row.control else f" vs {row.control}"
            axis.annotate(f"{read.text()} {gap.mean:+.4f}{versus}", (1.0, y),
                          xycoords=("axes fraction", "data"), xytext=(4, 0),
                          textcoords="offset points", va="center", fontsize=7,
                          color=colour)  # fmt: skip
        if margin:
            axis.axvspan(-margin, margin, color="tab:blue", alpha=0.08, linewidth=0)
        axis.axvline(0.0, color="grey", linewidth=0.8)
        axis.set_ylim(len(points) - 0.5, -0.5)  # the declaration's first point on top
        axis.set_yticks(range(len(points)), [scope for scope, _ in points], fontsize=8)
        axis.set_xlabel("held-out gap, rule - control (nats; < 0: the rule ahead)", fontsize=8)
        axis.set_title(title, fontsize=9)
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    read = sum(row.gap is not None for row in rows)
    title = (
        f"Holm over the declared family of {len(rows)}: {read} read, {len(rows) - read} "
        "pending; each bar the adjusted interval its word is read from"
        + (f", the shaded band the equivalence margin ±{margin:g}" if margin else "")
    )
    if later:
        title += f"\ndeclared for later stages, not run: {', '.join(later)}"
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return save_figure(figure, out_path)
