"""What a study lands stays small (issue #34): every tracked figure under benchmarks/results or
docs/figures is cited by a doc, and benchmarks/results holds at most 300 tracked files."""

from __future__ import annotations

from pathlib import Path

from benchmark_scripts import tracked

ROOT = Path(__file__).resolve().parents[2]


def docs_text() -> str:
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    documents += sorted((ROOT / "benchmarks").rglob("README.md"))
    return "\n".join(path.read_text() for path in documents)


def test_every_tracked_figure_is_cited_by_a_doc():
    text = docs_text()
    figures = tracked("benchmarks/results/*.png", "docs/figures/*.png")
    uncited = [
        path for path in figures if path not in text and path.removeprefix("docs/") not in text
    ]
    assert not uncited, f"tracked figures no doc cites (redraw them, or cite them): {uncited}"


def test_the_stored_results_stay_small():
    """Tables, figures and one compact record per study (journals gzipped, about 20x; figures
    with a palette, about 3x): a few MB in all, so that a clone stays small. The file count
    leaves room for what the fight map still has to land, four files a study (summary.md,
    tune.json, tune.png, study.log.gz): seven points, the second search at b64-4x and the
    second model's two points, 40 files on top of the 329 there were when it was set; and the
    ablations of a point's MARS winners (``fight_ablation.py``: a journal per sweep and the
    table, five files a rule), 10 more at b64-4x. Then the campaign of "The map decided" (five
    files a point, family.json the fifth, eleven points, and its declaration, verdicts, state
    and gamma rule) and the search benchmark (per point its table and three reference sweeps of
    three files, two surrogate tables): 85 more. Then the search benchmark's further held-out
    pairs (six journals a point), a re-finaled study (five files) and the campaign's map: 10
    more. Then the search benchmark's median check (three journals a point): 3 more. Then the
    second H200 run of the GPU targets (five files): 5 more. Then the fifth search design's
    studies (its b64-4x study's five files, its three further-pair journals, its b16-4x
    journal) and room for its b16-4x sweeps and report: 17 more. Then b16-4x's further pairs
    beyond that room (nine journals: the references', campaign-3's and the fifth design's, 501
    files in all), the reference against itself at b64-4x (three journals: 504) and
    campaign-3's first stage to its end (b4-4x's figure, the second model's point's five
    files): 510. Then AdamW's second 80-trial study at b64-4x (its journal, summary and report,
    and three sweep journals): 516. Its journal is a copy of the first study's with 96 runs
    more (0.17 MB), which, with the second model's point grown to its end, takes the total past
    the 8 MB it had been held to: 8.5 MB. Then the sixth search design's screen (its table)
    and its two paired studies (five files each, copies of campaign-3's journals with the few
    runs it added), the second model's figure: 527. Then campaign-4's declaration, the CPU
    default path's three step tables and the verdict design's page: 532; and room for
    campaign-4's eleven points (five files each, journals, reports and figures) and its
    verdicts, state and map: 600. Then campaign-4's studies of a rule at a fixed gamma beside
    its points (five files each, about 66 kB: the correction's worth, two rules at each of
    eleven points, and the gamma to take where a winner takes another gamma, about six), of
    which 8 had landed at 613 files: 760."""
    files = tracked("benchmarks/results")
    assert len(files) <= 760
    # 8.5 MB until campaign-4: its eleven journals (each point's finalists on six seeds and
    # pairs up to 64) are given 2.5 MB more, and its fixed-gamma studies (about 30, 66 kB
    # each) 2 MB
    assert sum((ROOT / f).stat().st_size for f in files) <= 13_000_000
