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
