"""``torch-mars tune``: every optimizer tuned by one protocol, on the study engine.

Each optimizer gets the same number of trials over the dimensions it has in the declared space
(:mod:`.space`), spent by the search the study records (tune's default the third surface design,
:mod:`.surface`; the lr-profiled search of the map's studies, :mod:`.profiled`) from starts that
follow one rule for every optimizer; each winner is then read on held-out runs: new
initialisations on new data orders, which no selection saw. The report gives each optimizer's
trials, its tuning curve (:mod:`.curves`), and each MARS rule's gap to its strongest same-cost
control as a paired interval with a Holm decision (:mod:`.verdict`). The study runs on
:mod:`.engine`: a trial is one harness run, the study lives in an Optuna storage (an SQLite file
in the study folder by default, or a shared database or journal file), any number of workers
(``--jobs`` here, ``--worker`` on other machines) work on it, and a killed study resumes without
rerunning a finished trial.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from torch_mars.train.study.engine import (
    StudySpec,
    budget_of,
    protocol_history,
    ran_under,
)
from torch_mars.train.study.family import (
    Comparison,
    campaign_family,
    check_holds,
    family_records,
    scope_of,
    study_family,
)
from torch_mars.train.study.profiled import ProfiledSearch
from torch_mars.train.study.selection import Selection
from torch_mars.train.study.space import (
    Fixed,
    Ladders,
    Point,
    check_extra,
    check_fixed,
    check_ladders,
    dimensions_of,
    extra_start,
    free_dimensions,
    onto_ladders,
    parse_point_key,
    point_at,
    point_key,
    shares_space,
    space_record,
    spaces_in_common,
    start_point,
    tunable_optimizers,
)
from torch_mars.train.study.surface import DESIGNS, SurfaceSearch
from torch_mars.train.study.two_stage import Design
from torch_mars.train.task import task_of
from torch_mars.train.trainer import TrainConfig

# The settings that choose which runs a study asks for, not what any run gives: a study
# reopened with other values of these resumes under them, every finished run counted (more
# trials extend the same search: its path is a prefix of the longer one).
PROTOCOL_KEYS = (
    "search",
    "optimizers",
    "selection",
    "trials",
    "order_seed",
    "max_rounds",
    "starts",
    "prune",
    "known",
)
# The searches a study can run, by the name its record keeps: the surface search by each of its
# designs (tune's default first), and the lr-profiled coordinate descent the map's studies ran.
SEARCHES: dict[str, Callable[..., ProfiledSearch]] = {
    **{name: functools.partial(SurfaceSearch, design=d) for name, d in DESIGNS.items()},
    "lr-profiled": ProfiledSearch,
}
DEFAULT_SEARCH = "surface-3"


def finalists_drawn(search: str) -> str:
    """How the search named ``search`` draws its finalists, in the report's words."""
    return DESIGNS[search].finalists_drawn if search in DESIGNS else ProfiledSearch.finalists_drawn


# Every optimizer's trials unless told: the surface search's budget (docs/harness.md).
DEFAULT_TRIALS = 40
# The optimizers a study tunes unless told, declared once for both doors (`torch-mars tune`,
# `torch_mars.tune`): on the harness's text task the five of its campaigns; on a user's
# training function the Adam pair and MARS-AdamW (Muon and MARS-Shampoo orthogonalise every
# matrix a user's model has, conv kernels too: asked for, not assumed).
TEXT_OPTIMIZERS = ("adamw", "nadamw", "mars-adamw", "muon", "mars-shampoo")
OBJECTIVE_OPTIMIZERS = ("adamw", "nadamw", "mars-adamw")


def default_optimizers(objective: bool) -> tuple[str, ...]:
    """The optimizers a study of a user's function (``objective``) or of the text task tunes
    unless told."""
    return OBJECTIVE_OPTIMIZERS if objective else TEXT_OPTIMIZERS


