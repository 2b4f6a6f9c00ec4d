"""Data for the harness: the embedded stdlib corpus, byte corpora from text, GPT-2 token
shards, deterministic batches, and ``prepare`` to make shards. No optimizer code lives here."""

from pathlib import Path

from torch_mars.data.batches import BatchSampler
from torch_mars.data.corpus import DataFormatError, TokenCorpus
from torch_mars.data.stdlib_corpus import StdlibCorpus
from torch_mars.data.text_corpus import TextCorpus
from torch_mars.data.token_shards import TokenShards


def load_corpus(spec: str, vocab_size: int | None = None) -> TokenCorpus:
    """A corpus from a command-line spec: ``stdlib`` (the default: this interpreter's standard
    library), ``stdlib:FOLDER`` (the standard library folder of another Python, to train on the
    same bytes as a machine running that version), ``shards:FOLDER`` for token shards, or the
    path of a text file or folder."""
    if spec == "stdlib":
        return StdlibCorpus()
    if spec.startswith("stdlib:"):
        return StdlibCorpus(Path(spec.removeprefix("stdlib:")))
    if spec.startswith("shards:"):
        folder = spec.removeprefix("shards:")
        return TokenShards(folder) if vocab_size is None else TokenShards(folder, vocab_size)
    return TextCorpus(spec)


__all__ = [
    "BatchSampler",
    "DataFormatError",
    "StdlibCorpus",
    "TextCorpus",
    "TokenCorpus",
    "TokenShards",
    "load_corpus",
]
