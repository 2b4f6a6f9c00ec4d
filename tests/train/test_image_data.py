"""Image data: IDX files, CIFAR python batches and image folders read from tiny generated files
(and the real Fashion-MNIST when ../shared has it), each reader's errors for missing, corrupt or
inconsistent files, and the uint8 crop/flip augmentation and per-channel normalisation."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from harness_helpers import SHARED_DATA
from torch_mars.data.corpus import DataFormatError
from torch_mars.data.images import (
    channel_stats,
    normalize,
    random_crop_and_flip,
    read_cifar,
    read_fashion_mnist,
    read_image_folder,
)


def write_idx(path, array: np.ndarray, magic: int, compress: bool = True) -> None:
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if compress else data)


def write_fashion(folder, n_train: int = 6, n_test: int = 4) -> None:
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("t10k", n_test)):
        write_idx(folder / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)), 2051)
        write_idx(folder / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10, 2049)


def test_idx_files_give_greyscale_images_and_labels(tmp_path):
    write_fashion(tmp_path)
    train = read_fashion_mnist(tmp_path, "train")
    test = read_fashion_mnist(tmp_path, "test")
    assert train.images.shape == (6, 1, 28, 28) and train.images.dtype == torch.uint8
    assert train.labels.tolist() == [0, 1, 2, 3, 4, 5]
    assert len(test) == 4 and train.classes[9] == "ankle boot"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"no such file; expected t10k-images-idx3-ubyte"),
        ("magic", r"magic number 2049; expected 2051"),
        ("truncated", r"bytes of data; expected 3136 for dimensions \[4, 28, 28\]"),
        ("bad-gzip", r"not a valid gzip file"),
        ("count", r"3 labels; expected one per image \(4 in"),
    ],
)
def test_idx_errors_name_the_file_and_the_problem(tmp_path, damage, message):
    write_fashion(tmp_path)
    images = tmp_path / "t10k-images-idx3-ubyte.gz"
    if damage == "missing":
        images.unlink()
    elif damage == "magic":
        write_idx(images, np.zeros((4, 28, 28)), 2049)
    elif damage == "truncated":
        write_idx(images, np.zeros((3, 28, 28)), 2051)
        data = gzip.decompress(images.read_bytes())
        images.write_bytes(gzip.compress(data[:4] + struct.pack(">I", 4) + data[8:]))
    elif damage == "bad-gzip":
        images.write_bytes(b"not gzip at all")
    else:
        write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.zeros(3), 2049)
    with pytest.raises(DataFormatError, match=message):
        read_fashion_mnist(tmp_path, "test")


def write_cifar10(folder, per_batch: int = 3) -> None:
    rng = np.random.default_rng(1)
    names = ["airplane", "automobile", "bird", "cat", "deer"]
    names += ["dog", "frog", "horse", "ship", "truck"]
    with (folder / "batches.meta").open("wb") as f:
        pickle.dump({"label_names": names}, f)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)}
        batch["labels"] = list(range(per_batch))
        with (folder / name).open("wb") as f:
            pickle.dump(batch, f)


def test_cifar10_batches_give_colour_images(tmp_path):
    write_cifar10(tmp_path)
    train = read_cifar(tmp_path, "train")
    assert train.images.shape == (15, 3, 32, 32) and len(train.classes) == 10
    with (tmp_path / "data_batch_1").open("rb") as f:
        first = pickle.load(f)["data"][0]
    assert torch.equal(train.images[0].flatten(), torch.from_numpy(first))
    assert len(read_cifar(tmp_path, "test")) == 3


def test_cifar100_uses_fine_labels(tmp_path):
    with (tmp_path / "meta").open("wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)]}, f)
    batch = {"data": np.zeros((2, 3072), np.uint8), "fine_labels": [7, 99], "coarse_labels": [0, 1]}
    for split in ("train", "test"):
        with (tmp_path / split).open("wb") as f:
            pickle.dump(batch, f)
    train = read_cifar(tmp_path, "train")
    assert train.labels.tolist() == [7, 99] and len(train.classes) == 100


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("no-meta", r"no batches.meta or meta file"),
        ("corrupt", r"data_batch_2: cannot be unpickled"),
        ("shape", r"data of shape \(3, 100\) with 3 labels"),
        ("missing", r"data_batch_5: no such file"),
    ],
)
def test_cifar_errors_name_the_file(tmp_path, damage, message):
    write_cifar10(tmp_path)
    if damage == "no-meta":
        (tmp_path / "batches.meta").unlink()
    elif damage == "corrupt":
        (tmp_path / "data_batch_2").write_bytes(b"\x80\x04garbage")
    elif damage == "shape":
        with (tmp_path / "data_batch_3").open("wb") as f:
            pickle.dump({"data": np.zeros((3, 100), np.uint8), "labels": [0, 1, 2]}, f)
    else:
        (tmp_path / "data_batch_5").unlink()
    with pytest.raises(DataFormatError, match=message):
        read_cifar(tmp_path, "train")


def write_folder(root, mode: str = "RGB", size: tuple[int, int] = (8, 6)) -> None:
    rng = np.random.default_rng(2)
    channels = (3,) if mode == "RGB" else ()
    for split in ("train", "test"):
        for name in ("cat", "dog"):
            (root / split / name).mkdir(parents=True)
            for i in range(2):
                pixels = rng.integers(0, 256, (size[1], size[0], *channels), dtype=np.uint8)
                Image.fromarray(pixels, mode).save(root / split / name / f"{i}.png")


def test_image_folder_reads_classes_in_sorted_order(tmp_path):
    write_folder(tmp_path)
    train = read_image_folder(tmp_path, "train")
    assert train.classes == ("cat", "dog") and train.labels.tolist() == [0, 0, 1, 1]
    assert train.images.shape == (4, 3, 6, 8)
    saved = np.array(Image.open(tmp_path / "train" / "dog" / "1.png"))
    assert torch.equal(train.images[3], torch.from_numpy(saved).permute(2, 0, 1))


def test_greyscale_folder_keeps_one_channel(tmp_path):
    write_folder(tmp_path, mode="L")
    assert read_image_folder(tmp_path, "test").images.shape == (4, 1, 6, 8)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("no-split", r"train: no such folder"),
        ("no-classes", r"train: no class folders"),
        ("corrupt", r"0.png: not a readable image"),
        ("size", r"1.png: size \(5, 5, 3\); expected the size of the first image \(6, 8, 3\)"),
    ],
)
def test_image_folder_errors_name_the_file(tmp_path, damage, message):
    write_folder(tmp_path)
    cat = tmp_path / "train" / "cat"
    if damage == "no-split":
        for file in sorted(tmp_path.rglob("*"), reverse=True):
            file.unlink() if file.is_file() else file.rmdir()
    elif damage == "no-classes":
        for file in sorted((tmp_path / "train").rglob("*"), reverse=True):
            file.unlink() if file.is_file() else file.rmdir()
    elif damage == "corrupt":
        (cat / "0.png").write_bytes(b"not a png")
    else:
        Image.fromarray(np.zeros((5, 5, 3), np.uint8)).save(cat / "1.png")
    with pytest.raises(DataFormatError, match=message):
        read_image_folder(tmp_path, "train")


def test_crop_and_flip_takes_a_window_of_the_padded_image():
    images = torch.randint(0, 256, (64, 3, 8, 8), dtype=torch.uint8)
    out = random_crop_and_flip(images, 2, torch.Generator().manual_seed(0))
    assert out.dtype == torch.uint8 and out.shape == images.shape
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    flipped = 0
    for original, result in zip(padded, out, strict=True):
        windows = [
            (original[:, i : i + 8, j : j + 8], flip)
            for i in range(5)
            for j in range(5)
            for flip in (False, True)
        ]
        matches = [flip for w, flip in windows if torch.equal(w.flip(2) if flip else w, result)]
        assert matches, "the output is not a (mirrored) window of the padded image"
        flipped += all(matches)
    assert 16 < flipped < 48
    again = random_crop_and_flip(images, 2, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_channel_stats_and_normalize_standardise_each_channel():
    images = torch.randint(0, 256, (32, 3, 4, 4), dtype=torch.uint8)
    images[:, 2] //= 4
    mean, std = channel_stats(images)
    normalised = normalize(images, mean, std)
    assert normalised.dtype == torch.float32
    torch.testing.assert_close(normalised.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        normalised.std(dim=(0, 2, 3), unbiased=False), torch.ones(3), atol=1e-5, rtol=0
    )


@pytest.mark.skipif(
    not (SHARED_DATA / "vision" / "fashion-mnist").is_dir(), reason="../shared has no Fashion-MNIST"
)
def test_real_fashion_mnist_has_the_documented_sizes():
    folder = SHARED_DATA / "vision" / "fashion-mnist"
    train, test = read_fashion_mnist(folder, "train"), read_fashion_mnist(folder, "test")
    assert train.images.shape == (60_000, 1, 28, 28) and len(test) == 10_000
    assert torch.bincount(train.labels).tolist() == [6000] * 10
