"""The fight map's protocol: its points (the `tiny` GPT on the stdlib corpus, T x 20 tokens per
non-embedding parameter, B sequences of 32 tokens per step), its budgets, the map's search and
seeds, and the ``torch-mars`` arguments that run a point, for a checkout of the repository
(:class:`FightMap`). The scripts of ``benchmarks/studies/`` run it; the reports of its studies
are :mod:`.map_report`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from torch_mars.models import GPT, gpt_config

BLOCK = 32
EVAL_TOKENS = 131_072
# name: (sequences per step, multiple of 20 tokens per parameter), in the order they run
POINTS: dict[str, tuple[int, int]] = {
    "b64-4x": (64, 4),
    "b16-4x": (16, 4),
    "b256-16x": (256, 16),
    "b128-16x": (128, 16),
    "b4-4x": (4, 4),
    "b128-4x": (128, 4),
    "b256-4x": (256, 4),
    "b16-1x": (16, 1),
    "b16-8x": (16, 8),
}
OPTIMIZERS = ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo")
# Every optimizer's trials at a point. The map began at 40; at b64-4x 40 more moved three
# winners of five (Muon's by 0.0115, MARS-Shampoo's by 0.0210 held out) and both verdicts, so
# it runs at 80 (docs/results.md, "The search's budget").
TRIALS = 80
# The first budget's reports are the point's own (POINT/summary.md), every other's in
# POINT/trials-N/POINT/: the same study extended, its first trials the same.
FIRST_TRIALS = 40
# Each search's best points re-read on three more seeds before a winner is named: at b64-4x a
# second search's Muon ranked 0.0015 ahead on seeds 0-2 and was 0.0056 behind on the held-out
# runs (docs/harness.md, "Finalists").
FINALISTS = 4
FINAL_SEEDS = (6, 7, 8)
# The map's search and seeds, written out: the defaults of ``tune`` moved on since.
MAP_PROTOCOL = (
    "--search lr-profiled --seeds 0 1 2 --heldout-seeds 3 4 5 --data-seed 0 "
    f"--heldout-data-seeds 1 2 --finalists {FINALISTS} --final-seeds "
    + " ".join(map(str, FINAL_SEEDS))
)


def non_embedding_parameters(model: str = "tiny") -> int:
    gpt = GPT(gpt_config(model, 256))
    return sum(p.numel() for n, p in gpt.named_parameters() if not n.startswith(("wte", "wpe")))


def steps_at(point: str, model: str = "tiny") -> int:
    """The optimizer steps of a run at ``point`` (sequences per step, tokens per parameter as a
    multiple of 20) for ``model``: its tokens are ``steps * batch * BLOCK``."""
    batch, multiple = POINTS[point]
    return 20 * multiple * non_embedding_parameters(model) // (batch * BLOCK)


def flag_value(value: object) -> str:
    """A hyperparameter as ``--grid`` spells it: a tuple or list in parentheses."""
    if isinstance(value, list | tuple):
        return "(" + ",".join(str(v) for v in value) + ")"
    return str(value)


@dataclass(frozen=True)
class FightMap:
    """The map's studies in the checkout at ``root``: each point's study in
    ``benchmarks/results/fight-map/POINT/``; every argument it builds names paths relative to
    ``root``, where the commands run (the printed command reproduces a run from there)."""

    root: Path

    @property
    def folder(self) -> Path:
        return self.root / "benchmarks" / "results" / "fight-map"

    def study_folder(self, point: str, order_seed: int = 0) -> Path:
        """Where a point's study lives: ``POINT/``, and a second search with another order seed
        (the check that a search's answer does not depend on its order) in
        ``POINT/order-seed-N/``, outside the map's verdicts."""
        folder = self.folder / point
        return folder if order_seed == 0 else folder / f"order-seed-{order_seed}"

    def budget_folder(self, point: str, trials: int, order_seed: int = 0) -> Path | None:
        """Where the reports of a point's study at ``trials`` other than :data:`FIRST_TRIALS`
        land: ``trials-N/`` in the study's folder (the same study and journal, extended or
        cut; its report in ``trials-N/NAME/``); None at the first budget, whose reports are
        the study's."""
        if trials == FIRST_TRIALS:
            return None
        return self.study_folder(point, order_seed) / f"trials-{trials}"

    def journal(self, point: str, order_seed: int = 0) -> Path:
        return self.study_folder(point, order_seed) / "study.log"

    def tune_arguments(
        self,
        point: str,
        jobs: int,
        trials: int,
        report: bool = False,
        order_seed: int = 0,
        *,
        study: Path | None = None,
        reports_in: Path | None = None,
        model: str = "tiny",
        data: str = "stdlib",
        optimizers: tuple[str, ...] = OPTIMIZERS,
        protocol: str = "",
    ) -> list[str]:
        """The ``torch-mars tune`` arguments of one point of the map (of its second search with
        ``order_seed`` > 0); ``study``, ``model``, ``data``, ``optimizers``: the same protocol
        at the point for another model and corpus, in the folder ``study``; ``reports_in``:
        the folder its report's folder goes in, where not beside the study's
        (:meth:`budget_folder`); ``protocol``: the search and seed flags (the map's,
        :data:`MAP_PROTOCOL`, unless given)."""
        protocol = protocol or MAP_PROTOCOL
        batch, _ = POINTS[point]
        study = (study or self.study_folder(point, order_seed)).relative_to(self.root)
        out_dir = reports_in.relative_to(self.root) if reports_in else study.parent
        steps = steps_at(point, model)
        arguments = (
            f"--model {model} --data {data} --steps {steps} --batch-size {batch} "
            f"--eval-interval {steps} --eval-tokens {EVAL_TOKENS} "
            f"--optimizers {' '.join(optimizers)} --trials {trials} {protocol} "
            f"--jobs {jobs} --name {study.name} --order-seed {order_seed} "
            f"--out-dir {out_dir} --storage journal:{study / 'study.log'}"
        )
        if "--peer-winners" not in protocol:  # the map's read their searches' own winners
            arguments += " --peer-winners off"
        if "--stable-winners" not in protocol:  # and ranked their finalists by the mean alone
            arguments += " --stable-winners off"
        return shlex.split(arguments) + (["--report"] if report else [])

    def winners_sweep_arguments(
        self,
        point: str,
        winners: dict[str, dict],
        folder: Path,
        name: str,
        seeds: tuple[str, ...],
        jobs: int,
        data_seed: int = 0,
    ) -> list[str]:
        """A ``torch-mars sweep`` of one point per optimizer, ``winners``' hyperparameters, at
        the map's budget for ``point``, each run on ``seeds`` and the data order ``data_seed``;
        the study ``name`` in ``folder`` (under the root), its journal
        ``folder/name/study.log``."""
        tune = self.tune_arguments(point, jobs, trials=1)
        budget = tune[: tune.index("--optimizers")]
        grids = [
            part
            for optimizer, hyperparams in winners.items()
            for key, value in hyperparams.items()
            for part in ("--grid", f"{optimizer}:{key}={flag_value(value)}")
        ]
        where = folder.relative_to(self.root)
        return [
            *budget,
            "--data-seed",
            str(data_seed),
            "--optimizers",
            *winners,
            *grids,
            "--search-seeds",
            *seeds,
            "--seeds",
            *seeds,
            "--jobs",
            str(jobs),
            "--out-dir",
            str(where),
            "--name",
            name,
            "--storage",
            f"journal:{where / name / 'study.log'}",
        ]
