"""The fixed validation set of a text run: ``eval_tokens`` tokens of the val split in windows
drawn once per corpus and block size, so runs at every batch size, seed and data order are
scored on the same text."""

from __future__ import annotations

import hashlib

import pytest

from harness_helpers import synthetic_corpus, tiny_config
from torch_mars.data.batches import BatchSampler
from torch_mars.train.trainer import Trainer


def digest(windows) -> str:
    inputs, targets = windows
    return hashlib.sha256(inputs.numpy().tobytes() + targets.numpy().tobytes()).hexdigest()


def test_the_validation_windows_are_the_same_for_batch_sizes_4_and_256():
    corpus = synthetic_corpus()
    small = BatchSampler(corpus, block_size=16, global_batch=4, seed=0)
    large = BatchSampler(corpus, block_size=16, global_batch=256, seed=3)
    tokens = 131_072
    windows = small.validation_windows(tokens)
    assert digest(windows) == digest(large.validation_windows(tokens))
    inputs, targets = windows
    assert inputs.numel() == targets.numel() == tokens
    assert bool((inputs[:, 1:] == targets[:, :-1]).all())


def test_a_token_count_that_is_no_multiple_of_the_block_is_refused():
    sampler = BatchSampler(synthetic_corpus(), block_size=16, global_batch=4, seed=0)
    with pytest.raises(ValueError, match="multiple of block_size=16"):
        sampler.validation_windows(100)


def test_a_run_scores_the_same_loss_on_them_whatever_its_batch_size(tmp_path):
    corpus = synthetic_corpus()
    losses = []
    for batch in (4, 8):
        config = tiny_config(tmp_path / f"b{batch}", batch_size=batch, eval_tokens=1024)
        losses.append(Trainer(config, corpus).evaluate())
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
