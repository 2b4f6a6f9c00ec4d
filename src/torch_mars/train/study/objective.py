"""A user's training function as a task, so that ``tune`` runs the same protocol on it as on the
harness's own models: :func:`tune` from Python, ``torch-mars tune --objective MODULE:FUNCTION``
from the command line.

The function's contract::

    def train(make_optimizer, seed: int, data_seed: int, report) -> float:
        model = build_model(seed)                # the initialisation: ``seed``
        optimizer = make_optimizer(model)        # the trial's optimizer, 1-D routing included
        for step, batch in enumerate(loader(data_seed)):   # the data order: ``data_seed``
            ...
            report(step, val_loss)               # optional: the curve of the report
        return final_val_loss                    # lower is better

A run's value is what the function returns. NaN or infinity is a diverged run (it scores
worst); an exception, or a value that is no number, fails the run's trial with its message,
and the study goes on (the run scores worst and is not retried). The function is known by its
import path and its source: a study of a changed function is another study.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import math
import numbers
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from torch_mars.train.optimizers import build_optimizer, default_hyperparams
from torch_mars.train.run_record import TASK_METRICS, RunFailed, RunResult
from torch_mars.train.run_shell import build_result
from torch_mars.train.study.pruning import RunPruned, check_report
from torch_mars.train.study.space import EXTRA_KEY
from torch_mars.train.study.tune_record import (
    OptimizerEntry,
    TuneRecord,
    VerdictEntry,
    read_tune_record,
)
from torch_mars.train.task import OMITTED_AT_DEFAULT, Task, register_task

CONTRACT = "train(make_optimizer, seed, data_seed, report) -> float"
# What the function's value is: a loss (lower better) or a score (higher better).
DIRECTIONS = ("minimize", "maximize")
_PARAMETERS = ("make_optimizer", "seed", "data_seed", "report")
# Functions handed to :func:`tune` in this process, by import path: one defined in a script or
# a notebook trains here even where its module cannot be imported again.
_GIVEN: dict[str, Callable[..., Any]] = {}


class ObjectiveFailed(RunFailed):
    """The training function raised, or returned something that is no number."""


@dataclass
class ObjectiveConfig:
    """One run of a user's training function.

    Attributes:
        objective: the function's import path, ``package.module:function``.
        optimizer: the optimizer ``make_optimizer`` builds.
        seed: the initialisation the function is given.
        data_seed: the data order the function is given.
        hyperparams: the optimizer's settings (the trial's point).
        model: the GPT config whose defaults start each optimizer's search (the harness's
            tuned recipes: ``tiny``, ``mini``, ``gpt2-small``).
        device: where ``make_optimizer``'s optimizer is described as running (the function
            places its own model).
        run_dir: where the run's reported curve is written.
        direction: ``"minimize"`` (the function returns a loss) or ``"maximize"`` (an
            accuracy, a reward): the run's final metric is the value, or its negative, so that
            lower is better throughout the study and its report.
        version: the function's version as its author declares it: the study knows the code by
            it instead of by its code's content (None: by the file), so that an edit
            that changes no result (a comment, a log line) keeps the study, and one that does is
            declared by a new version.
    """

    objective: str
    optimizer: str = "adamw"
    seed: int = 0
    data_seed: int = 0
    hyperparams: dict[str, Any] = field(default_factory=dict)
    model: str = "tiny"
    device: str = "cpu"
    run_dir: Path = Path("runs/objective")
    quiet: bool = True
    resume: bool = False
    overwrite: bool = False
    stop_after: int | None = None
    checkpoint_interval: int = 0
    direction: str = field(default="minimize", metadata={OMITTED_AT_DEFAULT: True})
    version: str | None = field(default=None, metadata={OMITTED_AT_DEFAULT: True})
    task_name: ClassVar[str] = "objective"

    def __post_init__(self) -> None:
        module, colon, name = self.objective.partition(":")
        if not (module and colon and name):
            raise ValueError(f"--objective must be MODULE:FUNCTION, got {self.objective!r}")
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}"
            )
        self.run_dir = Path(self.run_dir)

    @property
    def data(self) -> str:
        """What the engine keys the loaded function by."""
        return self.objective

    def resolved_hyperparams(self) -> dict[str, Any]:
        return {**default_hyperparams(self.optimizer, self.model), **self.hyperparams}


def import_objective(path: str) -> Callable[..., Any]:
    """The function at ``path`` (``module:function``; the current folder is searched too),
    checked against the contract: a ``ValueError`` in one line otherwise."""
    if path in _GIVEN:
        return _GIVEN[path]
    module_name, colon, name = path.partition(":")
    if not (module_name and colon and name):
        raise ValueError(f"--objective must be MODULE:FUNCTION, got {path!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:  # any error or exit the module raises on import
        what = (
            f"it calls sys.exit({error.code!r})"
            if isinstance(error, SystemExit)
            else f"{type(error).__name__}: {error}"
        )
        raise ValueError(
            f"--objective {path}: module {module_name!r} does not import ({what})"
        ) from None
    function = module
    for part in name.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise ValueError(f"--objective {path}: {module_name} has no {name!r}")
    check_contract(function, path)
    return function


def check_contract(function: Any, path: str, extra: Sequence[str] = ()) -> None:
    """A ``ValueError`` unless ``function`` takes the contract's four arguments, and each of
    your own dimensions ``extra`` by name."""
    if not callable(function):
        raise ValueError(f"--objective {path}: not a function")
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return  # a builtin or a C function: it is called as the contract says
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in parameters if p.default is p.empty and p.kind != p.VAR_POSITIONAL]
    takes_four = len(positional) >= 4 or any(p.kind == p.VAR_POSITIONAL for p in parameters)
    if not takes_four or len(required) > 4:
        raise ValueError(
            f"--objective {path}: takes ({', '.join(p.name for p in parameters)}); "
            f"the contract is {CONTRACT}"
        )
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if not any(p.kind == p.VAR_KEYWORD for p in parameters):
        missing = [name for name in extra if name not in named]
        if missing:
            raise ValueError(
                f"--objective {path}: extra_space names {', '.join(missing)}, which the "
                f"function does not take: add them as keyword arguments, e.g. "
                f"def train(make_optimizer, seed, data_seed, report, {missing[0]}=...)"
            )


def _library_paths() -> tuple[Path, ...]:
    """The folders of installed and standard-library code: what is not the user's."""
    import sysconfig

    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple(Path(p).resolve() for p in {sysconfig.get_path(n) for n in names} if p)


