"""``torch-mars prepare``: turn text into GPT-2 token shards (``train.bin``, ``val.bin``,
``meta.json``) that :class:`~torch_mars.data.token_shards.TokenShards` reads.

Two sources: local text files or folders (``.gz`` allowed), and the paper's corpora from the
Hugging Face hub (``openwebtext``, ``fineweb-edu``; needs ``pip install datasets`` and internet).
Documents are separated by GPT-2's ``<|endoftext|>`` token. Files are written under temporary
names and renamed when complete, so an interrupted run never leaves a shard that looks whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from torch_mars.atomic_files import write_text_atomically
from torch_mars.data.text_corpus import read_maybe_gzip
from torch_mars.data.token_shards import META_FILE, TOKEN_DTYPE


@dataclass(frozen=True)
class HubRecipe:
    """A Hugging Face dataset as the paper used it: ``load_dataset(path, name, split=split)``,
    text in column ``text``, a held-out share ``val_fraction`` split off with ``seed``."""

    path: str
    name: str | None
    split: str
    val_fraction: float
    seed: int = 2357


HUB_RECIPES: dict[str, HubRecipe] = {
    "openwebtext": HubRecipe("Skylion007/openwebtext", None, "train", 0.0005),
    "fineweb-edu": HubRecipe("HuggingFaceFW/fineweb-edu", "sample-10BT", "train", 0.0005),
}


def _encode_documents(texts: Iterable[str], tokenizer: Any, desc: str) -> Iterator[np.ndarray]:
    for text in tqdm(texts, desc=desc, unit="doc", disable=None):
        tokens = tokenizer.encode_ordinary(text)
        tokens.append(tokenizer.eot_token)
        yield np.asarray(tokens, dtype=TOKEN_DTYPE)


def _write_shard(path: Path, chunks: Iterable[np.ndarray]) -> int:
    partial = path.with_name(path.name + ".partial")
    count = 0
    with open(partial, "wb") as file:
        for chunk in chunks:
            chunk.astype(TOKEN_DTYPE, copy=False).tofile(file)
            count += len(chunk)
    if count < 2:
        partial.unlink()
        raise ValueError(f"{path.name} would hold {count} tokens; need at least 2")
    os.replace(partial, path)
    return count


def _write_meta(out_dir: Path, tokenizer: Any, counts: dict[str, int], source: str) -> None:
    meta = {
        "vocab_size": tokenizer.n_vocab,
        "dtype": "uint16",
        "tokenizer": "gpt2",
        "tokens": counts,
        "source": source,
    }
    write_text_atomically(out_dir / META_FILE, json.dumps(meta, indent=2) + "\n")


def prepare_text(
    inputs: list[Path], out_dir: Path, tokenizer: Any, val_fraction: float = 0.05
) -> dict[str, int]:
    """Tokenize local text files (or every file in given folders, sorted) into ``out_dir``.
    Each file is one document; the last ``val_fraction`` of the tokens is ``val.bin``.
    Returns the token counts per split."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    files: list[Path] = []
    for item in inputs:
        files += sorted(p for p in item.rglob("*") if p.is_file()) if item.is_dir() else [item]
    texts = (read_maybe_gzip(f).decode("utf-8", errors="replace") for f in files)
    tokens = np.concatenate(list(_encode_documents(texts, tokenizer, "tokenizing")))
    n_val = max(2, int(len(tokens) * val_fraction))
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {
        "train": _write_shard(out_dir / "train.bin", [tokens[:-n_val]]),
        "val": _write_shard(out_dir / "val.bin", [tokens[-n_val:]]),
    }
    _write_meta(out_dir, tokenizer, counts, ", ".join(map(str, inputs)))
    return counts


def prepare_hub(
    recipe_name: str, out_dir: Path, tokenizer: Any, load_dataset: Callable[..., Any] | None = None
) -> dict[str, int]:
    """Download and tokenize one of :data:`HUB_RECIPES` into ``out_dir``. ``load_dataset`` is
    ``datasets.load_dataset`` unless another loader with its signature is given."""
    if recipe_name not in HUB_RECIPES:
        raise ValueError(f"recipe must be one of {sorted(HUB_RECIPES)}, got {recipe_name!r}")
    recipe = HUB_RECIPES[recipe_name]
    if load_dataset is None:
        try:
            from datasets import load_dataset
        except ImportError as error:
            raise ImportError(
                f"the {recipe_name} recipe needs Hugging Face datasets: pip install datasets"
            ) from error
    dataset = load_dataset(recipe.path, recipe.name, split=recipe.split)
    splits = dataset.train_test_split(test_size=recipe.val_fraction, seed=recipe.seed, shuffle=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {
        split: _write_shard(
            out_dir / f"{split}.bin",
            _encode_documents((row["text"] for row in splits[part]), tokenizer, split),
        )
        for split, part in (("train", "train"), ("val", "test"))
    }
    _write_meta(out_dir, tokenizer, counts, f"{recipe.path} ({recipe.name or 'default'})")
    return counts
