"""The harness's one recipe table: every default hyperparameter of every (task, model,
optimizer), each value with where it came from (the paper's config, or a tuned study and its
point, with its date). ``compare``, ``train``, ``sweep``, ``tune``'s start points and the
benchmarks read their defaults here and nowhere else; ``torch-mars compare --show-recipe``
prints them with their sources.

A text row is layered: the paper's GPT-2 formulas (by size; the CPU-sized models take
``gpt2-small``'s), then, for the CPU-sized models, the tuned study at the ``compare`` budget,
then the model's own ``tune`` winners. A vision row is one layer.

>>> row = recipe("text", "tiny", "mars-adamw")
>>> row.settings["gamma"], row.sources["gamma"].startswith("torch-mars tune")
(0.1, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

PAPER = (
    "the paper's GPT-2 configs (AGI-Arena/MARS; MARS-Shampoo at Muon's lr, "
    "the Lion pair at a tenth of AdamW's)"
)
COMPARE_STUDY = (
    "the tuned study at the compare budget, 2026-11 "
    "(docs/results-history.md; study_compare.py, study_axes.py)"
)
MARS_M_STUDY = "the MARS-M study on tiny at 4x20 tokens/parameter, 2026-11 (results-history)"
CAMPAIGN_B16 = (
    "torch-mars tune, campaign-3's tiny/b16-4x (the surface-3 search, 40 trials on one selection "
    "seed, 4 finalists on 2 more, held out on seeds 3-6 x data orders 1-3), 2026-11-29 "
    "(docs/results.md)"
)
VISION_STUDY = (
    "the tuned vision study at VISION_COMPARE_BUDGET, 2026-11 "
    "(docs/results-history.md; study_vision.py)"
)
VISION_START = "a vision starting point, not tuned (the paper's weight decay 5e-4)"
# The vision rules whose rates, betas and gamma are the vision study's winners.
_VISION_TUNED = ("adamw", "nadamw", "mars-adamw", "mars-shampoo", "muon-nd")


@dataclass(frozen=True)
class Recipe:
    """One row: the default hyperparameters of ``optimizer`` for ``model`` in ``task``
    (``model`` is ``"*"`` for vision, whose defaults do not depend on it), and each one's
    source."""

    task: str
    model: str
    optimizer: str
    settings: dict[str, Any]
    sources: dict[str, str]


# The paper's GPT-2 settings (AGI-Arena/MARS configs). It gives none for MARS-Shampoo, MARS-Lion
# or Lion on GPT-2: MARS-Shampoo takes Muon's matrix lr, the Lion pair a tenth of AdamW's lr.
class _PaperLRs(NamedTuple):
    adamw: float
    mars: float
    lr_1d: float
    muon: float
    muon_adamw: float
    min_lr: float


_PAPER_LRS: dict[str, _PaperLRs] = {
    "gpt2-small": _PaperLRs(6e-4, 6e-3, 3e-3, 2e-2, 3e-3, 3e-5),
    "gpt2-medium": _PaperLRs(3e-4, 3e-3, 1.5e-3, 1e-2, 1.5e-3, 6e-5),
    "gpt2-large": _PaperLRs(2e-4, 2e-3, 1e-3, 6.67e-3, 1e-3, 1e-5),
    "gpt2-xl": _PaperLRs(2e-4, 2e-3, 1e-3, 6.67e-3, 1e-3, 1e-5),  # no Muon config: large's
}

# CPU-sized models: the winners of the tuned study at the `compare` budget (docs/results-history.md,
# history: study_compare.py: lr on 1.5x grids, then betas, gamma and Muon's momentum), the
# same on a 2-core CPU and on an H100 for the Adam and Lion pairs (the Newton-Schulz pair ran
# on the H100). NAdam's (Dozat's schedule) and NAdamW's are their control sweeps' winners
# (history: study_axes.py; NAdamW's equals AdamW's lr and betas). lr_1d was not swept.
_CPU_SETTINGS: dict[str, dict[str, Any]] = {
    "adamw": {"lr": 4.5e-3},
    "mars-adamw": {"lr": 6.7e-3, "betas": (0.9, 0.95), "gamma": 0.05, "lr_1d": 3e-3},
    "muon": {"lr": 3e-2, "momentum": 0.9, "adamw_lr": 3e-3},
    "mars-shampoo": {"lr": 3e-2, "betas": (0.9, 0.95), "gamma": 0.05, "lr_1d": 3e-3},
    "muon-nd": {"lr": 3e-2, "lr_1d": 3e-3},
    "lion": {"lr": 7.5e-4},
    "nadamw": {"lr": 4.5e-3},
    "nadam": {"lr": 3e-3},
    "mars-lion": {"lr": 5e-4, "betas": (0.9, 0.95), "gamma": 0.05, "lr_1d": 3e-3},
    # MARS-M's study (docs/results-history.md) ran on `tiny` at 4 x 20 tokens/parameter, not at the
    # compare budget: its winner there, with weight decay 0 on the matrices, which beat the
    # authors' 0.1 by 0.034 over three seeds.
    "mars-m": {
        "lr": 1.5e-2,
        "betas": (0.95, 0.99),
        "gamma": 0.1,
        "weight_decay": 0.0,
        "lr_1d": 4.5e-3,
    },
}

# Per CPU model, on top of those, each with its source. `tiny`: the winners of `torch-mars
# tune` at the `compare` budget, campaign-3's tiny/b16-4x (tune's default search;
# docs/results.md); a tune study of `tiny` opened later starts from them. AdamW and NAdamW
# route their 1-D tensors as the MARS rules do, as they were tuned. The other optimizers were
# not tuned on `tiny`.
_CPU_MODEL_SETTINGS: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "tiny": {
        "adamw": (
            CAMPAIGN_B16,
            {
                "lr": 0.00759,
                "betas": (0.9, 0.95),
                "weight_decay": 0.03,
                "lr_1d": 0.00506,
                "betas_1d": (0.9, 0.95),
                "weight_decay_1d": 0.001,
            },
        ),
        "nadamw": (
            CAMPAIGN_B16,
            {
                "lr": 0.00759,
                "betas": (0.9, 0.99),
                "weight_decay": 0.03,
                "lr_1d": 0.00506,
                "betas_1d": (0.9, 0.95),
                "weight_decay_1d": 0.001,
            },
        ),
        "mars-adamw": (
            CAMPAIGN_B16,
            {
                "lr": 0.0256,
                "betas": (0.9, 0.95),
                "weight_decay": 0.001,
                "gamma": 0.1,
                "lr_1d": 0.00338,
                "betas_1d": (0.9, 0.95),
                "weight_decay_1d": 0.1,
            },
        ),
        "muon": (
            CAMPAIGN_B16,
            {
                "lr": 0.0114,
                "momentum": 0.95,
                "weight_decay": 0.0,
                "adamw_lr": 0.0256,
                "adamw_betas": (0.9, 0.95),
                "adamw_weight_decay": 0.001,
            },
        ),
        "mars-shampoo": (
            CAMPAIGN_B16,
            {
                "lr": 0.0114,
                "betas": (0.98, 0.95),
                "weight_decay": 0.03,
                "gamma": 0.05,
                "lr_1d": 0.0256,
                "betas_1d": (0.9, 0.95),
                "weight_decay_1d": 0.0,
            },
        ),
    },
}

# The paper's code sets batch 128, weight decay 5e-4 and a multistep decay. Learning rates,
# betas and gamma of AdamW, NAdamW, MARS-AdamW, MARS-Shampoo and muon-nd are the winners of the
# tuned vision study at VISION_COMPARE_BUDGET (docs/results-history.md, history: study_vision.py);
# the others' rates are starting points. The MARS rules' 1-D AdamW path (batch-norm gains, biases)
# takes the group's lr and weight decay unless lr_1d / weight_decay_1d are given (muon-nd:
# lr_1d 1e-3).
VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "adamw": {"lr": 2e-3, "betas": (0.9, 0.95), "weight_decay": 5e-4},
    "mars-adamw": {"lr": 4.5e-3, "betas": (0.9, 0.95), "gamma": 0.1, "weight_decay": 5e-4},
    "mars-lion": {"lr": 1e-4, "betas": (0.9, 0.99), "gamma": 0.025, "weight_decay": 5e-4},
    "mars-shampoo": {"lr": 1.3e-2, "betas": (0.9, 0.95), "gamma": 0.05, "weight_decay": 0.0},
    # Moonlight's scale makes MARS-M's rate AdamW's; not tuned on images yet.
    "mars-m": {"lr": 1e-3, "betas": (0.95, 0.99), "gamma": 0.025, "weight_decay": 5e-4},
    "muon-nd": {"lr": 2e-2, "betas": (0.9, 0.95), "weight_decay": 0.0, "lr_1d": 1e-3},
    "muon": {
        "lr": 2e-2,
        "weight_decay": 0.0,
        "momentum": 0.95,
        "adamw_lr": 1e-3,
        "adamw_betas": (0.9, 0.999),
        "adamw_weight_decay": 5e-4,
    },
    "lion": {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 5e-4},
    "nadamw": {"lr": 4.5e-3, "betas": (0.9, 0.999), "weight_decay": 5e-4},
    "nadam": {"lr": 1e-3, "betas": (0.9, 0.999), "weight_decay": 5e-4, "momentum_decay": 4e-3},
}


def _paper(lrs: _PaperLRs) -> dict[str, dict[str, Any]]:
    mars_common = {
        "betas": (0.95, 0.99),
        "gamma": 0.025,
        "weight_decay": 1e-2,
        "lr_1d": lrs.lr_1d,
        "betas_1d": (0.9, 0.95),
        "weight_decay_1d": 0.1,
    }
    return {
        "adamw": {"lr": lrs.adamw, "betas": (0.9, 0.95), "weight_decay": 0.1},
        "mars-adamw": {"lr": lrs.mars, **mars_common},
        "mars-lion": {**mars_common, "lr": lrs.adamw / 10, "lr_1d": lrs.lr_1d},
        "mars-shampoo": {
            **mars_common,
            "lr": lrs.muon,
            "weight_decay": 0.0,
            "lr_1d": lrs.muon_adamw,
        },
        # MARS-M as the authors run it (MARS_M/optimizers/mars_m.py): momentum 0.95, weight decay
        # 0.1 and the lr shared with the AdamW tensors; AdamW's lr, as Moonlight's scale intends.
        "mars-m": {
            **mars_common,
            "lr": lrs.adamw,
            "weight_decay": 0.1,
            "lr_1d": lrs.adamw,
            "weight_decay_1d": 0.1,
        },
        "muon-nd": {
            **{k: v for k, v in mars_common.items() if k != "gamma"},
            "lr": lrs.muon,
            "weight_decay": 0.0,
            "lr_1d": lrs.muon_adamw,
        },
        "muon": {
            "lr": lrs.muon,
            "weight_decay": 0.0,
            "momentum": 0.95,
            "adamw_lr": lrs.muon_adamw,
            "adamw_betas": (0.9, 0.95),
            "adamw_weight_decay": 0.1,
        },
        "lion": {"lr": lrs.adamw / 10, "betas": (0.9, 0.99), "weight_decay": 1.0},
        "nadamw": {"lr": lrs.adamw, "betas": (0.9, 0.95), "weight_decay": 0.1},
        "nadam": {
            "lr": lrs.adamw,
            "betas": (0.9, 0.95),
            "weight_decay": 0.1,
            "momentum_decay": 4e-3,
        },
    }


def _layers(task: str, model: str, optimizer: str) -> list[tuple[str, dict[str, Any]]]:
    if task == "vision":
        source = VISION_STUDY if optimizer in _VISION_TUNED else VISION_START
        return [(source, VISION_DEFAULTS[optimizer])]
    if task != "text":
        raise ValueError(f"no recipes for task {task!r}; known: text, vision")
    lrs = _PAPER_LRS.get(model, _PAPER_LRS["gpt2-small"])
    layers = [(PAPER, _paper(lrs)[optimizer])]
    if model in _PAPER_LRS:
        return [*layers, (PAPER, {"min_lr": lrs.min_lr})]
    cpu_source = MARS_M_STUDY if optimizer == "mars-m" else COMPARE_STUDY
    layers.append((cpu_source, _CPU_SETTINGS[optimizer]))
    tuned = _CPU_MODEL_SETTINGS.get(model, {}).get(optimizer)
    return [*layers, tuned] if tuned else layers


def with_1d_following_group(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with the 1-D tensors' lr and weight decay (``lr_1d``, ``weight_decay_1d``)
    at the group's ``lr`` and ``weight_decay`` where it leaves them out: how a recipe without
    them is read where the 1-D tensors are routed apart (a MARS rule on images, a search's
    start point)."""
    filled = dict(settings)
    filled.setdefault("lr_1d", settings["lr"])
    filled.setdefault("weight_decay_1d", settings["weight_decay"])
    return filled


def recipe(task: str, model: str, optimizer: str) -> Recipe:
    """The row of ``(task, model, optimizer)`` (the caller checks the names)."""
    settings: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, values in _layers(task, model, optimizer):
        for key, value in values.items():
            settings[key] = value
            sources[key] = source
    return Recipe(task, "*" if task == "vision" else model, optimizer, settings, sources)


def format_recipes(rows: list[Recipe]) -> str:
    """The rows as a table: every value with its source."""
    lines = ["| optimizer | model | setting | value | source |", "|---|---|---|---|---|"]
    for row in rows:
        for key, value in row.settings.items():
            lines.append(
                f"| {row.optimizer} | {row.model} | {key} | {value} | {row.sources[key]} |"
            )
    return "\n".join(lines)
