"""What every data source gives the trainer: a train and a validation stream of token ids."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

FINGERPRINT_WINDOWS = 64
FINGERPRINT_WINDOW = 4096


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

    def fingerprint(self) -> str:
        """A short hash of the data itself, cheap on any size: the dtype, length and vocabulary,
        and 64 evenly spaced 4 KiB windows (first and last included) of each split's bytes. The
        same data reached by another path gives the same fingerprint. Another file, a resized,
        truncated or regenerated one, gives another; an edit confined to bytes between the
        windows (most of a large shard) is not seen, the price of reading 512 KiB at most."""
        digest = hashlib.sha256(f"vocab {self.vocab_size};".encode())
        for tokens in (self.train, self.val):
            raw = np.asarray(tokens).reshape(-1).view(np.uint8)
            digest.update(f"{tokens.dtype.str} {len(tokens)};".encode())
            window = FINGERPRINT_WINDOW
            starts = np.linspace(0, max(0, len(raw) - window), FINGERPRINT_WINDOWS).astype(np.int64)
            for start in dict.fromkeys(starts.tolist()):
                digest.update(raw[start : start + window].tobytes())
        return digest.hexdigest()[:16]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, train={len(self.train):,} tokens, "
            f"val={len(self.val):,} tokens, vocab_size={self.vocab_size})"
        )