def _users_file(obj: Any) -> Path | None:
    """The file of the user's module that defines ``obj`` (a module, function or class); None
    for installed, standard-library and built-in code."""
    module = obj if inspect.ismodule(obj) else sys.modules.get(getattr(obj, "__module__", ""))
    file = getattr(module, "__file__", None)
    if not file or not file.endswith(".py"):
        return None
    path = Path(file).resolve()
    if any(part in ("site-packages", "dist-packages") for part in path.parts):
        return None
    if any(path.is_relative_to(library) for library in _library_paths()):
        return None
    return path


def _names_used(code: Any) -> set[str]:
    """The global names a code object and the code nested in it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _names_used(const)
    return names


def code_parts(function: Callable[..., Any]) -> list[str]:
    """What a training function's results depend on in the user's code, as text: its own
    source; the source of each function or class of its own module it reads, followed through
    theirs; the value of each plain constant of that module it reads; and the whole file of
    every other module of the user's it reaches (installed and standard-library code aside).
    A driver's other lines (a ``print``, a ``__main__`` block) are no part of it."""
    parts: list[str] = []
    home = getattr(function, "__module__", None)
    seen: set[int] = set()
    files: set[Path] = set()
    queue: list[Any] = [function]
    while queue:
        obj = queue.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if inspect.ismodule(obj):
            path = _users_file(obj)
            if path is not None and path not in files:
                files.add(path)
                queue += [v for v in vars(obj).values() if inspect.ismodule(v) or callable(v)]
            continue
        if getattr(obj, "__module__", None) != home:
            path = _users_file(obj)
            if path is not None and (module := sys.modules.get(obj.__module__)) is not None:
                queue.append(module)
            continue
        try:
            parts.append(inspect.getsource(obj))
        except (OSError, TypeError):
            parts.append(f"{home}:{getattr(obj, '__qualname__', obj)!r}")
        code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
        namespace = getattr(inspect.unwrap(obj), "__globals__", {}) if callable(obj) else {}
        members = [getattr(obj, "__dict__", {}).values()] if inspect.isclass(obj) else []
        for value in (v for group in members for v in group):
            if inspect.isfunction(value):
                queue.append(value)
        for name in sorted(_names_used(code)) if code is not None else ():
            if name not in namespace:
                continue
            value = namespace[name]
            if isinstance(value, bool | int | float | str | bytes | tuple | type(None)):
                parts.append(f"{name} = {value!r}")
            elif inspect.ismodule(value) or inspect.isfunction(value) or inspect.isclass(value):
                queue.append(value)
    for path in sorted(files):
        parts.append(f"# {path.name}\n{path.read_text(errors='replace')}")
    return parts