@dataclass(frozen=True)
class TunePlan:
    """What a study tunes.

    Attributes:
        base: the budget and task (its optimizer, seeds and hyperparams are replaced per run).
        optimizers: the optimizers, each with a search space (:func:`tunable_optimizers`).
        selection: the seeds and data order that choose, and the held-out runs.
        study_dir: the study folder (report, run work folders, the default storage).
        trials: the trials every optimizer gets (a trial: one point on the selection seeds).
        search: the search's name in :data:`SEARCHES`.
        order_seed: shuffles the order in which the search visits dimensions (a second
            search from the same starts).
        max_rounds: stop each search after this many rounds (None: when its trials are spent
            or no move is left).
        storage: ``--storage`` as given (None: SQLite in ``study_dir``).
        study_name: the study's name in the storage.
        jobs: local worker processes.
        overwrite: start the study afresh if it exists with other settings.
        starts: per optimizer, the starts a study began with (:func:`~.run.resumed_plan`);
            an optimizer not in it starts by :meth:`starts_of`'s rule.
        family_file: a campaign's declaration, whose family of comparisons (every point's)
            Holm runs over (None: the study's own comparisons; :mod:`.family`).
        fixed: dimensions held at a value for every optimizer that has them, never moved
            (``(name, value)`` pairs, :func:`~.space.check_fixed`); part of the study's identity.
        ladders: your own values for dimensions (``(name, values)`` pairs,
            :func:`~.space.check_ladders`), stepped on instead of ours; part of the identity.
        reuse: tune study folders whose finished runs of the same settings are taken instead
            of trained (:mod:`.reuse`); not part of the identity (a taken run is the same run).
        reread: a stored tune study this one re-reads (:mod:`.reuse`): the searches begin
            from its starts (:attr:`starts`) and take its selection runs (:attr:`Selection.seeds`
            on its data order) whichever machine trained them, so that its selection is walked
            again as it was; the finalists' other seeds, peers' reads and held-out pairs train
            here. Not part of the identity (its starts are).
        extra: your own dimensions (``(name, values)`` pairs, :func:`~.space.check_extra`),
            tuned for every optimizer alike and passed to your function by name (a study of
            a training function only); part of the identity.
        prune: stop trials' runs early on the values your function reports, against the
            median of the same optimizer's (:mod:`.pruning`; a training function only).
        known: settings stored studies of the same point found, read on the choosing runs
            beside the peers' winners (``(optimizer, study folder, point key)``; the key holds
            the dimensions that study tuned, on this study's ladders; ``tune
            --known-winners``); a protocol setting (a study takes more of them on, its runs
            kept).
        looks: the two-look design the study declares (:class:`~.two_stage.Design`): its
            words read on the first ``looks.first`` drawn pairs, then on up to ``looks.cap``
            where one is inconclusive (:func:`~.run.run_study`); part of the identity.
    """

    base: TrainConfig
    optimizers: tuple[str, ...]
    selection: Selection
    study_dir: Path
    trials: int = DEFAULT_TRIALS
    search: str = DEFAULT_SEARCH
    order_seed: int = 0
    max_rounds: int | None = None
    storage: str | None = None
    study_name: str = "tune"
    jobs: int = 1
    overwrite: bool = False
    starts: Mapping[str, tuple[Point, ...]] | None = None
    family_file: Path | None = None
    fixed: Fixed = ()
    ladders: Ladders = ()
    reuse: tuple[Path, ...] = ()
    reread: Path | None = None
    extra: Ladders = ()
    prune: bool = False
    looks: Design | None = None
    known: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.optimizers:
            raise ValueError("tune needs at least one optimizer")
        for name in self.optimizers:
            dimensions_of(name)  # a ValueError naming the tunable ones
        if len(set(self.optimizers)) != len(self.optimizers):
            raise ValueError(f"an optimizer is named twice: {self.optimizers}")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {self.jobs}")
        if self.trials < 1:
            raise ValueError(f"--trials must be >= 1, got {self.trials}")
        if self.search not in SEARCHES:
            raise ValueError(f"--search must be one of {', '.join(SEARCHES)}, not {self.search!r}")
        if check_fixed(dict(self.fixed), self.optimizers) != tuple(self.fixed):
            raise ValueError(f"fixed {self.fixed}: give it as check_fixed returns it")
        if check_ladders(dict(self.ladders), self.optimizers) != tuple(self.ladders):
            raise ValueError(f"ladders {self.ladders}: give them as check_ladders returns them")
        if check_extra(dict(self.extra)) != tuple(self.extra):
            raise ValueError(f"extra {self.extra}: give it as check_extra returns it")
        if self.prune and task_of(self.base).name != "objective":
            raise ValueError(
                "prune: the text task reports no values to a pruner; pruning is for a "
                "training function (--objective) that calls report(step, value)"
            )
        if self.extra and task_of(self.base).name != "objective":
            raise ValueError(
                "extra_space: the text task has no dimensions of yours (it is this package's "
                "model); your own dimensions are for a training function (--objective)"
            )
        if self.known and not self.selection.peer_winners:
            raise ValueError(
                "--known-winners: read beside the peers' winners; give --peer-winners on"
            )
        both = {d for d, _ in self.fixed} & {d for d, _ in self.ladders}
        if both:
            raise ValueError(f"--fixed and --ladder both name {', '.join(sorted(both))}")
        strangers = [n for n, _ in self.selection.pairs_read if n not in self.optimizers]
        if strangers:
            raise ValueError(
                f"--pairs-read names {', '.join(strangers)}: not an optimizer of the study "
                f"({', '.join(self.optimizers)})"
            )
        pairs = min(len(self.selection.heldout_pairs(o)) for o in self.optimizers)
        if pairs < 2 and study_family(self.optimizers):
            raise ValueError(
                f"the held-out reads give {pairs} pair; a verdict "
                "needs at least 2 (refused before any run trains)"
            )

    @property
    def held(self) -> tuple[str, ...]:
        """The dimensions :attr:`fixed` holds, by name (what each search leaves unmoved)."""
        return tuple(d for d, _ in self.fixed)

    def starts_of(self, optimizer: str) -> tuple[Point, ...]:
        """One rule for every optimizer: its own defaults, then each peer's (the study's
        optimizers with its dimensions but for gamma) moved onto its space; the defaults as
        they were when the study began, where it records them (:attr:`starts`)."""
        if self.starts is not None and optimizer in self.starts:
            return self.starts[optimizer]
        model = self.base.model
        own = start_point(optimizer, model)
        points = [own] + [
            point_at(start_point(peer, model), own)
            for peer in self.optimizers
            if peer != optimizer and shares_space(peer, optimizer)
        ]
        free = free_dimensions(optimizer, self.held)
        yours = {d: extra_start(values) for d, values in self.extra}
        points = [{**onto_ladders({d: p[d] for d in free}, self.ladders), **yours} for p in points]
        return tuple({point_key(p): p for p in points}.values())

    @property
    def all_ladders(self) -> Ladders:
        """The ladders a point of this study reads its values on: your ``ladders`` and your
        own dimensions'."""
        return self.ladders + self.extra

    def command_line(self) -> list[str]:
        """``torch-mars tune``'s arguments that build this plan again (from the command line,
        :func:`~.run.tune_plan`): the inverse of the command line's mapping, held to it by a
        round-trip test. The report records it (``tune.json``'s ``command``), so that a study of
        your function is reopened, extended or joined by workers from a shell."""
        base, sel = self.base, self.selection
        if task_of(base).name == "objective":
            args = ["--objective", base.objective, "--model", base.model]
            if base.device != "cpu":
                args += ["--device", base.device]
            if base.direction != "minimize":
                args += ["--direction", base.direction]
            if base.version is not None:
                args += ["--objective-version", base.version]
        else:
            args = ["--model", base.model, "--data", base.data, "--steps", str(base.steps)]
            args += ["--batch-size", str(base.batch_size), "--grad-accum", str(base.grad_accum)]
            args += ["--schedule", base.schedule, "--grad-clip", repr(base.grad_clip)]
            args += ["--eval-interval", str(base.eval_interval)]
            args += ["--eval-batches", str(base.eval_batches), "--device", base.device]
            for flag, value in (
                ("--block-size", base.block_size),
                ("--warmup-steps", base.warmup_steps),
                ("--eval-tokens", base.eval_tokens),
                ("--validation-slices", base.validation_slices),
            ):
                if value is not None:
                    args += [flag, str(value)]
            args += ["--compile"] * base.compile + ["--exact"] * base.exact
        args += ["--optimizers", *self.optimizers, "--trials", str(self.trials)]
        args += ["--search", self.search, "--seeds", *map(str, sel.seeds)]
        args += ["--data-seed", str(sel.data_seed), "--finalists", str(sel.finalists)]
        if sel.finalists:
            args += ["--final-seeds", *map(str, sel.final_seeds)]
        if sel.final_data_seeds:
            args += ["--final-data-seeds", *map(str, sel.final_data_seeds)]
        if self.looks is not None:  # its pairs are its draw's
            args += ["--two-looks"]
        elif sel.pairs:
            args += ["--pairs", *(f"{s}:{o}" for s, o in sel.pairs)]
            if sel.pairs_read:
                args += ["--pairs-read", *(f"{o}={n}" for o, n in sel.pairs_read)]
        else:
            args += ["--heldout-seeds", *map(str, sel.heldout)]
            args += ["--heldout-data-seeds", *map(str, sel.heldout_data_seeds)]
        args += ["--peer-winners", "on" if sel.peer_winners else "off"]
        args += ["--stable-winners", "on" if sel.stable_winners else "off"]
        for flag, pairs in (("--ladder", self.ladders), ("--extra-space", self.extra)):
            if pairs:
                args += [flag, *(f"{d}={','.join(_numbers(v))}" for d, v in pairs)]
        if self.fixed:
            args += ["--fixed", *(f"{d}={v!r}" for d, v in self.fixed)]
        args += ["--prune"] * self.prune + ["--overwrite"] * self.overwrite
        if self.family_file is not None:
            args += ["--family", str(self.family_file)]
        if self.order_seed:
            args += ["--order-seed", str(self.order_seed)]
        if self.max_rounds is not None:
            args += ["--max-rounds", str(self.max_rounds)]
        if self.storage is not None:
            args += ["--storage", self.storage]
        if self.reuse:
            args += ["--reuse-runs", *map(str, self.reuse)]
        if self.reread is not None:
            args += ["--reread", str(self.reread)]
        if self.known:
            args += ["--known-winners", *dict.fromkeys(source for _, source, _ in self.known)]
        args += ["--name", self.study_name, "--out-dir", str(Path(self.study_dir).parent)]
        return [*args, "--jobs", str(self.jobs)]

    def searches(self) -> list[ProfiledSearch]:
        """Each optimizer's search; where the selection reads peers' winners, each with the
        searches of its peers (the study's optimizers that share its space but for gamma)."""
        own = [
            SEARCHES[self.search](
                name,
                self.starts_of(name),
                self.selection,
                self.trials,
                model=self.base.model,
                order_seed=self.order_seed,
                max_rounds=self.max_rounds,
                held=self.held,
                ladders=self.ladders,
                extra=self.extra,
            )
            for name in self.optimizers
        ]
        if not self.selection.peer_winners:
            return own
        return [
            dataclasses.replace(
                search,
                peers=tuple(
                    peer
                    for peer in own
                    if peer is not search and shares_space(peer.optimizer, search.optimizer)
                ),
                known=tuple(
                    (source, parse_point_key(key))
                    for name, source, key in self.known
                    if name == search.optimizer
                ),
            )
            for search in own
        ]

    def spec(self) -> StudySpec:
        """The study the engine runs."""
        settings = {
            "kind": "tune",
            "search": self.search,
            "optimizers": self.optimizers,
            "selection": self.selection.record(),
            "trials": self.trials,
            "order_seed": self.order_seed,
            "max_rounds": self.max_rounds,
            "starts": {n: [point_key(p) for p in self.starts_of(n)] for n in self.optimizers},
            "space": space_record(self.optimizers, self.ladders),
        }
        if self.fixed:  # absent when none: the identities of studies from before stay as stored
            settings["fixed"] = dict(self.fixed)
        if self.ladders:
            settings["ladders"] = {d: list(v) for d, v in self.ladders}
        if self.extra:
            settings["extra"] = {d: list(v) for d, v in self.extra}
        if self.prune:
            settings["prune"] = True
        if self.looks is not None:
            settings["looks"] = dataclasses.asdict(self.looks)
        if self.known:  # absent when none, as the others
            settings["known"] = [list(k) for k in self.known]
        return StudySpec(
            base=self.base,
            searches=tuple(self.searches()),
            fixed=self.fixed,
            curve_seeds=self.selection.read_seeds,
            study_dir=self.study_dir,
            settings=json.loads(json.dumps(settings)),
            optimizer_choices=tunable_optimizers(),
            storage=self.storage,
            study_name=self.study_name,
            jobs=self.jobs,
            overwrite=self.overwrite,
            protocol_keys=PROTOCOL_KEYS,
            in_common=identities_in_common,
            donors=self.reuse if self.reread is None else (self.reread, *self.reuse),
            donated_anywhere=frozenset(
                (seed, self.selection.data_seed)
                for seed in self.selection.seeds
                if self.reread is not None
            ),
            prune=self.prune,
        )


