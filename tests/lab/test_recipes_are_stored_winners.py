"""The recipes' defaults are the winners the project's stored studies found, and compare's
one-seed spread is the campaign's measured one: pins of research results, kept beside the lab
(tests/train/test_optimizer_factory.py tests how the optimizers are built)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from torch_mars.train import default_hyperparams
from torch_mars.train.recipes import recipe

STUDY_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def assert_defaults_are_winners(defaults: dict, winners: dict, where: tuple) -> None:
    for key, value in winners.items():
        expected = tuple(value) if isinstance(value, list) else value
        assert defaults[key] == expected, (*where, key)


def test_cpu_model_defaults_are_the_tuned_studys_winners():
    """The `compare` defaults are the winners recorded by history: study_compare.py."""
    studies = {"study-compare": ("adamw", "mars-adamw", "lion", "mars-lion")}
    studies["study-compare-h100"] = ("muon", "mars-shampoo")
    # MARS-M's study on tiny, with its weight-decay control (history: study_mars_m_controls.py).
    studies["study-mars-m-tiny4x/weight-decay"] = ("mars-m",)
    # torch's NAdam (Dozat's schedule), the earlier control (issue #24 replaced it by nadamw).
    studies["study-axes/nadam-dozat"] = ("nadam",)
    # NAdamW, the control issue #24 put in its place, tuned the same way at this budget.
    studies["study-axes/nadamw"] = ("nadamw",)
    for study, names in studies.items():
        folder = STUDY_RESULTS / study if "/" in study else STUDY_RESULTS / study / "betas"
        winners = json.loads((folder / "sweep.json").read_text())["winners"]
        for name in names:
            assert_defaults_are_winners(
                default_hyperparams(name, "mini"), winners[name], (study, name)
            )


def compare_point_entries() -> dict[str, dict]:
    """Each optimizer's finished entry in the report of campaign-3's study at the `compare`
    budget, tiny/b16-4x."""
    report = STUDY_RESULTS / "campaign-3" / "tiny" / "b16-4x" / "tune.json"
    entries = json.loads(report.read_text())["optimizers"]
    return {entry["optimizer"]: entry for entry in entries if entry["finished"]}


def test_tiny_defaults_are_the_campaigns_winners_at_the_compare_point():
    """`tiny` takes each optimizer's `torch-mars tune` winner at the `compare` budget, the
    campaign's b16-4x, and its source says how many trials; the optimizers it did not tune take
    mini's."""
    entries = compare_point_entries()
    assert set(entries) == {"adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo"}
    for name, entry in entries.items():
        assert_defaults_are_winners(
            default_hyperparams(name, "tiny"), entry["hyperparams"], ("b16-4x", name)
        )
        sources = set(recipe("text", "tiny", name).sources.values())
        assert any(f"{entry['trials']} trials" in source for source in sources), name
    for name in ("lion", "mars-lion", "nadam", "muon-nd", "mars-m"):
        assert default_hyperparams(name, "tiny") == default_hyperparams(name, "mini")


def test_vision_defaults_are_the_vision_studys_winners():
    """`compare-vision`'s defaults are the winners recorded by history: study_vision.py."""
    from torch_mars.train.recipes import VISION_DEFAULTS

    sweep = STUDY_RESULTS / "study-vision" / "betas" / "sweep.json"
    winners = json.loads(sweep.read_text())["winners"]
    assert set(winners) == {"adamw", "nadamw", "mars-adamw", "muon-nd", "mars-shampoo"}
    for name, point in winners.items():
        assert_defaults_are_winners(VISION_DEFAULTS[name], point, ("study-vision", name))


def test_compares_one_seed_spread_is_the_campaigns_held_out_std():
    """The spread a one-seed `compare` reads its gaps against is each default's std over the
    12 held-out runs of the campaign's b16-4x, where those defaults come from."""
    from torch_mars.train.compare import MEASURED_SEED_STD

    held_out = {
        name: round(statistics.stdev(entry["heldout_finals"]), 4)
        for name, entry in compare_point_entries().items()
    }
    assert held_out == MEASURED_SEED_STD