def fingerprint(function: Callable[..., Any]) -> str:
    """The function by content (:func:`code_parts`: its source, the helpers and constants of
    its module it reads, every other module of the user's it reaches), named so that a
    mismatch says which file: ``"train.py sha256:1f2e..."``."""
    try:
        path = Path(inspect.getsourcefile(function) or "")
    except TypeError:
        path = Path("")
    content = "\n".join(code_parts(function)).encode()
    digest = hashlib.sha256(content).hexdigest()[:32]
    return f"{path.name or function.__qualname__} sha256:{digest}"


def function_path(function: Callable[..., Any]) -> str:
    """``module:function`` as an import reaches it; a function of a script run as
    ``python script.py`` (module ``__main__``) is recorded as ``script:function``, so that its
    study reopens from an import, the command line or the script itself."""
    module = function.__module__
    if module == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if main_file:
            module = Path(main_file).stem
    return f"{module}:{function.__qualname__}"


def default_study_name(path: str) -> str:
    """The study name a training function gets unless given one: its module's last part and
    its name, ``digits_cnn.train`` for ``examples.digits_cnn:train``, so that two functions
    named alike in two modules never share a study folder."""
    module, _, function = path.partition(":")
    name = f"{module.rsplit('.', 1)[-1]}.{function}"
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", name).lstrip(".-")[:100] or "study"


