"""Deterministic batches: the batch of step ``s`` depends only on ``(seed, split, s)``, so every
optimizer in a comparison sees the same data in the same order, a resumed run picks up exactly
where it stopped, and each data-parallel process reads its own rows of the same global batch."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from torch_mars.data.corpus import TokenCorpus

_SPLIT_IDS = {"train": 0, "val": 1}
# The stream of the fixed validation windows: no run's seed, data seed or batch size enters it.
_VALIDATION_STREAM = 0x5EED


class BatchSampler:
    """Random windows of ``block_size + 1`` tokens from a :class:`TokenCorpus`.

    Args:
        corpus: the token streams.
        block_size: tokens per input sequence.
        global_batch: sequences per optimizer step, over all processes and micro-batches.
        seed: data seed, independent of the model's initialisation seed.

    Example:
        >>> import numpy as np
        >>> corpus = TokenCorpus(np.arange(100, dtype=np.uint8), np.arange(50, dtype=np.uint8),
        ...                      vocab_size=256, name="toy")
        >>> sampler = BatchSampler(corpus, block_size=8, global_batch=4, seed=0)
        >>> x, y = sampler.batch("train", step=3)
        >>> x.shape, bool((y[:, :-1] == x[:, 1:]).all())
        (torch.Size([4, 8]), True)
    """

    def __init__(self, corpus: TokenCorpus, block_size: int, global_batch: int, seed: int) -> None:
        for split in ("train", "val"):
            if len(corpus.split(split)) < block_size + 1:
                raise ValueError(
                    f"{corpus.name}: the {split} split has {len(corpus.split(split))} tokens, "
                    f"fewer than block_size + 1 = {block_size + 1}"
                )
        if global_batch < 1:
            raise ValueError(f"global_batch must be >= 1, got {global_batch}")
        self.corpus = corpus
        self.block_size = block_size
        self.global_batch = global_batch
        self.seed = seed

    def offsets(self, split: str, step: int) -> np.ndarray:
        """Start positions of the ``global_batch`` windows of ``step``, shape (global_batch,)."""
        tokens = self.corpus.split(split)
        rng = np.random.default_rng([self.seed, _SPLIT_IDS[split], step])
        return rng.integers(0, len(tokens) - self.block_size, size=self.global_batch)

    def batch(self, split: str, step: int, rows: slice = slice(None)) -> tuple[Tensor, Tensor]:
        """Inputs and next-token targets of ``step``, each (rows, block_size) int64; ``rows``
        picks this micro-batch's part of the global batch."""
        tokens = self.corpus.split(split)
        starts = self.offsets(split, step)[rows]
        windows = np.stack([tokens[s : s + self.block_size + 1] for s in starts]).astype(np.int64)
        windows_t = torch.from_numpy(windows)
        return windows_t[:, :-1], windows_t[:, 1:]

    def validation_windows(
        self, tokens: int, part: tuple[int, int] | None = None
    ) -> tuple[Tensor, Tensor]:
        """The fixed validation set of ``tokens`` predicted tokens: ``tokens / block_size``
        windows of the val split at positions drawn once for the corpus and block size, the
        same for every batch size, seed and data seed. ``part`` ``(index, count)``: the windows
        lie inside the index-th of ``count`` equal consecutive slices of the val split instead
        (two parts share no token). Inputs and targets, each (tokens / block_size, block_size)
        int64."""
        if tokens < self.block_size or tokens % self.block_size:
            raise ValueError(
                f"eval_tokens must be a positive multiple of block_size={self.block_size}, "
                f"got {tokens}"
            )
        split = self.corpus.split("val")
        if part is not None:
            index, count = part
            length = len(split) // count
            if length < self.block_size + 1:
                raise ValueError(
                    f"validation_slices={count}: a slice of the {len(split)}-token val split "
                    f"holds {length} tokens, fewer than block_size + 1 = {self.block_size + 1}"
                )
            split = split[index * length : (index + 1) * length]
        rng = np.random.default_rng([_VALIDATION_STREAM, self.block_size])
        starts = rng.integers(0, len(split) - self.block_size, size=tokens // self.block_size)
        windows = np.stack([split[s : s + self.block_size + 1] for s in starts]).astype(np.int64)
        windows_t = torch.from_numpy(windows)
        return windows_t[:, :-1], windows_t[:, 1:]
