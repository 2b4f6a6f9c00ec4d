"""The GPT-2 byte-level BPE tokenizer built with ``tiktoken`` from local ``encoder.json`` and
``vocab.bpe`` files, so tokenization works offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch_mars.data.corpus import DataFormatError

END_OF_TEXT = "<|endoftext|>"
GPT2_SINGLE_BYTE_TOKENS = 256


def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's map from the printable stand-in characters of ``encoder.json`` back to bytes:
    printable Latin-1 bytes stand for themselves, the other 68 bytes for ``chr(256 + k)`` in
    byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    decoder = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in decoder.values()]
    decoder.update({chr(256 + k): b for k, b in enumerate(others)})
    return decoder


def gpt2_mergeable_ranks(encoder_json: Path, vocab_bpe: Path) -> dict[bytes, int]:
    """Token bytes -> id from GPT-2's files. GPT-2 numbers its tokens in merge order, so the id
    is also the BPE merge rank; ``vocab.bpe`` is checked to hold one merge per multi-byte token.
    """
    for path in (encoder_json, vocab_bpe):
        if not path.is_file():
            raise DataFormatError(path, "no such file", "GPT-2's encoder.json and vocab.bpe")
    try:
        encoder = json.loads(encoder_json.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFormatError(
            encoder_json, f"not valid JSON ({error})", "GPT-2's token -> id map"
        ) from error
    decoder = gpt2_byte_decoder()
    encoder.pop(END_OF_TEXT, None)
    try:
        ranks = {bytes(decoder[ch] for ch in token): int(i) for token, i in encoder.items()}
    except (KeyError, TypeError, ValueError) as error:
        raise DataFormatError(
            encoder_json,
            f"a token or id is not GPT-2's format ({error!r})",
            "GPT-2's byte-level token -> id map",
        ) from error
    merges = [line for line in vocab_bpe.read_text(encoding="utf-8").splitlines()[1:] if line]
    if len(merges) != len(ranks) - GPT2_SINGLE_BYTE_TOKENS:
        raise DataFormatError(
            vocab_bpe,
            f"{len(merges)} merges for {len(ranks)} tokens",
            f"{len(ranks) - GPT2_SINGLE_BYTE_TOKENS} merges, one per "
            "multi-byte token of encoder.json",
        )
    return ranks


def gpt2_tokenizer(tokenizer_dir: str | Path | None = None) -> Any:
    """A ``tiktoken.Encoding`` for GPT-2. From ``tokenizer_dir/encoder.json`` and
    ``tokenizer_dir/vocab.bpe`` when given; otherwise ``tiktoken.get_encoding("gpt2")``, which
    downloads the files once (or finds them in ``TIKTOKEN_CACHE_DIR``)."""
    try:
        import tiktoken
        from tiktoken_ext.openai_public import r50k_pat_str
    except ImportError as error:
        raise ImportError(
            "GPT-2 tokenization needs tiktoken: pip install 'torch-mars[prepare]'"
        ) from error
    if tokenizer_dir is None:
        return tiktoken.get_encoding("gpt2")
    folder = Path(tokenizer_dir)
    ranks = gpt2_mergeable_ranks(folder / "encoder.json", folder / "vocab.bpe")
    return tiktoken.Encoding(
        name="gpt2-local",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={END_OF_TEXT: len(ranks)},
    )
