"""`torch-mars prepare` writes GPT-2 token shards offline, from local BPE files."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from harness_helpers import SHARED_DATA
from torch_mars.cli import main
from torch_mars.data import DataFormatError, TokenShards
from torch_mars.data.prepare import prepare_hub, prepare_text
from torch_mars.data.tokenizer import gpt2_tokenizer

tiktoken = pytest.importorskip("tiktoken")
GPT2_FILES = SHARED_DATA / "tokenizers" / "gpt2"
needs_gpt2_files = pytest.mark.skipif(
    not (GPT2_FILES / "encoder.json").is_file(), reason="GPT-2 BPE files not in ../shared/data"
)


@needs_gpt2_files
def test_local_tokenizer_gives_gpt2_ids():
    tokenizer = gpt2_tokenizer(GPT2_FILES)
    assert tokenizer.encode_ordinary("Hello world") == [15496, 995]
    assert tokenizer.eot_token == 50256 and tokenizer.n_vocab == 50257
    text = "MARS: Make vAriance Reduction Shine — ünïcödé\n\tand tabs"
    assert tokenizer.decode(tokenizer.encode_ordinary(text)) == text


@needs_gpt2_files
def test_shakespeare_has_the_documented_token_count():
    tokenizer = gpt2_tokenizer(GPT2_FILES)
    text = (SHARED_DATA / "text" / "tinyshakespeare.txt").read_text()
    assert len(tokenizer.encode_ordinary(text)) == 338_025


@needs_gpt2_files
def test_prepare_round_trips_text_through_token_shards(tmp_path):
    docs = {"a.txt": "First document.\n" * 50, "b.txt.gz": "Second, compressed.\n" * 50}
    for name, text in docs.items():
        data = text.encode()
        (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    out = tmp_path / "shards"
    assert (
        main(
            [
                "prepare",
                str(tmp_path / "a.txt"),
                str(tmp_path / "b.txt.gz"),
                "--out",
                str(out),
                "--tokenizer-dir",
                str(GPT2_FILES),
                "--val-fraction",
                "0.2",
            ]
        )
        == 0
    )
    shards = TokenShards(out)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["tokens"] == {"train": len(shards.train), "val": len(shards.val)}
    assert shards.vocab_size == 50257
    tokens = np.concatenate([shards.train, shards.val]).tolist()
    decoded = gpt2_tokenizer(GPT2_FILES).decode(tokens)
    assert decoded == "<|endoftext|>".join(docs.values()) + "<|endoftext|>"
    assert not list(out.glob("*.partial"))


@needs_gpt2_files
def test_hub_recipe_splits_and_tokenizes_with_a_given_loader(tmp_path):
    calls = []

    class FakeDataset(list):
        def train_test_split(self, test_size, seed, shuffle):
            calls.append((test_size, seed))
            return {"train": FakeDataset(self[1:]), "test": FakeDataset(self[:1])}

    def load_dataset(path, name, split):
        calls.append((path, name, split))
        return FakeDataset({"text": f"document number {i}"} for i in range(5))

    counts = prepare_hub("fineweb-edu", tmp_path, gpt2_tokenizer(GPT2_FILES), load_dataset)
    assert calls[0] == ("HuggingFaceFW/fineweb-edu", "sample-10BT", "train")
    assert calls[1] == (0.0005, 2357)
    assert counts == {"train": 4 * 4, "val": 4}
    assert TokenShards(tmp_path).vocab_size == 50257


def test_missing_tokenizer_files_are_named(tmp_path):
    with pytest.raises(DataFormatError, match=r"encoder\.json: no such file"):
        gpt2_tokenizer(tmp_path)


@needs_gpt2_files
def test_mismatched_bpe_files_are_rejected(tmp_path):
    (tmp_path / "encoder.json").write_bytes((GPT2_FILES / "encoder.json").read_bytes())
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\na b\n")
    with pytest.raises(DataFormatError, match="1 merges for 50256 tokens"):
        gpt2_tokenizer(tmp_path)


def test_unknown_recipe_and_bad_fraction_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="recipe must be one of"):
        prepare_hub("c4", tmp_path, tokenizer=None)
    with pytest.raises(ValueError, match="val_fraction must be in"):
        prepare_text([tmp_path], tmp_path, tokenizer=None, val_fraction=1.5)
