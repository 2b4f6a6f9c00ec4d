"""``--validation-slices N``: a run's fixed validation windows lie in the slice of the val split
its data order names (data order mod N), so a study's selection (one data order) and its
held-out runs (others) are scored on text that shares no token; unset, every run reads the same
windows and every identity stored before the setting stands."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from harness_helpers import write_synthetic_text
from torch_mars.data import BatchSampler, TokenCorpus
from torch_mars.train.study.selection import PROTOCOL
from torch_mars.train.study.tune import TunePlan
from torch_mars.train.trainer import TrainConfig, Trainer

BLOCK = 8


def positions() -> TokenCorpus:
    """A corpus whose val token at position i is i (mod 2**16): a window names where it lies."""
    val = np.arange(40_000, dtype=np.uint16)
    return TokenCorpus(np.arange(1_000, dtype=np.uint16), val, vocab_size=2**16, name="positions")


def span(part: tuple[int, int] | None, seed: int = 0, batch: int = 4) -> tuple[int, int]:
    sampler = BatchSampler(positions(), BLOCK, global_batch=batch, seed=seed)
    inputs, targets = sampler.validation_windows(64 * BLOCK, part)
    return int(inputs.min()), int(targets.max())


def test_the_slices_of_two_data_orders_share_no_token():
    slices = [span((index, 4)) for index in range(4)]
    for (low, high), index in zip(slices, range(4), strict=True):
        assert index * 10_000 <= low and high < (index + 1) * 10_000
    assert span(None) != slices[0]  # unset: windows over the whole split, as before


def test_a_slices_windows_are_the_same_for_every_seed_and_batch_size():
    sampler = BatchSampler(positions(), BLOCK, global_batch=4, seed=0)
    other = BatchSampler(positions(), BLOCK, global_batch=32, seed=7)
    first, second = (s.validation_windows(64 * BLOCK, (1, 4)) for s in (sampler, other))
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"validation_slices": 1, "eval_tokens": 4096}, r"validation_slices must be >= 2"),
        ({"validation_slices": 4}, r"validation_slices needs eval_tokens"),
    ],
)
def test_a_wrong_setting_is_refused_naming_it(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(model="tiny", **settings)


def test_a_slice_too_short_for_a_window_is_refused_naming_the_setting():
    sampler = BatchSampler(positions(), BLOCK, global_batch=4, seed=0)
    with pytest.raises(ValueError, match=r"validation_slices=8000: a slice"):
        sampler.validation_windows(64 * BLOCK, (0, 8000))


def test_the_trainer_reads_the_slice_of_its_data_order(tmp_path):
    text = write_synthetic_text(tmp_path / "corpus.txt")
    config = TrainConfig(
        model="tiny", data=str(text), steps=1, eval_tokens=256, validation_slices=3, data_seed=4,
        run_dir=tmp_path / "run", quiet=True,
    )  # fmt: skip
    trainer = Trainer(config)
    trainer.evaluate()
    expected = trainer.sampler.validation_windows(256, (4 % 3, 3))
    assert all(np.array_equal(a, b) for a, b in zip(trainer._validation, expected, strict=True))


def test_a_study_records_the_slices_only_where_set(tmp_path):
    text = write_synthetic_text(tmp_path / "corpus.txt")
    base = TrainConfig(model="tiny", data=str(text), steps=2, eval_tokens=256)

    def budget(config: TrainConfig) -> dict:
        plan = TunePlan(config, ("adamw",), PROTOCOL, Path(tmp_path / "study"))
        return plan.spec().identity()["budget"]

    assert "validation_slices" not in budget(base)  # the identities stored before it stand
    sliced = budget(dataclasses.replace(base, validation_slices=4))
    assert sliced["validation_slices"] == 4
    checkpoint = dataclasses.replace(base, validation_slices=4).identity("fingerprint")
    assert checkpoint["validation_slices"] == 4 and "validation_slices" not in base.identity("f")


@pytest.mark.parametrize("command", ["train", "compare", "tune"])
def test_the_flag_alone_reaches_the_runs_config(command):
    from torch_mars.cli import _text_config, build_parser

    parser = build_parser()
    given = [command, "--eval-tokens", "4096"]
    plain = _text_config(parser.parse_args(given), TrainConfig())
    sliced = _text_config(parser.parse_args([*given, "--validation-slices", "4"]), TrainConfig())
    assert plain.validation_slices is None and sliced.validation_slices == 4
    assert dataclasses.replace(sliced, validation_slices=None) == plain
