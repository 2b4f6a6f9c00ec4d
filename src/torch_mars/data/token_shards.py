"""Token shards in nanoGPT's layout: ``train.bin`` and ``val.bin`` of raw little-endian token
ids (uint16, or uint32 when ``meta.json`` says so), read through ``np.memmap`` so corpora larger
than memory work. ``torch-mars prepare`` writes them together with ``meta.json``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from torch_mars.data.corpus import DataFormatError, TokenCorpus

GPT2_VOCAB_SIZE = 50257
TOKEN_DTYPE = np.dtype("<u2")
# The token dtypes meta.json may name.
TOKEN_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
META_FILE = "meta.json"
CHECKED_TOKENS = 1 << 20


def _read_meta(folder: Path) -> dict:
    path = folder / META_FILE
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataFormatError(
            path, f"not valid JSON ({error})", "the meta.json that `torch-mars prepare` writes"
        ) from error
    if not isinstance(meta, dict) or not isinstance(meta.get("vocab_size"), int):
        raise DataFormatError(path, "no integer 'vocab_size'", "a JSON object with vocab_size")
    dtype = meta.setdefault("dtype", "uint16")
    if dtype not in TOKEN_DTYPES:
        raise DataFormatError(path, f"dtype {dtype!r}", f"one of {sorted(TOKEN_DTYPES)}")
    limit = np.iinfo(TOKEN_DTYPES[dtype]).max + 1
    if not 0 < meta["vocab_size"] <= limit:
        raise DataFormatError(
            path, f"vocab_size {meta['vocab_size']}", f"a vocabulary of 1 to {limit} ids in {dtype}"
        )
    counts = meta.get("tokens", {})
    if not isinstance(counts, dict) or any(
        not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in counts.values()
    ):
        raise DataFormatError(path, f"tokens {counts!r}", "whole token counts per split")
    return meta


def _open_shard(
    path: Path, expected_tokens: int | None, vocab_size: int, dtype: np.dtype = TOKEN_DTYPE
) -> np.ndarray:
    if not path.is_file():
        raise DataFormatError(
            path,
            "no such file",
            "a token shard written by `torch-mars prepare` or nanoGPT's prepare.py",
        )
    size = path.stat().st_size
    name = f"uint{8 * dtype.itemsize}"
    if size == 0:
        raise DataFormatError(path, "the file is empty", f"{name} token ids")
    if size % dtype.itemsize:
        raise DataFormatError(
            path,
            f"{size} bytes is not a whole number of {name} tokens (truncated?)",
            f"a file of {dtype.itemsize}-byte token ids",
        )
    tokens = size // dtype.itemsize
    if expected_tokens is not None and tokens != expected_tokens:
        raise DataFormatError(
            path,
            f"{tokens} tokens but meta.json records {expected_tokens} (truncated?)",
            f"{expected_tokens} {name} tokens",
        )
    shard = np.memmap(path, dtype=dtype, mode="r")
    largest = int(shard[:CHECKED_TOKENS].max())
    if largest >= vocab_size:
        raise DataFormatError(
            path,
            f"token id {largest} is outside the vocabulary",
            f"{name} ids below vocab_size={vocab_size}",
        )
    return shard


class TokenShards(TokenCorpus):
    """``folder/train.bin`` and ``folder/val.bin`` as memory-mapped uint16 arrays.

    ``vocab_size`` and the token ``dtype`` come from ``folder/meta.json`` when present (which
    also records the token counts, so a truncated shard is caught), else from the argument
    (GPT-2's 50257 by default) and uint16.
    The first million ids of each shard are checked against the vocabulary.
    """

    def __init__(self, folder: str | Path, vocab_size: int = GPT2_VOCAB_SIZE) -> None:
        folder = Path(folder)
        if not folder.is_dir():
            raise DataFormatError(folder, "no such folder", "a folder with train.bin and val.bin")
        meta = _read_meta(folder)
        vocab_size = meta.get("vocab_size", vocab_size)
        counts = meta.get("tokens", {})
        dtype = TOKEN_DTYPES[meta.get("dtype", "uint16")]
        train = _open_shard(folder / "train.bin", counts.get("train"), vocab_size, dtype)
        val = _open_shard(folder / "val.bin", counts.get("val"), vocab_size, dtype)
        super().__init__(train, val, vocab_size, str(folder))
