"""Every data source loads what it should and names the file and the expectation when it
cannot; batches are a pure function of (seed, split, step)."""

from __future__ import annotations

import gzip
import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from torch_mars.data import (
    BatchSampler,
    DataFormatError,
    StdlibCorpus,
    TextCorpus,
    TokenCorpus,
    TokenShards,
    load_corpus,
)
from torch_mars.data.stdlib_corpus import is_validation_file, stdlib_source_files


def test_stdlib_corpus_is_deterministic_and_split_by_file():
    first, second = StdlibCorpus(), StdlibCorpus()
    assert np.array_equal(first.train, second.train) and np.array_equal(first.val, second.val)
    assert first.vocab_size == 256
    assert 0.02 < len(first.val) / len(first.train) < 0.12
    files = stdlib_source_files()
    assert any(f.name == "topics.py" and f.parent.name == "pydoc_data" for f in files)
    assert not any("test" in f.parts or "site-packages" in f.parts for f in files)


def test_a_copied_stdlib_folder_gives_the_same_corpus(tmp_path):
    """``stdlib:FOLDER`` reads another install's standard library: a copy of this one's files,
    at their relative paths, gives this interpreter's corpus byte for byte."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in stdlib_source_files():
        target = tmp_path / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    copied, here = load_corpus(f"stdlib:{tmp_path}"), load_corpus("stdlib")
    assert np.array_equal(copied.train, here.train) and np.array_equal(copied.val, here.val)


def test_stdlib_split_depends_only_on_the_relative_path():
    assert is_validation_file("json/decoder.py") == is_validation_file("json/decoder.py")
    names = [f"pkg/module_{i}.py" for i in range(400)]
    assert 5 < sum(map(is_validation_file, names)) < 40


def test_text_corpus_reads_files_folders_and_gzip(tmp_path):
    text = b"the quick brown fox jumps over the lazy dog\n" * 20
    (tmp_path / "a.txt").write_bytes(text)
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / ".hidden").write_bytes(b"skipped")
    single = TextCorpus(tmp_path / "a.txt", val_fraction=0.1)
    assert single.vocab_size == 256
    assert bytes(single.train) + bytes(single.val) == text
    assert len(single.val) == int(len(text) * 0.1)
    folder = TextCorpus(tmp_path, val_fraction=0.1)
    assert len(folder.train) + len(folder.val) == 2 * len(text)


def make_file(name: str, content: bytes):
    def setup(folder):
        (folder / name).write_bytes(content)
        return folder / name

    return setup


def make_empty_folder(folder):
    (folder / "void").mkdir()
    return folder / "void"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda folder: folder / "missing.txt", "no such file or folder"),
        (make_file("empty.txt", b""), "the corpus is empty"),
        (make_file("cut.gz", gzip.compress(b"x" * 1000)[:-12]), "truncated"),
        (make_file("bad.gz", b"not gzip at all"), "not a valid gzip file"),
        (make_file("short.txt", b"abc"), "only 3 bytes"),
        (make_empty_folder, "the folder has no files"),
    ],
)
def test_text_corpus_errors_name_the_file_and_the_expectation(tmp_path, setup, message):
    path = setup(tmp_path)
    with pytest.raises(DataFormatError, match=message) as error:
        TextCorpus(path)
    assert str(path) in str(error.value) and "expected" in str(error.value)


def write_shards(folder, train, val, meta=None):
    folder.mkdir(exist_ok=True)
    np.asarray(train, dtype="<u2").tofile(folder / "train.bin")
    np.asarray(val, dtype="<u2").tofile(folder / "val.bin")
    if meta is not None:
        (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def test_token_shards_are_memory_mapped_uint16(tmp_path):
    folder = write_shards(
        tmp_path / "s",
        np.arange(1000) % 50257,
        np.arange(100),
        {"vocab_size": 50257, "tokens": {"train": 1000, "val": 100}},
    )
    shards = TokenShards(folder)
    assert isinstance(shards.train, np.memmap) and shards.train.dtype == np.uint16
    assert shards.vocab_size == 50257 and len(shards.val) == 100
    assert isinstance(load_corpus(f"shards:{folder}"), TokenShards)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / "val.bin").unlink(), "val.bin: no such file"),
        (lambda f: (f / "train.bin").write_bytes(b""), "the file is empty"),
        (lambda f: (f / "train.bin").write_bytes(b"\x01\x00\x02"), "not a whole number"),
        (
            lambda f: (f / "meta.json").write_text(
                '{"vocab_size": 50257, "tokens": {"train": 999}}'
            ),
            "meta.json records 999",
        ),
        (lambda f: (f / "meta.json").write_text("{not json"), "not valid JSON"),
        (
            lambda f: np.full(100, 60000, dtype="<u2").tofile(f / "val.bin"),
            "outside the vocabulary",
        ),
    ],
)
def test_token_shard_errors_name_the_file(tmp_path, damage, message):
    folder = write_shards(
        tmp_path / "s",
        np.arange(1000),
        np.arange(100),
        {"vocab_size": 50257, "tokens": {"train": 1000, "val": 100}},
    )
    damage(folder)
    with pytest.raises(DataFormatError, match=message) as error:
        TokenShards(folder)
    assert str(folder) in str(error.value)


def test_missing_shard_folder_is_an_error(tmp_path):
    with pytest.raises(DataFormatError, match="no such folder"):
        TokenShards(tmp_path / "nowhere")


def toy_corpus() -> TokenCorpus:
    return TokenCorpus(
        np.arange(5000, dtype=np.uint16) % 256,
        np.arange(600, dtype=np.uint16) % 256,
        vocab_size=256,
        name="toy",
    )


def test_batches_depend_only_on_seed_split_and_step():
    a = BatchSampler(toy_corpus(), block_size=8, global_batch=6, seed=3)
    b = BatchSampler(toy_corpus(), block_size=8, global_batch=6, seed=3)
    for step in (0, 7, 7, 100):
        assert all(
            torch.equal(u, v)
            for u, v in zip(a.batch("train", step), b.batch("train", step), strict=True)
        )
    assert not torch.equal(a.batch("train", 1)[0], a.batch("train", 2)[0])
    assert not torch.equal(a.batch("train", 1)[0], a.batch("val", 1)[0])
    other_seed = BatchSampler(toy_corpus(), block_size=8, global_batch=6, seed=4)
    assert not torch.equal(a.batch("train", 1)[0], other_seed.batch("train", 1)[0])


def test_row_slices_partition_the_global_batch():
    sampler = BatchSampler(toy_corpus(), block_size=8, global_batch=6, seed=0)
    whole_x, whole_y = sampler.batch("train", 5)
    parts = [sampler.batch("train", 5, slice(i, i + 2)) for i in (0, 2, 4)]
    assert torch.equal(torch.cat([x for x, _ in parts]), whole_x)
    assert torch.equal(whole_y[:, :-1], whole_x[:, 1:])
    assert whole_x.dtype == torch.int64 and whole_x.shape == (6, 8)


def test_a_split_shorter_than_a_block_is_rejected():
    corpus = TokenCorpus(np.zeros(100, np.uint8), np.zeros(5, np.uint8), 256, "small")
    with pytest.raises(ValueError, match="the val split has 5 tokens"):
        BatchSampler(corpus, block_size=8, global_batch=2, seed=0)