def _numbers(values: Sequence[Any]) -> list[str]:
    return [repr(v) for v in values]  # repr: a float reads back exactly


def identities_in_common(
    stored: dict[str, Any], wanted: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two tune identities with their space records reduced to the optimizers both record
    (:func:`~.space.spaces_in_common`): adding an optimizer to the table, or to a study by a
    new protocol, leaves every stored study of the others as it was."""
    a, b = stored.get("search", {}).get("space"), wanted.get("search", {}).get("space")
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return stored, wanted
    a, b = spaces_in_common(a, b)
    return (
        {**stored, "search": {**stored["search"], "space": a}},
        {**wanted, "search": {**wanted["search"], "space": b}},
    )


def plan_of_identity(
    identity: dict[str, Any],
    study_dir: Path,
    storage: str | None,
    study_name: str,
    history: Sequence[dict[str, Any]] = (),
) -> TunePlan:
    """The plan a tune study's stored identity describes (what ``--worker`` joins), its starts
    the first the study recorded for each optimizer (``history``: its earlier protocols)."""
    search = identity["search"]
    if search.get("kind") != "tune" or search.get("search") not in SEARCHES:
        raise ValueError(
            f"study {study_name!r} is not a tune study of this version ({search.get('kind')})"
        )
    base = budget_of(identity)
    if task_of(base).name not in ("text", "objective"):
        raise ValueError(f"study {study_name!r} is neither a text nor an objective study")
    selection = search["selection"]
    return TunePlan(
        base=base,
        optimizers=tuple(search["optimizers"]),
        selection=Selection.of_record(selection),
        study_dir=study_dir,
        trials=search["trials"],
        search=search["search"],
        order_seed=search["order_seed"],
        max_rounds=search["max_rounds"],
        storage=storage,
        study_name=study_name,
        starts=stored_starts(identity, history),
        fixed=tuple(sorted(search.get("fixed", {}).items())),
        ladders=tuple((d, tuple(v)) for d, v in sorted(search.get("ladders", {}).items())),
        extra=tuple((d, tuple(v)) for d, v in sorted(search.get("extra", {}).items())),
        prune=bool(search.get("prune", False)),
        looks=Design(**search["looks"]) if "looks" in search else None,
        known=tuple(tuple(k) for k in search.get("known", [])),
    )


def plan_of_study(
    study: optuna.Study, study_dir: Path, storage: str | None, study_name: str
) -> TunePlan:
    """:func:`plan_of_identity` of ``study``'s identity and protocol history."""
    identity = study.user_attrs["identity"]
    return plan_of_identity(identity, study_dir, storage, study_name, protocol_history(study))


def report_plan(study: optuna.Study, plan: TunePlan) -> TunePlan:
    """The plan a report of ``study`` reads: ``plan`` (the command line's) where the study ran
    under its protocol, now or before (a study extended to more trials keeps its shorter
    protocol's report), else the study's current protocol, said on stderr."""
    if ran_under(study, plan.spec()):
        return plan
    current = plan_of_study(study, plan.study_dir, plan.storage, plan.study_name)
    print(
        f"study {plan.study_name!r} never ran under this command line's protocol; reporting "
        f"its own ({', '.join(current.optimizers)}; {current.trials} trials each)",
        file=sys.stderr,
    )
    return current


def stored_starts(
    identity: dict[str, Any], history: Sequence[dict[str, Any]] = ()
) -> dict[str, tuple[Point, ...]]:
    """Per optimizer, the first starts a tune study recorded for it: in its earlier protocols
    (``history``, its ``protocol_history``, oldest first), then its identity. A protocol that
    dropped an optimizer dropped its starts from the identity; the optimizer taken up again
    must resume from them, not from the defaults of the day."""
    recorded: dict[str, tuple[Point, ...]] = {}
    if not isinstance(history, Sequence) or not all(
        isinstance(past, dict) and isinstance(past.get("protocol"), dict) for past in history
    ):
        raise ValueError(
            "the study's stored protocol_history is not a list of protocols: the study's data "
            "were changed outside tune"
        )
    for starts in [past["protocol"].get("starts") for past in history] + [
        identity["search"].get("starts")
    ]:
        for name, keys in (starts or {}).items():
            recorded.setdefault(name, tuple(parse_point_key(k) for k in keys))
    return recorded


# ---------------------------------------------------------------- the family

FAMILY_ATTR = "family"


def wanted_family(plan: TunePlan) -> tuple[list[Comparison], str]:
    """The family ``plan`` declares and its own scope: the campaign's (``plan.family_file``)
    or the study's own comparisons."""
    if plan.family_file is not None:
        return campaign_family(plan.family_file), scope_of(plan.study_dir, plan.family_file)
    return study_family(plan.optimizers), ""


def declared_family(study: optuna.Study, plan: TunePlan) -> tuple[list[Comparison], str]:
    """The family ``study`` declared (stored when it opened for its first run), or, for a study
    from before families were declared, the one ``plan`` declares."""
    stored = stored_family(study)
    return wanted_family(plan) if stored is None else stored


def stored_family(study: optuna.Study) -> tuple[list[Comparison], str] | None:
    """The family and scope ``study`` stored when it opened for its first run (None where it
    stored none), checked: one that is not a declared family was edited outside tune."""
    stored = study.user_attrs.get(FAMILY_ATTR)
    if stored is None:
        return None
    try:
        family = [Comparison.of_record(r) for r in stored["family"]]
        if not isinstance(stored["scope"], str) or not all(
            isinstance(c.rule, str) and all(isinstance(x, str) for x in c.controls) for c in family
        ):
            raise TypeError("not text")
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"the study's stored {FAMILY_ATTR} is not a declared family ({error}): the study's "
            "data were changed outside tune"
        ) from None
    return family, stored["scope"]


