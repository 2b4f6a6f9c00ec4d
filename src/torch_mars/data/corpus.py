"""What every data source gives the trainer: a train and a validation stream of token ids."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class DataFormatError(ValueError):
    """A data file is missing, empty, truncated or not in the expected format."""

    def __init__(self, path: str | Path, problem: str, expected: str) -> None:
        super().__init__(f"{path}: {problem}; expected {expected}")
        self.path = Path(path)


class TokenCorpus:
    """Two 1-D arrays of token ids, ``train`` and ``val`` (uint8 or uint16, in memory or
    memory-mapped), with ids in ``[0, vocab_size)``. Subclasses say where the tokens come from.

    Args:
        train: the training stream, at least two tokens.
        val: the validation stream, at least two tokens.
        vocab_size: number of distinct ids the model must embed.
        name: a short description for logs.
    """

    def __init__(self, train: np.ndarray, val: np.ndarray, vocab_size: int, name: str) -> None:
        for split, tokens in (("train", train), ("val", val)):
            if tokens.ndim != 1 or len(tokens) < 2:
                raise ValueError(
                    f"{name}: the {split} split needs at least 2 tokens, got shape {tokens.shape}"
                )
        self.train = train
        self.val = val
        self.vocab_size = vocab_size
        self.name = name

    def split(self, split: str) -> np.ndarray:
        """The ``"train"`` or ``"val"`` stream."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        return self.train if split == "train" else self.val

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, train={len(self.train):,} tokens, "
            f"val={len(self.val):,} tokens, vocab_size={self.vocab_size})"
        )