def number_of(value: Any) -> float:
    """A training function's return value as the run's final metric: any real number (Python's
    or numpy's), taken by ``float()``; anything else, a bool, or an int too large for a float is
    :class:`ObjectiveFailed` with what it was."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ObjectiveFailed(
            f"returned {type(value).__name__} {shown}, not a number (return float(loss))"
        )
    try:
        return float(value)
    except OverflowError as error:
        raise ObjectiveFailed(
            f"returned an int of {int(value).bit_length()} bits, too large for a float"
        ) from error


def run_objective(config: ObjectiveConfig, function: Callable[..., Any] | None) -> RunResult:
    """Call the training function once as the config says; its value is the run's final metric
    (a ``FloatingPointError`` for NaN or infinity, :class:`ObjectiveFailed` for an exception or
    a value that is no number)."""
    function = function if function is not None else import_objective(config.objective)
    hyperparams = config.resolved_hyperparams()
    hyperparams.pop("min_lr", None)  # the function runs its own schedule
    yours = hyperparams.pop(EXTRA_KEY, {})  # your own dimensions: the function's, by name

    def make_optimizer(model: nn.Module) -> Any:
        return build_optimizer(config.optimizer, model, hyperparams).optimizer

    config.run_dir.mkdir(parents=True, exist_ok=True)
    curve = (config.run_dir / "metrics.jsonl").open("w")

    sign = -1.0 if config.direction == "maximize" else 1.0  # as the final metric reads

    def report(step: int, value: float) -> None:
        curve.write(json.dumps({"step": int(step), "value": sign * float(value)}) + "\n")
        check_report(int(step), sign * float(value))  # a study that prunes may stop it here

    started = time.perf_counter()
    folder = os.getcwd()
    try:
        returned = function(make_optimizer, config.seed, config.data_seed, report, **yours)
    except RunPruned:
        raise
    except Exception as error:
        raise ObjectiveFailed(f"{type(error).__name__}: {error}") from error
    except SystemExit as exit_:
        # sys.exit inside the function ends this run, never the study
        raise ObjectiveFailed(f"the function called sys.exit({exit_.code!r})") from exit_
    finally:
        curve.close()
        os.chdir(folder)  # a function that changed folder does not move the study's files
    value = number_of(returned)
    if not math.isfinite(value):
        raise FloatingPointError(f"returned {value}")
    metric = -value if config.direction == "maximize" else value
    progress = {
        "train_time_s": time.perf_counter() - started,
        "best": metric,
        "final": metric,
        "last_train_loss": math.nan,
    }
    return build_result(config, steps=0, budget=1, progress=progress)


def _check_hyperparams(config: ObjectiveConfig) -> None:
    build_optimizer(config.optimizer, nn.Linear(2, 2), config.resolved_hyperparams())


OBJECTIVE_TASK = register_task(
    Task(
        name="objective",
        description="a user's training function; the value it returns (lower is better)",
        metric=TASK_METRICS["objective"],
        budget_unit="runs",
        command_suffix="",
        config_of_budget=lambda budget: ObjectiveConfig(**budget),
        load_data=lambda config: import_objective(config.objective),
        data_fingerprint=fingerprint,
        check_hyperparams=_check_hyperparams,
        setting=lambda config, _: (f"{config.objective}", config.objective),
        loop=None,
        run=run_objective,
    )
)


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` ends with, or :meth:`load` reads back from a study's folder: the
    report (markdown; :attr:`answer` its first paragraph, the answer in words), each
    optimizer's winner as keyword arguments for
    :func:`~torch_mars.train.optimizers.build_optimizer` (paste them into your code), each
    winner's held-out mean (NaN until its held-out runs have all finished), the verdicts
    (:class:`~torch_mars.train.study.tune_record.VerdictEntry`: rule, control, gap, interval,
    p, pairs, decision, the adjusted interval it was read from, ...), the files
    written (absolute paths: ``summary.md``, ``tune.json``, ``family.json``, ``tune.png``),
    and, in a study with your own dimensions (``extra_space``), each winner's values of them
    (the keyword arguments your function was called with)."""

    table: str
    winners: dict[str, dict[str, Any]]
    verdicts: list[VerdictEntry]
    paths: list[Path]
    heldout_means: dict[str, float] = field(default_factory=dict)
    extra_winners: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the shell command that reopens the study (extends it, or joins it as a worker with
    # --worker): ``shlex.join(result.command)``
    command: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.table

    @property
    def answer(self) -> str:
        """The report's answer in words: the best optimizer held out, then one sentence per
        comparison with its interval, decision and budget (the summary's first paragraph)."""
        return self.table.split("\n\n", 1)[0]

    @classmethod
    def load(cls, folder: str | Path) -> TuneResult:
        """A finished (or begun) study's result from its report in ``folder`` alone: no
        training function, no storage."""
        folder = Path(os.path.abspath(folder))
        return cls.of(folder, (folder / "summary.md").read_text(), read_tune_record(folder))

    @classmethod
    def of(cls, folder: Path, summary: str, record: TuneRecord) -> TuneResult:
        """The result of the report in ``folder`` whose ``summary.md`` text and record
        (:class:`~torch_mars.train.study.tune_record.TuneRecord`) are given: what a study
        returns from memory, and :meth:`load` from the files."""
        names = ("summary.md", "tune.json", "family.json", "tune.png")
        return cls(
            table=summary,
            winners={
                o.optimizer: {
                    k: tuple(v) if isinstance(v, list) else v for k, v in o.hyperparams.items()
                }
                for o in record.optimizers
                if o.hyperparams
            },
            verdicts=list(record.verdicts),
            paths=[folder / n for n in names if (folder / n).is_file()],
            heldout_means=heldout_means(record.optimizers),
            extra_winners={
                o.optimizer: o.extra_space for o in record.optimizers if o.extra_space is not None
            },
            command=list(record.command),
        )


def load_study(folder: str | Path) -> TuneResult:
    """A tune study's result read from its folder (``out_dir/name``) alone, without its
    training function: :meth:`TuneResult.load`."""
    return TuneResult.load(folder)


def heldout_means(entries: Sequence[OptimizerEntry]) -> dict[str, float]:
    """Each optimizer's held-out mean from its entry of a study's record (NaN where a run is
    missing)."""
    means = {}
    for o in entries:
        finals = o.heldout_finals
        complete = finals and None not in finals
        means[o.optimizer] = statistics.fmean(finals) if complete else math.nan
    return means


def tune(
    train: Callable[..., Any],
    optimizers: Sequence[str] | None = None,
    trials: int | None = None,
    storage: str | None = None,
    *,
    seeds: Sequence[int] | None = None,
    heldout_seeds: Sequence[int] | None = None,
    data_seed: int = 0,
    heldout_data_seeds: Sequence[int] | None = None,
    finalists: int | None = None,
    final_seeds: Sequence[int] | None = None,
    final_data_seeds: Sequence[int] = (),
    pairs: Sequence[tuple[int, int]] = (),
    pairs_read: Mapping[str, int] | None = None,
    peer_winners: bool | None = None,
    stable_winners: bool | None = None,
    search: str | None = None,
    fixed: Mapping[str, float] | None = None,
    ladders: Mapping[str, Sequence[float]] | None = None,
    direction: str = "minimize",
    version: str | None = None,
    time_budget_s: float | None = None,
    out_dir: str | Path = "runs",
    name: str | None = None,
    defaults: str = "tiny",
    jobs: int = 1,
    progress: bool = True,
    reuse_runs: Sequence[str | Path] = (),
    reread: str | Path | None = None,
    known_winners: Sequence[str | Path] = (),
    family_file: str | Path | None = None,
    order_seed: int = 0,
    max_rounds: int | None = None,
    overwrite: bool = False,
    extra_space: Mapping[str, Sequence[float]] | None = None,
    prune: bool = False,
    two_looks: bool = False,
) -> TuneResult:
    """Tune ``optimizers`` on the training function ``train`` by the protocol of
    ``torch-mars tune``: the declared space per optimizer, ``trials`` trials each, selection on
    ``seeds`` (data order ``data_seed``; the ``finalists`` best points of each search also on
    ``final_seeds``, on ``final_data_seeds`` where given, one data order per final seed, the
    best mean over all of them winning), each winner read on
    ``heldout_seeds`` x ``heldout_data_seeds`` (or on ``pairs``, independent
    ``(seed, data order)`` pairs; ``pairs_read`` names optimizers that read only their first
    n, ``{"adamw": 12}``) at its best-known setting (with ``peer_winners``, on by
    default, each peer's winner moved onto its space is read on the choosing runs too, and
    the best mean wins: a search that stopped short is said, and not what a verdict reads;
    with ``stable_winners``, on by default, a candidate with a diverged run among its choosing
    runs ranks after every one without),
    paired intervals, tuning curves, and the report
    files in ``out_dir/name`` (``name``: the function's name). ``fixed`` holds dimensions at a
    value for every optimizer that has them, never tuned (``{"weight_decay": 0.05}``; not the
    lr; each in its range, :data:`~torch_mars.train.study.space.FIXED_RANGES`). ``ladders``:
    your own values for a dimension, searched instead of ours (``{"gamma": (0.05, 0.1, 0.2)}``;
    two or more, ascending, in its range; not the lr or the 1-D lr ratio).
    ``direction="maximize"``: ``train`` returns a score (accuracy, reward); the study and its
    report read its negative, so that lower is better throughout. ``version``: the study knows
    your code by this declared version rather than by its code's content (bump it when
    an edit changes results). ``time_budget_s``: begin no run after that many seconds (those in
    flight finish); the result is the report as far as the study got, and the same call resumes
    it. A killed study resumes (call it again).
    ``defaults`` names the GPT config whose tuned recipes start the searches; ``jobs`` > 1
    needs ``train`` importable from its module. ``progress``: a bar on stderr counting the
    runs against those the study plans (with ``jobs`` > 1, each worker prints a line per run
    instead); False prints neither. ``reuse_runs``: folders of other tune studies whose
    finished runs this study takes instead of training them where they train alike (the same
    budget, data, hyperparameters, seed, data order, device and threads;
    :mod:`~torch_mars.train.study.reuse`), as ``torch-mars tune --reuse-runs``.
    ``reread``: a stored tune study whose selection this one walks again (its starts, its
    selection runs taken whichever machine trained them; the finalists' other seeds, peers'
    reads and pairs train here), as ``--reread``. ``known_winners``: stored studies of the
    same function and budget whose winners are read on the choosing runs beside the peers'
    (``--known-winners``): a setting they found that beats a search's own is what it is read
    at.
    ``family_file``: a campaign's declaration, whose family Holm runs over; ``order_seed``:
    another order of the search's dimensions (a second search); ``max_rounds``: a quick look
    that spends fewer trials (never a comparison); ``overwrite``: start a study recorded with
    other settings afresh. ``extra_space``: your own dimensions, each a name and its values
    (``{"dropout": [0.0, 0.1, 0.2], "warmup": [0, 100, 200]}``, two or more ascending
    numbers), searched for every optimizer alike from its middle value and passed to ``train``
    as keyword arguments (``def train(make_optimizer, seed, data_seed, report, dropout,
    warmup)``); each winner's values are in :attr:`TuneResult.extra_winners`. ``prune``:
    stop a trial's run early where a value it passes to ``report`` is worse than the median
    of its optimizer's finished trial runs at that step (Optuna's median pruner, after 5 of
    them; :mod:`~torch_mars.train.study.pruning`); finalists', peers' and held-out runs always
    finish. ``two_looks``: every word read on 12 independent pairs the study draws, then, where
    one is inconclusive, on up to 64 (its spread plans how many; Pocock's boundaries keep the
    family-wise error at 0.05 over both looks; at most 52 more runs an optimizer, said when it
    starts; docs/harness.md, "Verdicts that decide"). The plan is
    :func:`~torch_mars.train.study.run.tune_plan`'s, the command line's
    too: a setting left None takes the protocol's default there; an error names the keyword."""
    from torch_mars.train.study.run import keyword_spelling, run_study, tune_plan

    path = function_path(train)
    check_contract(train, path, tuple(extra_space or ()))
    _GIVEN[path] = train
    base = ObjectiveConfig(objective=path, model=defaults, direction=direction, version=version)
    name = name or default_study_name(path)
    try:
        plan = tune_plan(
            base,
            study_dir=Path(os.path.abspath(out_dir)) / name,  # paths stay absolute
            name=name,
            optimizers=optimizers,
            trials=trials,
            search=search,
            seeds=seeds,
            heldout_seeds=heldout_seeds,
            data_seed=data_seed,
            heldout_data_seeds=heldout_data_seeds,
            finalists=finalists,
            final_seeds=final_seeds,
            final_data_seeds=final_data_seeds,
            pairs=pairs,
            pairs_read=pairs_read,
            peer_winners=peer_winners,
            stable_winners=stable_winners,
            fixed=fixed,
            ladders=ladders,
            family_file=None if family_file is None else Path(family_file),
            order_seed=order_seed,
            max_rounds=max_rounds,
            storage=storage,
            jobs=jobs,
            overwrite=overwrite,
            reuse_runs=reuse_runs,
            reread=reread,
            known_winners=known_winners,
            extra_space=extra_space,
            prune=prune,
            two_looks=two_looks,
        )
    except ValueError as error:  # the keywords' names, not the flags'
        raise ValueError(keyword_spelling(str(error))) from None
    folder = plan.study_dir
    show = ("bar" if jobs == 1 else "lines") if progress else "none"
    ran = run_study(plan, time_budget_s=time_budget_s, show=show, announce_to=None)
    if ran.stopped:
        print(f"tune {plan.study_name!r}: {ran.stopped}", file=sys.stderr)
    if ran.nothing:  # the report says which runs failed and why
        raise ObjectiveFailed(f"tune {plan.study_name!r}: {ran.nothing}; report in {folder}")
    return TuneResult.of(folder, ran.report.summary, ran.report.record)


__all__ = [
    "CONTRACT",
    "OBJECTIVE_TASK",
    "ObjectiveConfig",
    "ObjectiveFailed",
    "TuneResult",
    "import_objective",
    "load_study",
    "run_objective",
    "tune",
]
