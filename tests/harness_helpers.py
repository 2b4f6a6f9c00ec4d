"""Small training configs shared by the harness tests: the tiny GPT on a synthetic byte corpus,
so runs take a fraction of a second and need no files."""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
from pathlib import Path

import numpy as np

from torch_mars.data import TokenCorpus
from torch_mars.train import TrainConfig

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def synthetic_corpus(seed: int = 0) -> TokenCorpus:
    """Bytes with learnable structure: a repeated random phrase with noise."""
    rng = np.random.default_rng(seed)
    phrase = rng.integers(97, 123, size=50)
    stream = np.tile(phrase, 400)
    noise = rng.random(len(stream)) < 0.1
    stream[noise] = rng.integers(32, 127, size=int(noise.sum()))
    data = stream.astype(np.uint8)
    return TokenCorpus(data[:18_000], data[18_000:], vocab_size=256, name="synthetic")


TINY_CLI = shlex.split(
    "--model tiny --steps 6 --batch-size 4 --block-size 16 --eval-interval 3 --eval-batches 2 "
    "--quiet"
)


def write_synthetic_text(path: Path) -> Path:
    """The synthetic corpus as a text file that ``--data`` can name."""
    corpus = synthetic_corpus()
    path.write_bytes(bytes(corpus.train) + bytes(corpus.val))
    return path


def toy_tune_plan(study_dir: Path, corpus_file: Path, optimizers: tuple[str, ...], **changes):
    """A ``tune`` plan of four steps of the tiny GPT on ``corpus_file``: one selection seed and
    one held-out run (seed 1, data order 1) per optimizer."""
    from torch_mars.train.study.selection import Selection
    from torch_mars.train.study.tune import TunePlan

    base = tiny_config(study_dir / "unused", data=str(corpus_file), steps=4, eval_interval=2)
    selection = Selection((0,), (1,), heldout_data_seeds=(1,))
    return TunePlan(base, optimizers, selection, study_dir, **changes)


def tiny_config(run_dir: Path, **changes) -> TrainConfig:
    """Eight steps of the tiny GPT, evaluated every four, quiet."""
    base = TrainConfig(
        model="tiny",
        data="synthetic",
        steps=8,
        batch_size=4,
        block_size=16,
        eval_interval=4,
        eval_batches=2,
        run_dir=run_dir,
        quiet=True,
    )
    return dataclasses.replace(base, **changes)


def kill_when_paused(args: list[str], finished: int, what: str = "trials") -> dict[str, str]:
    """Run ``args`` (a study command, ``what="trials"``, or a run, ``what="steps"``) with the
    pause variable set to ``finished``, read its stderr until it says it paused, and kill it
    there with SIGKILL: a point the test controls, not a moment guessed by polling. Returns
    the environment to resume it in (without the pause)."""
    from torch_mars.train.run_shell import PAUSE_AT_STEP_VARIABLE
    from torch_mars.train.study.engine import PAUSE_AFTER_VARIABLE

    variable, said_when = {
        "trials": (PAUSE_AFTER_VARIABLE, f"paused after {finished} finished trials"),
        "steps": (PAUSE_AT_STEP_VARIABLE, f"paused after {finished} steps"),
    }[what]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        args,
        env={**env, variable: str(finished)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said = []
    for line in process.stderr:
        said.append(line)
        if said_when in line:
            break
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert said and said_when in said[-1], "".join(said)[-2000:]
    return env


_DYING_SITE = """
import importlib, os, signal
_spec = os.environ.get("TORCH_MARS_TEST_DIE_AT")
if _spec:
    _target, _n, _when, _token = _spec.split("|")
    _owner_path, _name = _target.rsplit(".", 1)
    _module, _, _cls = _owner_path.partition(":")
    _owner = importlib.import_module(_module)
    for _part in filter(None, _cls.split(".")):
        _owner = getattr(_owner, _part)
    _real, _calls = getattr(_owner, _name), [0]

    def _chosen():
        try:
            os.close(os.open(_token, os.O_CREAT | os.O_EXCL))
            return True
        except FileExistsError:
            return False

    def _dying(*args, **kwargs):
        _calls[0] += 1
        if _calls[0] == int(_n) and _chosen():
            if _when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            _real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        return _real(*args, **kwargs)

    setattr(_owner, _name, _dying)
"""


def dying_env(folder: Path, target: str, n: int, when: str = "before") -> dict[str, str]:
    """The environment in which the first Python process (of any started with it, a spawned
    worker too) to call ``target`` (``module:Class.method``) for the ``n``-th time dies there
    as under SIGKILL, ``before`` or ``after`` the real call: a kill at a named line, not at a
    guessed moment."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_DYING_SITE)
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))
    spec = f"{target}|{n}|{when}|{folder / 'died'}"
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": path,
        "TORCH_MARS_TEST_DIE_AT": spec,
    }


def lr_bowl(make_optimizer, seed: int, data_seed: int, report) -> float:
    """A training function for ``tune --objective harness_helpers:lr_bowl``: a bowl in the
    log of the lr its optimizer is built with (least at 10**-2.5), a little higher per seed."""
    import math

    import torch

    group = make_optimizer(torch.nn.Linear(2, 2)).param_groups[0]
    return (math.log10(group["lr"]) + 2.5) ** 2 + 0.01 * seed