def declare_family(study: optuna.Study, plan: TunePlan) -> None:
    """Store ``plan``'s family in ``study`` before its first run; a study that declared one
    keeps it, and a plan that would add a comparison to it is refused. A study with runs from
    before families were declared takes its family now, over every optimizer it has runs of,
    and says so on stderr."""
    stored = stored_family(study)
    if stored is not None:
        declared, scope = stored
        mine = [dataclasses.replace(c, scope=scope) for c in study_family(plan.optimizers)]
        check_holds(declared, mine, plan.study_name)
        return
    family, scope = wanted_family(plan)
    mine = [dataclasses.replace(c, scope=scope) for c in study_family(plan.optimizers)]
    check_holds(family, mine, plan.study_name)
    done = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    if done and plan.family_file is None:
        # a late declaration covers every optimizer the study has runs of, not only this
        # command line's: a pair tuned first would otherwise lose its comparison
        ran = {t.user_attrs["optimizer"] for t in done if "optimizer" in t.user_attrs}
        family = study_family(sorted(ran | set(plan.optimizers)))
    if done:
        print(
            f"study {plan.study_name!r} had no declared family; it declares "
            f"{'; '.join(c.key for c in family)} now, after {len(done)} finished runs",
            file=sys.stderr,
        )
    study.set_user_attr(FAMILY_ATTR, {"scope": scope, "family": family_records(family)})
