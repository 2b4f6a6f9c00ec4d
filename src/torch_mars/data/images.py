"""Image classification data: IDX files (MNIST, Fashion-MNIST), the CIFAR-10/100 python batches,
and image folders (``split/<class>/*.jpg|png``), all read into one in-memory form, plus the
augmentation and normalisation the CIFAR recipe uses, done in torch on uint8 batches.

Every reader raises :class:`~torch_mars.data.corpus.DataFormatError` naming the file, what is
wrong with it and what was expected.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from torch_mars.data.corpus import DataFormatError
from torch_mars.data.text_corpus import read_maybe_gzip

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049


@dataclass(frozen=True)
class ImageDataset:
    """Labelled images in memory.

    Attributes:
        images: uint8 tensor ``(N, C, H, W)``.
        labels: int64 tensor ``(N,)`` with values in ``[0, len(classes))``.
        classes: class names, index = label.
        name: where the images came from, for logs.
    """

    images: Tensor
    labels: Tensor
    classes: tuple[str, ...]
    name: str

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"{self.name}: images must be uint8 (N, C, H, W), got {self.images.dtype} "
                f"{tuple(self.images.shape)}"
            )
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(
                f"{self.name}: {self.images.shape[0]} images but labels of shape "
                f"{tuple(self.labels.shape)}"
            )
        if len(self.labels) and not 0 <= int(self.labels.min()) <= int(self.labels.max()) < len(
            self.classes
        ):
            raise ValueError(f"{self.name}: labels outside [0, {len(self.classes)})")

    def __len__(self) -> int:
        return self.images.shape[0]

    def fingerprint(self) -> str:
        """A SHA-256 of the images, labels and class names themselves (not where they came
        from): the same set read from another path matches, any changed pixel does not."""
        digest = hashlib.sha256(f"{tuple(self.images.shape)} {self.classes!r};".encode())
        digest.update(self.images.contiguous().numpy().tobytes())
        digest.update(self.labels.contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]


def _idx_array(path: Path, magic: int, what: str) -> np.ndarray:
    data = read_maybe_gzip(path, f"IDX {what} file")
    if len(data) < 8:
        raise DataFormatError(path, f"{len(data)} bytes, too short for a header", f"IDX {what}")
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise DataFormatError(path, f"magic number {found}", f"{magic} (IDX {what})")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = int(np.prod(dims)) if dims else 0
    if len(data) - header != expected:
        raise DataFormatError(
            path,
            f"{len(data) - header} bytes of data",
            f"{expected} for dimensions {dims} (truncated or corrupt file)",
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def read_idx(images_path: Path, labels_path: Path, classes: tuple[str, ...]) -> ImageDataset:
    """Greyscale images and labels from an IDX pair (``.gz`` or not), as MNIST ships them."""
    images = _idx_array(Path(images_path), IDX_IMAGES_MAGIC, "images")
    labels = _idx_array(Path(labels_path), IDX_LABELS_MAGIC, "labels")
    if len(images) != len(labels):
        raise DataFormatError(
            labels_path, f"{len(labels)} labels", f"one per image ({len(images)} in {images_path})"
        )
    if len(labels) and int(labels.max()) >= len(classes):
        raise DataFormatError(labels_path, f"label {int(labels.max())}", f"< {len(classes)}")
    return ImageDataset(
        torch.from_numpy(images.copy()).unsqueeze(1),
        torch.from_numpy(labels.astype(np.int64)),
        classes,
        str(images_path),
    )


FASHION_MNIST_CLASSES = (
    "t-shirt/top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_fashion_mnist(folder: Path, split: str) -> ImageDataset:
    """The ``train`` or ``test`` split of (Fashion-)MNIST from its four IDX files in ``folder``
    (each may be gzipped)."""
    folder = Path(folder)
    paths = []
    for stem in _IDX_FILES[split]:
        candidates = [folder / stem, folder / f"{stem}.gz"]
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            raise DataFormatError(folder / stem, "no such file", f"{stem} or {stem}.gz")
        paths.append(found)
    return read_idx(paths[0], paths[1], FASHION_MNIST_CLASSES)


# What a CIFAR python batch is made of besides dicts, lists, strings and numbers: numpy arrays.
_CIFAR_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }
)


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that builds only what the CIFAR format uses: any other class or function
    named in the file (``os.system``, say) is refused before it is looked up, so a batch from
    an untrusted download cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _CIFAR_GLOBALS:
            raise pickle.UnpicklingError(
                f"refused {module}.{name}: a CIFAR batch holds only numpy arrays, lists, "
                "strings and numbers"
            )
        return super().find_class(module, name)


def _unpickle(path: Path) -> dict:
    if not path.is_file():
        raise DataFormatError(path, "no such file", "a CIFAR python batch")
    try:
        with path.open("rb") as handle:
            batch = _CifarUnpickler(handle, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise DataFormatError(path, f"cannot be unpickled ({error})", "a CIFAR batch") from error
    if not isinstance(batch, dict):
        raise DataFormatError(path, f"a pickled {type(batch).__name__}", "a dict (a CIFAR batch)")
    return batch


def read_cifar(folder: Path, split: str) -> ImageDataset:
    """CIFAR-10 (``data_batch_1..5``, ``test_batch``, ``batches.meta``) or CIFAR-100 (``train``,
    ``test``, ``meta``; fine labels) from the python batches in ``folder``."""
    folder = Path(folder)
    if (folder / "batches.meta").is_file():
        classes = tuple(_unpickle(folder / "batches.meta")["label_names"])
        files = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
        label_key = "labels"
    elif (folder / "meta").is_file():
        classes = tuple(_unpickle(folder / "meta")["fine_label_names"])
        files, label_key = [split], "fine_labels"
    else:
        raise DataFormatError(
            folder, "no batches.meta or meta file", "a CIFAR-10 or CIFAR-100 python folder"
        )
    images, labels = [], []
    for name in files:
        batch = _unpickle(folder / name)
        if "data" not in batch or label_key not in batch:
            raise DataFormatError(folder / name, "missing 'data' or labels", "a CIFAR batch")
        data = np.asarray(batch["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(data) != len(batch[label_key]):
            raise DataFormatError(
                folder / name,
                f"data of shape {data.shape} with {len(batch[label_key])} labels",
                "(N, 3072) uint8 rows and one label per row",
            )
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch[label_key], dtype=np.int64))
    return ImageDataset(
        torch.from_numpy(np.concatenate(images)),
        torch.from_numpy(np.concatenate(labels)),
        classes,
        f"{folder} ({split})",
    )


def read_image_folder(root: Path, split: str, classes: Sequence[str] | None = None) -> ImageDataset:
    """Images under ``root/split/<class>/`` (JPEG or PNG, one size). Greyscale folders stay one
    channel; anything else is read as RGB.

    Labels are indices into ``classes``: by default the split's class folders in sorted order;
    given (the training split's list, for a test split), each folder is matched to it by name,
    so a class folder missing from the split shifts no label, and a folder whose class is not
    in ``classes`` is a :class:`DataFormatError`."""
    from PIL import Image, UnidentifiedImageError

    folder = Path(root) / split
    if not folder.is_dir():
        raise DataFormatError(folder, "no such folder", "split/<class>/*.jpg|png")
    present = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not present:
        raise DataFormatError(folder, "no class folders", "one sub-folder per class")
    classes = tuple(present) if classes is None else tuple(classes)
    unknown = [name for name in present if name not in classes]
    if unknown:
        raise DataFormatError(
            folder,
            f"class folders {unknown} that the training split does not have",
            f"classes among {list(classes)}",
        )
    arrays, labels = [], []
    mode = None
    for name in present:
        label = classes.index(name)
        files = sorted(p for p in (folder / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        for file in files:
            try:
                with Image.open(file) as image:
                    mode = mode or ("L" if image.mode in ("L", "1") else "RGB")
                    pixels = np.asarray(image.convert(mode), dtype=np.uint8)
            except (UnidentifiedImageError, OSError) as error:
                raise DataFormatError(
                    file, f"not a readable image ({error})", "JPEG or PNG"
                ) from error
            if arrays and pixels.shape != arrays[0].shape:
                raise DataFormatError(
                    file, f"size {pixels.shape}", f"the size of the first image {arrays[0].shape}"
                )
            arrays.append(pixels)
            labels.append(label)
    if not arrays:
        raise DataFormatError(folder, "no .jpg/.jpeg/.png files", "images in the class folders")
    images = np.stack(arrays)
    images = images[:, None] if images.ndim == 3 else images.transpose(0, 3, 1, 2)
    return ImageDataset(
        torch.from_numpy(np.ascontiguousarray(images)),
        torch.tensor(labels, dtype=torch.int64),
        classes,
        str(folder),
    )


def channel_stats(images: Tensor) -> tuple[Tensor, Tensor]:
    """Per-channel mean and standard deviation of uint8 ``(N, C, H, W)`` images, in [0, 1] units
    (computed in float64, so exact for any split size)."""
    values = images.to(torch.float64).div_(255.0)
    mean = values.mean(dim=(0, 2, 3))
    std = values.std(dim=(0, 2, 3), unbiased=False)
    return mean.float(), std.float()


def normalize(images: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """uint8 ``(N, C, H, W)`` images to float32 ``(x / 255 - mean) / std`` per channel."""
    scaled = images.to(torch.float32).div_(255.0)
    return scaled.sub_(mean.view(1, -1, 1, 1)).div_(std.view(1, -1, 1, 1))


def random_crop_and_flip(images: Tensor, padding: int, generator: torch.Generator) -> Tensor:
    """The CIFAR augmentation on a uint8 batch ``(N, C, H, W)``: zero-pad by ``padding`` pixels,
    crop a random ``H x W`` window per image, and mirror each image left-right with probability
    1/2. Returns a new uint8 batch of the input's shape; draws only from ``generator``.
    """
    n, _, height, width = images.shape
    padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
    tops = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
    lefts = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
    flips = torch.rand(n, generator=generator) < 0.5
    rows = (tops[:, None] + torch.arange(height)[None, :])[:, None, :, None]
    columns = lefts[:, None] + torch.arange(width)[None, :]
    columns = torch.where(flips[:, None], columns.flip(1), columns)[:, None, None, :]
    batch = torch.arange(n)[:, None, None, None]
    channels = torch.arange(images.shape[1])[None, :, None, None]
    return padded[batch, channels, rows, columns]
